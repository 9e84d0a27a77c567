"""The repository's own manifests (tests/data): every document evaluates, stably, or is refused.

They run on any clone; tests/unit/test_corpus.py does the same for the external corpus.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.helpers import CONFIGMAPS, DATA, assert_stable
from webhook.core.base.errors import ObjectShapeError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.sources.files import load_policy_dir, read_documents

CONFIGS = {"templates-off": WebhookConfig(), "templates-on": load_config({"mutateTemplates": True})}
FILES = sorted(
    f"{path.parent.name}/{path.name}" for path in (DATA / "manifests").glob("*.yaml")
) + sorted(f"malformed/{path.name}" for path in (DATA / "malformed").glob("*.yaml"))
# Documents evaluate() refuses, with the exact reason; any other one raising fails the test.
EXPECTED_INVALID = {
    ("malformed/shape-mistakes.yaml", 0): "Deployment.spec.template.spec.containers must be a list",
    ("malformed/shape-mistakes.yaml", 1): (
        'Pod smoke-test container "smoke".resources.limits must be an object'
    ),
}


def test_the_fixture_files_are_there() -> None:
    assert FILES == [
        "manifests/builtin-workloads.yaml",
        "manifests/operator-workloads.yaml",
        "malformed/shape-mistakes.yaml",
    ]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", FILES)
def test_every_document_evaluates_and_is_idempotent(name: str, config: str) -> None:
    policy_set = load_policy_dir(CONFIGMAPS)
    docs = read_documents(DATA / name)
    assert docs
    for index, doc in enumerate(docs):
        assert isinstance(doc, Mapping)
        reason = EXPECTED_INVALID.get((name, index))
        if reason is None:
            assert_stable(doc, policy_set, CONFIGS[config])
        else:
            with pytest.raises(ObjectShapeError) as refused:
                evaluate(doc, policy_set, CONFIGS[config])
            assert str(refused.value) == reason
    assert all(i < len(docs) for n, i in EXPECTED_INVALID if n == name)
