"""lib/split_read.py: the sweep's read in several processes (issue 24: at 500,000 runs reading
was 77 % of the CLI's CPU, on one core) gives exactly what one reader gives, on every sample,
real sweep and bad input, and a run copied into another piece is still found."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import BAD_INPUTS, REAL_DATA, REPO, SAMPLE_SWEEPS
from sweep_builder import fields_shown, read_sweep, write_grid

from lib import split_read, sweep_files
from lib.problems import ProblemLog
from lib.settings import DEFAULT_K_VAR, ENGINE_FIELDS, ContextSettings, Settings

BATCH_SIZE_VAR = "max_concurrency"
#: What the CLI reads by default (lib/cli/tune.py's _read): the kept-metrics path.
CLI_METRICS = (
    *Settings().metrics_read(),
    *ContextSettings().fields_read(),
    *(name for names in ENGINE_FIELDS.values() for name in names),
)


def _sweeps() -> list[Path]:
    folders = [path for path in sorted(SAMPLE_SWEEPS.iterdir()) if path.is_dir()]
    folders += [path for path in sorted(BAD_INPUTS.iterdir()) if path.is_dir()]
    if REAL_DATA.is_dir():
        folders += [path for path in sorted(REAL_DATA.iterdir()) if path.is_dir()]
    return folders


@pytest.mark.parametrize("metrics", [None, CLI_METRICS], ids=["every-metric", "cli-metrics"])
@pytest.mark.parametrize("folder", _sweeps(), ids=lambda path: path.name)
def test_a_split_read_gives_what_one_reader_gives(folder: Path, metrics: tuple[str, ...]) -> None:
    alone = fields_shown(read_sweep(folder, metrics))
    for processes in (2, 3, 7):
        split = read_sweep(folder, metrics, processes=processes, split_from_bytes=0)
        assert fields_shown(split) == alone, processes


def _entries(folder: Path) -> list[tuple[Path, str, str, str]]:
    return sweep_files._data_files(folder, ProblemLog(), None)


def _total_bytes(entries: list[tuple[Path, str, str, str]]) -> int:
    run_file_bytes: list[int] = []
    return sum(split_read._file_bytes(entry, run_file_bytes) for entry in entries)


@pytest.mark.parametrize("folder", _sweeps(), ids=lambda path: path.name)
def test_pieces_are_whole_folders_in_order(folder: Path) -> None:
    entries = _entries(folder)
    combos = {id(entry[0]) for entry in entries}
    for processes in (2, 3, 7):
        pieces = split_read.split(entries, processes, 0)
        assert [entry for piece in pieces for entry in piece] == entries
        assert len(pieces) <= min(processes, max(len(combos), 1))
        assert all(piece for piece in pieces) or pieces == [[]]
        # No folder in two pieces.
        owners = [{id(entry[0]) for entry in piece} for piece in pieces]
        assert sum(map(len, owners)) == len(set().union(*owners))


def test_the_size_threshold_splits_from_its_value_on(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0] * 3, (1, 3): [150.0] * 3, (8, 0): [400.0] * 3})
    entries = _entries(tmp_path)
    total = _total_bytes(entries)
    # The three summary.json files (their run=N.json backups are never read, so not counted).
    summaries = [folder / name for folder, name, kind, _ in entries if kind == "summary"]
    assert total == sum(path.stat().st_size for path in summaries)
    assert len(split_read.split(entries, 2, total)) == 2
    assert split_read.split(entries, 2, total + 1) == [entries]
    assert split_read.split(entries, 1, 0) == [entries]


def test_pieces_share_the_bytes() -> None:
    entries = _entries(SAMPLE_SWEEPS / "sonnet-like")
    pieces = split_read.split(entries, 2, 0)
    sizes = [_total_bytes(piece) for piece in pieces]
    largest_folder = max(
        _total_bytes([entry for entry in entries if entry[0] is folder])
        for folder in {entry[0] for entry in entries}
    )
    # Each piece holds its half to within one folder.
    assert abs(sizes[0] - sizes[1]) <= largest_folder


def test_a_run_copied_into_another_piece_is_read_by_one_reader(tmp_path: Path) -> None:
    experiment = tmp_path / "sweep"
    write_grid(experiment, {(1, 0): [100.0] * 3, (1, 3): [150.0] * 3})
    # `cp -r` of the first combo folder, named so that it sorts last: the last piece.
    original = sorted(path for path in experiment.iterdir() if path.is_dir())[0]
    shutil.copytree(original, experiment / "zz-copy")
    entries = _entries(experiment)
    pieces = split_read.split(entries, 3, 0)
    assert any(entry[0].name == "zz-copy" for entry in pieces[-1])
    read = functools.partial(
        sweep_files._read_part, root=experiment, reader=(BATCH_SIZE_VAR, DEFAULT_K_VAR, None)
    )
    # The pieces met the same run keys: the split read gives up ...
    assert split_read.read_split(read, pieces) is None
    # ... where one without the copy does not.
    assert split_read.read_split(read, split_read.split(entries[:-4], 3, 0)) is not None
    split = read_sweep(experiment, processes=3, split_from_bytes=0)
    assert fields_shown(split) == fields_shown(read_sweep(experiment))
    repeated = [problem for problem in split.problems if problem.rule == "repeated-run"]
    assert repeated and all("zz-copy" in problem.files[0] for problem in repeated)


@pytest.mark.parametrize("metrics", [None, CLI_METRICS], ids=["every-metric", "cli-metrics"])
def test_stale_summaries_split_read_as_one_reader_reads_them(
    tmp_path: Path, metrics: tuple[str, ...] | None
) -> None:
    """Issue 38: a summary.json older than run files it lacks is read from its run files,
    in whichever piece its folder falls, with the same warning."""
    experiment = tmp_path / "sweep"
    cells = {(anchor, k): [100.0 + anchor + k, 101.0, 99.0] for anchor in (1, 4) for k in (0, 3)}
    write_grid(experiment, cells)
    for folder in sorted(path for path in experiment.iterdir() if path.is_dir())[1::2]:
        record = json.loads((folder / "run=2.json").read_text(encoding="utf-8"))
        record.update(run_number=3, output_throughput=7.0)
        (folder / "run=3.json").write_text(json.dumps(record), encoding="utf-8")
    alone = read_sweep(experiment, metrics)
    # One warning naming both folders: the same words for each (lib.problems merges them).
    (stale,) = alone.problems
    assert stale.rule == "stale-summary" and len(stale.files) == 2
    for processes in (2, 3, 4):
        split = read_sweep(experiment, metrics, processes=processes, split_from_bytes=0)
        assert fields_shown(split) == fields_shown(alone), processes


FORKED = """
import hashlib, json, os, sys
from lib.sweep_files import read_sweep_files
forks = []
fork = os.fork
def counted():
    pid = fork()
    if pid:
        forks.append(pid)
    return pid
os.fork = counted
def digest(**split):
    files = read_sweep_files(sys.argv[1], batch_size_var="max_concurrency",
        k_var="speculative_config.num_speculative_tokens_per_batch_size", **split)
    return hashlib.sha256(repr([getattr(files, name) for name in sorted(vars(files))])
        .encode()).hexdigest()
alone = digest()
split = digest(processes=3, split_from_bytes=0)
print(json.dumps([alone == split, len(forks), sorted(m for m in ("polars", "numpy")
    if m in sys.modules)]))
"""


def test_pieces_are_read_in_forked_children() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(SAMPLE_SWEEPS / "sonnet-like")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    same, forks, heavy = json.loads(done.stdout)
    assert same is True
    assert (forks, heavy) == (2, [])  # three pieces: two children, the first read here


def test_the_digest_of_the_fork_test_sees_every_field() -> None:
    # FORKED hashes vars(files), and fields_shown shows it: every field of the dataclass,
    # none left out.
    files = read_sweep(SAMPLE_SWEEPS / "sonnet-like")
    assert sorted(vars(files)) == sorted(field.name for field in dataclasses.fields(files))


def test_a_read_stopped_on_its_way_leaves_no_reader(tmp_path: Path) -> None:
    # The first piece is read here; when that fails (or a signal stops it), the children that
    # read the other pieces are killed and reaped, none left reading.
    code = """
import json, os, sys, time
from lib import prefetch, split_read
prefetch.worth_forking = lambda: True
def read(piece):
    if piece == ["first"]:
        time.sleep(0.2)
        raise KeyboardInterrupt
    time.sleep(30)
try:
    split_read.read_split(read, [["first"], ["second"], ["third"]])
except KeyboardInterrupt:
    pass
print(json.dumps(list(prefetch._RUNNING)))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
