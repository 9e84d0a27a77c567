"""Denial messages stay readable (SPEC §7): capped, one description per policy, clean text."""

from __future__ import annotations

from tests.helpers import CM_VCORE, VCORE, container, pod, run
from webhook.core.config.model import WebhookConfig
from webhook.core.outcome.decision import MAX_LISTED_VIOLATIONS, Decision, Violation

NO_CUDA = WebhookConfig(cuda_affinity=False)
DESCRIPTION = "vGPU compute, 100 per card."


def test_five_thousand_violations_make_a_short_message_with_the_count() -> None:
    containers = [container(f"c{i}", limits={VCORE: "150"}) for i in range(5000)]
    decision = run(pod(*containers), config=NO_CUDA)
    assert len(decision.violations) == 5000
    message = decision.denial_message()
    lines = message.split("\n")
    assert lines[0] == "Pod ml/train: 5000 GPU policy violations:"
    listed = lines[1 : 1 + MAX_LISTED_VIOLATIONS]
    assert all(line.startswith('- Pod ml/train, container "c') for line in listed)
    assert lines[1 + MAX_LISTED_VIOLATIONS] == (
        "- and 4980 more violations; run `gpu-webhook review -f <manifest>` to see them all"
    )
    # The policy's description once, after the list, not 20 (or 5,000) times.
    assert lines[2 + MAX_LISTED_VIOLATIONS :] == [
        "About these policies:",
        f"- {CM_VCORE}: {DESCRIPTION}",
    ]
    assert message.count("100 per card") == 1
    assert len(message.encode()) < 12_000


def test_a_single_violation_keeps_its_description_inline() -> None:
    decision = run(pod(container("c", limits={VCORE: "150"})), config=NO_CUDA)
    message = decision.denial_message()
    assert message.startswith('Pod ml/train, container "c": limits.tencent.com/vcuda-core=')
    assert message.endswith(f"in ConfigMap {CM_VCORE}). {DESCRIPTION}")


def test_control_escape_and_bidi_characters_never_reach_a_denial() -> None:
    name = "evil\u202e\x1b[31m\x01name\u2066"
    decision = run(pod(container(name, limits={VCORE: "150"})), config=NO_CUDA)
    message = decision.denial_message()
    assert message.startswith('Pod ml/train, container "evil name "')
    for bad in ("\u202e", "\x1b", "\x01", "\u2066", "[31m"):
        assert bad not in message


def test_a_huge_violation_line_is_cut() -> None:
    long = Violation("x" * 5000, "Pod ml/a")
    message = Decision(object_ref="Pod ml/a", violations=(long, long)).denial_message()
    header, first, second = message.split("\n")
    assert header == "Pod ml/a: 2 GPU policy violations:"
    assert len(first) == len(second) == 2 + 400
    assert first.endswith("…")
