"""lib/sweep_files.py: reading a sweep's files needs neither Polars nor NumPy, what it reads
can cross a process boundary, the garbage collector is left as the caller had it, and walking
the folder loses nothing without a word."""

from __future__ import annotations

import gc
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from paths import REPO, SAMPLE_SWEEPS
from sweep_builder import HEALTHY, by_rule, combo_name, healthy_copy, read_sweep, write_grid

from lib import sweep_files
from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.problems import Severity
from lib.sweep_files import holds_runs, read_sweep_files
from lib.sweeps import load_experiment, sweep_from


def test_reading_loads_neither_polars_nor_numpy() -> None:
    folder = str(SAMPLE_SWEEPS / "sonnet-like")
    probe = (
        "import sys; from lib.sweep_files import read_sweep_files;"
        f" read_sweep_files({folder!r}, batch_size_var='max_concurrency',"
        " k_var='speculative_config.num_speculative_tokens_per_batch_size');"
        " print(sorted(m for m in ('polars', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("metrics", [None, ("output_throughput", "failed")])
def test_what_is_read_survives_pickling(metrics: tuple[str, ...] | None) -> None:
    folder = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"
    files = read_sweep_files(
        folder,
        batch_size_var="max_concurrency",
        k_var="speculative_config.num_speculative_tokens_per_batch_size",
        metrics=metrics,
    )
    travelled = sweep_from(pickle.loads(pickle.dumps(files)))
    here = load_experiment(folder, metrics=metrics)
    assert travelled.runs.equals(here.runs)
    assert (travelled.problems, travelled.input_files) == (here.problems, here.input_files)
    assert travelled.speculative_configs == here.speculative_configs


def test_garbage_collector_is_paused_while_reading_and_restored(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0], (1, 3): [150.0]})
    seen: list[bool] = []

    def progress(paths: Sequence[Path]) -> Iterator[Path]:
        for path in paths:
            seen.append(gc.isenabled())
            yield path

    assert gc.isenabled()
    load_experiment(tmp_path, progress=progress)
    assert seen == [False, False]
    assert gc.isenabled()

    def failing(paths: Sequence[Path]) -> Iterator[Path]:
        raise RuntimeError("the progress bar broke")
        yield from paths

    with pytest.raises(RuntimeError):
        load_experiment(tmp_path, progress=failing)
    assert gc.isenabled()
    gc.disable()
    try:
        load_experiment(tmp_path, metrics=["output_throughput"])
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


def test_metrics_must_be_a_collection_of_names(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0]})
    with pytest.raises(TypeError):
        load_experiment(tmp_path, metrics="output_throughput")
    assert gc.isenabled()


# --------------------------------------------------------------------------- walking the folder
# The schedule the CLI writes for HEALTHY.
HEALTHY_SCHEDULE = "[[1, 3, 3], [4, 4, 0]]"


def _tune_output(experiment: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(experiment), "--output-json", str(experiment.parent / "schedule.json")])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_empty_path_is_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The working directory is a healthy sweep: analysing it would exit 0.
    monkeypatch.chdir(healthy_copy(tmp_path))
    assert main(["", "--output-json", str(tmp_path / "schedule.json")]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "error [missing-folder] the experiment path is empty in ''" in captured.err
    assert not (tmp_path / "schedule.json").exists()
    assert [p.rule for p in load_experiment("").problems] == ["missing-folder"]


def test_a_folder_that_cannot_be_listed_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # root can list a chmod 000 folder (and CI may run as root): the refusal comes from
    # os.scandir, as it would for any other user.
    experiment = healthy_copy(tmp_path)
    locked = experiment / "SERVE--k0-BENCH--c4"
    listing = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, err = _tune_output(experiment, capsys)
    assert code == EXIT_BAD_INPUT
    assert out == ""
    line = (
        "error [unreadable-folder] cannot list the folder: Permission denied in SERVE--k0-BENCH--c4"
    )
    assert line in err
    # Without the problem the anchor would silently lose K=0 and pick K=3.
    assert "unreadable-folder" in by_rule(load_experiment(experiment).problems)


def test_symlinked_combo_folders_are_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = healthy_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("SERVE--k0-BENCH--c4", "SERVE--k3-BENCH--c1"):
        (experiment / name).rename(elsewhere / name)
        (experiment / name).symlink_to(elsewhere / name, target_is_directory=True)
    code, out, err = _tune_output(experiment, capsys)
    # The copied corpus has no mean_e2el_ms: its one note (lib/effective_batch.py), nothing else.
    assert code == EXIT_OK
    assert [line.split("]")[0] for line in err.splitlines()] == ["note [effective-batch-unknown"]
    assert out.splitlines()[0] == HEALTHY_SCHEDULE
    assert load_experiment(experiment).runs.height == load_experiment(HEALTHY).runs.height


def test_a_folder_reached_twice_is_read_once(tmp_path: Path) -> None:
    experiment = healthy_copy(tmp_path)
    # A link to a sibling (sorted after it) and a link back up to the experiment folder.
    (experiment / "SERVE--k3-BENCH--c4-copy").symlink_to("SERVE--k3-BENCH--c4")
    (experiment / "SERVE--k0-BENCH--c1" / "loop").symlink_to("..")
    sweep = load_experiment(experiment)
    assert sweep.runs.height == load_experiment(HEALTHY).runs.height
    twice = by_rule(sweep.problems)["folder-seen-twice"]
    assert {problem.severity for problem in twice} == {Severity.WARNING}
    named = {file: problem.message for problem in twice for file in problem.files}
    assert set(named) == {"SERVE--k3-BENCH--c4-copy", "SERVE--k0-BENCH--c1/loop"}
    assert "the same folder as SERVE--k3-BENCH--c4 " in named["SERVE--k3-BENCH--c4-copy"]
    assert "the same folder as . " in named["SERVE--k0-BENCH--c1/loop"]


def test_within_refuses_links_that_lead_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    experiment = healthy_copy(root)
    outside = tmp_path / "outside"
    shutil.copytree(HEALTHY / "SERVE--k3-BENCH--c4", outside / "SERVE--k3-BENCH--c4")
    secret = outside / "secret.json"
    secret.write_text('["the secret"]', encoding="utf-8")
    # A whole combo folder and one file, each through a link out of the root.
    (experiment / "SERVE--k3-BENCH--c4").rename(root / "inside-but-moved")
    (experiment / "SERVE--k3-BENCH--c4").symlink_to(outside / "SERVE--k3-BENCH--c4")
    (experiment / "SERVE--k0-BENCH--c4" / "summary.json").unlink()
    (experiment / "SERVE--k0-BENCH--c4" / "summary.json").symlink_to(secret)
    inside = load_experiment(experiment, within=root)
    refused = by_rule(inside.problems)["outside-root"]
    assert sorted(file for problem in refused for file in problem.files) == [
        "SERVE--k0-BENCH--c4/summary.json",
        "SERVE--k3-BENCH--c4",
    ]
    assert all(problem.severity is Severity.ERROR for problem in refused)
    assert "the secret" not in repr(inside.problems)
    # The refused combo is not read at all; the refused summary's backups (run=N.json) are.
    assert inside.runs.filter(pl.col("combo") == "SERVE--k3-BENCH--c4").height == 0
    assert inside.runs.filter(pl.col("combo") == "SERVE--k0-BENCH--c4").height == 3
    # The experiment folder itself may be the link out.
    (root / "door").symlink_to(outside, target_is_directory=True)
    behind = load_experiment(root / "door", within=root)
    assert [problem.rule for problem in behind.problems] == ["outside-root"]
    assert behind.runs.height == 0
    # Links inside the root, and any link without `within`, are followed.
    assert "outside-root" not in by_rule(load_experiment(experiment, within=tmp_path).problems)
    assert "outside-root" not in by_rule(load_experiment(experiment).problems)


def test_a_folder_name_that_is_not_utf8_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = healthy_copy(tmp_path)
    odd = os.fsdecode(b"SERVE--k3-BENCH--c4\xff")
    (experiment / "SERVE--k3-BENCH--c4").rename(experiment / odd)
    sweep = load_experiment(experiment)
    assert "SERVE--k3-BENCH--c4\\xff" in sweep.runs["combo"].to_list()
    code, out, err = _tune_output(experiment, capsys)
    # The copied corpus has no mean_e2el_ms: its one note (lib/effective_batch.py), nothing else.
    assert code == EXIT_OK
    assert [line.split("]")[0] for line in err.splitlines()] == ["note [effective-batch-unknown"]
    assert out.splitlines()[0] == HEALTHY_SCHEDULE
    # A problem in that folder names it escaped, never with the raw byte.
    (experiment / odd / "summary.json").write_bytes(b"[{")
    code, out, err = _tune_output(experiment, capsys)
    assert "SERVE--k3-BENCH--c4\\xff/summary.json" in err


@pytest.mark.parametrize(
    ("name", "holds"),
    [
        ("run=3.json", True),
        ("run=03.failure.json", True),
        # Issue 38, kind 16: \d took every script's digits, and int() read "run=٣" as run 3.
        ("run=\u0663.json", False),
        ("run=\uff13.failure.json", False),
        ("run=\u00b3.json", False),
        ("run=-3.json", False),
    ],
)
def test_a_run_number_in_a_file_name_is_ascii_digits(name: str, holds: bool) -> None:
    assert holds_runs(name) is holds


# --- issue 38, kind 8: a summary.json older than run files it lacks is stale ---------------


def _stale_sweep(tmp_path: Path) -> Path:
    """A 1-anchor x 2-K sweep of 3 runs a cell (run files, then the summary, as vLLM writes)."""
    return write_grid(tmp_path / "sweep", {(1, 0): [100.0, 101.0, 99.0], (1, 3): [150.0] * 3})


def _combo(sweep: Path) -> Path:
    return sweep / combo_name(1, 3)


def _after_summary(path: Path, after_ns: int, summary: Path | None = None) -> None:
    """Set ``path``'s times ``after_ns`` after its folder's summary.json's (or ``summary``'s):
    the clock ticks coarsely, so files written one after the other may share a time."""
    written = (summary or path.parent / "summary.json").stat().st_mtime_ns
    os.utime(path, ns=(written + after_ns, written + after_ns))


def _rewrite_run(folder: Path, number: int, after_summary_ns: int | None, **fields: Any) -> Path:
    """run=``number``.json of ``folder`` written anew with ``fields`` changed (a new run with
    that number if there is none), as a sweep writes a run's file: a new entry of the folder,
    which changes the folder's time (set 1 s after the summary's). The file's time is set
    ``after_summary_ns`` after the summary's (None: left)."""
    path = folder / f"run={number}.json"
    source = path if path.exists() else folder / "run=0.json"
    record = json.loads(source.read_text(encoding="utf-8"))
    record.update(run_number=number, **fields)
    path.unlink(missing_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    if after_summary_ns is not None:
        _after_summary(path, after_summary_ns)
    _after_summary(folder, 10**9, folder / "summary.json")
    return path


def _throughputs(sweep: Path, k: int) -> list[float]:
    runs = load_experiment(sweep).runs.filter(pl.col("k") == k).sort("run_number")
    return runs["output_throughput"].to_list()


@pytest.mark.parametrize(
    ("number", "fields", "reason"),
    [
        (2, {"output_throughput": 10.0}, "run=2.json differs from its run in summary.json"),
        (3, {"output_throughput": 11.0}, "run=3.json is not in summary.json"),
    ],
    ids=["a-run-measured-again", "a-run-added"],
)
def test_run_files_newer_than_a_summary_that_lacks_their_runs_are_the_data(
    tmp_path: Path, number: int, fields: dict[str, Any], reason: str
) -> None:
    sweep = _stale_sweep(tmp_path)
    _rewrite_run(_combo(sweep), number, 1_000_000_000, **fields)
    read = load_experiment(sweep)
    (stale,) = by_rule(read.problems)["stale-summary"]
    assert stale.severity is Severity.WARNING
    assert stale.files == (combo_name(1, 3),)
    assert reason in stale.message and "run=N.json files are read instead" in stale.message
    expected = {2: [150.0, 150.0, 10.0], 3: [150.0, 150.0, 150.0, 11.0]}[number]
    assert _throughputs(sweep, 3) == expected
    # The other combo's summary is current: still its data.
    assert f"{combo_name(1, 0)}/summary.json" in read.input_files
    assert f"{combo_name(1, 3)}/run={number}.json" in read.input_files
    # One warning for the folder, not one per run file (a damaged summary's).
    assert "summary-replaced-by-runs" not in by_rule(read.problems)


@pytest.mark.parametrize(
    ("after_ns", "stale"), [(-1, False), (0, False), (1, True)], ids=["older", "same", "newer"]
)
def test_a_run_file_is_newer_than_its_summary_only_strictly(
    tmp_path: Path, after_ns: int, stale: bool
) -> None:
    """vLLM writes the summary right after the last run file, in the same clock tick at times:
    only a run file modified strictly after it is checked against it."""
    sweep = _stale_sweep(tmp_path)
    _rewrite_run(_combo(sweep), 1, after_ns, output_throughput=10.0)
    assert ("stale-summary" in by_rule(load_experiment(sweep).problems)) is stale
    assert _throughputs(sweep, 3) == ([150.0, 10.0, 150.0] if stale else [150.0] * 3)


def test_a_newer_run_file_the_summary_holds_is_no_reason(tmp_path: Path) -> None:
    """A copy that did not keep the files' times (``cp -r``) leaves run files newer than the
    summary that holds them: the summary is current and nothing is said."""
    sweep = _stale_sweep(tmp_path)
    for path in _combo(sweep).glob("run=*.json"):
        _after_summary(path, 10**9)
    _after_summary(_combo(sweep), 10**9, _combo(sweep) / "summary.json")
    read = load_experiment(sweep)
    assert read.problems == ()
    assert f"{combo_name(1, 3)}/summary.json" in read.input_files
    assert not any("run=" in name for name in read.input_files)


def test_a_run_file_numbered_as_no_run_of_the_summary_is_checked_whatever_its_time(
    tmp_path: Path,
) -> None:
    """A run the summary lacks by number is found without its time (a copy may have made it
    older than the summary)."""
    sweep = _stale_sweep(tmp_path)
    _rewrite_run(_combo(sweep), 3, -(10**9), output_throughput=11.0)
    (stale,) = by_rule(load_experiment(sweep).problems)["stale-summary"]
    assert "run=3.json is not in summary.json" in stale.message
    assert _throughputs(sweep, 3) == [150.0, 150.0, 150.0, 11.0]


def test_a_newer_run_file_that_is_no_record_makes_the_summary_stale(tmp_path: Path) -> None:
    """A run file cut off mid-write by the kill: the summary is stale, and the reading of the
    run files reports the damaged one."""
    sweep = _stale_sweep(tmp_path)
    path = _rewrite_run(_combo(sweep), 3, None)
    path.write_text(path.read_text(encoding="utf-8")[:40], encoding="utf-8")
    _after_summary(path, 10**9)
    found = by_rule(load_experiment(sweep).problems)
    assert "run=3.json cannot be read" in found["stale-summary"][0].message
    assert found["invalid-json"][0].files == (f"{combo_name(1, 3)}/run=3.json",)


def test_a_stale_summary_names_its_runs_no_run_file_holds(tmp_path: Path) -> None:
    """A run file removed to measure the run again, the sweep stopped before: the summary's
    old run is not used, and the warning says so."""
    sweep = _stale_sweep(tmp_path)
    (_combo(sweep) / "run=0.json").unlink()
    _rewrite_run(_combo(sweep), 2, 10**9, output_throughput=10.0)
    (stale,) = by_rule(load_experiment(sweep).problems)["stale-summary"]
    assert "its runs 0 have no run file and are not used" in stale.message
    assert _throughputs(sweep, 3) == [150.0, 10.0]


def test_a_current_summary_reads_no_run_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot path: beside a current summary a run file costs a stat, never a parse."""
    sweep = _stale_sweep(tmp_path)
    opened: list[str] = []
    real = sweep_files._read_json

    def spy(path: Path, *args: Any, **kwargs: Any) -> Any:
        opened.append(path.name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(sweep_files, "_read_json", spy)
    load_experiment(sweep)
    assert opened == ["summary.json", "summary.json"]


def test_run_files_are_timed_only_where_their_folder_changed_after_the_summary(
    tmp_path: Path,
) -> None:
    """A sweep's run file arrives as a new entry of its folder, which changes the folder's
    time: a folder untouched since its summary costs one stat, and a run file edited in place
    there (by hand: vLLM writes a run's file once) is not seen."""
    sweep = _stale_sweep(tmp_path)
    path = _combo(sweep) / "run=1.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**record, "output_throughput": 10.0}), encoding="utf-8")
    _after_summary(path, 10**9)
    _after_summary(_combo(sweep), 0, _combo(sweep) / "summary.json")
    assert "stale-summary" not in by_rule(load_experiment(sweep).problems)
    _after_summary(_combo(sweep), 1, _combo(sweep) / "summary.json")
    assert "stale-summary" in by_rule(load_experiment(sweep).problems)


def test_a_run_file_numbered_past_the_limit_beside_a_summary_is_named(tmp_path: Path) -> None:
    """Its number is no run of the summary (none is past 2^31 - 1), so it is checked."""
    sweep = _stale_sweep(tmp_path)
    _rewrite_run(_combo(sweep), 0, 10**9, output_throughput=12.0).rename(
        _combo(sweep) / f"run={'9' * 240}.json"
    )
    found = by_rule(load_experiment(sweep).problems)
    # Its record says run 0, which it holds differently from the summary.
    assert "9999.json differs from its run in summary.json" in found["stale-summary"][0].message
    assert "invalid-file-name" in found


def test_a_summary_whose_run_numbers_are_not_numbers_is_checked_without_a_crash(
    tmp_path: Path,
) -> None:
    """A summary.json whose records hold a run_number that is a list (unhashable: the stale
    check collected the raw values in a set and raised TypeError, found by the split-read
    property) beside a run file it lacks: checked, the run file read, no traceback."""
    sweep = _stale_sweep(tmp_path)
    folder = _combo(sweep)
    summary = folder / "summary.json"
    records = json.loads(summary.read_text(encoding="utf-8"))
    for record in records:
        record["run_number"] = [1]
    summary.write_text(json.dumps(records), encoding="utf-8")
    _rewrite_run(folder, 5, 10**9)
    files = read_sweep(sweep)
    assert "stale-summary" in {problem.rule for problem in files.problems}
