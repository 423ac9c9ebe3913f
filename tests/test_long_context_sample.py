"""data/sample_sweeps/long-context: the SYNTHETIC context-axis sample (data/sample_sweeps/README.md,
"The context model (`long-context`)").

The generator rewrites the committed folder byte for byte, and the seed's default policy, given
the runs of one `random_input_len` at a time, picks the K of the README's EXPECTED GRID (derived
from the noise-free model, not from the tuner).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from paths import SAMPLE_SWEEPS

from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import Sweep, load_experiment

NAME = "long-context"
SAMPLE = SAMPLE_SWEEPS / NAME
README = SAMPLE_SWEEPS / "README.md"
GENERATOR = SAMPLE_SWEEPS / "generate.py"
CONTEXT_VAR = "random_input_len"

pytestmark = pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"{SAMPLE} is missing")


def _readme_grid() -> dict[tuple[int, int], int]:
    """{(batch, random_input_len): K} from the README's table of chosen K: the one table under
    "### EXPECTED GRID" whose cells are all whole numbers."""
    section = README.read_text(encoding="utf-8").split("### EXPECTED GRID", 1)[1]
    section = re.split(r"\n##+ ", section, maxsplit=1)[0]
    tables: list[list[list[str]]] = [[]]
    for line in section.splitlines():
        if line.startswith("|"):
            tables[-1].append([cell.strip() for cell in line.strip("|").split("|")])
        elif tables[-1]:
            tables.append([])
    grids = []
    for table in tables:
        if len(table) < 3:
            continue
        header, body = table[0], table[2:]
        if all(re.fullmatch(r"\d+", cell) for row in body for cell in row):
            lengths = [int(cell) for cell in header[1:]]
            grids.append(
                {
                    (int(row[0]), length): int(k)
                    for row in body
                    for length, k in zip(lengths, row[1:], strict=True)
                }
            )
    assert len(grids) == 1, f"one table of chosen K under EXPECTED GRID, not {len(grids)}"
    return grids[0]


GRID = _readme_grid()
LENGTHS = sorted({length for _, length in GRID})
BATCHES = sorted({batch for batch, _ in GRID})


@pytest.fixture(scope="module")
def sweep() -> Sweep:
    return load_experiment(SAMPLE)


def _files(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_generator_rewrites_the_folder_byte_for_byte(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(GENERATOR), "--out-dir", str(tmp_path), "--only", NAME],
        check=True,
        capture_output=True,
    )
    fresh, committed = _files(tmp_path / NAME), _files(SAMPLE)
    assert sorted(fresh) == sorted(committed)
    differing = [name for name in committed if fresh[name] != committed[name]]
    assert differing == []


def test_the_design_and_the_prompt_lengths(sweep: Sweep) -> None:
    runs = sweep.runs
    assert sweep.problems == ()
    assert sorted(runs["anchor"].unique()) == BATCHES == [1, 8, 64, 256]
    assert sorted(runs[CONTEXT_VAR].unique()) == LENGTHS == [512, 2048, 8192, 32768]
    assert sorted(runs["k"].unique()) == [0, 1, 3, 5]
    assert runs["global_k"].unique().to_list() == [5]
    cells = runs.group_by("anchor", "k", CONTEXT_VAR).len()
    assert cells.height == 4 * 4 * 4
    assert cells["len"].unique().to_list() == [3]
    # every prompt exactly random_input_len tokens (random dataset, range ratio 0)
    assert (runs["total_input_tokens"] / runs["completed"] == runs[CONTEXT_VAR]).all()
    combo = "SERVE--k3-BENCH--max_concurrency=256-random_input_len=2048"
    assert combo in runs["combo"].to_list()


def _at_length(sweep: Sweep, length: int) -> Sweep:
    return dataclasses.replace(sweep, runs=sweep.runs.filter(pl.col(CONTEXT_VAR) == length))


@pytest.mark.parametrize("length", LENGTHS)
def test_each_context_point_tunes_to_the_expected_grid(sweep: Sweep, length: int) -> None:
    result = tune(_at_length(sweep, length), Settings())
    assert result.ok, [problem.message for problem in result.errors]
    decisions = result.decisions
    picks = dict(zip(decisions["anchor"], decisions["selected_k"], strict=True))
    assert picks == {batch: GRID[batch, length] for batch in BATCHES}
    assert result.cells["relative_mad"].max() < 0.05


def test_pooled_contexts_fail_the_noise_gate(sweep: Sweep) -> None:
    # every (anchor, K) cell mixes four prompt lengths (README: "Pooled ... exit 2")
    result = tune(sweep, Settings())
    assert not result.ok
    rules = {problem.rule for problem in result.errors}
    assert rules == {"noisy-objective", "undecided-anchor"}


def test_the_cli_prints_the_expected_grid_and_every_format_exports(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from lib.cli.main import main

    result = tmp_path / "result.json"
    assert main([str(SAMPLE), "--output-json", str(result)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("context grid"))
    header = lines[start + 1].split()
    assert header[2:] == [str(length) for length in LENGTHS]
    printed = {}
    marked = set()
    for line in lines[start + 3 : start + 3 + len(BATCHES)]:
        batch, *ks = line.split()
        for length, k in zip(LENGTHS, ks, strict=True):
            printed[int(batch), length] = int(k.rstrip("?"))
            if k.endswith("?"):
                marked.add((int(batch), length))
    assert printed == GRID
    # "?" marks exactly the cells the result calls unresolved (at the default 1 % assumed
    # between servers, some close calls are).
    grid = json.loads(result.read_text())["context_grid"]
    unresolved = {(c["batch_size"], c["prompt_tokens"]) for c in grid if c["status"] != "resolved"}
    assert marked == unresolved
    for name in ("vllm-context", "vllm-rfc-48944", "vllm-pr-54801"):
        written = tmp_path / f"{name}.json"
        assert main(["export", str(result), "--format", name, "-o", str(written)]) == 0
        assert written.exists()
