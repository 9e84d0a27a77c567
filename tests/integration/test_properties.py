"""Property: no body, however malformed, makes the server answer 500 or stop serving."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.helpers import RunningServer

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)

# Review-shaped bodies reach deeper code than random JSON: vary the fields the server reads.
kinds = st.sampled_from(["Pod", "Deployment", "CronJob", "ConfigMap", "Secret", "", "Job"])
resources = st.dictionaries(
    st.sampled_from(
        ["nvidia.com/gpu", "tencent.com/vcuda-core", "tencent.com/vcuda-memory", "cpu"]
    ),
    st.one_of(st.sampled_from(["1", "150", "0.5", "500m", "1k", "-1", ""]), json_values),
    max_size=3,
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.text(max_size=8), "image": st.one_of(st.text(max_size=30), json_values)},
        optional={
            "resources": st.one_of(
                st.fixed_dictionaries({}, optional={"limits": resources, "requests": resources}),
                json_values,
            ),
            "env": st.one_of(json_values, st.lists(json_values, max_size=2)),
        },
    ),
    max_size=3,
)
objects = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"kind": kinds, "metadata": st.one_of(json_values, st.just({"name": "x"}))},
        optional={
            "spec": st.one_of(json_values, st.fixed_dictionaries({"containers": containers}))
        },
    ),
)
reviews = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["AdmissionReview", "Pod", None]),
        "apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "x"]),
        "request": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {
                    "uid": st.one_of(st.text(max_size=8), json_values),
                    "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", "", 3]),
                    "object": objects,
                },
                optional={
                    "kind": st.one_of(json_values, st.fixed_dictionaries({"kind": kinds})),
                    "namespace": st.one_of(st.sampled_from(["ml", "kube-public"]), json_values),
                    "dryRun": json_values,
                    "userInfo": json_values,
                },
            ),
        ),
    }
)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def answered_sanely(
    server: RunningServer, endpoint: str, body: bytes, headers: dict[str, str] | None = None
) -> None:
    reply = server.request("POST", endpoint, body, headers=headers)
    assert reply.status in (200, 400, 413), (reply.status, reply.text)
    if reply.status == 200:
        answer: Any = json.loads(reply.body)
        assert answer["kind"] == "AdmissionReview"
        assert isinstance(answer["response"]["allowed"], bool)
        # A malformed object is a clear denial, not a crash inside the evaluation core.
        status = answer["response"].get("status", {})
        assert status.get("reason") != "InternalError", status.get("message")
    else:
        assert reply.text.strip(), "a refusal must say why"


@SETTINGS
@given(endpoint=st.sampled_from(["/mutate", "/validate"]), body=st.binary(max_size=512))
def test_arbitrary_bytes_never_yield_500(server: RunningServer, endpoint: str, body: bytes) -> None:
    answered_sanely(server, endpoint, body)


@SETTINGS
@given(endpoint=st.sampled_from(["/mutate", "/validate"]), value=json_values)
def test_arbitrary_json_never_yields_500(server: RunningServer, endpoint: str, value: Any) -> None:
    answered_sanely(server, endpoint, json.dumps(value).encode())


@SETTINGS
@given(endpoint=st.sampled_from(["/mutate", "/validate"]), review=reviews)
def test_review_shaped_json_never_yields_500(
    server: RunningServer, endpoint: str, review: dict[str, Any]
) -> None:
    answered_sanely(server, endpoint, json.dumps(review).encode())


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


# How the body is compressed, independently of what Content-Encoding claims: right, wrong
# (gzip labelled deflate), truncated, or not at all.
COMPRESSIONS: dict[str, Callable[[bytes], bytes]] = {
    "none": lambda data: data,
    "gzip": gzip.compress,
    "zlib": zlib.compress,
    "raw-deflate": _raw_deflate,
    "truncated-gzip": lambda data: gzip.compress(data)[: max(1, len(gzip.compress(data)) // 2)],
}


@SETTINGS
@given(
    endpoint=st.sampled_from(["/mutate", "/validate"]),
    payload=st.one_of(st.binary(max_size=512), reviews.map(lambda r: json.dumps(r).encode())),
    compression=st.sampled_from(sorted(COMPRESSIONS)),
    encoding=st.sampled_from(["gzip", "deflate", "identity", "GZIP", "br", "x-gzip", "gzip, br"]),
)
def test_compressed_bodies_never_yield_500(
    server: RunningServer, endpoint: str, payload: bytes, compression: str, encoding: str
) -> None:
    body = COMPRESSIONS[compression](payload)
    answered_sanely(server, endpoint, body, {"Content-Encoding": encoding})


def test_server_still_healthy_after_the_properties(server: RunningServer) -> None:
    assert server.request("GET", "/healthz").status == 200
    assert server.request("GET", "/readyz").status == 200
