"""`tune-spec-k check`: a deployed schedule against static-K servers and K=0
(lib/validate_deployment.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sweep_builder import record, write_combo

from lib.cli import main
from lib.validate_deployment import CheckSettings, check_deployment

SCHEDULE = [[1, 63, 7], [64, 256, 0]]
DYNAMIC: dict[str, Any] = {
    "method": "eagle3",
    "model": "drafter",
    "num_speculative_tokens": 7,
    "num_speculative_tokens_per_batch_size": SCHEDULE,
}


def arm_spec(arm: str) -> tuple[str | dict[str, Any], int]:
    """(sweep_builder spec, K) of an arm name: dynamic, static-k<K>, no-spec."""
    if arm == "dynamic":
        return DYNAMIC, 0
    if arm == "no-spec":
        return "none", 0
    return "static", int(arm.removeprefix("static-k"))


def write_validation(root: Path, values: dict[tuple[int, str], list[float]]) -> Path:
    """One combo per (anchor, arm), one run per value, named as `plan --validate` names them."""
    for (anchor, arm), runs in values.items():
        spec, k = arm_spec(arm)
        records = [
            record(anchor, k, run_number=n, spec=spec, output_throughput=value)
            for n, value in enumerate(runs)
        ]
        write_combo(root / f"SERVE--{arm}-BENCH--c{anchor}", records)
    return root


def spread(center: float, relative: float = 0.005) -> list[float]:
    """Three runs within +-relative of center."""
    return [center * (1 - relative), center, center * (1 + relative)]


# At batch size 1 the schedule runs K=7 and at 64 it runs K=0.
GOOD = {
    (1, "dynamic"): spread(318.0),
    (1, "static-k3"): spread(298.0),
    (1, "static-k7"): spread(318.0),
    (1, "no-spec"): spread(206.0),
    (64, "dynamic"): spread(3520.0),
    (64, "static-k3"): spread(3075.0),
    (64, "static-k7"): spread(3035.0),
    (64, "no-spec"): spread(3524.0),
}


def test_a_schedule_as_good_as_every_alternative_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    assert main(["check", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"schedule under test: {json.dumps(SCHEDULE)}"
    assert "batch_size=1: OK" in out
    assert "batch_size=64: OK" in out
    report = check_deployment(root, CheckSettings())
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
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


def test_dynamic_sd_overhead_at_k0_is_flagged_as_a_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The schedule-enabled engine at K=0 is 15 % slower than a plain server at 64 (the kind
    # of cost vLLM issue #49548 reports), far beyond the 1 % tolerance and the 0.5 % noise.
    values = {**GOOD, (64, "dynamic"): spread(3524.0 * 0.85)}
    root = write_validation(tmp_path / "v", values)
    assert main(["check", str(root)]) == 1
    out = capsys.readouterr().out
    assert "batch_size=64: LOSS" in out
    assert "LOSS at batch size(s) [64]" in out
    assert "#49548" in out
    row = check_deployment(root, CheckSettings()).verdicts.to_dicts()[1]
    assert row["p_vs_k0"] <= 0.1
    # overhead = 1 - 0.85 x 3524 / 3524 = 15 % of throughput.
    assert row["overhead_percent"] == pytest.approx(15.0)


def test_a_loss_against_the_best_static_k_is_flagged(tmp_path: Path) -> None:
    # At batch 1 the schedule's K=7 runs 10 % below a static K=3 server.
    values = {**GOOD, (1, "static-k3"): spread(350.0), (1, "dynamic"): spread(315.0)}
    report = check_deployment(write_validation(tmp_path / "v", values), CheckSettings())
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
    assert rows[1]["verdict"] == "loss"
    assert rows[1]["best_static"] == "static K=3"
    assert rows[1]["vs_best_static_percent"] == pytest.approx((315 / 350 - 1) * 100)
    assert rows[64]["verdict"] == "ok"
    assert report.losses == [1]


def test_noise_makes_a_close_call_inconclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 % below the plain server with +-8 % runs: neither confidently worse nor as good.
    values = {
        **GOOD,
        (64, "dynamic"): spread(3524 * 0.98, 0.08),
        (64, "no-spec"): spread(3524.0, 0.08),
    }
    root = write_validation(tmp_path / "v", values)
    assert main(["check", str(root)]) == 0
    assert "batch_size=64: INCONCLUSIVE" in capsys.readouterr().out
    assert main(["check", str(root), "--strict"]) == 1


def test_a_minimised_objective_reverses_better_and_worse(tmp_path: Path) -> None:
    # Lower TPOT is better: the dynamic arm at 64 has 15 % lower TPOT than the plain server.
    values = {**GOOD, (64, "dynamic"): spread(3524.0 * 0.85)}
    report = check_deployment(
        write_validation(tmp_path / "v", values),
        CheckSettings(objective="output_throughput", direction="minimize"),
    )
    row = report.verdicts.to_dicts()[1]
    assert row["verdict"] == "ok"
    # Minimising, gain = other / dynamic - 1 = 1 / 0.85 - 1, and the overhead is negative:
    # dynamic / other - 1 = -15 %.
    assert row["vs_k0_percent"] == pytest.approx((1 / 0.85 - 1) * 100)
    assert row["overhead_percent"] == pytest.approx(-15.0)


def test_a_missing_baseline_is_stated_not_guessed(tmp_path: Path) -> None:
    values = {key: runs for key, runs in GOOD.items() if key[1] != "no-spec"}
    report = check_deployment(write_validation(tmp_path / "v", values), CheckSettings())
    row = report.verdicts.to_dicts()[0]
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
    row = check_deployment(root, CheckSettings()).verdicts.to_dicts()[1]
    assert row["k0_arm"] == "K=0 (1-range)"
    assert any("not measured" in reason for reason in row["reasons"])


def test_schedule_file_selects_the_arm_and_must_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps({"num_speculative_tokens_per_batch_size": SCHEDULE}))
    assert main(["check", str(root), "--schedule", str(schedule)]) == 0
    capsys.readouterr()
    other = tmp_path / "other.json"
    other.write_text(json.dumps([[1, 31, 7], [32, 256, 0]]))
    assert main(["check", str(root), "--schedule", str(other)]) == 2
    error = capsys.readouterr().err
    assert "no run served the schedule under test" in error
    assert "[[1, 31, 7], [32, 256, 0]]" in error


def test_two_schedules_without_schedule_flag_are_ambiguous(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    other = {**DYNAMIC, "num_speculative_tokens_per_batch_size": [[1, 31, 3], [32, 256, 0]]}
    write_combo(
        root / "SERVE--other-BENCH--c1",
        [record(1, 0, run_number=n, spec=other, output_throughput=300.0) for n in range(3)],
    )
    assert main(["check", str(root)]) == 2
    assert "several multi-range schedules" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "flags", "message"),
    [
        (lambda root: root, [], "the experiment folder does not exist"),
        (
            lambda root: write_validation(
                root, {key: runs for key, runs in GOOD.items() if key[1] != "dynamic"}
            ),
            [],
            "no run served the schedule under test",
        ),
        (lambda root: write_validation(root, GOOD), ["--confidence", "1.5"], "confidence"),
    ],
)
def test_bad_input_exits_2_with_the_problem(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Any,
    flags: list[str],
    message: str,
) -> None:
    root = make(tmp_path / "v")
    assert main(["check", str(root), *flags]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert "Traceback" not in error


def test_json_report_is_written_and_deterministic(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["check", str(root), "--output-json", str(first)]) == 0
    assert main(["check", str(root), "--output-json", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()
    data = json.loads(first.read_text())
    assert [row["verdict"] for row in data["anchors"]] == ["ok", "ok"]
    assert {row["arm"] for row in data["arms"]} == {
        "dynamic",
        "static K=3",
        "static K=7",
        "no speculation",
    }


REAL_VALIDATION = (
    Path(__file__).resolve().parents[1] / "data" / "validation_sweeps" / "real-cpu-tiny-ngram"
)


def test_the_real_cpu_validation_sweep_is_judged(capsys: pytest.CaptureFixture[str]) -> None:
    """The real vLLM validation sweep (scripts/real_cpu_sweep/run_validation.sh): the records
    vLLM wrote for a dynamic, a static and a plain server fall into the right arms."""
    schedule_file = REAL_VALIDATION / "tuned_schedule.json"
    if not schedule_file.is_file():
        pytest.skip(f"{REAL_VALIDATION} has not been committed yet")
    schedule = json.loads(schedule_file.read_text())["num_speculative_tokens_per_batch_size"]
    assert schedule == [[1, 1, 2], [2, 3, 5], [4, 7, 3], [8, 8, 0]]
    report = check_deployment(REAL_VALIDATION, CheckSettings(min_runs=2), schedule)
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
    status = main(
        ["check", str(REAL_VALIDATION), "--min-runs", "2", "--schedule", str(schedule_file)]
    )
    assert status == (1 if report.losses else 0)
    assert capsys.readouterr().out.count("batch_size=") == 4


def test_an_arm_with_too_few_runs_is_left_out_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = {**GOOD, (64, "no-spec"): [3524.0, 3530.0]}
    root = write_validation(tmp_path / "v", values)
    report = check_deployment(root, CheckSettings())
    row = report.verdicts.to_dicts()[1]
    assert row["k0_arm"] is None
    assert any("no K=0 server measured here" in reason for reason in row["reasons"])
    assert main(["check", str(root)]) == 0
    assert "no speculation: only 2 usable run(s), so it is left out" in capsys.readouterr().err
