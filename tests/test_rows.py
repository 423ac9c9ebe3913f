"""lib/rows.py: a sweep's records turned into rows, with a problem for what cannot be used."""

from __future__ import annotations

import polars as pl
from paths import BAD_INPUTS
from sweep_builder import by_rule

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
