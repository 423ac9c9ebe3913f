"""The seed's policy (vLLM PR #49163), rule by rule, plus schedule building and vLLM validation.

Data flow (each step a Polars frame with a documented schema):

1. runs (one row per run, :mod:`lib.sweeps`) -> :func:`health_gate`, :func:`objective_gate`,
   :func:`global_k_gate`, :func:`server_gate` mark runs that cannot be used, each with its
   reason.
2. kept runs -> :func:`cell_statistics`: one row per (anchor, K) with median, MAD, relative MAD,
   conservative score and acceptance statistics.
3. cells -> :func:`min_runs_gate`, :func:`noise_gate`, :func:`acceptance_gate` reject cells,
   :func:`anchor_grid_gate` checks the grid, :func:`tie_rule` picks one K per anchor.
4. decisions (one row per anchor) -> :func:`decided_schedule`: the seed's merge
   (:func:`merge_picks`) into a :class:`Schedule`, checked by vLLM's rules
   (:func:`validate_schedule`).

Nothing here stops at the first problem: :func:`tune` returns every cell with its verdict and
every problem found, and the CLI refuses to write when any problem is an error.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import polars as pl

from lib import robust
from lib.flags import flag_name
from lib.keys import LARGEST_WHOLE_NUMBER, whole_number
from lib.objectives import OBJECTIVES_BY_NAME, direction_problems
from lib.problems import Problem, Severity, errors, show_value
from lib.servers import configuration_expression, serve_combo_expression
from lib.settings import (
    DEFAULT_K_VAR,
    DEFAULT_REPLICA_VAR,
    GLOBAL_K_VAR,
    HEALTH_FIELDS,
    Fields,
    Settings,
)
from lib.sweeps import Sweep

__all__ = [
    "CELL_SCHEMA",
    "DECISION_SCHEMA",
    "NO_SCHEDULE",
    "PLAUSIBLE_OBJECTIVE",
    "TRTLLM_SCHEDULE",
    "ConfidenceBlocks",
    "JsonValue",
    "Range",
    "Schedule",
    "TuningResult",
    "acceptance_gate",
    "anchor_grid_gate",
    "candidate_json",
    "cell_statistics",
    "decide",
    "decided_schedule",
    "finite_or_none",
    "global_k_gate",
    "health_gate",
    "merge_picks",
    "min_runs_gate",
    "noise_gate",
    "objective_gate",
    "schedule_problems",
    "server_gate",
    "tie_rule",
    "trtllm_bound",
    "tune",
    "unplaced_runs",
    "validate_schedule",
]

#: One inclusive ``[lo, hi, K]`` range of a schedule.
Range = tuple[int, int, int]

_ROW_KEY = ("source", "position")

#: The smallest positive and the largest objective value taken for a measurement, in any unit.
PLAUSIBLE_OBJECTIVE = (1e-100, 1e100)


# --------------------------------------------------------------------------- run gates


def _excluded(runs: pl.DataFrame, mask: pl.Expr, reason: str) -> pl.DataFrame:
    # One query: only the five columns are filtered (an eager filter copies every column).
    return (
        runs.lazy()
        .filter(mask)
        .select("source", "position", "anchor", "k", pl.lit(reason).alias("reason"))
        .collect()
    )


def _cell_files(frame: pl.DataFrame) -> tuple[str, ...]:
    return tuple(dict.fromkeys(frame["source"].to_list()))


def health_gate(runs: pl.DataFrame) -> tuple[pl.DataFrame, list[Problem]]:
    """Runs that failed: a ``run=N.failure.json``, ``failed > 0``, or ``completed !=
    num_prompts`` where both fields are present (a run that dropped requests measured less
    work). Returns the excluded runs with reasons, and one error per (anchor, K, reason).

    A missing ``failed`` / ``completed`` field is not a failure: the real sweeps the tool reads
    do not always carry them.
    """
    failed_field, completed_field, prompts_field = HEALTH_FIELDS
    failed = pl.col(failed_field) if failed_field in runs.columns else pl.lit(None)
    completed = pl.col(completed_field) if completed_field in runs.columns else pl.lit(None)
    prompts = pl.col(prompts_field) if prompts_field in runs.columns else pl.lit(None)
    rules = [
        (pl.col("failure_file"), "failed-run", "the run failed (run=N.failure.json)"),
        ((failed > 0).fill_null(False), "failed-requests", "requests failed (failed > 0)"),
        (
            (completed != prompts).fill_null(False) & ~(failed > 0).fill_null(False),
            "incomplete-run",
            "completed != num_prompts: the run did not finish every request",
        ),
    ]
    excluded = []
    problems = []
    for mask, rule, reason in rules:
        bad = runs.filter(mask)
        if bad.is_empty():
            continue
        excluded.append(_excluded(runs, mask, reason))
        for (anchor, k), group in bad.group_by("anchor", "k", maintain_order=True):
            values = ""
            if rule != "failed-run":
                values = ", ".join(
                    " ".join(f"{name}={_number(row.get(name))}" for name in HEALTH_FIELDS)
                    for row in group.select(
                        [name for name in HEALTH_FIELDS if name in group.columns]
                    ).to_dicts()
                )
            problems.append(
                Problem(
                    Severity.ERROR,
                    rule,
                    f"{group.height} unhealthy run(s): {reason}",
                    files=_cell_files(group),
                    field={"failed-requests": failed_field, "incomplete-run": completed_field}.get(
                        rule
                    ),
                    value=values or None,
                    anchor=_int_or_none(anchor),
                    k=_int_or_none(k),
                    expected="failed == 0 and completed == num_prompts",
                )
            )
    return _concat_excluded(excluded), problems


def objective_gate(
    runs: pl.DataFrame, settings: Settings, non_numeric: dict[str, dict[int, str]]
) -> tuple[pl.DataFrame, list[Problem]]:
    """Runs whose objective cannot be ranked: absent, null, not a number, not finite,
    negative, zero when minimising (a zero latency is a broken measurement), or beyond
    :data:`PLAUSIBLE_OBJECTIVE` either way (1e-100 tok/s or 1e100 ms is damage, not a
    measurement, and the log-ratios of such values overflow the gains computed from them).

    A null ``request_goodput`` means the bench ran without ``--goodput``: the problem says so.
    """
    objective = settings.objective
    if runs.is_empty():
        # Nothing was read, and the loader has said why: "no objective" would only add noise.
        return _excluded(runs, pl.lit(True), "no objective field"), []
    if objective not in runs.columns and non_numeric.get(objective):
        # Text in every run ("fast"): the field is there, as no number; the rules below say so.
        runs = runs.with_columns(pl.lit(None, pl.Float64).alias(objective))
    if objective not in runs.columns:
        problem = Problem(
            Severity.ERROR,
            "missing-objective",
            "no run has the objective field",
            files=_cell_files(runs.head(3)),
            field=objective,
            expected="a numeric record field, e.g. "
            + ", ".join(list(OBJECTIVES_BY_NAME)[:3])
            + " (README's table of objectives lists the known ones)",
        )
        return _excluded(runs, pl.lit(True), "no objective field"), [problem]
    value = pl.col(objective)
    lower = "> 0" if not settings.maximize else ">= 0"
    too_small = (value <= 0) if not settings.maximize else (value < 0)
    smallest, largest = PLAUSIBLE_OBJECTIVE
    plausible = f"a number from {smallest:g} to {largest:g}" + (
        " or 0" if settings.maximize else ""
    )
    goodput_hint = (
        ": the bench ran without --goodput (rerun it with e.g. --goodput tpot:50, or choose"
        " another objective)"
        if objective == "request_goodput"
        else ""
    )
    with_row = runs.with_row_index("_row")
    text_rows = non_numeric.get(objective, {})
    rules = [
        (
            value.is_null() & ~pl.col("_row").is_in(list(text_rows)),
            "missing-objective",
            "the objective is missing or null" + goodput_hint,
        ),
        (value.is_null() & pl.col("_row").is_in(list(text_rows)), "non-numeric-objective", ""),
        (
            value.is_nan() | value.is_infinite(),
            "non-finite-objective",
            "the objective is not finite",
        ),
        (value.is_finite() & too_small, "out-of-range-objective", f"the objective is not {lower}"),
        (
            value.is_finite() & ((value > largest) | ((value > 0) & (value < smallest))),
            "out-of-range-objective",
            "the objective is no plausible measurement",
        ),
    ]
    excluded = []
    problems = []
    for mask, rule, reason in rules:
        bad = with_row.filter(mask.fill_null(False) & ~pl.col("failure_file"))
        if bad.is_empty():
            continue
        if rule == "non-numeric-objective":
            reason = "the objective is not a number"
            shown = [text_rows[row] for row in bad["_row"].to_list()]
        else:
            shown = [show_value(v) for v in bad[objective].to_list()]
        excluded.append(_excluded(with_row, pl.col("_row").is_in(bad["_row"].implode()), reason))
        problems.append(
            Problem(
                Severity.ERROR,
                rule,
                f"{bad.height} run(s) with an unusable objective: {reason}",
                files=_cell_files(bad),
                field=objective,
                value=", ".join(dict.fromkeys(shown)),
                expected=plausible,
            )
        )
    return _concat_excluded(excluded), problems


def acceptance_value_gate(
    runs: pl.DataFrame, settings: Settings, non_numeric: dict[str, dict[int, str]]
) -> tuple[pl.DataFrame, list[Problem]]:
    """Runs whose acceptance (``--acceptance-var``) is no usable value: text that is no
    number (``"abc"``; numeric text such as ``"2.5"`` is that number, as the seed's
    ``float()`` reads it), not finite, or negative: no acceptance rate or length is, so the
    field is not what the flag says or the record is damaged (the seed refuses the sweep:
    "Expected numeric / finite / non-negative acceptance"), whatever the K, K=0 included.
    Each such run is excluded, one error per (rule, anchor, K) naming the values. Zero is
    accepted (a run that drafted and accepted nothing); absent or null is no acceptance (the
    cell rules judge it); without the flag nothing is checked."""
    field = settings.acceptance
    if field is None or runs.is_empty():
        return _excluded(runs, pl.lit(False), ""), []
    text_rows = non_numeric.get(field, {})
    if field not in runs.columns:
        if not text_rows:
            return _excluded(runs, pl.lit(False), ""), []
        runs = runs.with_columns(pl.lit(None, pl.Float64).alias(field))
    value = pl.col(field)
    with_row = runs.with_row_index("_row")
    rules = [
        (
            value.is_null() & pl.col("_row").is_in(list(text_rows)),
            "non-numeric-acceptance",
            "the acceptance is not a number",
            "a number >= 0",
        ),
        (
            value.is_nan() | value.is_infinite(),
            "non-finite-acceptance",
            "the acceptance is not finite",
            "a finite number >= 0",
        ),
        (value < 0, "negative-acceptance", "the acceptance is negative", ">= 0"),
    ]
    excluded = []
    problems = []
    for mask, rule, reason, expected in rules:
        bad = with_row.filter(mask.fill_null(False) & ~pl.col("failure_file"))
        if bad.is_empty():
            continue
        excluded.append(_excluded(with_row, pl.col("_row").is_in(bad["_row"].implode()), reason))
        for (anchor, k), group in bad.group_by("anchor", "k", maintain_order=True):
            shown = (
                [text_rows[row] for row in group["_row"].to_list()]
                if rule == "non-numeric-acceptance"
                else [show_value(v) for v in group[field].to_list()]
            )
            problems.append(
                Problem(
                    Severity.ERROR,
                    rule,
                    f"{group.height} run(s) with an unusable acceptance: {reason}",
                    files=_cell_files(group),
                    field=field,
                    value=", ".join(dict.fromkeys(shown)),
                    anchor=_int_or_none(anchor),
                    k=_int_or_none(k),
                    expected=expected,
                )
            )
    return _concat_excluded(excluded), problems


def global_k_gate(
    runs: pl.DataFrame, k_var: str, allow_mixed: bool
) -> tuple[pl.DataFrame, list[Problem], int | None]:
    """The global ``speculative_config.num_speculative_tokens`` (the startup maximum that sizes
    buffers and CUDA graphs) must be one value for the whole sweep, and no run's K may exceed
    its global. With the default ``--k-var`` every run that has a ``speculative_config`` must
    also state the global. Runs of a server without speculation are exempt.

    ``allow_mixed`` (not in the seed) accepts sweeps that vary the global itself (static-K
    servers): the deployable global is then the largest observed, a configuration none of the
    candidates ran with, which the caller must say.

    With another ``--k-var`` (a static-K sweep reads ``num_speculative_tokens`` itself) the
    seed checks no global and states none, and so does this gate: no configured global, and a
    global that differs between runs is an error only with the default ``--k-var``. One
    check stays with any ``--k-var``, since it prevents a wrong answer: a K above its run's
    global was clamped by vLLM, so the run did not measure that K.

    Returns excluded runs, problems and the configured global (None when absent).
    """
    problems = []
    excluded = []
    speculative = runs.filter(pl.col("speculation").fill_null(False))
    if k_var != DEFAULT_K_VAR:
        return _k_above_global(runs), _k_above_global_problems(speculative), None
    missing = speculative.filter(pl.col("global_k").is_null())
    if not missing.is_empty():
        problems.append(
            Problem(
                Severity.ERROR,
                "missing-global-k",
                f"{missing.height} run(s) state no usable global speculative-token count",
                files=_cell_files(missing),
                field=GLOBAL_K_VAR,
                expected="the same whole number on every speculative run",
            )
        )
    globals_seen = sorted(speculative["global_k"].drop_nulls().unique().to_list())
    configured = globals_seen[0] if len(globals_seen) == 1 else None
    if len(globals_seen) > 1:
        configured = globals_seen[-1] if allow_mixed else None
        by_value = {
            value: _cell_files(speculative.filter(pl.col("global_k") == value).head(2))
            for value in globals_seen
        }
        problems.append(
            Problem(
                Severity.NOTE if allow_mixed else Severity.ERROR,
                "mixed-global-k",
                "the global speculative-token count differs between runs, so candidates ran"
                " on differently sized engines"
                + (
                    f"; the schedule is exported with the largest, {globals_seen[-1]}, which"
                    " no candidate ran with"
                    if allow_mixed
                    else "; a sweep that varies K statically can be compared with"
                    f" {flag_name(Settings, 'allow_mixed_global_k')} (the deployed engine will use"
                    " the largest)"
                ),
                files=tuple(f for files in by_value.values() for f in files),
                field=GLOBAL_K_VAR,
                value=", ".join(str(v) for v in globals_seen),
                expected="one value for the whole sweep",
            )
        )
    excluded.append(_k_above_global(runs))
    problems += _k_above_global_problems(speculative)
    return _concat_excluded(excluded), problems, configured


def _k_above_global(runs: pl.DataFrame) -> pl.DataFrame:
    """The runs whose K is above their global (excluded: vLLM clamped K to it)."""
    return _excluded(runs, pl.col("k") > pl.col("global_k"), "K above the global")


def _k_above_global_problems(speculative: pl.DataFrame) -> list[Problem]:
    """One ``k-above-global`` error per (anchor, K) of a run whose K is above its global."""
    above = speculative.filter(pl.col("k") > pl.col("global_k"))
    return [
        Problem(
            Severity.ERROR,
            "k-above-global",
            "K is above the global speculative-token count, which vLLM clamps to",
            files=_cell_files(group),
            field=GLOBAL_K_VAR,
            value=", ".join(str(v) for v in group["global_k"].unique().sort()),
            anchor=_int_or_none(anchor),
            k=_int_or_none(k),
            expected=f"global >= {k}",
        )
        for (anchor, k), group in above.group_by("anchor", "k", maintain_order=True)
    ]


def server_gate(
    runs: pl.DataFrame, k_var: str, replica_var: str = DEFAULT_REPLICA_VAR
) -> tuple[pl.DataFrame, list[Problem]]:
    """A cell holds the runs of one server configuration: runs at the same (anchor, K) from
    folders of different serve combos (``SERVE--a-...`` and ``SERVE--b-...``) are different
    servers that the records cannot tell apart, and pooling them would rank a mixture.
    Serve combos whose names differ only in the replica marker (``k3-seed=0``, ``k3-seed=1``:
    :mod:`lib.servers`, ``--replica-var``) are one configuration on several server starts,
    which the confidence model weighs as such (:mod:`lib.confidence`, "Servers").

    It happens when the sweep varied something the records do not hold (a K set on the
    server's command line, where every record reads as K=0), or when two sweeps were copied
    into one folder. Every run of such a cell is excluded, and the error names the folders and
    ``--k-var``, which resolves it when some record field does hold what differs.

    Folders named otherwise (not the sweep's layout) say nothing about their server and are
    not compared; the same serve combo under several parent folders (a sweep resumed into
    another experiment folder) is one server.
    """
    placed = runs.filter(pl.col("anchor").is_not_null() & pl.col("k").is_not_null()).with_columns(
        serve_combo_expression().alias("_serve"),
        configuration_expression(replica_var).alias("_configuration"),
    )
    mixed = (
        placed.group_by("anchor", "k", maintain_order=True)
        .agg(pl.col("_configuration").drop_nulls().unique(maintain_order=True).alias("_serves"))
        .filter(pl.col("_serves").list.len() > 1)
        .sort("anchor", "k")
    )
    if mixed.is_empty():
        return _concat_excluded([]), []
    problems = []
    for anchor, k, configurations in mixed.iter_rows():
        cell = placed.filter((pl.col("anchor") == anchor) & (pl.col("k") == k))
        # A file of each configuration, so the user sees which folders collide.
        firsts = [
            cell.filter(pl.col("_configuration") == name).row(0, named=True)
            for name in configurations
        ]
        first_files = [first["source"] for first in firsts]
        serves = [first["_serve"] for first in firsts]
        problems.append(
            Problem(
                Severity.ERROR,
                "pooled-servers",
                f"runs of {len(serves)} server configurations (serve combos) fall into one"
                " cell, and a ranking of their mixture would hold for neither server",
                files=tuple(first_files),
                field=k_var,
                value=", ".join(f"SERVE--{name}" for name in serves),
                anchor=anchor,
                k=k,
                expected=(
                    "one server configuration per (batch size, K): if the servers ran different"
                    " K (set on their command line, it is in no record), name a record field"
                    f" that holds K with {flag_name(Fields, 'k_var')}; if they are replicas (the"
                    " same server started again), name the serve parameter that tells them"
                    f" apart with {flag_name(Fields, 'replica_var')}; else keep the folders of"
                    " one server"
                ),
            )
        )
    keys = mixed.select("anchor", "k")
    pooled = runs.join(
        keys.with_columns(pl.lit(True).alias("_pooled")), on=["anchor", "k"], how="left"
    )
    excluded = _excluded(pooled, pl.col("_pooled").fill_null(False), "runs of different servers")
    return excluded, problems


def unplaced_runs(runs: pl.DataFrame) -> pl.DataFrame:
    """Runs with no usable anchor or K (the loader reported why): they belong to no cell."""
    return _excluded(
        runs, pl.col("anchor").is_null() | pl.col("k").is_null(), "no usable anchor or K"
    )


# --------------------------------------------------------------------------- cells

#: Schema of the cell frame returned by :func:`cell_statistics` and :func:`tune`.
CELL_SCHEMA = {
    "anchor": pl.Int64,
    "k": pl.Int64,
    "num_runs": pl.Int64,
    "median": pl.Float64,
    "mad": pl.Float64,
    "relative_mad": pl.Float64,
    "conservative": pl.Float64,
    "acceptance_runs": pl.Int64,
    "median_acceptance": pl.Float64,
    "acceptance_relative_mad": pl.Float64,
    "files": pl.List(pl.Utf8),
}


def cell_statistics(runs: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """One row per (anchor, K) of ``runs`` (:data:`CELL_SCHEMA`), sorted by anchor, K.

    A run whose objective is null (an excluded run) is not counted: ``num_runs`` counts the
    usable runs, so a cell whose runs were all excluded has ``num_runs == 0``.

    ``conservative`` is :func:`lib.robust.conservative_score` of the median and MAD;
    acceptance columns are null without ``settings.acceptance``.
    """
    objective = settings.objective
    acceptance = settings.acceptance
    median = robust.median(objective)
    mad = robust.median_abs_deviation(objective)
    if acceptance is not None and acceptance in runs.columns:
        accepted = pl.col(acceptance).is_not_null() & pl.col(acceptance).is_finite()
        acceptance_exprs = [
            accepted.sum().cast(pl.Int64).alias("acceptance_runs"),
            robust.median(acceptance).alias("median_acceptance"),
            robust.median_abs_deviation(acceptance).alias("_acceptance_mad"),
        ]
    else:
        acceptance_exprs = [
            pl.lit(0, pl.Int64).alias("acceptance_runs"),
            pl.lit(None, pl.Float64).alias("median_acceptance"),
            pl.lit(None, pl.Float64).alias("_acceptance_mad"),
        ]
    cells = (
        runs.group_by("anchor", "k")
        .agg(
            pl.col(objective).count().cast(pl.Int64).alias("num_runs"),
            median.alias("median"),
            mad.alias("mad"),
            *acceptance_exprs,
            pl.col("source").unique(maintain_order=True).alias("files"),
        )
        .with_columns(
            robust.relative_mad(pl.col("mad"), pl.col("median")).alias("relative_mad"),
            robust.conservative_score(
                pl.col("median"), pl.col("mad"), settings.uncertainty_penalty, settings.maximize
            ).alias("conservative"),
            robust.relative_mad(pl.col("_acceptance_mad"), pl.col("median_acceptance")).alias(
                "acceptance_relative_mad"
            ),
        )
        .sort("anchor", "k")
    )
    return cells.select(list(CELL_SCHEMA)).cast(CELL_SCHEMA)  # type: ignore[arg-type]


def _cell_problem(row: dict[str, Any], rule: str, message: str, **fields: Any) -> Problem:
    return Problem(
        Severity.ERROR,
        rule,
        message,
        files=tuple(row["files"]),
        anchor=row["anchor"],
        k=row["k"],
        **fields,
    )


def min_runs_gate(cells: pl.DataFrame, min_runs: int) -> tuple[pl.Series, list[Problem]]:
    """Reject cells with fewer than ``min_runs`` usable runs: a median of one or two runs says
    nothing about noise. Returns a rejection reason per cell (null when kept) and problems."""
    mask = cells["num_runs"] < min_runs
    problems = [
        _cell_problem(
            row,
            "too-few-runs",
            f"only {row['num_runs']} usable run(s)",
            field="num_runs",
            value=str(row["num_runs"]),
            expected=f">= {min_runs} ({flag_name(Settings, 'min_runs')})",
        )
        for row in cells.filter(mask).to_dicts()
    ]
    return _reasons(mask, f"fewer than {min_runs} runs"), problems


def noise_gate(cells: pl.DataFrame, settings: Settings) -> tuple[pl.Series, list[Problem]]:
    """Reject cells whose objective relative MAD exceeds ``max_objective_relative_mad``.

    A cell at exactly the threshold is kept (the seed's ``>``). With 3 runs the MAD ignores the
    farther of the two outer runs, so this gate misses a single far-off run; it catches cells
    whose runs are all spread out.
    """
    threshold = settings.max_objective_relative_mad
    mask = cells["relative_mad"] > threshold
    problems = [
        _cell_problem(
            row,
            "noisy-objective",
            "the runs disagree too much to rank this cell",
            field=settings.objective + " relative MAD",
            value=f"{row['relative_mad']:.4f}",
            expected=f"<= {threshold} ({flag_name(Settings, 'max_objective_relative_mad')})",
        )
        for row in cells.filter(mask).to_dicts()
    ]
    return _reasons(mask, f"objective relative MAD above {threshold}"), problems


def acceptance_gate(cells: pl.DataFrame, settings: Settings) -> tuple[pl.Series, list[Problem]]:
    """Acceptance stability (only with ``--acceptance-var``).

    - K=0 may lack acceptance (no drafts, so vLLM writes no ``spec_decode_*`` fields).
    - A cell with no usable run says nothing more: each of its runs' exclusions is reported.
    - A cell where only some runs have it is an error: the runs measured different things.
    - A K>0 cell with none is an error: the field is wrong or drafting never happened.
    - A relative MAD above ``max_acceptance_relative_mad`` is a warning, or an error that
      rejects the cell with ``strict_acceptance_stability``.
    """
    count = len(cells)
    if settings.acceptance is None:
        return pl.Series([None] * count, dtype=pl.Utf8), []
    field = settings.acceptance
    reasons: list[str | None] = []
    problems = []
    for row in cells.to_dicts():
        runs, have = row["num_runs"], row["acceptance_runs"]
        reason = None
        if runs == 0 or (have == 0 and row["k"] == 0):
            # No usable run (each exclusion is reported with its reason), or K=0 (no drafts).
            pass
        elif have == 0:
            reason = "no acceptance values"
            problems.append(
                _cell_problem(row, "missing-acceptance", reason, field=field, expected="a number")
            )
        elif have < runs:
            reason = f"acceptance in only {have} of {runs} runs"
            problems.append(
                _cell_problem(
                    row, "partial-acceptance", reason, field=field, expected="in every run or none"
                )
            )
        elif row["acceptance_relative_mad"] > settings.max_acceptance_relative_mad:
            message = "acceptance is unstable between runs"
            strict = settings.strict_acceptance_stability
            problems.append(
                Problem(
                    Severity.ERROR if strict else Severity.WARNING,
                    "unstable-acceptance",
                    message,
                    files=tuple(row["files"]),
                    anchor=row["anchor"],
                    k=row["k"],
                    field=field + " relative MAD",
                    value=f"{row['acceptance_relative_mad']:.4f}",
                    expected=f"<= {settings.max_acceptance_relative_mad}"
                    f" ({flag_name(Settings, 'max_acceptance_relative_mad')})",
                )
            )
            if strict:
                reason = message
        reasons.append(reason)
    return pl.Series(reasons, dtype=pl.Utf8), problems


def anchor_grid_gate(cells: pl.DataFrame) -> list[Problem]:
    """The anchors must start at 1 (vLLM's schedule must cover batch size 1), and every anchor
    must have measured the same set of K (otherwise "best" means different things per anchor).
    Checked on every cell measured, kept or not."""
    problems = []
    anchors = sorted(cells["anchor"].unique().to_list())
    # One aggregation, not a frame per anchor: this gate runs on every slider move in the app.
    per_anchor = cells.group_by("anchor", maintain_order=True).agg(
        pl.col("k"), pl.col("files").explode().drop_nulls().unique(maintain_order=True)
    )
    # Grid problems concern whole anchors: name their files so the user can find them.
    files_at = {anchor: tuple(files) for anchor, _, files in per_anchor.iter_rows()}
    if anchors and anchors[0] != 1:
        problems.append(
            Problem(
                Severity.ERROR,
                "anchors-not-from-1",
                "the smallest batch-size anchor is not 1, so the schedule cannot start at 1",
                files=files_at[anchors[0]],
                field="anchor",
                value=str(anchors[0]),
                expected="an anchor at batch size 1",
                extra={"anchors": anchors},
            )
        )
    k_sets = {anchor: set(ks) for anchor, ks, _ in per_anchor.iter_rows()}
    every_k = set().union(*k_sets.values()) if k_sets else set()
    for anchor in anchors:
        missing = sorted(every_k - k_sets[anchor])
        if missing:
            problems.append(
                Problem(
                    Severity.ERROR,
                    "unequal-k-sets",
                    "this anchor lacks K "
                    + ", ".join(str(k) for k in missing)
                    + ", measured at other anchors",
                    files=files_at[anchor],
                    anchor=anchor,
                    field="k",
                    value=", ".join(str(k) for k in sorted(k_sets[anchor])),
                    expected="the K set " + ", ".join(str(k) for k in sorted(every_k)),
                )
            )
    return problems


# --------------------------------------------------------------------------- decisions


def tie_rule(cells: pl.DataFrame, relative_tolerance: float, maximize: bool) -> pl.DataFrame:
    """Add ``ratio``, ``tied`` and ``selected`` to the kept cells (``status == "kept"``).

    Per anchor, ``best`` is the highest conservative score (lowest when minimising);
    ``ratio = conservative / best`` (``best / conservative`` when minimising), so 1 is the best
    and smaller is worse. Every K with ``ratio >= 1 - relative_tolerance`` is tied with the
    best, and the smallest tied K is selected: fewer draft tokens cost less when the benefit is
    the same. Edge case: when maximising and the best score is 0 (every K scored 0, or its
    penalty clipped it to 0), nothing is ranked: no ratio, no pick, as the seed refuses such an
    anchor (:func:`zero_score_problems` says so). Rejected cells get null ratio and are never
    tied or selected.
    """
    kept = pl.col("status") == "kept"
    score = pl.when(kept).then(pl.col("conservative"))
    best = (score.max() if maximize else score.min()).over("anchor")
    ratio = pl.when(best > 0).then(score / best) if maximize else best / score
    with_ratio = cells.with_columns(ratio.alias("ratio")).with_columns(
        (pl.col("ratio") >= 1 - relative_tolerance).fill_null(False).alias("tied")
    )
    chosen = pl.col("k").filter(pl.col("tied")).min().over("anchor")
    return with_ratio.with_columns((pl.col("tied") & (pl.col("k") == chosen)).alias("selected"))


def zero_score_problems(cells: pl.DataFrame, maximize: bool) -> list[Problem]:
    """One ``no-positive-objective`` error per anchor where kept cells exist and none scores
    above 0 (maximising): the seed's "No positive conservative objective for batch_size=B".
    A score is the median less ``penalty x 1.4826 x MAD``, clipped at 0, so it is 0 when every
    K measured 0 or when the noise penalty eats the whole median. Minimising never meets it
    (a latency must be > 0, so its score is too)."""
    if not maximize:
        return []
    kept = cells.filter(pl.col("status") == "kept")
    best = kept.group_by("anchor").agg(
        pl.col("conservative").max().alias("best"), pl.col("files").explode().alias("files")
    )
    return [
        Problem(
            Severity.ERROR,
            "no-positive-objective",
            "no K scores above 0 here: every kept cell's conservative objective is 0, so"
            " nothing can be ranked",
            files=tuple(dict.fromkeys(files)),
            anchor=anchor,
            field="conservative objective",
            value=show_value(value),
            expected="> 0 for some K (a measured objective above 0, or a smaller"
            f" {flag_name(Settings, 'uncertainty_penalty')})",
        )
        for anchor, value, files in best.filter(pl.col("best") <= 0).sort("anchor").rows()
    ]


#: Schema of the decision frame (one row per anchor).
DECISION_SCHEMA = {
    "anchor": pl.Int64,
    "selected_k": pl.Int64,
    "selected_median": pl.Float64,
    "selected_conservative": pl.Float64,
    "vs_best_percent": pl.Float64,
    "vs_k0_percent": pl.Float64,
    "tied_k": pl.List(pl.Int64),
    "complete": pl.Boolean,
}


def decide(
    cells: pl.DataFrame, maximize: bool, score: Literal["conservative", "median"] = "conservative"
) -> pl.DataFrame:
    """One row per anchor (:data:`DECISION_SCHEMA`) from cells with ``selected`` / ``tied``.

    ``vs_best_percent``: ``(ratio - 1) * 100`` of the selected cell, i.e. its score against the
    best one's (0 when the best itself was selected, negative when a smaller tied K won).
    ``vs_k0_percent``: the selected K's ``score`` column (the seed ranks by the conservative
    score; the confident rule by the median) against K=0's, positive = better (for a minimised
    objective, ``k0 / selected - 1``); null without a kept K=0 cell or when K=0 scored 0.
    ``complete`` is false when any cell at the anchor was rejected, so the pick was made among
    fewer K than were measured. An anchor with no kept cell has a null K.
    """
    k0 = cells.filter((pl.col("k") == 0) & (pl.col("status") == "kept")).select(
        "anchor", pl.col(score).alias("_k0")
    )
    per_anchor = cells.group_by("anchor").agg(
        pl.col("k").filter(pl.col("tied")).alias("tied_k"),
        (pl.col("status") == "kept").all().alias("complete"),
    )
    selected = cells.filter(pl.col("selected")).select(
        "anchor",
        pl.col("k").alias("selected_k"),
        pl.col("median").alias("selected_median"),
        pl.col("conservative").alias("selected_conservative"),
        ((pl.col("ratio") - 1) * 100).alias("vs_best_percent"),
    )
    selected_score = pl.col("selected_" + score)
    gain = selected_score / pl.col("_k0") if maximize else pl.col("_k0") / selected_score
    return (
        per_anchor.join(selected, on="anchor", how="left")
        .join(k0, on="anchor", how="left")
        .with_columns(
            pl.when(pl.col("_k0") > 0).then((gain - 1) * 100).alias("vs_k0_percent"),
            pl.col("tied_k").list.sort(),
        )
        .sort("anchor")
        .select(list(DECISION_SCHEMA))
        .cast(DECISION_SCHEMA)  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- schedules


def merge_picks(anchors: Sequence[int], ks: Sequence[int], max_batch_size: int) -> list[Range]:
    """The seed's schedule merge: anchor i covers ``[anchor_i, anchor_{i+1} - 1]`` and the
    last anchor covers up to ``max_batch_size``; neighbouring ranges with the same K merge. No
    monotonicity is assumed: K may go down and up again.

    >>> merge_picks([1, 64, 128, 256], [7, 0, 0, 0], 256)
    [(1, 63, 7), (64, 256, 0)]
    >>> merge_picks([1, 8, 32], [2, 0, 2], 64)
    [(1, 7, 2), (8, 31, 0), (32, 64, 2)]
    """
    pairs = sorted(zip(anchors, ks, strict=True))
    merged: list[Range] = []
    for index, (anchor, k) in enumerate(pairs):
        upper = pairs[index + 1][0] - 1 if index + 1 < len(pairs) else max_batch_size
        if merged and merged[-1][2] == k:
            merged[-1] = (merged[-1][0], upper, k)
        else:
            merged.append((anchor, upper, k))
    return merged


def validate_schedule(schedule: Any) -> list[str]:
    """vLLM's own checks on ``num_speculative_tokens_per_batch_size`` at engine start
    (``vllm/v1/spec_decode/dynamic/utils.py``), as a list of violations (empty = valid).

    A non-empty list; each entry a list of 3 integers ``[lo, hi, K]`` with ``lo > 0``,
    ``hi > 0``, ``lo <= hi``, ``K >= 0``; sorted by ``lo``, no two ranges may overlap; the first
    range must start at 1. Gaps are allowed (they inherit the previous K at run time). One
    rule of tune-spec-k's own, the same for every command that reads a schedule or a sweep: no
    number above :data:`~lib.keys.LARGEST_WHOLE_NUMBER`.

    >>> validate_schedule([[1, 63, 7], [64, 256, 0]])
    []
    >>> validate_schedule([[2, 8, 3], [5, 9, 1]])
    ['ranges [2, 8, 3] and [5, 9, 1] overlap', 'the first range starts at 2, not 1']
    """
    if not isinstance(schedule, list | tuple) or not schedule:
        return ["the schedule must be a non-empty list of [lo, hi, K] ranges"]
    violations = []
    ranges = []
    for index, entry in enumerate(schedule):
        if not (
            isinstance(entry, list | tuple)
            and len(entry) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
        ):
            violations.append(f"entry {index} {entry!r} is not a list of 3 integers")
            continue
        lo, hi, k = entry
        if lo <= 0 or hi <= 0:
            violations.append(f"entry {index} {list(entry)}: batch sizes must be > 0")
        if lo > hi:
            violations.append(f"entry {index} {list(entry)}: lo > hi")
        if k < 0:
            violations.append(f"entry {index} {list(entry)}: K must be >= 0")
        if max(lo, hi, k) > LARGEST_WHOLE_NUMBER:
            violations.append(
                f"entry {index} {list(entry)}: numbers above {LARGEST_WHOLE_NUMBER}"
                " (tune-spec-k's limit on batch sizes and K) are typos or damage"
            )
        ranges.append((lo, hi, k))
    ranges.sort()
    for before, after in itertools.pairwise(ranges):
        if after[0] <= before[1]:
            violations.append(f"ranges {list(before)} and {list(after)} overlap")
    if ranges and ranges[0][0] != 1:
        violations.append(f"the first range starts at {ranges[0][0]}, not 1")
    return violations


@dataclass(frozen=True, order=True)
class Schedule:
    """vLLM's ``num_speculative_tokens_per_batch_size``: inclusive ``[lo, hi, K]`` ranges, in
    the order given. Built from per-anchor picks (:meth:`from_picks`), read from a user's JSON
    (:meth:`parse`, :meth:`from_trtllm`), checked against vLLM's rules (:meth:`violations`),
    looked up (:meth:`k_at`) and written (:meth:`to_json`, :meth:`json_text`,
    :meth:`to_trtllm`) in one place.

    TensorRT-LLM's ``draft_len_schedule`` says the same with ``{batch_size_upper_bound: K}``: a
    batch size uses the K of the smallest bound at or above it. To it, each range's bound is
    one below the next range's start (a gap goes to the range before it, as in vLLM) and the
    last bound is the last ``hi``; neighbours with equal K merge. Back, the bounds give
    ``[[1, b1, K1], [b1 + 1, b2, K2], ...]`` without gaps. So vLLM runs the round trip exactly
    as the original at every batch size up to the last ``hi``.

    >>> schedule = Schedule.from_picks([1, 64, 128, 256], [7, 0, 0, 0], 256)
    >>> schedule.json_text()
    '[[1, 63, 7], [64, 256, 0]]'
    >>> schedule.k_at(63), schedule.k_at(64), schedule.k_at(1000), schedule.k_at(1, global_k=3)
    (7, 0, 0, 3)
    >>> schedule.to_trtllm()
    {63: 7, 256: 0}
    >>> Schedule.from_trtllm({"63": 7, "256": 0}) == (schedule, [])
    True
    """

    ranges: tuple[Range, ...]

    @classmethod
    def from_picks(cls, anchors: Sequence[int], ks: Sequence[int], max_batch_size: int) -> Schedule:
        """The step schedule of per-anchor picks (:func:`merge_picks`)."""
        return cls(tuple(merge_picks(anchors, ks, max_batch_size)))

    @classmethod
    def parse(cls, raw: Any) -> tuple[Schedule | None, list[str]]:
        """A schedule from a user's JSON value, or None and vLLM's violated rules."""
        violations = validate_schedule(raw)
        if violations:
            return None, violations
        return cls(tuple((int(lo), int(hi), int(k)) for lo, hi, k in raw)), []

    @classmethod
    def from_trtllm(cls, draft_len_schedule: Any) -> tuple[Schedule | None, list[str]]:
        """A schedule from TensorRT-LLM's ``{batch_size_upper_bound: K}``, or None and what is
        wrong with it. Bounds may be ints or their JSON spelling (``"63"``); K whole and >= 0.
        """
        if not isinstance(draft_len_schedule, Mapping) or not draft_len_schedule:
            return None, [
                f"{TRTLLM_SCHEDULE} must be a non-empty object of batch_size_upper_bound: K"
                f" (got {json.dumps(draft_len_schedule, default=str)})"
            ]
        bounds: dict[int, int] = {}
        for raw_bound, k in draft_len_schedule.items():
            bound = trtllm_bound(raw_bound)
            if bound is None or not 1 <= bound <= LARGEST_WHOLE_NUMBER:
                return None, [
                    f"{TRTLLM_SCHEDULE} key {raw_bound!r} is not a batch size (expected a"
                    f" whole number from 1 to {LARGEST_WHOLE_NUMBER})"
                ]
            if not _whole(k) or whole_number(k) is None:
                return None, [
                    f"{TRTLLM_SCHEDULE}[{raw_bound!r}] = {json.dumps(k)} is not a draft length"
                    f" (expected a whole number from 0 to {LARGEST_WHOLE_NUMBER})"
                ]
            if bound in bounds:
                return None, [f"{TRTLLM_SCHEDULE} repeats the bound {bound}"]
            bounds[bound] = k
        ranges = []
        start = 1
        for bound in sorted(bounds):
            ranges.append((start, bound, bounds[bound]))
            start = bound + 1
        return cls(tuple(ranges)), []

    def __iter__(self) -> Iterator[Range]:
        return iter(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    @property
    def largest_k(self) -> int:
        """The largest K of any range (0 for an empty schedule)."""
        return max((k for _, _, k in self.ranges), default=0)

    def violations(self) -> list[str]:
        """vLLM's rules this schedule breaks (:func:`validate_schedule`)."""
        return validate_schedule(self.to_json())

    def k_at(self, batch_size: int, global_k: int | None = None) -> int:
        """The K vLLM runs at ``batch_size``: the K of the last range whose ``lo <=
        batch_size``, so a batch size in a gap inherits the previous range's K and one past the
        last range the last K; clamped to the startup maximum ``global_k`` when given. A batch
        size below the first range (invalid schedules only) uses the first range's K."""
        ordered = sorted(self.ranges)
        chosen = ordered[0][2]
        for lo, _, k in ordered:
            if lo <= batch_size:
                chosen = k
        return chosen if global_k is None else min(chosen, global_k)

    def to_json(self) -> list[list[int]]:
        """The ``[[lo, hi, K], ...]`` list vLLM reads."""
        return [list(r) for r in self.ranges]

    def json_text(self) -> str:
        """The schedule as one line of JSON, as the CLI prints it first."""
        return json.dumps(self.to_json())

    def to_trtllm(self) -> dict[int, int]:
        """TensorRT-LLM's ``{batch_size_upper_bound: K}`` (see the class); the schedule must be
        valid."""
        violations = self.violations()
        if violations:
            raise ValueError("not a valid vLLM schedule: " + "; ".join(violations))
        ordered = sorted(self.ranges)
        bounds: dict[int, int] = {}
        for index, (_, hi, k) in enumerate(ordered):
            bound = ordered[index + 1][0] - 1 if index + 1 < len(ordered) else hi
            if bounds and list(bounds.values())[-1] == k:
                # Equal neighbours: the earlier bound would only repeat the same K.
                del bounds[list(bounds)[-1]]
            bounds[bound] = k
        return bounds


#: A result without a schedule: vLLM rejects it; written as ``[]``.
NO_SCHEDULE = Schedule(())
#: TensorRT-LLM's field for its schedule.
TRTLLM_SCHEDULE = "draft_len_schedule"


def trtllm_bound(raw: Any) -> int | None:
    """A ``draft_len_schedule`` key as a batch size: an int, or the digits JSON keys are."""
    if _whole(raw):
        return int(raw)
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw)
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def schedule_problems(schedule: Schedule) -> list[Problem]:
    """One ``invalid-schedule`` error per vLLM rule ``schedule`` breaks, naming it as JSON."""
    return [
        Problem(Severity.ERROR, "invalid-schedule", violation, value=schedule.json_text())
        for violation in schedule.violations()
    ]


def decided_schedule(
    decisions: pl.DataFrame, max_batch_size: int | None, undecided: str
) -> tuple[Schedule | None, list[Problem]]:
    """The step schedule of the per-anchor picks in ``decisions``, checked against vLLM's
    rules; None with an ``undecided-anchor`` error (``undecided`` says why) when some anchor
    has no K, and None without problems when there are no anchors at all."""
    anchors = decisions["anchor"].to_list()
    picks = decisions["selected_k"].to_list()
    if anchors and max_batch_size is not None and None not in picks:
        schedule = Schedule.from_picks(anchors, picks, max_batch_size)
        return schedule, schedule_problems(schedule)
    if not anchors:
        return None, []
    missing = [a for a, k in zip(anchors, picks, strict=True) if k is None]
    problem = Problem(
        Severity.ERROR,
        "undecided-anchor",
        "no K could be chosen: " + undecided,
        value=", ".join(str(a) for a in missing),
    )
    return None, [problem]


# --------------------------------------------------------------------------- the whole policy


class ConfidenceBlocks(Protocol):
    """What a result keeps of its confidence analysis: the per-anchor blocks it writes."""

    def blocks(self) -> Mapping[int, Mapping[str, Any]]: ...


class CellBlocks(Protocol):
    """Per-cell JSON values a result writes as the last key of each candidate."""

    def blocks(self) -> Mapping[tuple[int, int], Mapping[str, Any]]: ...


class JsonValue(Protocol):
    """A typed part of the result that becomes one top-level JSON key when it is written."""

    def to_json(self) -> Any: ...


@dataclass(frozen=True, eq=False)
class TuningResult:
    """Everything the policy found: cells with verdicts, decisions, the schedule, problems.

    ``cells``: :data:`CELL_SCHEMA` plus ``status`` ("kept" / "rejected"), ``reason``, ``ratio``,
    ``tied``, ``selected``. ``decisions``: :data:`DECISION_SCHEMA`. ``excluded_runs``: source,
    position, anchor, k, reason for every run left out of the cells. ``schedule`` is None when
    some anchor has no decision.
    """

    sweep: Sweep
    settings: Settings
    cells: pl.DataFrame
    decisions: pl.DataFrame
    excluded_runs: pl.DataFrame
    schedule: Schedule | None
    max_batch_size: int | None
    configured_global_k: int | None
    max_k_observed: int | None
    problems: tuple[Problem, ...]
    #: The confidence report (:class:`lib.confidence.ConfidenceReport`, typed frames) whose
    #: ``blocks()`` become each ``batch_decisions[i]["confidence"]`` when the result file is
    #: written (:func:`lib.deploy.result_file.result_document`).
    confidence: ConfidenceBlocks | None = None
    #: Further top-level JSON keys (decision policy, switch points, deployment), after
    #: ``problems``: typed values (:class:`JsonValue`), serialised when the file is written.
    additions: Mapping[str, JsonValue] = field(default_factory=dict)
    #: The effective batch per cell (:class:`lib.effective_batch.EffectiveBatch`): each
    #: candidate's last key ``effective_batch_size`` (null where not computed); no key when None.
    effective_batch: CellBlocks | None = None

    @property
    def ok(self) -> bool:
        """True when the seed would have succeeded: a schedule and no error."""
        return self.schedule is not None and not errors(list(self.problems))

    @property
    def errors(self) -> list[Problem]:
        return errors(list(self.problems))

    @property
    def deploy_global_k(self) -> int:
        """The ``num_speculative_tokens`` to start the engine with: the configured global, or
        the largest K in the schedule when the sweep stated none (at least 1, vLLM's minimum)."""
        if self.configured_global_k is not None:
            return self.configured_global_k
        largest = (self.schedule or NO_SCHEDULE).largest_k
        return max(largest, self.max_k_observed or 0, 1)

    def speculative_config(self) -> dict[str, Any]:
        """The ``--speculative-config`` to paste into ``vllm serve``: the settings every
        speculative run shared (method, draft model, ...), the global K, and the schedule.
        ``method`` is ``"<method>"`` when no run recorded one (a placeholder to fill in)."""
        shared: dict[str, Any] = {}
        configs = self.sweep.speculative_configs
        if configs:
            first = configs[0]
            shared = {
                key: value
                for key, value in first.items()
                if all(key in other and other[key] == value for other in configs[1:])
            }
        shared.pop("num_speculative_tokens_per_batch_size", None)
        shared.setdefault("method", "<method>")
        shared["num_speculative_tokens"] = self.deploy_global_k
        shared["num_speculative_tokens_per_batch_size"] = (self.schedule or NO_SCHEDULE).to_json()
        return shared


def candidate_json(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A cell of :attr:`TuningResult.cells` as the seed's JSON candidate (without its batch
    size): K, runs and the statistics, non-finite floats as null."""
    return {
        "k": cell["k"],
        "num_runs": cell["num_runs"],
        "median_objective": finite_or_none(cell["median"]),
        "mad_objective": finite_or_none(cell["mad"]),
        "conservative_objective": finite_or_none(cell["conservative"]),
        "objective_relative_mad": finite_or_none(cell["relative_mad"]),
        "median_acceptance": finite_or_none(cell["median_acceptance"]),
        "acceptance_relative_mad": finite_or_none(cell["acceptance_relative_mad"]),
    }


@dataclass(frozen=True, eq=False)
class _GatedRuns:
    """What the run-level gates leave: their problems, the excluded runs, the placed runs with
    an excluded run's objective and acceptance blanked, and the configured global K."""

    problems: tuple[Problem, ...]
    excluded: pl.DataFrame
    usable: pl.DataFrame
    configured_global: int | None


def _run_gate_settings(settings: Settings) -> Settings:
    """The settings the run-level gates read (objective, direction, acceptance, a global K
    that differs), the others at their defaults: the key of :func:`_run_gates`' cache."""
    return dataclasses.replace(
        Settings(),
        objective=settings.objective,
        direction=settings.direction,
        acceptance=settings.acceptance,
        allow_mixed_global_k=settings.allow_mixed_global_k,
    )


@functools.lru_cache(maxsize=16)
def _run_gates(sweep: Sweep, settings: Settings) -> _GatedRuns:
    """The gates that judge runs, not cells (health, objective, global K, server, unplaced).

    Cached (sweeps compare by identity; their frames are immutable): a slider that moves the
    minimum runs, the penalty, the noise threshold or the tolerance reuses them."""
    runs = sweep.runs
    problems: list[Problem] = []
    health_excluded, found = health_gate(runs)
    problems += found
    objective_excluded, found = objective_gate(runs, settings, sweep.non_numeric)
    problems += found
    acceptance_excluded, found = acceptance_value_gate(runs, settings, sweep.non_numeric)
    problems += found
    global_excluded, found, configured_global = global_k_gate(
        runs, sweep.k_var, settings.allow_mixed_global_k
    )
    problems += found
    server_excluded, found = server_gate(runs, sweep.k_var, sweep.replica_var)
    problems += found
    problems += _baseline_notes(runs)
    excluded = _concat_excluded(
        [
            health_excluded,
            objective_excluded,
            acceptance_excluded,
            global_excluded,
            server_excluded,
            unplaced_runs(runs),
        ]
    )
    # Every measured (anchor, K) stays a cell, even when all its runs are excluded: it is then
    # rejected for too few runs instead of silently vanishing from the grid.
    placed = runs.filter(pl.col("anchor").is_not_null() & pl.col("k").is_not_null())
    if settings.objective not in placed.columns:
        placed = placed.with_columns(pl.lit(None, pl.Float64).alias(settings.objective))
    usable = placed.join(
        excluded.select(*_ROW_KEY, pl.lit(True).alias("_excluded")),
        on=list(_ROW_KEY),
        how="left",
    ).with_columns(
        pl.when(pl.col("_excluded").is_null()).then(pl.col(column))
        for column in dict.fromkeys([settings.objective, settings.acceptance])
        if column in placed.columns
    )

    return _GatedRuns(tuple(problems), excluded, usable, configured_global)


def tune(sweep: Sweep, settings: Settings) -> TuningResult:
    """Apply the seed's policy to a loaded sweep, collecting every problem on the way.

    Settings that cannot be used (:meth:`Settings.invalid`) tune nothing: the result holds the
    loader's problems and one ``invalid-setting`` error per reason, and no cell, because what
    the gates would say under such settings (an objective that is a file name, a tolerance
    past 100 %) is not true of the sweep."""
    problems: list[Problem] = list(sweep.problems)
    invalid = settings.invalid()
    if invalid:
        problems += [Problem(Severity.ERROR, "invalid-setting", reason) for reason in invalid]
        return _untuned(sweep, settings, problems)
    problems += direction_problems(settings)
    runs = sweep.runs
    gated = _run_gates(sweep, _run_gate_settings(settings))
    problems += gated.problems
    excluded, usable, configured_global = gated.excluded, gated.usable, gated.configured_global

    cells = cell_statistics(usable, settings)
    reasons = []
    for gate in (min_runs_gate(cells, settings.min_runs), noise_gate(cells, settings)):
        reasons.append(gate[0])
        problems += gate[1]
    acceptance_reasons, found = acceptance_gate(cells, settings)
    reasons.append(acceptance_reasons)
    problems += found
    problems += anchor_grid_gate(cells)
    reason = pl.concat_str(*[pl.lit(r) for r in reasons], separator="; ", ignore_nulls=True)
    cells = cells.with_columns(
        pl.when(reason.str.len_chars() > 0).then(reason).alias("reason"),
    ).with_columns(
        pl.when(pl.col("reason").is_null())
        .then(pl.lit("kept"))
        .otherwise(pl.lit("rejected"))
        .alias("status")
    )
    cells = tie_rule(cells, settings.relative_tolerance, settings.maximize)
    problems += zero_score_problems(cells, settings.maximize)
    decisions = decide(cells, settings.maximize)

    anchors = decisions["anchor"].to_list()
    max_batch_size = settings.max_batch_size or (max(anchors) if anchors else None)
    if settings.max_batch_size is not None and anchors and settings.max_batch_size != max(anchors):
        problems.append(
            Problem(
                Severity.ERROR,
                "max-batch-size",
                "the maximum batch size must equal the largest anchor (the seed's rule: the"
                " schedule would extrapolate beyond what was measured)",
                field=flag_name(Settings, "max_batch_size"),
                value=str(settings.max_batch_size),
                expected=str(max(anchors)),
            )
        )
    schedule, found = decided_schedule(
        decisions, max_batch_size, "every cell at the anchor was rejected, or none scored above 0"
    )
    problems += found
    return TuningResult(
        sweep=sweep,
        settings=settings,
        cells=cells,
        decisions=decisions,
        excluded_runs=excluded,
        schedule=schedule,
        max_batch_size=max_batch_size,
        configured_global_k=configured_global,
        max_k_observed=_largest_k(runs),
        problems=tuple(problems),
    )


def _largest_k(runs: pl.DataFrame) -> int | None:
    """The largest K any run has (None when no run has one)."""
    k_values = runs["k"].drop_nulls()
    return int(k_values.max()) if len(k_values) else None  # type: ignore[arg-type]


def _untuned(sweep: Sweep, settings: Settings, problems: list[Problem]) -> TuningResult:
    """A result with the schemas of a tuning and no cell, anchor or schedule."""
    cells = pl.DataFrame(schema=CELL_SCHEMA).with_columns(  # type: ignore[arg-type]
        pl.lit(None, pl.Utf8).alias("reason"), pl.lit(None, pl.Utf8).alias("status")
    )
    cells = tie_rule(cells, 0.0, maximize=True)
    return TuningResult(
        sweep=sweep,
        settings=settings,
        cells=cells,
        decisions=decide(cells, maximize=True),
        excluded_runs=_concat_excluded([]),
        schedule=None,
        max_batch_size=None,
        configured_global_k=None,
        max_k_observed=_largest_k(sweep.runs),
        problems=tuple(problems),
    )


def _baseline_notes(runs: pl.DataFrame) -> list[Problem]:
    """Say what the K=0 baseline is: a plain server, or the schedule-enabled engine at K=0."""
    k0 = runs.filter(pl.col("k") == 0)
    plain = k0.filter(~pl.col("speculation").fill_null(True))
    notes = []
    if not plain.is_empty():
        notes.append(
            Problem(
                Severity.NOTE,
                "k0-without-speculation",
                f"{plain.height} K=0 run(s) are a server without speculative decoding (no"
                " speculative_config): counted as K=0. Such a baseline lacks the Dynamic SD"
                " engine's own overhead, so gains over it are slightly optimistic",
                files=_cell_files(plain.head(3)),
            )
        )
    return notes


def _reasons(mask: pl.Series, reason: str) -> pl.Series:
    return pl.select(pl.when(pl.lit(mask)).then(pl.lit(reason))).to_series()


def _concat_excluded(frames: list[pl.DataFrame]) -> pl.DataFrame:
    schema = {
        "source": pl.Utf8,
        "position": pl.Int64,
        "anchor": pl.Int64,
        "k": pl.Int64,
        "reason": pl.Utf8,
    }
    if not frames:
        return pl.DataFrame(schema=schema)
    combined = pl.concat([frame.lazy().cast(schema) for frame in frames])  # type: ignore[arg-type]
    return combined.unique(subset=list(_ROW_KEY), keep="first", maintain_order=True).collect()


def finite_or_none(value: float | None) -> float | None:
    """``value`` where it is a finite float, else None: how the result JSON writes a statistic
    that is not finite (JSON has no NaN or infinity)."""
    return value if value is not None and math.isfinite(value) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return show_value(value)
