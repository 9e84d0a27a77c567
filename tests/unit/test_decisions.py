"""The decision cache's bookkeeping: where the uid is, the size bound, invalidation."""

from __future__ import annotations

import json
from typing import Any

from webhook.admission.decisions import DecisionCache, normalized_key, split_uid

BODY = b'{"kind":"AdmissionReview","request":{"uid":"abc-1","object":{"metadata":{"uid":"x"}}}}'


def _put(cache: DecisionCache, key: bytes, uid: bytes, payload: bytes) -> None:
    cache.put(
        "mutate",
        key,
        uid,
        payload,
        labels=("Pod", "CREATE", "allowed"),
        mutation_kinds=(),
        fields=(),
    )


def test_split_uid_takes_the_request_uid_and_keeps_everything_else() -> None:
    split = split_uid(BODY)
    assert split == (BODY.replace(b"abc-1", b""), b"abc-1")


def test_bodies_not_in_the_api_servers_order_or_with_odd_uids_are_not_split() -> None:
    assert split_uid(b'{"request":{"kind":{},"uid":"abc"}}') is None
    assert split_uid(b'{"request": {"uid": "abc"}}') is None
    assert split_uid(b'{"request":{"uid":"a\\u0062c"}}') is None
    assert split_uid(b'{"request":{"uid":""}}') is None
    assert split_uid(b'{"request":{"uid":"' + b"a" * 129 + b'"}}') is None


def test_the_answer_gets_the_new_uid() -> None:
    cache = DecisionCache(1 << 20)
    key, uid = split_uid(BODY) or (b"", b"")
    _put(cache, key, uid, b'{"response":{"uid":"abc-1","allowed":true}}')
    hit = cache.get("mutate", key)
    assert hit is not None
    assert hit.response(b"zzz") == b'{"response":{"uid":"zzz","allowed":true}}'
    assert cache.get("validate", key) is None


def test_an_answer_naming_the_uid_twice_is_not_stored() -> None:
    cache = DecisionCache(1 << 20)
    _put(cache, b"k", b"u1", b'{"uid":"u1","x":{"uid":"u1"}}')
    assert cache.get("mutate", b"k") is None


def test_the_least_recently_used_answers_go_first_past_the_bound() -> None:
    cache = DecisionCache(3000)
    for index in range(5):
        _put(cache, b"key-%d" % index, b"u", b'{"uid":"u","pad":"' + b"x" * 300 + b'"}')
    assert cache.size <= 3000
    # Each entry costs ~925 bytes (key, answer and bookkeeping): three fit.
    assert len(cache) == 3
    assert cache.get("mutate", b"key-0") is None
    assert cache.get("mutate", b"key-1") is None
    assert cache.get("mutate", b"key-2") is not None


def test_a_new_snapshot_empties_the_cache() -> None:
    cache = DecisionCache(1 << 20)
    policies, config = object(), object()
    cache.check_generation((policies, config))
    _put(cache, b"k", b"u", b'{"uid":"u"}')
    cache.check_generation((policies, config))
    assert cache.get("mutate", b"k") is not None
    cache.check_generation((object(), config))
    assert cache.get("mutate", b"k") is None
    assert cache.invalidations == 1


def _review(name: str, uid: str, when: str, image: str = "cuda:12.4") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "generateName": "t-",
        "uid": uid,
        "creationTimestamp": when,
    }
    meta["managedFields"] = [{"manager": "kcm", "time": when}]
    return {
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-" + uid,
            "name": name,
            "object": {"kind": "Pod", "metadata": meta, "spec": {"image": image}},
        },
    }


def _key(review: dict[str, Any], names: bool) -> bytes | None:
    return normalized_key(review, "validate", lambda v: json.dumps(v).encode(), names=names)


def test_the_normalized_key_leaves_out_only_what_the_api_server_sets_per_pod() -> None:
    one = _review("t-aaaaa", "u1", "2026-11-23T10:00:00Z")
    two = _review("t-bbbbb", "u2", "2026-11-23T10:00:01Z")
    assert _key(one, names=False) == _key(two, names=False)
    assert _key(one, names=True) != _key(two, names=True)
    assert _key(_review("t-aaaaa", "u3", "x"), names=True) == _key(one, names=True)
    other_image = _review("t-aaaaa", "u1", "2026-11-23T10:00:00Z", image="cuda:11.8")
    assert _key(other_image, names=False) != _key(one, names=False)
    assert _key({"request": {"object": []}}, names=True) is None
