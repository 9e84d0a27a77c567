"""A Pod UPDATE of an annotation a container reads a device variable from (issue 46 item 4,
MindCluster's `ASCEND_VISIBLE_DEVICES` from
`fieldRef: metadata.annotations['huawei.com/Ascend910']`): the kubelet reads the annotation
again when it restarts the container, so only the writers the admin declares
(gpuAccess.annotationWriters, annotationWriterGroups; default Volcano's scheduler) may change
it. Tried as a tenant would: `kubectl annotate --overwrite`, then a restart."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import container, pod, standard_policies
from tests.vendor_examples import mindcluster_pod
from webhook.cli import main
from webhook.core.base.errors import ConfigError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import Decision, evaluate

KEY = "huawei.com/Ascend910"
WHY = "GPUs reached without a request are counted by no quota, CRL or scheduler."
TEXT = (
    'container "ascend" reads huawei.com/Ascend910 as ASCEND_VISIBLE_DEVICES: '
    "only gpuAccess.annotationWriters may change it"
)
VOLCANO = "system:serviceaccount:volcano-system:volcano-scheduler"
TENANT = "alice"
TENANT_GROUPS = ("system:authenticated",)
ALLOCATED = "Ascend910-0,Ascend910-1"
EVERY_NPU = ",".join(f"Ascend910-{i}" for i in range(8))


def config(mode: str, **access: Any) -> WebhookConfig:
    return load_config(
        {"gpuAccess": {"mode": mode, **access}, "registryLookups": {"publicRegistries": False}}
    )


def scheduled(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """MindCluster's pod as Volcano's Ascend plugin leaves it: the NPUs it allocated in the
    annotation, bound to a node."""
    obj = mindcluster_pod(nodeName="npu-node-1")
    obj["metadata"]["annotations"] = {KEY: ALLOCATED} if annotations is None else annotations
    return obj


def annotated(old: dict[str, Any], changes: dict[str, str | None]) -> dict[str, Any]:
    """`kubectl annotate`: a value sets the key, None removes it."""
    new = copy.deepcopy(old)
    annotations = new["metadata"].setdefault("annotations", {})
    for key, value in changes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return new


def update(
    new: dict[str, Any],
    old: dict[str, Any],
    cfg: WebhookConfig,
    *,
    username: str | None = TENANT,
    groups: tuple[str, ...] = TENANT_GROUPS,
    sub_resource: str = "",
    violations_only: bool = False,
) -> Decision:
    return evaluate(
        new,
        standard_policies(),
        cfg,
        operation="UPDATE",
        sub_resource=sub_resource,
        old_object=old,
        violations_only=violations_only,
        username=username,
        groups=groups,
    )


CHANGED = annotated(scheduled(), {KEY: EVERY_NPU})
ADDED = (scheduled({}), annotated(scheduled({}), {KEY: EVERY_NPU}))
REMOVED = (scheduled(), annotated(scheduled(), {KEY: None}))
OTHER = annotated(scheduled(), {"team": "vision"})


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(scheduled(), CHANGED, id="changed"),
        pytest.param(*ADDED, id="added before Volcano writes it"),
        pytest.param(*REMOVED, id="removed"),
    ],
)
def test_a_tenant_rewriting_the_annotation_is_denied_under_enforce(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    decision = update(new, old, config("enforce"))
    assert not decision.allowed
    (violation,) = decision.violations
    assert violation.message == f"Pod ml/train, {TEXT}. {WHY}"
    assert violation.container == 'container "ascend"'
    assert decision.patch == []


def test_under_warn_it_is_a_warning_and_the_update_is_admitted() -> None:
    decision = update(CHANGED, scheduled(), config("warn"))
    assert decision.allowed
    assert decision.warnings == (TEXT,)
    assert len(TEXT) <= 120
    # /validate repeats no warning (the mutating call showed it); under enforce it still denies.
    assert update(CHANGED, scheduled(), config("warn"), violations_only=True).warnings == ()
    assert not update(CHANGED, scheduled(), config("enforce"), violations_only=True).allowed


@pytest.mark.parametrize(
    ("cfg", "username", "groups"),
    [
        pytest.param(config("enforce"), VOLCANO, (), id="Volcano's scheduler (the default)"),
        pytest.param(
            config("enforce", annotationWriters=["kubernetes-admin"]),
            "kubernetes-admin",
            ("kubeadm:cluster-admins", "system:authenticated"),
            id="a declared user",
        ),
        pytest.param(
            config("enforce", annotationWriterGroups=["system:serviceaccounts:volcano-system"]),
            "system:serviceaccount:volcano-system:other",
            ("system:serviceaccounts", "system:serviceaccounts:volcano-system"),
            id="a member of a declared group",
        ),
    ],
)
def test_a_declared_writer_may_change_it(
    cfg: WebhookConfig, username: str, groups: tuple[str, ...]
) -> None:
    for old, new in ((scheduled(), CHANGED), ADDED, REMOVED):
        decision = update(new, old, cfg, username=username, groups=groups)
        assert decision.allowed and decision.warnings == ()


def test_the_writers_the_admin_writes_are_the_whole_list() -> None:
    """Declaring a writer replaces the default: Volcano's scheduler is then a tenant like any."""
    cfg = config("enforce", annotationWriters=["kubernetes-admin"])
    assert not update(CHANGED, scheduled(), cfg, username=VOLCANO, groups=()).allowed
    # A group name given as a user name is no group, and a user name given as a group no user.
    groups_only = config("enforce", annotationWriters=[], annotationWriterGroups=[TENANT])
    assert not update(CHANGED, scheduled(), groups_only).allowed


def test_other_annotations_and_other_pods_are_not_concerned() -> None:
    assert update(OTHER, scheduled(), config("enforce")).violations == ()
    plain = pod(container("app", "busybox:1.36"))
    plain["metadata"]["annotations"] = {KEY: ALLOCATED}
    decision = update(annotated(plain, {KEY: EVERY_NPU}), plain, config("enforce"))
    assert decision.allowed and decision.warnings == ()


def test_any_device_variable_from_an_annotation_is_judged() -> None:
    """Not only MindCluster's key: NVIDIA_VISIBLE_DEVICES from an annotation (a finding at
    create, admitted with a warning under warn) cannot be widened afterwards either."""
    env = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['example.com/gpus']"}},
        }
    ]
    old = pod(container("app", "busybox:1.36", env=env))
    old["metadata"]["annotations"] = {"example.com/gpus": "void"}
    new = annotated(old, {"example.com/gpus": "all"})
    decision = update(new, old, config("warn"))
    assert decision.warnings == (
        'container "app" reads example.com/gpus as NVIDIA_VISIBLE_DEVICES: '
        "only gpuAccess.annotationWriters may change it",
    )


def test_the_status_subresource_and_an_unknown_user_are_not_judged() -> None:
    """The kubelet (system:node:<name>) writes status only; the CLI knows no user."""
    status = update(CHANGED, scheduled(), config("enforce"), sub_resource="status")
    assert not status.handled
    cli = update(CHANGED, scheduled(), config("enforce"), username=None, groups=())
    assert cli.allowed and cli.violations == ()


def test_under_off_and_in_an_exempt_namespace_nothing_is_judged() -> None:
    assert not update(CHANGED, scheduled(), config("off")).handled
    exempt = config("enforce", exemptNamespaces=["ml"])
    assert not update(CHANGED, scheduled(), exempt).handled


@pytest.mark.parametrize("bad", ["", " volcano", "volcano "])
def test_a_writer_that_names_nobody_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config("enforce", annotationWriters=[bad])
    assert str(raised.value) == (
        "webhook config is invalid: gpuAccess.annotationWriters: "
        f"Value error, {bad!r} is not a user or group name"
    )
    with pytest.raises(ConfigError, match="annotationWriterGroups: Value error"):
        config("enforce", annotationWriterGroups=[bad])


@pytest.mark.parametrize(
    ("text", "code", "says"),
    [
        (
            'gpuAccess:\n  annotationWriters: [" volcano"]\n',
            1,
            "gpuAccess.annotationWriters: ' volcano' is not a user or group name",
        ),
        (
            "gpuAccess:\n  annotationWriterGroups: [system:serviceaccounts:volcano-system]\n",
            0,
            "OK",
        ),
    ],
)
def test_lint_checks_the_writers(tmp_path: Path, text: str, code: int, says: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    out = io.StringIO()
    assert main(["lint", "--config", str(path)], out=out) == code
    assert says in out.getvalue()
