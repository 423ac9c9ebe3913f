"""lib/rows.py: a sweep's records turned into rows, with a problem for what cannot be used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from paths import BAD_INPUTS
from sweep_builder import by_rule, write_grid

from lib.problems import Severity
from lib.sweeps import load_experiment


def test_a_run_number_past_the_limit_is_replaced_by_its_place_with_a_warning() -> None:
    # huge-numbers gives the first record of SERVE--k0-BENCH--c4/summary.json run_number 2^63.
    sweep = load_experiment(BAD_INPUTS / "huge-numbers")
    (warning,) = by_rule(sweep.problems)["invalid-run-number"]
    assert warning.severity is Severity.WARNING
    assert (warning.files, warning.value) == (("SERVE--k0-BENCH--c4/summary.json[0]",), str(2**63))
    numbers = sweep.runs.filter(pl.col("source") == "SERVE--k0-BENCH--c4/summary.json")
    assert numbers["run_number"].to_list() == [0, 1, 2]


# --- issue 38, kind 12: engine settings beyond every count --------------------------------

CELLS = {(1, 0): [100.0, 101.0, 99.0], (1, 3): [150.0, 151.0, 149.0]}


@pytest.mark.parametrize(
    ("fields", "field", "value"),
    [
        ({"max_num_seqs": 2**31}, "max_num_seqs", str(2**31)),
        ({"max-num-seqs": 1e300}, "max-num-seqs", "1e+300"),
        ({"max_cudagraph_capture_size": 10**300}, "max_cudagraph_capture_size", None),
        ({"max_num_batched_tokens": -(2**31)}, "max_num_batched_tokens", str(-(2**31))),
        (
            {"compilation_config": {"max_cudagraph_capture_size": 2**31}},
            "compilation_config.max_cudagraph_capture_size",
            str(2**31),
        ),
        (
            {"compilation_config": json.dumps({"cudagraph_capture_sizes": [1, 2**40]})},
            "compilation_config.cudagraph_capture_sizes",
            None,
        ),
    ],
    ids=["int", "float", "301-digits", "negative", "compilation-config", "capture-sizes-text"],
)
def test_an_engine_setting_beyond_every_count_is_refused_by_name(
    tmp_path: Path, fields: dict[str, Any], field: str, value: str | None
) -> None:
    """Issue 38: a huge C or max_num_seqs in the serve params was taken and printed as a
    301-digit range, then dropped by the result reader: it is refused where it enters."""
    sweep = load_experiment(write_grid(tmp_path / "sweep", CELLS, **fields))
    (problem,) = by_rule(sweep.problems)["invalid-engine-setting"]
    assert problem.severity is Severity.ERROR
    assert problem.field == field
    assert problem.expected == "a whole number up to 2147483647"
    assert value is None or problem.value == value
    assert all("/summary.json[" in file for file in problem.files)


@pytest.mark.parametrize(
    "fields",
    [
        {"max_num_seqs": 2**31 - 1, "max_cudagraph_capture_size": float(2**31 - 1)},
        {"compilation_config": {"cudagraph_capture_sizes": [1, 2**31 - 1]}},
        # What is no number is left to the readers' own rules (a text is no count, not huge).
        {"max_num_seqs": "1e300"},
    ],
)
def test_every_count_up_to_the_limit_is_taken_without_a_word(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    sweep = load_experiment(write_grid(tmp_path / "sweep", CELLS, **fields))
    assert "invalid-engine-setting" not in by_rule(sweep.problems)
