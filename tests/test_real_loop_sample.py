"""data/sample_sweeps/real-cpu-loop: a real `tune-spec-k run` on vLLM's CPU build, stopped by
SIGTERM during round 2 (its README). What its log says is checked against the run files
themselves, read here independently of the accounting's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import SAMPLE_SWEEPS

from lib.cli.main import main
from lib.loop.run.rounds import rounds_of

SAMPLE = SAMPLE_SWEEPS / "real-cpu-loop"
LOG = json.loads((SAMPLE / "rounds.json").read_text(encoding="utf-8"))


def _round_files(number: int) -> list[Path]:
    """Round ``number``'s measured runs: its sweeps' folders, ``round-N`` (with the lean
    design's inner ``grid``) and ``round-N-*``, every ``run=N.json``."""
    folders = [SAMPLE / f"round-{number}", *sorted(SAMPLE.glob(f"round-{number}-*"))]
    return sorted(p for f in folders if f.is_dir() for p in f.rglob("run=*.json"))


def test_the_log_reads_back_typed() -> None:
    log, problems = rounds_of(LOG, "rounds.json")
    assert problems == [] and log is not None
    assert [r.status for r in log.rounds] == ["tuned", "tuned", "planned"]
    # Stopped (SIGTERM) while round 2 ran: no stop rule was reached.
    assert log.stop_rule is None


@pytest.mark.parametrize("number", [0, 1])
def test_each_finished_round_counts_its_own_run_files_and_their_durations(number: int) -> None:
    record = LOG["rounds"][number]
    files = _round_files(number)
    assert record["runs"] == record["planned_runs"] == len(files)
    durations = sum(json.loads(p.read_text(encoding="utf-8"))["duration"] for p in files)
    assert record["run_seconds"] == pytest.approx(durations, abs=0.01)
    # GPU time is the runs' durations plus the server starts, nothing else.
    seconds = record["run_seconds"] + record["server_start_seconds"]
    assert record["gpu_seconds"] == pytest.approx(seconds, abs=0.01)
    assert record["verdict"] == "provisional"


def test_the_stopped_round_kept_every_file_whole_and_counts_nothing_yet() -> None:
    # Round 2 was planned at 86 runs and stopped part-way: its files are whole JSON (nothing
    # half-written), and it is counted when the same command resumes it, not before.
    record = LOG["rounds"][2]
    assert record["status"] == "planned" and record["runs"] == 0
    files = _round_files(2)
    assert 0 < len(files) < record["planned_runs"]
    assert all(isinstance(json.loads(p.read_text(encoding="utf-8")), dict) for p in files)
    assert LOG["gpu_seconds"] == pytest.approx(sum(r["gpu_seconds"] for r in LOG["rounds"]))


def test_tuning_the_stopped_experiment_names_the_anchor_round_2_left_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Mid-round, the new anchor 7 has K=0 and K=1 only. The experiment is tuned with its
    # design's K (rounds.json: 0, 1, 2, 3, 5), so K=2, 3 and 5 are judged there: at the CPU's
    # 11-36 % run noise no lead is clear of the runs' spread, so none is ruled out, and the
    # verdict names them (resume the run to measure them).
    out = tmp_path / "r.json"
    flags = ["--min-runs", "1", "--max-objective-relative-mad", "0.6", "--output-json", str(out)]
    assert main([str(SAMPLE), *flags]) == 0
    err = capsys.readouterr().err
    for k in (2, 3, 5):
        assert f"warning [unmeasured-k] batch size 7, K={k}:" in err
    result = json.loads(out.read_text())
    assert result["selection"]["design_ks"] == [0, 1, 2, 3, 5]
    assert result["verdict"]["state"] == "provisional"
    assert any(
        r["rule"] == "unmeasured-k" and r["message"].startswith("batch size 7:")
        for r in result["verdict"]["reasons"]
    )
