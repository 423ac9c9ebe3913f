"""The gate stage of the seed's policy (vLLM PR #49163): which runs and cells may be ranked.

Data flow (each step a Polars frame with a documented schema):

1. runs (one row per run, :mod:`lib.sweeps`) -> :func:`health_gate`, :func:`objective_gate`,
   :func:`acceptance_value_gate`, :func:`global_k_gate`, :func:`server_gate` and
   :func:`unplaced_runs` mark runs that cannot be used, each with its reason.
2. kept runs -> :func:`lib.cells.cell_statistics`: one row per (anchor, K) with median, MAD,
   relative MAD, conservative score and acceptance statistics.
3. cells -> :func:`lib.cells.min_runs_gate`, :func:`~lib.cells.noise_gate` and
   :func:`~lib.cells.acceptance_gate` reject cells, :func:`~lib.cells.anchor_grid_gate`
   checks the grid.

:func:`gate` runs them all on a loaded sweep and returns a :class:`GatedSweep`, the input of
the decision (:func:`lib.schedule.seed_decision`). Nothing here stops at the first problem:
every cell keeps its verdict and every problem found is returned.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import polars as pl

from lib.cells import (
    CELL_SCHEMA,
    acceptance_gate,
    anchor_grid_gate,
    cell_statistics,
    min_runs_gate,
    noise_gate,
)
from lib.flags import flag_name
from lib.objectives import OBJECTIVES_BY_NAME, direction_problems
from lib.problems import Problem, Severity, show_value
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
    "PLAUSIBLE_OBJECTIVE",
    "GatedSweep",
    "acceptance_value_gate",
    "gate",
    "global_k_gate",
    "health_gate",
    "objective_gate",
    "server_gate",
    "unplaced_runs",
]

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


# --------------------------------------------------------------------------- the gate stage


@dataclass(frozen=True, eq=False)
class GatedSweep:
    """What the gates leave of a sweep: every measured cell with its verdict.

    ``cells``: :data:`lib.cells.CELL_SCHEMA` plus ``reason`` (why the cell was rejected, null
    when kept) and ``status`` ("kept" / "rejected"). ``excluded_runs``: source, position,
    anchor, k, reason for every run left out of the cells. ``problems``: the loader's, then
    the gates'. ``usable_settings`` is False when the settings cannot be used (no cell then).
    """

    sweep: Sweep
    settings: Settings
    cells: pl.DataFrame
    excluded_runs: pl.DataFrame
    configured_global_k: int | None
    problems: tuple[Problem, ...]
    usable_settings: bool = True


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


def gate(sweep: Sweep, settings: Settings) -> GatedSweep:
    """Every gate of the seed's policy on a loaded sweep: the run gates, then the cell gates.

    Settings that cannot be used (:meth:`Settings.invalid`) gate nothing: the result holds the
    loader's problems and one ``invalid-setting`` error per reason, and no cell, because what
    the gates would say under such settings (an objective that is a file name, a tolerance
    past 100 %) is not true of the sweep."""
    problems: list[Problem] = list(sweep.problems)
    invalid = settings.invalid()
    if invalid:
        problems += [Problem(Severity.ERROR, "invalid-setting", reason) for reason in invalid]
        cells = pl.DataFrame(schema=CELL_SCHEMA).with_columns(  # type: ignore[arg-type]
            pl.lit(None, pl.Utf8).alias("reason"), pl.lit(None, pl.Utf8).alias("status")
        )
        return GatedSweep(
            sweep, settings, cells, _concat_excluded([]), None, tuple(problems), False
        )
    problems += direction_problems(settings)
    gated = _run_gates(sweep, _run_gate_settings(settings))
    problems += gated.problems

    cells = cell_statistics(gated.usable, settings)
    reasons = []
    for rejected, found in (
        min_runs_gate(cells, settings.min_runs),
        noise_gate(cells, settings),
        acceptance_gate(cells, settings),
    ):
        reasons.append(rejected)
        problems += found
    reason = pl.concat_str(*[pl.lit(r) for r in reasons], separator="; ", ignore_nulls=True)
    cells = cells.with_columns(
        pl.when(reason.str.len_chars() > 0).then(reason).alias("reason"),
    ).with_columns(
        pl.when(pl.col("reason").is_null())
        .then(pl.lit("kept"))
        .otherwise(pl.lit("rejected"))
        .alias("status")
    )
    problems += anchor_grid_gate(cells, settings)
    return GatedSweep(
        sweep, settings, cells, gated.excluded, gated.configured_global, tuple(problems)
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


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return show_value(value)
