"""Property: a workload UPDATE with an unchanged pod template is never denied nor patched."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import GPU, GPUCORES, VCORE, VMEM, crl, policies, workload
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = [VCORE, VMEM, GPU, GPUCORES]
GROUP = {VCORE: "gpu-manager", VMEM: "gpu-manager", GPU: "nvidia", GPUCORES: "hami"}
BOUNDS = st.sampled_from([None, "0", "1", "4", "100"])
VALUES: st.SearchStrategy[Any] = st.sampled_from(
    ["0", "1", "8", "150", "0.5", "abc", "４", "", 3, None, True]
)

policy_data = st.fixed_dictionaries(
    {
        "limits": st.sampled_from(["disabled", "required", "optional", "bogus"]),
        "requests": st.sampled_from(["disabled", "required", "fromLimits"]),
        "defaultValue": BOUNDS,
        "min": BOUNDS,
        "max": BOUNDS,
        "wholeUnit": BOUNDS,
    }
)
resources = st.dictionaries(
    st.sampled_from(["limits", "requests"]),
    st.dictionaries(st.sampled_from([*KEYS, "cpu"]), VALUES, max_size=4),
    max_size=2,
)
CONFIGS = [WebhookConfig(), load_config({"mutateTemplates": True, "noCompatibleNode": "deny"})]


@FAST
@given(
    kind=st.sampled_from(
        ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]
    ),
    chosen=st.dictionaries(st.sampled_from(KEYS), policy_data, max_size=4),
    container_resources=st.lists(resources, min_size=1, max_size=3),
    annotations=st.dictionaries(
        st.sampled_from(["features.alauda.io/env-fixes", "features.alauda.io/cuda-version"]),
        st.sampled_from(["false", "maybe", "12.4", "x"]),
    ),
    config=st.sampled_from(CONFIGS),
    violations_only=st.booleans(),
    replicas=st.integers(min_value=0, max_value=5),
)
def test_unchanged_template_update_is_never_denied(
    kind: str,
    chosen: dict[str, dict[str, str | None]],
    container_resources: list[dict[str, Any]],
    annotations: dict[str, str],
    config: WebhookConfig,
    violations_only: bool,
    replicas: int,
) -> None:
    policy_set = policies(*(crl(key, GROUP[key], **data) for key, data in chosen.items()))
    containers = [
        {"name": f"c{i}", "image": "paddlepaddle/paddle:2.6", "resources": res}
        for i, res in enumerate(container_resources)
    ]
    old = workload(
        kind,
        {
            "metadata": {"namespace": "ml", "annotations": annotations},
            "spec": {"containers": containers},
        },
    )
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "ml"}
    new["spec"]["replicas"] = replicas
    decision = evaluate(
        new,
        policy_set,
        config,
        operation="UPDATE",
        old_object=old,
        violations_only=violations_only,
    )
    assert decision.allowed
    assert decision.patch == []
    assert (decision.notes, decision.warnings) == ((), ())
    # The same template on CREATE is evaluated: the guard, not leniency, allowed the update.
    created = evaluate(new, policy_set, config, operation="CREATE", old_object=old)
    assert created.reason == ""
