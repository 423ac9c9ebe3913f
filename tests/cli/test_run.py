"""lib/cli/run.py: `tune-spec-k run` against the stand-in vllm (bench/standin_vllm): the loop
ends with a schedule, rounds.json and a verdict that `tune-spec-k DIR` agrees with; a crashed
sweep names its command and log and resumes without measuring a run twice; a stop signal
leaves no process and resumes the same way; the budget, the round limit and other arguments
are refused or obeyed on both sides."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import REPO
from signal_runs import _session
from standin import CLEAR_FLAGS, CLEAR_TRUTH, measured, use_standin, write_model

from lib.cli.main import main
from lib.files import read_json
from lib.loop.run.rounds import rounds_of


def _run(*flags: str) -> int:
    return main(["run", *CLEAR_FLAGS, "--results-dir", "R", "-e", "E", *flags])


def _log(folder: Path) -> dict[str, object]:
    data = json.loads((folder / "R" / "E" / "rounds.json").read_text())
    assert isinstance(data, dict)
    return data


def _run_files(folder: Path) -> int:
    return sum(1 for path in (folder / "R" / "E").rglob("run=*.json"))


def test_the_loop_ends_ready_with_a_schedule_that_tuning_the_folder_agrees_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    assert _run("--budget-gpu-hours", "1") == 0
    out = capsys.readouterr().out
    experiment = tmp_path / "R" / "E"
    assert (experiment / "speculative_k_schedule.json").is_file()
    log = _log(tmp_path)
    rounds = log["rounds"]
    assert isinstance(rounds, list)
    # Round 0, the lean design: the probe K (K=0 and the largest, K=3) 3 times at each of the
    # 3 anchors (3 anchors or fewer are all probe anchors), K=1 once at each: 2 x 3 x 3 + 3 =
    # 21 runs. Every anchor resolves, but the picks switch between 2 (K=3) and 4 (K=0): round
    # 1 is the new anchor 3 at every K, as often as the median cell was measured (3 runs):
    # 9 runs, after which the verdict is ready.
    assert [r["runs"] for r in rounds] == [21, 9]
    assert [r["verdict"] for r in rounds] == ["provisional", "ready"]
    assert log["stop"] == {"rule": "ready", "text": "the verdict is ready: every pick resolved"}
    assert "the lean design" in rounds[0]["purpose"]
    # Every run the stand-in measured once, and each is a file of the experiment (round 0's
    # second sweep, round-0/grid, included).
    counts = measured(tmp_path)
    assert set(counts.values()) == {1} and sum(counts.values()) == _run_files(tmp_path) == 30
    assert "--speculative-config" in out and "run stopped:" in out
    # The experiment reads like any other: tuning it again as the summary says gives the
    # last round's schedule.
    [line] = [line for line in out.splitlines() if line.startswith("the same tuning of")]
    words = shlex.split(line.partition(": ")[2])
    assert words[:2] == ["tune-spec-k", "R/E"] and "--min-runs=1" in words
    assert main(words[1:]) == 0
    result = json.loads((experiment / "speculative_k_schedule.json").read_text())
    # K=3 up to 2 and from the new anchor 3 on K=0 (the truth's best at 3, 13 % ahead).
    assert result["num_speculative_tokens_per_batch_size"] == rounds[-1]["schedule"]
    assert rounds[-1]["schedule"] == [[1, 2, 3], [3, 4, 0]]
    assert result["verdict"]["state"] == "ready"


def test_a_full_round_zero_is_the_seed_s_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    # --design full runs the seed's grid at --num-runs: 3 K x 3 anchors x 1 run = 9 runs.
    assert _run("--design", "full", "--num-runs", "1", "--max-rounds", "1") == 0
    [record] = _log(tmp_path)["rounds"]  # type: ignore[misc]
    assert record["runs"] == sum(measured(tmp_path).values()) == 9
    assert "the seed's full grid (--design full)" in record["purpose"]


def test_gpu_time_is_the_runs_durations_plus_the_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stand-in's clock: each server start 60 s, then the runs, 5 s after each run (the
    # gap before a new server includes the last run's 5 s); so a measured start is 65 s, and
    # the first of a round (nothing before it) counts at the median measured, 65 s too. The
    # lean round 0 has 3 servers: K=0 and K=3 in its first sweep, K=1 in the second
    # (round-0/grid, written inside the first), whose runs count too.
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH, start_seconds=60.0, overhead_seconds=5.0)
    monkeypatch.chdir(tmp_path)
    assert _run("--max-rounds", "1") == 0
    record = _log(tmp_path)["rounds"][0]  # type: ignore[index]
    durations = [
        json.loads(path.read_text())["duration"]
        for path in (tmp_path / "R" / "E").rglob("run=*.json")
    ]
    assert record["run_seconds"] == pytest.approx(sum(durations), abs=1e-3)
    assert record["server_starts"] == 3 and record["measured_server_starts"] == 2
    # Timestamps have whole seconds: each measured gap is 65 s give or take one.
    assert record["server_start_seconds"] == pytest.approx(3 * 65, abs=4)
    assert record["gpu_seconds"] == pytest.approx(
        record["run_seconds"] + record["server_start_seconds"], abs=1e-3
    )


def test_a_crashed_sweep_names_its_command_and_log_and_resumes_without_measuring_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = use_standin(monkeypatch, tmp_path, CLEAR_TRUTH, crash_at_run=5)
    monkeypatch.chdir(tmp_path)
    assert _run() == 1
    err = capsys.readouterr().err
    assert "vllm bench sweep serve" in err and "logs/round-0.log" in err
    log_file = tmp_path / "R" / "E" / "logs" / "round-0.log"
    assert "the server died" in log_file.read_text()
    assert _log(tmp_path)["rounds"][0]["status"] == "failed"  # type: ignore[index]
    assert sum(measured(tmp_path).values()) == 4  # the fifth crashed before it was written
    write_model(truth, CLEAR_TRUTH)
    assert _run() == 0
    counts = measured(tmp_path)
    assert set(counts.values()) == {1}, [cell for cell, n in counts.items() if n > 1]
    # Round 0's 21 runs and round 1's 9 (see the first test), each once.
    assert sum(counts.values()) == _run_files(tmp_path) == 30
    first = _log(tmp_path)["rounds"][0]  # type: ignore[index]
    assert first["resumes"] == 1 and first["status"] == "tuned" and first["failure"] is None
    # The log of the crash is kept; the resumed sweep's output follows it.
    assert "the server died" in log_file.read_text() and "--resume" in log_file.read_text()


def test_a_stop_signal_leaves_no_process_and_the_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH, sleep_seconds=0.15)
    command = [sys.executable, "-m", "lib.cli", "run", *CLEAR_FLAGS]
    command += ["--results-dir", str(tmp_path / "R"), "-e", "E"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(300):
            if _run_files(tmp_path) >= 3 or process.poll() is not None:
                break
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 130, err.decode()
        assert "Traceback" not in err.decode()
        assert _session(process.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    stopped_at = sum(measured(tmp_path).values())
    assert 3 <= stopped_at < 21  # round 0 has 21 runs
    write_model(tmp_path / "standin-truth.json", CLEAR_TRUTH)
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    counts = measured(tmp_path)
    assert set(counts.values()) == {1} and sum(counts.values()) == _run_files(tmp_path)


def test_the_round_limit_stops_and_a_larger_one_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    assert _run("--max-rounds", "1") == 0
    log = _log(tmp_path)
    assert log["stop"]["rule"] == "max-rounds" and len(log["rounds"]) == 1  # type: ignore[index,arg-type]
    assert _run("--max-rounds", "2") == 0
    log = _log(tmp_path)
    assert log["stop"]["rule"] == "ready" and len(log["rounds"]) == 2  # type: ignore[index,arg-type]
    assert set(measured(tmp_path).values()) == {1}


def test_the_budget_stops_before_a_round_it_cannot_afford(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    # Round 0 on its own: 21 runs at --run-seconds 1 and 3 starts at 60 s = 201 s < 700 s.
    # Its real cost: each run 32 prompts x 128 tokens over the cell's throughput, K=0 3 x 4096
    # x (1/100 + 1/190 + 1/600) = 208 s, K=3 3 x 4096 x (1/170 + 1/320 + 1/400) = 141 s, K=1
    # 4096 x (1/130 + 1/250 + 1/470) = 57 s, plus 3 starts at about 65 s: about 600 s, which
    # leaves no room for round 1's 3 server starts alone (195 s) within 700 s.
    hours = str(700 / 3600)
    estimates = ("--run-seconds", "1", "--server-start-seconds", "60")
    assert _run("--budget-gpu-hours", hours, *estimates) == 0
    log = _log(tmp_path)
    assert log["stop"]["rule"] == "budget" and len(log["rounds"]) == 1  # type: ignore[index,arg-type]
    assert "exceeds the budget" in capsys.readouterr().out


def test_a_budget_below_round_zero_is_refused_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    # 21 runs x 1 s + 3 starts x 60 s = 201 s: 200 s is below it, 201 s is not.
    flags = ("--run-seconds", "1", "--server-start-seconds", "60", "--max-rounds", "1")
    assert _run("--budget-gpu-hours", str(200 / 3600), *flags) == 2
    err = capsys.readouterr().err
    assert "--budget-gpu-hours" in err and "round 0 alone" in err
    assert measured(tmp_path) == {}
    assert _run("--budget-gpu-hours", str(201 / 3600 + 1e-9), *flags) == 0


def test_other_arguments_and_a_foreign_folder_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    assert _run("--max-rounds", "1") == 0
    capsys.readouterr()
    assert main(["run", *CLEAR_FLAGS[:-1], "1,2", "--results-dir", "R", "-e", "E"]) == 2
    err = capsys.readouterr().err
    assert "other-arguments" in err and "design.anchors" in err
    (tmp_path / "R" / "F").mkdir()
    (tmp_path / "R" / "F" / "x.json").write_text("{}")
    assert main(["run", *CLEAR_FLAGS, "--results-dir", "R", "-e", "F"]) == 2
    assert "not-a-run" in capsys.readouterr().err


def test_rounds_json_reads_back_through_its_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    assert _run() == 0
    path = tmp_path / "R" / "E" / "rounds.json"
    data, _ = read_json(path)
    log, problems = rounds_of(data, str(path))
    assert log is not None and not problems
    assert [r.verdict for r in log.rounds] == ["provisional", "ready"]
    # Round 0 resolved every anchor; it was provisional for the switch between 2 and 4.
    assert log.rounds[1].unresolved == () and log.rounds[0].unresolved == ()
    assert log.rounds[0].picks == {1: 3, 2: 3, 4: 0}


def test_a_damaged_rounds_json_is_refused_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    assert _run("--max-rounds", "1") == 0
    path = tmp_path / "R" / "E" / "rounds.json"
    data = json.loads(path.read_text())
    data["rounds"][0]["runs"] = "nine"
    path.write_text(json.dumps(data))
    before = sum(measured(tmp_path).values())
    capsys.readouterr()
    assert _run("--max-rounds", "2") == 2
    err = capsys.readouterr().err
    assert "invalid-rounds" in err and "rounds[0].runs" in err and '"nine"' in err
    assert "R/E/rounds.json" in err and "Traceback" not in err
    assert sum(measured(tmp_path).values()) == before


def test_a_run_file_cut_short_is_measured_again_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = use_standin(monkeypatch, tmp_path, CLEAR_TRUTH, crash_at_run=5)
    monkeypatch.chdir(tmp_path)
    assert _run("--max-rounds", "1") == 1
    # A run killed while its file was written: the real sweep's --resume would read it back
    # and fail; the loop keeps it aside and the run is measured again.
    # The crash came at the fifth run of the probe sweep, on K=0's server: its runs at batch 1
    # (seeds 0-2) and its first at batch 2 (seed 0) are done.
    broken = tmp_path / "R" / "E" / "round-0" / "SERVE--k0-BENCH--c2-seed0" / "run=0.json"
    (broken.parent / "summary.json").unlink()
    broken.write_text('{"date": "2026')
    write_model(truth, CLEAR_TRUTH)
    capsys.readouterr()
    assert _run("--max-rounds", "1") == 0
    assert "is not whole" in capsys.readouterr().out
    assert broken.with_name("run=0.json.broken").read_text() == '{"date": "2026'
    assert json.loads(broken.read_text())["duration"] > 0
    counts = measured(tmp_path)
    combo = broken.parent.name
    assert (
        counts[(str(Path("R") / "E" / "round-0"), combo, "0")] == 2
    )  # measured twice: cut short once
    assert sum(counts.values()) == _run_files(tmp_path) + 1 == 22  # round 0's 21, one twice


def test_the_tuning_flags_reach_every_rounds_tuning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    flags = ("--objective-var", "median_tpot_ms", "--objective-direction", "minimize")
    assert _run("--max-rounds", "1", *flags) == 0
    result = json.loads((tmp_path / "R" / "E" / "speculative_k_schedule.json").read_text())
    assert result["selection"]["objective_metric"] == "median_tpot_ms"
    assert result["selection"]["objective_direction"] == "minimize"
    # The stand-in's TPOT is batch / throughput: the fastest K has the smallest, K=3 at 1 and
    # 2, K=0 at 4.
    anchors = _log(tmp_path)["rounds"][0]["anchors"]  # type: ignore[index]
    assert {a["batch_size"]: a["selected_k"] for a in anchors} == {1: 3, 2: 3, 4: 0}
    assert _log(tmp_path)["arguments"]["tuning"] == {  # type: ignore[index]
        "objective": "median_tpot_ms",
        "direction": "minimize",
    }


def test_a_context_design_is_refused_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    assert _run("--context-lengths", "64,512") == 2
    assert "--context-lengths" in capsys.readouterr().err
    assert not (tmp_path / "R").exists()


def test_a_follow_up_round_that_crashed_resumes_at_that_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stand-in counts runs per sweep: round 0 first, then round 1 (the new anchor 3 at
    # K=0, 1, 3, 3 runs each, a sweep per server start) crashes at its first sweep's second
    # run: K=0's first run is done.
    truth = use_standin(monkeypatch, tmp_path, CLEAR_TRUTH)
    monkeypatch.chdir(tmp_path)
    assert _run("--max-rounds", "1") == 0
    write_model(truth, CLEAR_TRUTH, crash_at_run=2)
    assert _run() == 1
    assert "round-1" in capsys.readouterr().err
    rounds = _log(tmp_path)["rounds"]
    assert [r["status"] for r in rounds] == ["tuned", "failed"]  # type: ignore[union-attr]
    assert sum(measured(tmp_path).values()) == 21 + 1
    write_model(truth, CLEAR_TRUTH)
    assert _run() == 0
    rounds = _log(tmp_path)["rounds"]
    assert [r["status"] for r in rounds] == ["tuned", "tuned"]  # type: ignore[union-attr]
    assert [r["resumes"] for r in rounds] == [0, 1]  # type: ignore[union-attr]
    counts = measured(tmp_path)
    assert set(counts.values()) == {1} and sum(counts.values()) == _run_files(tmp_path) == 30


#: Rising with K at 1 and 2 (K=5 best by 7-10 %), falling at 4 (K=0 best by 7 %): unimodal
#: in K everywhere, so a bracketed round 0 (K=0, 2, 5) settles which half each K=1 or K=3 is in.
BRACKET_TRUTH = {
    "1": {"0": 100.0, "1": 120.0, "2": 140.0, "3": 150.0, "5": 160.0},
    "2": {"0": 190.0, "1": 240.0, "2": 280.0, "3": 300.0, "5": 310.0},
    "4": {"0": 600.0, "1": 560.0, "2": 480.0, "3": 420.0, "5": 380.0},
}


def test_a_bracketed_round_zero_measures_the_other_k_only_where_they_could_lead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_standin(monkeypatch, tmp_path, BRACKET_TRUTH)
    monkeypatch.chdir(tmp_path)
    flags = [*CLEAR_FLAGS]
    flags[flags.index("--ks") + 1] = "0,1,2,3,5"
    status = main(
        ["run", *flags, "--first-ks", "0,2,5", "--results-dir", "R", "-e", "E", "--max-rounds", "2"]
    )
    assert status == 0
    cells = {combo.split("-seed")[0] for _, combo, _ in measured(tmp_path)}
    skipped = {c for c in cells if c.startswith(("SERVE--k1-", "SERVE--k3-"))}
    # Round 0 measures K=0, 2, 5 only. At 1 and 2 the values rise with K: K=1 (below K=2,
    # which K=5 beats) is ruled out and K=3 (between K=2 and K=5) is measured; at 4 they fall:
    # K=3 (above K=2, which K=0 beats) is ruled out and K=1 is measured.
    # Round 1 also adds anchor 3 (the picks switch between 2 and 4) at every K not ruled out
    # at both 2 and 4: all five (K=1 is open at 4, K=3 at 2).
    assert skipped == {
        "SERVE--k3-BENCH--c1",
        "SERVE--k3-BENCH--c2",
        "SERVE--k1-BENCH--c4",
        "SERVE--k1-BENCH--c3",
        "SERVE--k3-BENCH--c3",
    }
    rounds = _log(tmp_path)["rounds"]
    assert "bracketed" in rounds[0]["purpose"]  # type: ignore[index]
    # The experiment's own tuning says what was assumed for the cells never measured.
    experiment = tmp_path / "R" / "E"
    result = json.loads((experiment / "speculative_k_schedule.json").read_text())
    assumes = result["verdict"]["assumption"] or ""
    assert "throughput unimodal in K" in assumes
    assert "K=1 at batch sizes 1, 2; K=3 at batch sizes 4;" in assumes
    out = capsys.readouterr().out
    assert "--design-ks=0,1,2,3,5" in out or "--design-ks 0,1,2,3,5" in out


def test_a_round_over_the_budget_runs_the_part_that_fits_first_cells_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_standin(monkeypatch, tmp_path, BRACKET_TRUTH)
    monkeypatch.chdir(tmp_path)
    flags = [*CLEAR_FLAGS]
    flags[flags.index("--ks") + 1] = "0,1,2,3,5"
    base = ["run", *flags, "--first-ks", "0,2,5", "--results-dir", "R", "-e", "E"]
    assert main([*base, "--max-rounds", "1"]) == 0
    spent = float(_log(tmp_path)["gpu_seconds"])  # type: ignore[arg-type]
    # Round 1 as planned in full: the new anchor 3 (the picks switch between 2 and 4) at K=0,
    # 2 and 5 (three server starts and their runs), K=3 at 1 and 2 and K=1 at 4 (the K left
    # open there), each new cell 3 runs (as many as the median cell has): five server starts
    # of about 65 s and their runs, over the 400 s left. Trimmed: the open K at the measured
    # anchors only, no new anchor: K=3's sweep (a start, 6 runs at batch 1 and 2) and K=1's (a
    # start, 3 runs at batch 4), estimated at about 300 s: both fit.
    hours = str((spent + 400) / 3600)
    budget = [*base, "--max-rounds", "3", "--budget-gpu-hours", hours]
    # Crash the trimmed round at its second run, then resume it: the resumed round runs the
    # sweep it chose, not the whole follow-up planned again from the same inputs.
    write_model(tmp_path / "standin-truth.json", BRACKET_TRUTH, crash_at_run=2)
    assert main(budget) == 1
    write_model(tmp_path / "standin-truth.json", BRACKET_TRUTH)
    assert main(budget) == 0
    log = _log(tmp_path)
    rounds = log["rounds"]
    assert len(rounds) == 2  # type: ignore[arg-type]
    assert "trimmed to the budget left" in rounds[1]["purpose"]  # type: ignore[index]
    asked = {(c["batch_size"], c["k"]) for c in rounds[1]["asked"]}  # type: ignore[index]
    assert asked == {(1, 3), (2, 3), (4, 1)}
    # Planned within the budget; the crash and the resume cost a server start more, counted.
    assert float(rounds[1]["estimated_gpu_seconds"]) <= 400  # type: ignore[index]
    assert rounds[1]["resumes"] == 1  # type: ignore[index]
    assert log["stop"]["rule"] == "budget"  # type: ignore[index]
    # Only those cells were measured in round 1, each run once.
    counts = measured(tmp_path)
    later = {c.split("-seed")[0] for e, c, _ in counts if "round-1" in e}
    assert later == {"SERVE--k3-BENCH--c1", "SERVE--k3-BENCH--c2", "SERVE--k1-BENCH--c4"}
    assert set(counts.values()) == {1}


def test_a_tuning_refused_for_noisy_cells_reruns_them_instead_of_stopping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # 15 % run noise against the seed's 10 % MAD gate: some of round 0's probe cells (3 runs)
    # are refused as too noisy to rank. Round 1 reruns exactly those cells, 3 more runs each.
    use_standin(monkeypatch, tmp_path, CLEAR_TRUTH, run_cv=0.15)
    monkeypatch.chdir(tmp_path)
    _run("--max-rounds", "2")
    out = capsys.readouterr().out
    rounds = _log(tmp_path)["rounds"]
    assert rounds[0]["verdict"] == "cannot-tune"  # type: ignore[index]
    (line,) = [x for x in out.splitlines() if x.endswith("the next round reruns them")]
    named = line.removeprefix("the tuning refused the runs of ").split(" (")[0].split(", ")
    refused = {(int(c.split(" at ")[1]), int(c.split(" at ")[0].removeprefix("K="))) for c in named}
    assert rounds[1]["purpose"].startswith("the cells the tuning refused")  # type: ignore[index]
    asked = {(c["batch_size"], c["k"]): c["runs_before"] for c in rounds[1]["asked"]}  # type: ignore[index]
    assert set(asked) == refused and set(asked.values()) == {3}
    # The stand-in measured each of them 3 more times in round 1, and nothing else.
    later = [c for e, c, _ in measured(tmp_path) if "round-1" in e]
    expected = {f"SERVE--k{k}-BENCH--c{a}-seed{s}" for a, k in refused for s in (3, 4, 5)}
    assert set(later) == expected and len(later) == 3 * len(refused)
