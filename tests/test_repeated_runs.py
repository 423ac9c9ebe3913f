"""lib/repeated_runs.py: a run read twice (a copied folder or file, a record listed twice, a
run number repeated within a cell) counts once, with a warning naming where it was first read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sweep_builder import HEALTHY, by_rule, healthy_copy, record, write_combo

from lib import repeated_runs, sweep_files
from lib.problems import Severity
from lib.sweeps import Sweep, load_experiment


def _repeats(sweep: Sweep) -> dict[str, str]:
    """file -> message of every repeated-run warning."""
    return {
        file: problem.message
        for problem in by_rule(sweep.problems).get("repeated-run", [])
        if problem.severity is Severity.WARNING
        for file in problem.files
    }


def test_a_copied_run_counts_once(tmp_path: Path) -> None:
    experiment = healthy_copy(tmp_path)
    original = experiment / "SERVE--k3-BENCH--c1" / "run=0.json"
    # A run file copied into a folder of its own (no summary.json there, so it is read).
    (experiment / "stray").mkdir()
    shutil.copy(original, experiment / "stray" / "run=0.json")
    sweep = load_experiment(experiment)
    assert sweep.runs.height == load_experiment(HEALTHY).runs.height
    assert _repeats(sweep) == {
        "stray/run=0.json": "a record already read from SERVE--k3-BENCH--c1/summary.json"
        " (a copy?): counted once, from there"
    }


def test_records_alike_in_the_run_key_fields_are_told_apart_by_their_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repeated-run check writes a record's content out only when its few run-key fields
    (repeated_runs.RUN_KEY_FIELDS) match an earlier record's; the earlier file is then read
    again. A twin that matches there but differs elsewhere is a run of its own; a copy of
    either is a repeat of that one, named by the file it was first read from."""
    experiment = healthy_copy(tmp_path)
    original = experiment / "SERVE--k3-BENCH--c1" / "summary.json"
    record = json.loads(original.read_text())[0]
    twin = {**record, "label": "twin"}  # label is no run-key field
    assert "label" not in repeated_runs.RUN_KEY_FIELDS
    for folder, content in {"z1-twin": twin, "z2-copy": record, "z3-copy": twin}.items():
        (experiment / folder).mkdir()
        (experiment / folder / "run=0.json").write_text(json.dumps(content))
    read_again: list[str] = []
    records_again = sweep_files._records_again

    def counting(*arguments: Any) -> list[Any]:
        read_again.append(arguments[1])
        return records_again(*arguments)

    monkeypatch.setattr(sweep_files, "_records_again", counting)
    sweep = load_experiment(experiment)
    # The twin is one more run; the two copies are not.
    assert sweep.runs.height == load_experiment(HEALTHY).runs.height + 1
    assert _repeats(sweep) == {
        "z2-copy/run=0.json": "a record already read from SERVE--k3-BENCH--c1/summary.json"
        " (a copy?): counted once, from there",
        "z3-copy/run=0.json": "a record already read from z1-twin/run=0.json"
        " (a copy?): counted once, from there",
    }
    # The original's file is read again once, when the twin matches its key; then both
    # contents are known.
    assert read_again == ["SERVE--k3-BENCH--c1/summary.json"]


def test_a_record_listed_twice_or_a_run_number_repeated_counts_once(tmp_path: Path) -> None:
    experiment = healthy_copy(tmp_path)
    summary = experiment / "SERVE--k0-BENCH--c4" / "summary.json"
    records = json.loads(summary.read_text())
    other = experiment / "SERVE--k3-BENCH--c4" / "summary.json"
    renumbered = json.loads(other.read_text())
    # The same record twice; and, in another folder, run 1 again with other measurements.
    summary.write_text(json.dumps([*records, records[0]]))
    other.write_text(json.dumps([*renumbered, {**renumbered[0], "run_number": 1}]))
    sweep = load_experiment(experiment)
    assert sweep.runs.height == load_experiment(HEALTHY).runs.height
    assert _repeats(sweep) == {
        "SERVE--k0-BENCH--c4/summary.json": "a record already read from"
        " SERVE--k0-BENCH--c4/summary.json (a copy?): counted once, from there",
        "SERVE--k3-BENCH--c4/summary.json": "run 1 of the folder again, already read from"
        " SERVE--k3-BENCH--c4/summary.json: counted once, from there",
    }
    # Each repeated run is left out; the runs kept are the first of each.
    kept = sweep.runs.filter(pl.col("combo") == "SERVE--k3-BENCH--c4")
    assert kept["run_number"].to_list() == [0, 1, 2]


def test_one_summary_of_several_cells_numbering_each_from_0_keeps_every_run(
    tmp_path: Path,
) -> None:
    """Runs 0, 1, 2 of each (batch size, K) in one folder (one summary.json of a whole sweep,
    as the seed's own test writes it) are 12 runs, not 3: a run number repeats only within a
    cell. The same number again at the same cell is still a repeat (test above)."""
    records = [
        record(anchor, k, run_number=number, output_throughput=100.0 + 10 * k + number)
        for anchor in (1, 8)
        for k in (0, 3)
        for number in range(3)
    ]
    write_combo(tmp_path / "case", records, run_files=False)
    sweep = load_experiment(tmp_path)
    assert _repeats(sweep) == {}
    cells = sweep.runs.group_by("anchor", "k").len().sort("anchor", "k")
    assert cells.rows() == [(1, 0, 3), (1, 3, 3), (8, 0, 3), (8, 3, 3)]
    # One more record repeating run 2 of batch size 8, K=3 (other measurements): counted once.
    repeat = {**records[-1], "output_throughput": 999.0}
    write_combo(tmp_path / "case", [*records, repeat], run_files=False)
    again = load_experiment(tmp_path)
    assert list(_repeats(again)) == ["case/summary.json"]
    assert again.runs.height == 12
