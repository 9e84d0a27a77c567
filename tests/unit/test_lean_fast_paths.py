"""Issue 40's memos and fast paths on the runtime fixes and the messages give the general
path's answers: clean_text's memo, shm's size memo, the runtime-fix plan read once per config
(and replaced when the config changes)."""

from __future__ import annotations

import pytest

from tests.helpers import GPU, container, pod, standard_policies, without_shm
from webhook.core.config.model import WebhookConfig
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.outcome import decision
from webhook.core.runtimefix import shm

TEXTS = [
    "",
    "plain warning",
    "accents é ≥ 中文",
    "red \x1b[31mtext\x1b[0m",
    "bidi \u202e override \u2066x\u2069",
    "tabs\tand\nnewlines\r\n",
    "zero\u200bwidth",
    "x" * 2000,
    "x\n" * 700,
]


@pytest.mark.parametrize("text", TEXTS)
def test_clean_text_memo_gives_the_general_answer(text: str) -> None:
    expected = decision._clean(text)
    assert decision.clean_text(text) == expected
    assert decision.clean_text(text) == expected  # from the memo
    assert decision.clean_text(str(text)) == expected


def test_clean_text_memo_is_bounded() -> None:
    for n in range(decision._CLEAN_MAX + 10):
        decision.clean_text(f"text {n}\x00")
    assert len(decision._CLEAN) <= decision._CLEAN_MAX
    assert decision.clean_text("text 1\x00") == "text 1"


@pytest.mark.parametrize(
    ("limits", "fraction", "cap"),
    [
        (("8Gi",), 0.5, "16Gi"),
        (("8Gi", "4Gi"), 0.5, "16Gi"),
        (("64Gi",), 0.5, "16Gi"),
        (("1000M", 512), 0.25, "16Gi"),
        (("x",), 0.5, "16Gi"),
        ((1.5e9,), 1.0, "1Gi"),
        (("100Ki",), 0.5, "16Gi"),
    ],
)
def test_shm_size_memo_gives_the_worked_out_size(
    limits: tuple[str | int | float, ...], fraction: float, cap: str
) -> None:
    expected = shm._work_out(limits, fraction, cap)
    assert shm._sized(limits, fraction, cap) == expected
    assert shm._sized(limits, fraction, cap) == expected


def test_runtime_fix_plan_follows_the_config() -> None:
    policies = standard_policies()
    obj = pod(
        container("train", "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", limits={GPU: "1"})
    )
    on, off = WebhookConfig(), without_shm()
    for _ in range(2):
        assert "shm" in evaluate(obj, policies, on).mutation_kinds
        assert "shm" not in evaluate(obj, policies, off).mutation_kinds
