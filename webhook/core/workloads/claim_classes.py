"""A DRA claim's device classes, per request (claims.py): a frozenset subclass, which mypyc
cannot compile as a native class, so it is a module of its own that stays interpreted while
claims.py, on the request path, is compiled (setup.py)."""

from __future__ import annotations

from collections.abc import Mapping


class ClaimClasses(frozenset[str]):
    """Every device class a claim requests, and (`requests`) the classes per request name.

    A container that names a request in `resources.claims[].request` gets only that request's
    devices (k8s.io/api core/v1 ResourceClaim.Request: "If empty, everything from the claim is
    made available, otherwise only the result of this request"), so a NIC-only sidecar of a
    claim with a GPU request and a NIC request is no GPU container. A `firstAvailable`
    request's subrequests are also listed as `request/subrequest`.
    """

    requests: Mapping[str, frozenset[str]]

    # Equal to a plain frozenset of the same classes (what a caller asking "which classes"
    # compares with), but two ClaimClasses also compare their requests: the claim cache
    # interns and change-detects projections by equality.
    def __eq__(self, other: object) -> bool:
        if isinstance(other, ClaimClasses):
            return frozenset.__eq__(self, other) and self.requests == other.requests
        return frozenset.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return frozenset.__hash__(self)

    @classmethod
    def of(cls, requests: Mapping[str, frozenset[str]]) -> ClaimClasses:
        top = [classes for name, classes in requests.items() if "/" not in name]
        made = cls(frozenset().union(*top))
        made.requests = requests
        return made

    def on(self, request: str | None, gpu_classes: frozenset[str]) -> bool:
        """Whether what a container gets from this claim (all of it, or one request) includes
        a device of one of `gpu_classes`. A request name the claim does not have gives the
        container nothing of it."""
        if not request:
            return not self.isdisjoint(gpu_classes)
        classes = self.requests.get(request)
        return classes is not None and not classes.isdisjoint(gpu_classes)
