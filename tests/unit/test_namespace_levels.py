"""The namespaces' Pod Security level snapshot (SPEC §14): what the reflector keeps of each
Namespace, and how /inventory shows it; its list/watch runs against the real API server in
tests/e2e/test_kapi_runtime_fixes.py."""

from __future__ import annotations

from webhook.sources.namespaces import NamespaceLevelSource
from webhook.sources.store import PolicyStore


def namespace(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels, "annotations": {"big": "x" * 1000}}}


def test_only_the_enforce_label_is_kept_and_published() -> None:
    store = PolicyStore()
    source = NamespaceLevelSource(store)
    project = source._project
    items = {
        ("", "ml"): project(namespace("ml", **{"pod-security.kubernetes.io/enforce": "baseline"})),
        ("", "rdma"): project(
            namespace("rdma", **{"pod-security.kubernetes.io/enforce": "privileged", "a": "b"})
        ),
        ("", "plain"): project(namespace("plain", team="x")),
        ("", "odd"): project({"metadata": {"name": "odd", "labels": None}}),
    }
    assert store.namespace_levels is None
    assert store.snapshot_status("Namespace")["available"] is False
    source._build(items)
    assert dict(store.namespace_levels or {}) == {
        "ml": "baseline",
        "rdma": "privileged",
        "plain": "",
        "odd": "",
    }
    assert store.snapshot_status("Namespace") == {"available": True}
