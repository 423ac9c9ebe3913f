"""lib/loop/check.py: a deployed schedule against static-K servers and K=0, per anchor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import VALIDATION_SWEEP
from sweep_builder import (
    CONTEXT_ARMS,
    DYNAMIC,
    GOOD_VALIDATION,
    record,
    spread,
    write_combo,
    write_context_validation,
    write_validation,
)

from lib.deploy.deployed import context_schedule_of
from lib.deploy.grid import UNBOUNDED_CONTEXT
from lib.loop.check import CheckReport, CheckSettings, UnderTest, check_deployment
from lib.schedule import Schedule
from lib.settings import ContextSettings, Options, Settings

GOOD = GOOD_VALIDATION
#: Independent runs (no server offsets): the model these expectations were derived with.
INDEPENDENT = Options(server_cv=0.0)


def check(root: Path, settings: CheckSettings | None = None, **schedule: UnderTest) -> CheckReport:
    return check_deployment(
        root, settings or CheckSettings(options=INDEPENDENT), schedule.get("schedule")
    )


def test_a_schedule_as_good_as_every_alternative_passes(tmp_path: Path) -> None:
    report = check(write_validation(tmp_path / "v", GOOD))
    assert report.schedule == Schedule(((1, 63, 7), (64, 256, 0)))
    assert report.losses == [] and report.errors == []
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
    assert (rows[1]["verdict"], rows[64]["verdict"]) == ("ok", "ok")
    # Batch 1: best static is K=7 (318 vs 298); the dynamic arm equals it: +0.00 %.
    assert rows[1]["best_static"] == "static K=7"
    assert rows[1]["vs_best_static_percent"] == pytest.approx(0.0, abs=1e-9)
    # ... and beats the plain server by 318 / 206 - 1 = 54.37 %.
    assert rows[1]["vs_k0_percent"] == pytest.approx((318 / 206 - 1) * 100)
    assert rows[1]["dynamic_k"] == 7
    assert rows[1]["same_k_arm"] == "static K=7"
    # Batch 64: the schedule runs K=0; against the plain server 3520 vs 3524:
    # overhead 1 - 3520 / 3524 = +0.114 % of throughput, within the 1 % tolerance.
    assert rows[64]["dynamic_k"] == 0
    assert rows[64]["k0_arm"] == "no speculation"
    assert rows[64]["overhead_percent"] == pytest.approx((1 - 3520 / 3524) * 100)
    assert rows[64]["p_vs_k0"] >= 0.9
    # A run at 64 requests ramps up and drains through 1-63, where the schedule runs K=7.
    assert any("K in [0, 7] below it" in reason for reason in rows[64]["reasons"])
    assert not any("below it" in reason for reason in rows[1]["reasons"])


def test_files_with_a_byte_order_mark_are_read_like_the_loader_reads_them(tmp_path: Path) -> None:
    # An editor that saves UTF-8 "with BOM": the loader accepts it, so the arms must too.
    root = write_validation(tmp_path / "v", GOOD)
    for summary in root.rglob("summary.json"):
        summary.write_bytes(b"\xef\xbb\xbf" + summary.read_bytes())
    plain = check(write_validation(tmp_path / "plain", GOOD))
    marked = check(root)
    assert marked.errors == []
    assert marked.verdicts.equals(plain.verdicts)


def test_dynamic_sd_overhead_at_k0_is_a_loss(tmp_path: Path) -> None:
    # The schedule-enabled engine at K=0 is 15 % slower than a plain server at 64 (the kind
    # of cost vLLM issue #49548 reports), far beyond the 1 % tolerance and the 0.5 % noise.
    values = {**GOOD, (64, "dynamic"): spread(3524.0 * 0.85)}
    report = check(write_validation(tmp_path / "v", values))
    assert report.losses == [64]
    row = report.verdicts.to_dicts()[1]
    assert row["verdict"] == "loss"
    assert row["p_vs_k0"] <= 0.1
    # overhead = 1 - 0.85 x 3524 / 3524 = 15 % of throughput.
    assert row["overhead_percent"] == pytest.approx(15.0)


def test_a_loss_against_the_best_static_k_is_flagged(tmp_path: Path) -> None:
    # At batch 1 the schedule's K=7 runs 10 % below a static K=3 server.
    values = {**GOOD, (1, "static-k3"): spread(350.0), (1, "dynamic"): spread(315.0)}
    report = check(write_validation(tmp_path / "v", values))
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
    assert rows[1]["verdict"] == "loss"
    assert rows[1]["best_static"] == "static K=3"
    assert rows[1]["vs_best_static_percent"] == pytest.approx((315 / 350 - 1) * 100)
    assert rows[64]["verdict"] == "ok"
    assert report.losses == [1]


def test_noise_makes_a_close_call_inconclusive(tmp_path: Path) -> None:
    # 2 % below the plain server with +-8 % runs: neither confidently worse nor as good.
    values = {
        **GOOD,
        (64, "dynamic"): spread(3524 * 0.98, 0.08),
        (64, "no-spec"): spread(3524.0, 0.08),
    }
    report = check(write_validation(tmp_path / "v", values))
    assert [row["verdict"] for row in report.verdicts.to_dicts()] == ["ok", "inconclusive"]
    assert report.losses == []


def test_a_minimised_objective_reverses_better_and_worse(tmp_path: Path) -> None:
    # Lower TPOT is better: the dynamic arm at 64 has 15 % lower TPOT than the plain server.
    values = {**GOOD, (64, "dynamic"): spread(3524.0 * 0.85)}
    settings = CheckSettings(
        options=INDEPENDENT, tuning=Settings(objective="output_throughput", direction="minimize")
    )
    row = check(write_validation(tmp_path / "v", values), settings).verdicts.to_dicts()[1]
    assert row["verdict"] == "ok"
    # Minimising, gain = other / dynamic - 1 = 1 / 0.85 - 1, and the overhead is negative:
    # dynamic / other - 1 = -15 %.
    assert row["vs_k0_percent"] == pytest.approx((1 / 0.85 - 1) * 100)
    assert row["overhead_percent"] == pytest.approx(-15.0)


def test_a_missing_baseline_is_stated_not_guessed(tmp_path: Path) -> None:
    values = {key: runs for key, runs in GOOD.items() if key[1] != "no-spec"}
    row = check(write_validation(tmp_path / "v", values)).verdicts.to_dicts()[0]
    assert row["k0_arm"] is None
    assert any("no K=0 server" in reason for reason in row["reasons"])


def test_the_seed_designs_k0_is_used_when_there_is_no_plain_server(tmp_path: Path) -> None:
    values = {key: runs for key, runs in GOOD.items() if key[1] != "no-spec"}
    root = write_validation(tmp_path / "v", values)
    for anchor, center in ((1, 206.0), (64, 3524.0)):
        records = [
            record(anchor, 0, run_number=n, spec="schedule", output_throughput=value)
            for n, value in enumerate(spread(center))
        ]
        write_combo(root / f"SERVE--k0-BENCH--c{anchor}", records)
    row = check(root).verdicts.to_dicts()[1]
    assert row["k0_arm"] == "K=0 (1-range)"
    assert any("not measured" in reason for reason in row["reasons"])


def test_the_schedule_under_test_selects_the_arm_and_must_match(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    assert check(root, schedule=Schedule(((1, 63, 7), (64, 256, 0)))).errors == []
    report = check(root, schedule=Schedule(((1, 31, 7), (32, 256, 0))))
    (problem,) = report.errors
    assert problem.rule == "no-dynamic-arm"
    assert problem.value == "[[1, 31, 7], [32, 256, 0]]"


def test_two_schedules_without_one_under_test_are_ambiguous(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    other = {**DYNAMIC, "num_speculative_tokens_per_batch_size": [[1, 31, 3], [32, 256, 0]]}
    write_combo(
        root / "SERVE--other-BENCH--c1",
        [record(1, 0, run_number=n, spec=other, output_throughput=300.0) for n in range(3)],
    )
    assert [p.rule for p in check(root).errors] == ["ambiguous-dynamic-arm"]


@pytest.mark.parametrize(
    ("values", "settings", "rule"),
    [
        (None, CheckSettings(), "missing-folder"),
        (
            {key: runs for key, runs in GOOD.items() if key[1] != "dynamic"},
            CheckSettings(),
            "no-dynamic-arm",
        ),
        (GOOD, CheckSettings(options=Options(confidence=1.5)), "invalid-setting"),
    ],
)
def test_bad_input_is_an_error_not_an_exception(
    tmp_path: Path,
    values: dict[tuple[int, str], list[float]] | None,
    settings: CheckSettings,
    rule: str,
) -> None:
    root = tmp_path / "v"
    if values is not None:
        write_validation(root, values)
    report = check(root, settings)
    assert rule in [p.rule for p in report.errors]
    assert report.verdicts.is_empty()


def test_json_report_is_deterministic(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    first, second = check(root).to_json_text(), check(root).to_json_text()
    assert first == second
    data = json.loads(first)
    assert [row["verdict"] for row in data["anchors"]] == ["ok", "ok"]
    assert {row["arm"] for row in data["arms"]} == {
        "dynamic",
        "static K=3",
        "static K=7",
        "no speculation",
    }
    assert data["settings"] == {
        "objective": "output_throughput",
        "direction": "maximize",
        "relative_tolerance": 0.01,
        "confidence": 0.9,
        "min_runs": 3,
        "seed": 49163,
        "server_cv": 0.0,
        "batch_size_var": "max_concurrency",
    }
    assert data["assumption"] == (
        "no server replicas: P(eps-good) assumes servers vary by at most 0.0% (--server-cv;"
        " measure it with tune-spec-k plan --server-replicas)"
    )


def test_the_real_cpu_validation_sweep_is_judged() -> None:
    """The real vLLM validation sweep (scripts/real_cpu_sweep/run_validation.sh): the records
    vLLM wrote for a dynamic, a static and a plain server fall into the right arms."""
    schedule_file = VALIDATION_SWEEP / "tuned_schedule.json"
    data = json.loads(schedule_file.read_text())["num_speculative_tokens_per_batch_size"]
    schedule, _ = Schedule.parse(data)
    assert schedule == Schedule(((1, 1, 2), (2, 3, 5), (4, 7, 3), (8, 8, 0)))
    report = check(
        VALIDATION_SWEEP,
        CheckSettings(options=INDEPENDENT, tuning=Settings(min_runs=2)),
        schedule=schedule,
    )
    assert report.errors == []
    assert set(report.arms["arm"]) == {"dynamic", "static K=3", "no speculation"}
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
    # The K the schedule runs at 1, 2, 4, 8: 2, 5, 3, 0.
    assert {a: r["dynamic_k"] for a, r in rows.items()} == {1: 2, 2: 5, 4: 3, 8: 0}
    # Where the schedule runs K=3 (batch 4) the static K=3 server measures its overhead; where
    # it runs K=0 (batch 8), the plain server does.
    assert rows[4]["same_k_arm"] == "static K=3"
    assert rows[8]["same_k_arm"] == "no speculation"
    assert all(r["best_static"] == "static K=3" for r in rows.values())
    assert all(r["k0_arm"] == "no speculation" for r in rows.values())
    # SERVE--dynamic-BENCH--c8/run=1.json has spec_decode_* counters: it drafted while draining.
    assert any("drafted tokens in 1 of 2 run(s)" in reason for reason in rows[8]["reasons"])


def test_an_arm_with_too_few_runs_is_left_out_with_a_warning(tmp_path: Path) -> None:
    values = {**GOOD, (64, "no-spec"): [3524.0, 3530.0]}
    report = check(write_validation(tmp_path / "v", values))
    row = report.verdicts.to_dicts()[1]
    assert row["k0_arm"] is None
    assert any("no K=0 server measured here" in reason for reason in row["reasons"])
    warnings = [p.message for p in report.problems if p.severity.value == "warning"]
    assert "no speculation: only 2 usable run(s), so it is left out at this batch size" in warnings


def test_at_the_default_server_cv_a_tie_between_two_servers_is_inconclusive(
    tmp_path: Path,
) -> None:
    """Batch 64: the dynamic arm runs K=0, 0.11 % below the plain server, runs 0.5 % apart.
    With independent runs that is a sure tie ("ok"); at the default 1 % between servers, the
    two arms are two servers, a difference of sd 1.4 %: not sure (P(at least as good) about
    Phi(0.89 / 1.41) = 0.74 before calibration), and the report says what it assumed."""
    root = write_validation(tmp_path / "v", GOOD)
    independent = {row["anchor"]: row for row in check(root).verdicts.to_dicts()}
    assert independent[64]["verdict"] == "ok"
    report = check_deployment(root, CheckSettings(), None)
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
    assert rows[64]["verdict"] == "inconclusive"
    assert report.assumption is not None
    assert report.assumption.startswith(
        "no server replicas: P(eps-good) assumes servers vary by at most 1.0% (--server-cv"
    )


# --------------------------------------------------------------------------- context schedules

TOP = UNBOUNDED_CONTEXT
#: PR #48944 entries running the right K of CONTEXT_ARMS everywhere: K=3, except 0 at batch
#: 64-256 above context 2180 (8192 tokens: context 8256).
RFC_GOOD = [
    [1, 63, 1, 2180, 3],
    [1, 63, 2181, TOP, 3],
    [64, 256, 1, 2180, 3],
    [64, 256, 2181, TOP, 0],
]
#: The two contexts swapped at batch 64: K=0 at 512 tokens, K=3 at 8192 (both wrong).
RFC_SWAPPED = [
    [1, 63, 1, 2180, 3],
    [1, 63, 2181, TOP, 3],
    [64, 256, 1, 2180, 0],
    [64, 256, 2181, TOP, 3],
]
#: The K each config runs per (anchor, prompt), read off its entries by hand.
RFC_GOOD_KS = {(1, 512): 3, (1, 8192): 3, (64, 512): 3, (64, 8192): 0}
RFC_SWAPPED_KS = {(1, 512): 3, (1, 8192): 3, (64, 512): 0, (64, 8192): 3}


def rfc(entries: list[list[int]], global_k: int = 3) -> dict[str, object]:
    return {
        "method": "eagle3",
        "model": "drafter",
        "num_speculative_tokens": global_k,
        "speculative_token_schedule": entries,
        "ctx_agg": "mean",
    }


def pr(batch: list[list[int]], lengths: list[list[int]]) -> dict[str, object]:
    return {
        "method": "eagle3",
        "model": "drafter",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": batch,
        "num_speculative_tokens_per_seq_len": lengths,
    }


def by_cell(report: CheckReport, column: str) -> dict[tuple[int, int], object]:
    """(anchor, prompt tokens) -> the verdict row's ``column``, over every context point."""
    return {
        (row["anchor"], context.prompt_tokens): row[column]
        for context in report.contexts
        for row in context.verdicts.to_dicts()
    }


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


def test_the_schedule_under_test_may_be_given_and_selects_among_context_schedules(
    tmp_path: Path,
) -> None:
    """Two context schedules served side by side: without --schedule that is ambiguous; each
    given selects its own arm, and the other is another schedule."""
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(RFC_GOOD), RFC_GOOD_KS)
    other = rfc(RFC_SWAPPED)
    for prompt in (512, 8192):
        for anchor in (1, 64):
            k = RFC_SWAPPED_KS[(anchor, prompt)]
            values = CONTEXT_ARMS[prompt][(anchor, f"static-k{k}" if k else "no-spec")]
            records = [
                record(
                    anchor,
                    0,
                    run_number=n,
                    spec=other,
                    output_throughput=v,
                    random_input_len=prompt,
                    total_input_tokens=prompt * 100,
                    total_output_tokens=128 * 100,
                )
                for n, v in enumerate(values)
            ]
            write_combo(root / f"SERVE--other-BENCH--c{anchor}-p{prompt}", records)
    assert [p.rule for p in check(root).errors] == ["ambiguous-dynamic-arm"]
    good, _ = context_schedule_of(rfc(RFC_GOOD))
    swapped, _ = context_schedule_of(other)
    assert good is not None and swapped is not None
    report = check(root, schedule=good)
    assert report.errors == [] and report.losses == []
    assert any(
        arm.startswith('other schedule {"format": "vllm-rfc-48944"')
        for arm in report.contexts[0].arms["arm"]
    )
    assert check(root, schedule=swapped).losses == [64]


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


def test_the_engine_clamps_a_context_schedule_to_num_speculative_tokens(tmp_path: Path) -> None:
    # Served with num_speculative_tokens 2 the tables' K=3 run as K=2 (vLLM clamps them).
    arms = {
        p: {**v, **{(a, "static-k2"): v[(a, "static-k3")] for a in (1, 64)}}
        for p, v in CONTEXT_ARMS.items()
    }
    ks = {key: min(k, 2) for key, k in RFC_GOOD_KS.items()}
    report = check(write_context_validation(tmp_path / "v", arms, rfc(RFC_GOOD, global_k=2), ks))
    assert by_cell(report, "dynamic_k") == ks


def test_the_capture_rule_holds_a_context_schedule_to_its_largest_k_per_batch_size(
    tmp_path: Path,
) -> None:
    """Batch 64-256 runs K=3 at short contexts: 129 x 4 = 516 tokens per step pass vLLM's
    default C=512 there (128 x 4 = 512 does not), whatever it runs at long ones."""
    report = check(
        write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(RFC_GOOD), RFC_GOOD_KS)
    )
    assert report.deployment is not None
    assert [(r["lo"], r["hi"], r["k"]) for r in report.deployment["graphless_ranges"]] == [
        (129, 256, 3)
    ]
    (warning,) = [p for p in report.problems if p.rule == "graphless-range"]
    assert warning.message.startswith(
        "the context schedule held to its largest K per batch size over every context,"
        " [[1, 63, 3], [64, 256, 3]]: batch sizes 129-256 run K=3"
    )


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
