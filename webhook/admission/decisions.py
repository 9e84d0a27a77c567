"""The decision cache: answers of reviews that differ only in their request uid.

A ReplicaSet or a Job creating N pods sends N mutating reviews that are byte-identical but for
`request.uid`: the API server calls mutating admission before it gives a `generateName` object
its name (k8s.io/apiserver pkg/endpoints/handlers/create.go runs mutatingAdmission.Admit before
requestFunc, whose store Create calls rest.BeforeCreate, which sets the name from GenerateName,
then the validating admission func). The evaluation is a pure function of the body and of the
snapshots (policies, config, node inventory, DRA claims), so the answer to such a body is the
answer already computed, with the new uid: one dict lookup instead of a parse and an evaluation.

What keeps it exact:
- the key is the endpoint and the whole body but for the uid's characters, so an answer is only
  ever reused for the very same object, name, namespace, user, operation and dry-run flag (its
  messages can never name another object);
- the uid is taken at the first `"request":{"uid":"`, the API server's own field order (Go's
  encoding/json writes struct fields in declaration order, and `UID` is AdmissionRequest's
  first field); a body shaped otherwise is never cached. Two bodies whose bytes agree outside
  that span have the same JSON structure, so the span is the request uid in both;
- a uid is reused only if it is plain (letters, digits, `-._:`), so no escape or control
  character can slip past the JSON parser the full path would have run;
- the snapshots an answer was computed with are kept by identity: any new policy set, config,
  inventory (or its "not listed yet" state) or claim index empties the cache before a lookup;
- answers that depended on a registry lookup (whose cache ages) or on an internal error are
  never stored; the size is bounded (least recently used answers go first).

Against a real API server two replicas' bodies differ in more than the uid, in fields the
evaluation never reads: `managedFields` carry the time of the request (the field manager runs
before admission), and by the validating call the API server has set the pod's name, `uid` and
`creationTimestamp` (rest.BeforeCreate: GenerateName, then FillObjectMetaSystemFields, then the
createValidation func). So a Pod review that misses the byte key is parsed (as it would be
anyway) and looked up again under a normalized key: the request without its uid, the object
without metadata.uid, creationTimestamp and managedFields. For /validate the key also leaves
out the names (request.name, metadata.name), and only plain "allowed" answers (no message, no
warning: nothing that could name the pod) are kept under it. Only these fields are left out,
and only for Pods: the evaluation reads a pod's name only to write it into messages, and none
of the others (tests/integration/test_decision_cache.py checks cached answers against the
full path).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, NamedTuple

_MARKER = b'"request":{"uid":"'
_PLAIN_UID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
# Set per pod by the API server and never read by the evaluation (module docstring).
_VOLATILE_METADATA = frozenset({"uid", "creationTimestamp", "managedFields"})
# Per-entry bookkeeping on top of the key and response bytes (tuple, dict slots, fields).
_ENTRY_OVERHEAD = 600


class CachedAnswer(NamedTuple):
    """A response split around its uid, and what the log line and metrics need.

    Only tuples, bytes and strings: the collector stops tracking such tuples, so thousands of
    cached answers add nothing to its full passes (a dict per answer cost the miss path ~10 %).
    """

    head: bytes
    tail: bytes
    labels: tuple[str, str, str]  # kind, operation (metric labels) and the result
    mutation_kinds: tuple[str, ...]
    fields: tuple[tuple[str, Any], ...]  # the review log line without uid and duration
    # What the answer counts in the metrics, as state.Outcome has it.
    gpu_containers: tuple[str, ...] = ()
    placements: tuple[str, ...] = ()
    violations: tuple[tuple[str, str], ...] = ()
    cuda_unknown: tuple[tuple[str, str], ...] = ()

    def response(self, uid: bytes) -> bytes:
        return self.head + uid + self.tail


def split_uid(body: bytes) -> tuple[bytes, bytes] | None:
    """(key bytes, uid) of a body in the API server's field order, or None."""
    at = body.find(_MARKER)
    if at < 0:
        return None
    start = at + len(_MARKER)
    end = body.find(b'"', start)
    if end < 0:
        return None
    uid = body[start:end]
    if _PLAIN_UID.fullmatch(uid) is None:
        return None
    return body[:start] + body[end:], uid


def normalized_key(data: Any, endpoint: str, dumps: Any, *, names: bool) -> bytes | None:
    """The key of a decoded Pod review without the fields the API server sets per pod (and
    without its names unless `names`); None when the body is not shaped like one."""
    request = data.get("request")
    obj = request.get("object") if isinstance(request, dict) else None
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    kept_meta = {
        k: v for k, v in meta.items() if k not in _VOLATILE_METADATA and (names or k != "name")
    }
    kept = {k: v for k, v in request.items() if k != "uid" and (names or k != "name")}
    kept["object"] = {**obj, "metadata": kept_meta}
    key: bytes = dumps([endpoint, names, data.get("apiVersion"), data.get("kind"), kept])
    return key


class DecisionCache:
    """Bounded LRU of answers, valid for one generation of snapshots (compared by identity)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self.invalidations = 0
        self._generation: tuple[object, ...] = ()
        self._entries: OrderedDict[tuple[str, bytes], tuple[CachedAnswer, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def check_generation(self, generation: tuple[object, ...]) -> None:
        """Empty the cache when any snapshot differs from the ones its answers were made with."""
        current = self._generation
        if len(current) == len(generation) and all(
            a is b for a, b in zip(current, generation, strict=True)
        ):
            return
        if self._entries:
            self.invalidations += 1
        self._entries.clear()
        self.size = 0
        self._generation = generation

    def get(self, endpoint: str, key: bytes) -> CachedAnswer | None:
        found = self._entries.get((endpoint, key))
        if found is None:
            return None
        self._entries.move_to_end((endpoint, key))
        return found[0]

    def count(self, hit: bool) -> None:
        """One review looked up (under one key or more): a hit or a miss."""
        if hit:
            self.hits += 1
        else:
            self.misses += 1

    def put(
        self,
        endpoint: str,
        key: bytes,
        uid: bytes,
        payload: bytes,
        *,
        labels: tuple[str, str, str],
        mutation_kinds: tuple[str, ...],
        fields: tuple[tuple[str, Any], ...],
        gpu_containers: tuple[str, ...] = (),
        placements: tuple[str, ...] = (),
        violations: tuple[tuple[str, str], ...] = (),
        cuda_unknown: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Store `payload` (the answer for `uid`) if its uid can be found in it exactly once."""
        needle = b'"uid":"' + uid + b'"'
        if payload.count(needle) != 1:
            return
        at = payload.index(needle) + len(b'"uid":"')
        answer = CachedAnswer(
            payload[:at],
            payload[at + len(uid) :],
            labels,
            mutation_kinds,
            fields,
            gpu_containers,
            placements,
            violations,
            cuda_unknown,
        )
        cost = len(key) + len(payload) + _ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return
        previous = self._entries.pop((endpoint, key), None)
        if previous is not None:
            self.size -= previous[1]
        self._entries[(endpoint, key)] = (answer, cost)
        self.size += cost
        while self.size > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.size -= dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": len(self._entries),
            "bytes": self.size,
            "maxBytes": self.max_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "invalidations": self.invalidations,
        }
