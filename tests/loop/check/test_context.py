"""lib/loop/check/context.py: a validation sweep judged per context point, a context schedule
at the K it runs there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_builder import (
    CONTEXT_ARMS,
    GOOD_VALIDATION,
    spread,
    write_context_validation,
    write_validation,
)
from validation_check import (
    INDEPENDENT,
    RFC_GOOD,
    RFC_GOOD_KS,
    RFC_SWAPPED,
    RFC_SWAPPED_KS,
    TOP,
    by_cell,
    check,
    pr,
    rfc,
)

from lib.loop.check.judge import CheckSettings
from lib.settings import ContextSettings

GOOD = GOOD_VALIDATION


@pytest.mark.parametrize(
    ("entries", "ks", "verdicts"),
    [
        (RFC_GOOD, RFC_GOOD_KS, dict.fromkeys(RFC_GOOD_KS, "ok")),
        # Swapped at batch 64: at 512 tokens K=0 measures the plain server's 3000 against
        # static K=3's 3500 (-14 %); at 8192 K=3 measures 2000 against the plain 2600 (-23 %):
        # both far beyond the 1 % tolerance and the 0.5 % noise.
        (
            RFC_SWAPPED,
            RFC_SWAPPED_KS,
            {**dict.fromkeys(RFC_SWAPPED_KS, "ok"), (64, 512): "loss", (64, 8192): "loss"},
        ),
    ],
)
def test_an_rfc_48944_schedule_is_judged_per_context_at_the_k_it_runs_there(
    tmp_path: Path,
    entries: list[list[int]],
    ks: dict[tuple[int, int], int],
    verdicts: dict[tuple[int, int], str],
) -> None:
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(entries), ks)
    report = check(root)
    assert report.errors == []
    assert report.schedule is None and report.context_schedule is not None
    assert [(c.prompt_tokens, c.context_tokens) for c in report.contexts] == [
        (512, 576),
        (8192, 8256),
    ]
    assert by_cell(report, "dynamic_k") == ks
    assert by_cell(report, "verdict") == verdicts
    assert report.losses == sorted({a for (a, _), v in verdicts.items() if v == "loss"})
    assert report.one_prompt_length is None


@pytest.mark.parametrize(
    ("lengths", "k_at_512", "verdict_at_512"),
    [
        # The length table's first range ends exactly at 512 + 128 / 2 = 576: K=3 there.
        ([[1, 576, 3], [577, TOP, 0]], 3, "ok"),
        # It ends one before: 576 is the next range's lo, K=0, and at 512 tokens K=0 loses.
        ([[1, 575, 3], [576, TOP, 0]], 0, "loss"),
    ],
)
def test_a_pr_54801_schedule_runs_the_smaller_k_and_a_context_on_a_range_edge_is_that_range(
    tmp_path: Path, lengths: list[list[int]], k_at_512: int, verdict_at_512: str
) -> None:
    """Batch table K=3 everywhere; at 8192 tokens (context 8256) both length tables say 0,
    which is right only at batch 64 (2600 > 2000): at batch 1 the smaller-K rule turns off the
    speculation that pays there (180 against 250: a loss)."""
    ks = {(1, 512): k_at_512, (64, 512): k_at_512, (1, 8192): 0, (64, 8192): 0}
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, pr([[1, 256, 3]], lengths), ks)
    report = check(root)
    assert report.errors == []
    assert by_cell(report, "dynamic_k") == ks
    assert by_cell(report, "verdict") == {
        (1, 512): verdict_at_512,
        (64, 512): verdict_at_512,
        (1, 8192): "loss",
        (64, 8192): "ok",
    }


def test_a_context_schedule_on_a_sweep_of_one_prompt_length_is_judged_there_and_says_so(
    tmp_path: Path,
) -> None:
    """Only the 8192-token runs: the schedule is judged at that one length, where it runs
    K=0 at batch 64 (context 8256 > 2180), and the report says what it rests on."""
    arms = {8192: CONTEXT_ARMS[8192]}
    ks = {key: k for key, k in RFC_GOOD_KS.items() if key[1] == 8192}
    report = check(write_context_validation(tmp_path / "v", arms, rfc(RFC_GOOD), ks))
    assert report.errors == []
    assert [(c.prompt_tokens, c.context_tokens) for c in report.contexts] == [(8192, 8256)]
    assert by_cell(report, "dynamic_k") == ks
    assert set(by_cell(report, "verdict").values()) == {"ok"}
    assert report.context_field == "random_input_len"
    assert report.one_prompt_length is not None
    assert report.one_prompt_length.startswith(
        "the validation sweep did not vary the prompt length: the context schedule is judged"
        " at its one prompt length, 8192 tokens"
    )
    assert (
        "decode-time context 8256 (prompt + output / 2 = 8192 + 128 / 2)"
        in report.one_prompt_length
    )
    data = json.loads(report.to_json_text())
    assert data["one_prompt_length"] == report.one_prompt_length
    assert data["schedule"] == {
        "format": "vllm-rfc-48944",
        "speculative_token_schedule": sorted(RFC_GOOD),
    }
    assert [c["context_tokens"] for c in data["contexts"]] == [8256]


def test_a_context_schedule_needs_a_prompt_length(tmp_path: Path) -> None:
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(RFC_GOOD), RFC_GOOD_KS)
    settings = CheckSettings(options=INDEPENDENT, context=ContextSettings(context_var="none"))
    report = check(root, settings)
    assert [p.rule for p in report.errors] == ["no-prompt-length"]
    assert report.errors[0].message == (
        "--context-var none ignores the prompt length: the context schedule's K depends on it"
    )
    assert report.contexts == () and report.verdicts.is_empty()


def test_a_note_of_the_loader_leaves_the_context_axis_on(tmp_path: Path) -> None:
    """A warm-up file (the loader's note "warm-up run ignored") once switched the axis off:
    the two prompt lengths were pooled and static K=7's 25 % lead at batch 64 and 8192
    tokens (4400 against 3520) vanished. Judged per length it is a loss there."""
    root = write_validation(tmp_path / "v", GOOD, prompt_tokens=512)
    write_validation(root, {**GOOD, (64, "static-k7"): spread(4400.0)}, prompt_tokens=8192)
    (root / "SERVE--dynamic-BENCH--c1-p512" / "warmup.json").write_text("{}")
    report = check(root)
    assert "warmup-ignored" in [p.rule for p in report.problems]
    assert [c.prompt_tokens for c in report.contexts] == [512, 8192]
    assert by_cell(report, "verdict")[(64, 8192)] == "loss"


def test_a_prompt_length_field_no_record_holds_is_an_error_not_a_pooled_check(
    tmp_path: Path,
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    settings = CheckSettings(options=INDEPENDENT, context=ContextSettings(context_var="my_len"))
    report = check(root, settings)
    assert [p.rule for p in report.errors] == ["context-field-missing"]
    assert report.verdicts.is_empty()
