"""Messages within 120 characters that never cut the image or the role they name (issue 17)."""

from __future__ import annotations

from webhook.core.base.wording import MAX_MESSAGE_CHARS, NOTE_LIMIT, Wording, after, fit

IMAGE = "nvcr.io/nvidia/tritonserver:24.05-py3"
MESSAGE = Wording(
    (
        f"CUDA version of {IMAGE} unknown, no affinity: set the annotation or the table",
        f"CUDA version of {IMAGE} unknown: set the annotation",
        f"CUDA of {IMAGE} unknown",
    )
)


def test_the_longest_wording_that_fits_wins() -> None:
    assert fit(MESSAGE) == MESSAGE.wordings[0]
    assert fit(MESSAGE, ("replica Worker: ",)) == "replica Worker: " + MESSAGE.wordings[1]
    role = "worker group " + "g" * 40 + ": "
    assert fit(MESSAGE, (role,)) == role + MESSAGE.wordings[2]


def test_a_longer_wording_behind_a_shorter_prefix_beats_a_shorter_wording() -> None:
    long_prefix = "will apply to replica Worker pods: "  # 35 characters
    short_prefix = "for replica Worker pods: "  # 25
    message = Wording(("a" * 90, "b" * 50))
    assert fit(message, (long_prefix, short_prefix)) == short_prefix + "a" * 90


def test_the_shortest_wording_is_kept_whole_when_the_names_make_it_long() -> None:
    image = "registry.example.com/" + "x" * 150 + ":1"
    message = Wording((f"CUDA version of {image} unknown", f"CUDA of {image} unknown"))
    assert fit(message, ("replica Worker: ",)) == f"replica Worker: CUDA of {image} unknown"


def test_a_plain_text_loses_its_end_never_its_prefix() -> None:
    text = "w" * 200
    role = "replica Worker: "
    assert fit(text, (role,)) == role + "w" * (NOTE_LIMIT - len(role) - 1) + "…"
    assert len(fit(text, (role,))) == NOTE_LIMIT
    # A role longer than the limit stays whole; 40 characters of the text come after it.
    long_role = "replica " + "r" * 150 + ": "
    assert fit(text, (long_role,)) == long_role + "w" * 39 + "…"


def test_no_message_passes_the_hard_bound() -> None:
    # A "name" past any valid image reference or role (a megabyte string) is cut at last.
    huge = Wording(("x" * 10_000,))
    assert fit(huge) == "x" * (MAX_MESSAGE_CHARS - 1) + "…"


def test_after_puts_a_prefix_in_front_of_every_wording() -> None:
    assert after('container "a": ', MESSAGE) == Wording(
        tuple(f'container "a": {w}' for w in MESSAGE.wordings)
    )
    assert after('container "a": ', "text") == 'container "a": text'
