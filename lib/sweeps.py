"""A `vllm bench sweep serve` experiment folder as one Polars row per run.

:func:`load_experiment` reads the folder (:func:`lib.sweep_files.read_sweep_files`, see
``docs/formats.md`` for the layout) and builds :attr:`Sweep.runs`; :func:`sweep_from` builds a
sweep from files read elsewhere (the CLI reads them while it imports Polars).

Schema of :attr:`Sweep.runs` (one row per run, in file order):

=================== ======== ==========================================================
column              dtype    meaning
=================== ======== ==========================================================
source              Utf8     file the run came from, relative to the experiment folder
position            Int64    index of the record in that file (0 for run=N.json)
combo               Utf8     folder holding the file, relative to the experiment folder
run_number          Int64    the record's ``run_number``, else N of ``run=N``
failure_file        Boolean  the run is a ``run=N.failure.json``: it failed
speculation         Boolean  the record has a ``speculative_config`` (False: plain server)
anchor              Int64    batch-size anchor (``--batch-size-var``); null if unusable
k                   Int64    effective K at the anchor (``--k-var``); null if unusable
global_k            Int64    ``speculative_config.num_speculative_tokens``; null if absent
<metric>            Float64  every numeric field of the record; nested dicts flattened with
                             dots (``speculative_config.num_speculative_tokens``); null where
                             the record lacks it, holds null, or holds a non-number. With
                             ``load_experiment(..., metrics=[...])`` only those named
=================== ======== ==========================================================

Text values (``"abc"``, ``true``), also of a field no run holds as a number, are kept in
:attr:`Sweep.non_numeric` so the policy can name them instead of treating them as missing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from lib.problems import Problem, Severity, show_value
from lib.servers import replica_var_reason
from lib.settings import DEFAULT_BATCH_SIZE_VAR, DEFAULT_K_VAR, DEFAULT_REPLICA_VAR, DERIVED_COLUMNS
from lib.sweep_files import Progress, SweepFiles, read_sweep_files

__all__ = ["Sweep", "load_experiment", "sweep_from"]


@dataclass(frozen=True, eq=False)
class Sweep:
    """An experiment folder as data: the runs, what was read, and every problem met."""

    root: Path
    batch_size_var: str
    k_var: str
    runs: pl.DataFrame
    input_files: tuple[str, ...]
    problems: tuple[Problem, ...]
    non_numeric: dict[str, dict[int, str]] = field(default_factory=dict)
    speculative_configs: tuple[dict[str, Any], ...] = ()
    #: Each distinct ``compilation_config`` the serve combos set (none when none did).
    compilation_configs: tuple[dict[str, Any], ...] = ()
    #: The serve parameter marking server replicas in serve combo names (:mod:`lib.servers`).
    replica_var: str = DEFAULT_REPLICA_VAR

    @property
    def metrics(self) -> list[str]:
        """Numeric record fields available as objectives or acceptance metrics."""
        return [name for name in self.runs.columns if name not in DERIVED_COLUMNS]


def load_experiment(
    path: str | os.PathLike[str],
    *,
    batch_size_var: str = DEFAULT_BATCH_SIZE_VAR,
    k_var: str = DEFAULT_K_VAR,
    replica_var: str = DEFAULT_REPLICA_VAR,
    progress: Progress | None = None,
    metrics: Collection[str] | None = None,
    within: str | os.PathLike[str] | None = None,
) -> Sweep:
    """Read every run under an experiment folder; never raises for bad input.

    ``progress`` wraps the list of files to read (the app passes a progress bar). Problems
    (missing folder, unreadable or truncated files, records that are not objects, runs without
    a usable anchor or K) are returned in :attr:`Sweep.problems`; the runs that could be read
    are returned whatever else is wrong.

    ``metrics`` (None: all) names the metric columns wanted, e.g. the objective, the
    acceptance field and ``failed``, ``completed``, ``num_prompts`` for the CLI. The result is
    then the full load's with :attr:`Sweep.runs` restricted to the derived columns and the
    named metrics that exist (same order, dtypes and values) and :attr:`Sweep.non_numeric` to
    the named metrics; rows, problems, input files and configs are unchanged. A name no
    record has gives no column, as in the full load; a derived column's name adds nothing. A
    name with a dot (nested or dotted fields) makes the whole load take the full path before
    restricting. A plain ``str`` is refused (it would be a collection of one-letter names).

    ``within`` (the dashboard passes its root) confines the reading: a symbolic link below
    ``path`` that resolves outside ``within`` is a problem naming it, and nothing behind it
    is listed or read. Without it, links are followed wherever they lead (the user's own
    files, on the command line).
    """
    files = read_sweep_files(
        path,
        batch_size_var=batch_size_var,
        k_var=k_var,
        progress=progress,
        metrics=metrics,
        within=within,
    )
    return sweep_from(files, replica_var=replica_var)


def sweep_from(files: SweepFiles, *, replica_var: str = DEFAULT_REPLICA_VAR) -> Sweep:
    """The sweep of files read by :func:`lib.sweep_files.read_sweep_files`; ``replica_var``
    names the serve parameter marking server replicas (:mod:`lib.servers`)."""
    if files.kept is not None:
        runs, non_numeric = _kept_frame(files)
    else:
        runs, non_numeric = _frame(files)
        if files.metrics is not None:
            wanted = set(files.metrics)
            runs = runs.select(
                name for name in runs.columns if name in DERIVED_COLUMNS or name in wanted
            )
            non_numeric = {name: rows for name, rows in non_numeric.items() if name in wanted}
    problems = files.problems
    reason = replica_var_reason(replica_var)
    if reason is not None:
        problems = (*problems, Problem(Severity.ERROR, "invalid-setting", reason))
    return Sweep(
        root=files.root,
        batch_size_var=files.batch_size_var,
        k_var=files.k_var,
        runs=runs,
        input_files=files.input_files,
        problems=problems,
        non_numeric=non_numeric,
        speculative_configs=files.speculative_configs,
        compilation_configs=files.compilation_configs,
        replica_var=replica_var,
    )


_DERIVED_SCHEMA: dict[str, type[pl.DataType]] = {
    "source": pl.Utf8,
    "position": pl.Int64,
    "combo": pl.Utf8,
    "run_number": pl.Int64,
    "failure_file": pl.Boolean,
    "speculation": pl.Boolean,
    "anchor": pl.Int64,
    "k": pl.Int64,
    "global_k": pl.Int64,
}


def _derived_frame(derived: dict[str, list[Any]]) -> pl.DataFrame:
    try:
        return pl.DataFrame(derived, schema=_DERIVED_SCHEMA)
    except Exception:
        # An int beyond 64 bits (an anchor of 2**64) fails either way; the row-wise build the
        # loader always used fails with the same error as before.
        names = list(derived)
        rows = [dict(zip(names, row, strict=True)) for row in zip(*derived.values(), strict=True)]
        return pl.from_dicts(rows, schema=_DERIVED_SCHEMA)


def _as_float(value: float | None) -> float | None:
    """An int as the nearest float; one beyond the float range as an infinity of its sign."""
    if type(value) is not int:
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _frame(reader: SweepFiles) -> tuple[pl.DataFrame, dict[str, dict[int, str]]]:
    # Only the keys matter (first-seen order); updating with the rows themselves is cheapest.
    metric_names: dict[str, Any] = {}
    for numbers in reader.numbers:
        metric_names.update(numbers)
    derived = _derived_frame(reader.derived)
    # JSON NaN arrives as a float NaN and is kept: the policy rejects non-finite values by name.
    schema = dict.fromkeys(metric_names, pl.Float64)
    try:
        metrics = pl.from_dicts(reader.numbers, schema=schema) if reader.numbers else pl.DataFrame()
    except OverflowError:
        # Polars takes ints up to 128 bits; Python's json, the fallback parser, reads any size.
        rows = [{name: _as_float(value) for name, value in row.items()} for row in reader.numbers]
        metrics = pl.from_dicts(rows, schema=schema)
    # Every text value, also of a field that no run holds as a number (an objective or an
    # acceptance that is text in every run is there, and no number: the gates say so).
    non_numeric: dict[str, dict[int, str]] = {}
    for row, others in enumerate(reader.others):
        for name, value in others.items():
            if name not in DERIVED_COLUMNS:
                non_numeric.setdefault(name, {})[row] = show_value(value)
    return pl.concat([derived, metrics], how="horizontal"), non_numeric


def _kept_frame(reader: SweepFiles) -> tuple[pl.DataFrame, dict[str, dict[int, str]]]:
    """:func:`_frame` for the kept metrics: a name is a column if some row holds a number or a
    null there, placed where the full load places it (ordered by the row that first holds
    it, then by its place in that row)."""
    names = sorted(reader.first_seen, key=reader.first_seen.__getitem__)
    columns = []
    for name in names:
        values = reader.columns[name]
        try:
            columns.append(pl.Series(name, values, dtype=pl.Float64))
        except OverflowError:
            # As in _frame: an int beyond the float range becomes an infinity of its sign.
            columns.append(pl.Series(name, [_as_float(v) for v in values], dtype=pl.Float64))
    derived = _derived_frame(reader.derived)
    # The kept names' text values, also where no row holds a number (there is no column then).
    non_numeric = {
        name: {row: show_value(value) for row, value in rows.items()}
        for name, rows in reader.texts.items()
    }
    return (derived.hstack(columns) if columns else derived), non_numeric
