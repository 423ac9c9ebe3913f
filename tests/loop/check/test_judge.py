"""lib/loop/check/judge.py: the dynamic arm against static-K servers and K=0, per anchor."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_builder import GOOD_VALIDATION, record, spread, write_combo, write_validation
from validation_check import INDEPENDENT, check

from lib.loop.check.judge import CheckSettings
from lib.loop.check.report import check_deployment
from lib.schedule import Schedule
from lib.settings import Settings

GOOD = GOOD_VALIDATION


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


def test_the_smaller_batch_notes_are_of_the_clamped_schedule(tmp_path: Path) -> None:
    """[[1, 63, 7], [64, 256, 3]] served under num_speculative_tokens=3 runs K=3 at every
    batch size: no K differs below an anchor, so no ramp-up note (unclamped, batch 1 read "K=3
    at 1 requests but K in [7] below it")."""
    dynamic = {
        "method": "eagle3",
        "model": "drafter",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 63, 7], [64, 256, 3]],
    }
    report = check(write_validation(tmp_path / "v", GOOD, dynamic=dynamic))
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
    assert rows[1]["dynamic_k"] == rows[64]["dynamic_k"] == 3
    assert not any("below it" in r for row in rows.values() for r in row["reasons"])
