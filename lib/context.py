"""The context-length axis: a sweep that varied the prompt length, tuned per context point.

A batch-only schedule is a short-context observation: with long prompts the verify step is
dominated by attention over the context and speculation can pay again at high batch
(``docs/context.md``). This module finds the context points of a sweep
(:func:`find_context_axis`) and runs the whole analysis of :mod:`lib.analysis` once per point
(:func:`analyse_contexts`), so every (batch anchor, context point) cell gets the seed's rules
and the confidence model, and every problem is listed with the context it belongs to.

Schema of :attr:`ContextAxis.runs` (one row per run of the sweep, in its order): the sweep's
:attr:`~lib.sweeps.Sweep.runs` plus

=================== ======== ==========================================================
column              dtype    meaning
=================== ======== ==========================================================
prompt_tokens       Float64  the run's prompt length (the field's value, or the measured
                             mean prompt); null when the record has none
context_point       Int64    index into :attr:`ContextAxis.points`; null when unplaced
=================== ======== ==========================================================
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lib.analysis import Analysis, analyse
from lib.confidence import ServerNoise, combined_servers
from lib.context_grid import (
    ContextGrid,
    GridCell,
    assemble_grid,
    not_deployable_refusal,
    unexportable_grid_problems,
)
from lib.context_grid import ContextPoint as GridPoint
from lib.objectives import direction_problems
from lib.problems import Problem, Severity, show_value
from lib.schedule import candidate_json, finite_or_none
from lib.settings import (
    CONTEXT_AUTO,
    CONTEXT_NONE,
    DECLARED_OUTPUT,
    MEASURED_OUTPUT,
    MEASURED_PROMPT,
    PROMPT_LENGTH_FIELDS,
    PROMPT_TOKENS_RANGE,
    REPEAT_SEED,
    ContextSettings,
    Options,
    Settings,
    context_var_reason,
    prompt_length_expected,
    prompt_length_reason,
)
from lib.sweeps import Sweep

__all__ = [
    "ContextAnalysis",
    "ContextAxis",
    "ContextPoint",
    "analyse_contexts",
    "context_points",
    "find_context_axis",
    "output_length_problem",
    "sole_context_point",
]


@dataclass(frozen=True)
class ContextPoint:
    """One context point of the sweep: its prompt length, the mean output length when known,
    and the decode-time context the engine's buckets see, about ``prompt + output / 2`` (a
    request's context grows from its prompt to prompt + output while it decodes)."""

    prompt_tokens: int
    output_tokens: int | None
    num_runs: int

    @property
    def context_tokens(self) -> int:
        """Decode-time context: prompt + output / 2, rounded down; the prompt alone when the
        output length is unknown.

        >>> ContextPoint(512, 128, 3).context_tokens, ContextPoint(512, None, 3).context_tokens
        (576, 512)
        """
        return self.prompt_tokens + (self.output_tokens or 0) // 2

    def label(self) -> str:
        """How the point is named in text: ``512 tokens``."""
        return f"{self.prompt_tokens} tokens"

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "context_tokens": self.context_tokens,
            "num_runs": self.num_runs,
        }


@dataclass(frozen=True, eq=False)
class ContextAxis:
    """The context points of a sweep (at least two), the runs placed on them, and what was
    found on the way. ``field`` names where the prompt length came from."""

    field: str
    tolerance: float
    points: tuple[ContextPoint, ...]
    runs: pl.DataFrame
    problems: tuple[Problem, ...]

    def sweep_at(self, sweep: Sweep, index: int) -> Sweep:
        """``sweep`` restricted to the runs of one context point. The loader's problems stay
        with the whole sweep (reported once, not once per point).

        The same object for the same axis, sweep and point: the analysis's caches, which
        compare sweeps by identity, then serve an app's slider moved on a context sweep as
        they serve one on a batch-only sweep."""
        return _sweep_at(self, sweep, index)


@functools.lru_cache(maxsize=32)
def _sweep_at(axis: ContextAxis, sweep: Sweep, index: int) -> Sweep:
    runs = axis.runs.filter(pl.col("context_point") == index).drop("prompt_tokens", "context_point")
    return dataclasses.replace(sweep, runs=runs, problems=())


def context_points(values: Sequence[float], tolerance: float) -> list[list[float]]:
    """Group prompt lengths into context points: sorted, a new point starts where a length
    exceeds the current point's *smallest* length by more than ``tolerance`` (relative), so no
    point spans more than the tolerance, whatever the number of points. A chain of lengths each
    close to the next (512, 560, 613, ...: 9 % steps at a 10 % tolerance) splits wherever it
    outgrows its first length, instead of pooling prompts many times apart into one point.
    The lengths must be finite (:func:`lib.settings.prompt_length_reason`).

    >>> context_points([512, 4096, 515, 4000, 32768], 0.1)
    [[512, 515], [4000, 4096], [32768]]
    >>> context_points([100, 105, 110, 116], 0.05)
    [[100, 105], [110], [116]]
    >>> context_points([100, 110, 110.0001], 0.1)
    [[100, 110], [110.0001]]
    >>> context_points([], 0.1)
    []
    """
    groups: list[list[float]] = []
    for value in sorted(values):
        if groups and value <= groups[-1][0] * (1 + tolerance):
            groups[-1].append(value)
        else:
            groups.append([value])
    return groups


def _prompt_expression(sweep: Sweep, context_var: str) -> tuple[str, pl.Expr] | None:
    """Where the prompt length comes from, as a label and an expression over the runs."""
    columns = set(sweep.runs.columns)

    def present(name: str) -> bool:
        # A field some record holds as text is present too: its text is refused by name
        # (:func:`_text_prompt_problems`), never read as "no such field".
        held = name in columns and sweep.runs[name].is_not_null().any()
        return held or bool(sweep.non_numeric.get(name))

    def column(name: str) -> pl.Expr:
        return pl.col(name) if name in columns else pl.lit(None, dtype=pl.Float64)

    if context_var != CONTEXT_AUTO:
        return (context_var, column(context_var)) if present(context_var) else None
    for required, added in PROMPT_LENGTH_FIELDS:
        if all(present(name) for name in required):
            used = [*required, *(name for name in added if present(name))]
            total = pl.sum_horizontal(column(name) for name in required)
            for name in used[len(required) :]:
                total = total + column(name).fill_null(0)
            label = "+".join(used)
            # Null when a required field is missing: sum_horizontal would read it as 0.
            missing = pl.any_horizontal(column(name).is_null() for name in required)
            return label, pl.when(~missing).then(total)
    tokens, completed = MEASURED_PROMPT
    if present(tokens) and present(completed):
        measured = pl.when(pl.col(completed) > 0).then(pl.col(tokens) / pl.col(completed))
        return f"{tokens}/{completed}", measured
    return None


def _output_tokens(runs: pl.DataFrame) -> pl.Series | None:
    """The mean output length of each run: measured, else the swept output length."""
    tokens, completed = MEASURED_OUTPUT
    candidates: list[pl.Expr] = []
    if tokens in runs.columns and completed in runs.columns:
        candidates.append(pl.when(pl.col(completed) > 0).then(pl.col(tokens) / pl.col(completed)))
    candidates += [pl.col(name) for name in DECLARED_OUTPUT if name in runs.columns]
    if not candidates:
        return None
    return runs.select(pl.coalesce(candidates))[:, 0]


def output_length_problem(median: float, prompt_tokens: int, runs: pl.DataFrame) -> Problem | None:
    """An ``invalid-output-length`` error when a context point's median output length (its
    runs' ``total_output_tokens / completed``, else the swept output length) is no length:
    not finite, negative, or above :data:`~lib.settings.PROMPT_TOKENS_RANGE`'s top, where a
    decode-time context (prompt + output / 2) and a ``--max-model-len`` (prompt + output)
    would pass the engines' 2^31 - 1 and the written result would be refused by its own
    ``export``. None for any output from 0 to 2^30 tokens (0: nothing decoded).

    >>> empty = pl.DataFrame({"source": []}, schema={"source": pl.Utf8})
    >>> output_length_problem(128.0, 512, empty) is None, output_length_problem(0.0, 512, empty)
    (True, None)
    >>> output_length_problem(3e9, 512, empty).rule
    'invalid-output-length'
    """
    highest = PROMPT_TOKENS_RANGE[1]
    if math.isfinite(median) and 0 <= median <= highest:
        return None
    return Problem(
        Severity.ERROR,
        "invalid-output-length",
        f"at {prompt_tokens} prompt tokens the runs' median output length is no length: the"
        " decode-time context cannot be named",
        files=tuple(runs["source"].unique(maintain_order=True).to_list()[:3]),
        field=" / ".join(MEASURED_OUTPUT),
        value=show_value(median),
        expected=f"an output length from 0 to {highest} tokens",
    )


def find_context_axis(
    sweep: Sweep, settings: ContextSettings, objective: str | None = None
) -> tuple[ContextAxis | None, list[Problem]]:
    """The sweep's context axis, or None when it has none (and what was noticed).

    Rules:

    - ``--context-var none``: no axis (the seed's behaviour).
    - ``--context-var`` naming a column the loader derives, or the ``objective``: no axis and
      an ``invalid-setting`` error (:func:`lib.settings.context_var_reason`; the CLI refuses
      the flag before reading, the app's control comes here).
    - The prompt length of a run is ``--context-var``'s field; with ``auto`` the first of
      :data:`~lib.settings.PROMPT_LENGTH_FIELDS` some record holds, else the measured mean prompt
      ``total_input_tokens / completed``. A field named explicitly that no record holds is an
      error.
    - A run without a prompt length (a failed run has no measurements) takes the context of
      the other runs in its folder (one bench combo, one prompt length); a run whose folder
      holds none is a warning and stays out of the grid.
    - Lengths within ``tolerance`` of each other are one context point
      (:func:`context_points`); fewer than two points is no axis.
    - Prompt lengths that vary only between anchors or K (every (anchor, K) measured at a
      single length: a dataset sampled differently per concurrency) are no axis either: a note
      says so, since no cell can be compared across lengths.
    - Nor are lengths that vary only between the repeats' seeds (the records' ``seed``: each
      seed samples its own prompts, so a measured mean prompt differs from seed to seed):
      where every (anchor, K) has one length per seed, its runs are repeats of one workload,
      and a note says so. Runs without a seed count as one seed.
    - No cell mixes contexts: a point spans at most the tolerance (:func:`context_points`
      bounds it from its smallest length), so no check of a cell's own spread is needed.
    """
    found = _prompted_runs(sweep, settings, objective)
    if not isinstance(found, _PromptedRuns):
        return None, found
    label, runs, refused = found.label, found.runs, found.refused
    placed_values = runs["prompt_tokens"].drop_nulls().to_list()
    groups = context_points(placed_values, settings.context_tolerance)
    if len(groups) < 2:
        # Refused lengths are errors even where no axis is left: never a silent "no axis".
        return None, refused
    runs = runs.with_columns(_point_of_each(runs["prompt_tokens"], groups))
    problems: list[Problem] = list(refused)
    placed = runs.filter(
        pl.col("anchor").is_not_null()
        & pl.col("k").is_not_null()
        & pl.col("context_point").is_not_null()
    )
    lengths = ", ".join(_tokens(statistics.median(group)) for group in groups)
    if _one_point_each(placed, ()):
        return None, [
            *refused,
            Problem(
                Severity.NOTE,
                "no-context-axis",
                "prompt lengths differ between cells but no (batch size, K) was measured at"
                " more than one, so they are not a context axis; tuned as one context",
                field=label,
                value=lengths,
                expected="the same (batch size, K) measured at several prompt lengths",
            ),
        ]
    if REPEAT_SEED in placed.columns and _one_point_each(placed, (REPEAT_SEED,)):
        return None, [
            *refused,
            Problem(
                Severity.NOTE,
                "no-context-axis",
                f"prompt lengths differ only between the repeats' seeds ({REPEAT_SEED}: each"
                " samples its own prompts), so they are not a context axis; tuned as one"
                " context",
                field=label,
                value=lengths,
                expected="the same (batch size, K) measured at several prompt lengths with one"
                " seed",
            ),
        ]
    # A refused run is named by its own error, not again as one without a length.
    unplaced = runs.filter(pl.col("context_point").is_null() & ~pl.col("_refused"))
    runs = runs.drop("_refused")
    if unplaced.height:
        problems.append(
            Problem(
                Severity.WARNING,
                "no-prompt-length",
                "runs without a prompt length (none in the record or its folder) are left out"
                " of the context grid",
                files=tuple(unplaced["source"].unique(maintain_order=True).to_list()),
                field=label,
                value="null",
                expected="a prompt length",
            )
        )
    output = _output_tokens(runs)
    points = []
    for index, group in enumerate(groups):
        members = runs["context_point"] == index
        point, bad_output = _context_point(group, runs.filter(members), output, members)
        points.append(point)
        problems += [bad_output] if bad_output is not None else []
    axis = ContextAxis(label, settings.context_tolerance, tuple(points), runs, tuple(problems))
    return axis, list(problems)


def sole_context_point(
    sweep: Sweep, settings: ContextSettings, needed_for: str
) -> tuple[ContextPoint | None, str | None, list[Problem]]:
    """The one context point of a sweep that did not vary the prompt length (where
    :func:`find_context_axis` finds no axis), and the field its length came from: every run's
    prompt length read by the axis's own rules (``--context-var``'s field; with ``auto`` the
    swept prompt-length key, else the measured mean prompt ``total_input_tokens /
    completed``), the point named by their median, with the runs' median output length.

    None and an error (its message ends with ``needed_for``: why the length is wanted) where
    there is no one length: ``--context-var none``, no record with a prompt length, a refused
    length (its own error), or lengths more than the tolerance apart that are still no axis
    (each (batch size, K) measured at one of them, or each seed at its own)."""
    found = _prompted_runs(sweep, settings, None)
    if isinstance(found, list) and found:
        return None, None, found
    if not isinstance(found, _PromptedRuns) or found.runs["prompt_tokens"].is_null().all():
        reason = (
            "--context-var none ignores the prompt length"
            if settings.context_var == CONTEXT_NONE
            else "no record holds a prompt length"
        )
        return (
            None,
            None,
            [
                Problem(
                    Severity.ERROR,
                    "no-prompt-length",
                    f"{reason}: {needed_for}",
                    field="--context-var",
                    value=repr(settings.context_var),
                    expected="records with random_input_len, or total_input_tokens and completed;"
                    " or --context-var FIELD",
                )
            ],
        )
    if found.refused:
        return None, None, found.refused
    prompts = found.runs["prompt_tokens"]
    groups = context_points(prompts.drop_nulls().to_list(), settings.context_tolerance)
    if len(groups) > 1:
        lengths = ", ".join(_tokens(statistics.median(group)) for group in groups)
        return (
            None,
            None,
            [
                Problem(
                    Severity.ERROR,
                    "several-prompt-lengths",
                    "the runs' prompt lengths differ by more than the context tolerance but are no"
                    f" context axis (no (batch size, K) measured at several of them): {needed_for}",
                    field=found.label,
                    value=lengths,
                    expected="one prompt length, or the same (batch size, K) measured at several",
                )
            ],
        )
    chosen = prompts.is_not_null()
    point, bad_output = _context_point(
        groups[0], found.runs.filter(chosen), _output_tokens(found.runs), chosen
    )
    return point, found.label, [bad_output] if bad_output is not None else []


@dataclass(frozen=True, eq=False)
class _PromptedRuns:
    """The sweep's runs with their prompt length (``prompt_tokens``, null where a run has none
    or was refused; ``_refused`` marks the refused), where it came from, and the errors of
    the refused lengths."""

    label: str
    runs: pl.DataFrame
    refused: list[Problem]


def _prompted_runs(
    sweep: Sweep, settings: ContextSettings, objective: str | None
) -> _PromptedRuns | list[Problem]:
    """Every run's prompt length by the rules of :func:`find_context_axis` (the field, text
    and out-of-range lengths refused, a failed run taking its folder's), or why there is none
    (empty: ``none``, or ``auto`` finding no field)."""
    if settings.context_var == CONTEXT_NONE:
        return []
    named_wrong = context_var_reason(settings.context_var, objective)
    if named_wrong is not None:
        return [Problem(Severity.ERROR, "invalid-setting", named_wrong)]
    source = _prompt_expression(sweep, settings.context_var)
    if source is None:
        if settings.context_var == CONTEXT_AUTO:
            return []
        return [
            Problem(
                Severity.ERROR,
                "context-field-missing",
                "no record holds the prompt-length field named by --context-var",
                field="--context-var",
                value=repr(settings.context_var),
                expected="a numeric record field, e.g. random_input_len; or auto / none",
            )
        ]
    label, prompt = source
    runs = sweep.runs.with_columns(prompt.cast(pl.Float64).alias("prompt_tokens"))
    text_rows = _text_prompt_rows(sweep, label)
    out_of_range = _out_of_range(runs)
    refused = _text_prompt_problems(sweep, label, text_rows) + _out_of_range_problems(
        runs.filter(out_of_range), label
    )
    # A refused run is out of the grid (and its folder's other runs do not fill it in).
    in_text = runs.with_row_index("_row")["_row"].is_in(sorted(text_rows))
    runs = runs.with_columns((out_of_range | in_text).alias("_refused")).with_columns(
        pl.when(~pl.col("_refused")).then(pl.col("prompt_tokens")).alias("prompt_tokens")
    )
    # A failed run has no measurement: its folder (one bench combo) says its prompt length.
    by_folder = (
        runs.filter(pl.col("prompt_tokens").is_not_null())
        .group_by("combo")
        .agg(pl.col("prompt_tokens").median().alias("_folder_prompt"))
    )
    runs = (
        runs.join(by_folder, on="combo", how="left", maintain_order="left")
        .with_columns(
            pl.when(~pl.col("_refused"))
            .then(pl.col("prompt_tokens").fill_null(pl.col("_folder_prompt")))
            .alias("prompt_tokens")
        )
        .drop("_folder_prompt")
    )
    return _PromptedRuns(label, runs, refused)


def _context_point(
    group: Sequence[float], members: pl.DataFrame, output: pl.Series | None, chosen: pl.Series
) -> tuple[ContextPoint, Problem | None]:
    """The point of one group of prompt lengths (:func:`context_points`): named by their
    median, with the median output length of its runs (``members``: ``output`` where
    ``chosen``), none where unknown or no length (:func:`output_length_problem`)."""
    prompt = statistics.median(group)
    outputs = output.filter(chosen).drop_nulls() if output is not None else None
    if outputs is None or not outputs.len():
        return ContextPoint(round(prompt), None, members.height), None
    median = float(outputs.median())  # type: ignore[arg-type]
    bad_output = output_length_problem(median, round(prompt), members)
    output_tokens = round(median) if bad_output is None else None
    return ContextPoint(round(prompt), output_tokens, members.height), bad_output


def _one_point_each(placed: pl.DataFrame, within: tuple[str, ...]) -> bool:
    """Whether every (anchor, K) was measured at one context point only, for each value of
    ``within`` (the fields that also split the runs); False when there are no runs."""
    counts = placed.group_by("anchor", "k", *within).agg(pl.col("context_point").n_unique())
    return bool(placed.height) and counts["context_point"].max() == 1


def _tokens(value: float) -> str:
    """A prompt length as text: ``512``, ``511.5``, ``3e+09``, ``nan``, ``inf``, ``-512``."""
    return f"{value:g}" if abs(value) < 1e6 or not math.isfinite(value) else f"{value:.3g}"


def _text_prompt_rows(sweep: Sweep, label: str) -> dict[int, tuple[str, str]]:
    """The runs (row -> (field, the text as shown)) whose prompt-length field holds text. The
    measured mean prompt is read from numeric fields only (their text is the loader's to
    report)."""
    fields = () if label == "/".join(MEASURED_PROMPT) else tuple(label.split("+"))
    rows: dict[int, tuple[str, str]] = {}
    for name in fields:
        for row, shown in sweep.non_numeric.get(name, {}).items():
            rows.setdefault(row, (name, shown))
    return rows


def _text_prompt_problems(
    sweep: Sweep, label: str, rows: dict[int, tuple[str, str]]
) -> list[Problem]:
    """One error per prompt-length field some record holds as text (``"512"``, a JSON
    string): not a number, as a batch size or K written as text is not one. The runs holding
    it are named and stay out of the grid."""
    sources = sweep.runs["source"]
    by_field: dict[str, list[int]] = {}
    for row in sorted(rows):
        by_field.setdefault(rows[row][0], []).append(row)
    return [
        Problem(
            Severity.ERROR,
            "non-numeric-prompt-length",
            "the prompt-length field holds text, not a number: the run is left out of the"
            " context grid (write the length as a JSON number)",
            files=tuple(dict.fromkeys(sources[row] for row in field_rows)),
            field=name,
            value=", ".join(dict.fromkeys(rows[row][1] for row in field_rows)),
            expected=prompt_length_expected() + ", as a JSON number",
        )
        for name, field_rows in by_field.items()
    ]


def _point_of_each(prompts: pl.Series, groups: list[list[float]]) -> pl.Series:
    """``context_point``: the index of the group (:func:`context_points`: sorted, disjoint,
    each from its smallest length to its largest) holding each run's prompt length, null for
    a run without one. Every length given is in a group (the groups were made of them): the
    last group starting at or below it. One search for all runs, not a Python call each.

    >>> groups = [[512.0, 520.0], [2048.0]]
    >>> _point_of_each(pl.Series([512.0, None, 2048.0, 520.0]), groups).to_list()
    [0, None, 1, 0]
    """
    starts = pl.Series([group[0] for group in groups], dtype=pl.Float64)
    found = starts.search_sorted(prompts.fill_null(0.0), side="right").cast(pl.Int64) - 1
    return pl.select(pl.when(prompts.is_not_null()).then(found)).to_series().alias("context_point")


def _out_of_range(runs: pl.DataFrame) -> pl.Series:
    """Whether each run's prompt length is one no command takes
    (:func:`lib.settings.prompt_length_reason`); a missing one is not (nothing to refuse).
    Each length is handed to Python once, here: the problems are written from the refused
    runs alone."""
    return pl.Series(
        [
            value is not None and prompt_length_reason(value) is not None
            for value in runs["prompt_tokens"].to_list()
        ],
        dtype=pl.Boolean,
    )


def _out_of_range_problems(refused: pl.DataFrame, label: str) -> list[Problem]:
    """One error per distinct prompt length of the ``refused`` runs (those
    :func:`_out_of_range` marks: 0, negatives, NaN, infinities, more than 2^30 tokens), naming
    the runs holding it; those runs stay out of the grid."""
    problems = []
    by_value: dict[float, list[str]] = {}
    for value, file in refused.select("prompt_tokens", "source").rows():
        # NaN is no dict key that finds itself: all NaNs are one value.
        by_value.setdefault(math.nan if math.isnan(value) else value, []).append(file)
    for value, files in sorted(by_value.items(), key=lambda item: _sort_key(item[0])):
        reason = prompt_length_reason(value)
        problems.append(
            Problem(
                Severity.ERROR,
                "invalid-prompt-length",
                f"the prompt length is {reason}: the run is left out of the context grid",
                files=tuple(dict.fromkeys(files)),
                field=label,
                value=_tokens(value),
                expected=prompt_length_expected(),
            )
        )
    return problems


def _sort_key(value: float) -> tuple[bool, float]:
    """Numbers in order, NaN last."""
    return (math.isnan(value), 0.0 if math.isnan(value) else value)


# --------------------------------------------------------------------------- the grid

#: Rules whose problems concern the deployable schedule, not the cell's decision: a sweep
#: measured at fixed batch sizes above 1 still gives a grid (the published evidence is such),
#: and one warning replaces them (the schedule of such picks starts above 1: invalid).
_SCHEDULE_RULES = ("anchors-not-from-1", "invalid-schedule")


@dataclass(frozen=True, eq=False)
class ContextAnalysis:
    """The analysis per context point, the seed's pooled answer, and every problem.

    ``contexts[i]`` is the whole :class:`~lib.analysis.Analysis` of ``axis.points[i]``.
    ``pooled`` is the seed's analysis of the sweep as one context (cells mixing lengths);
    ``answer`` is the batch-only analysis the result's seed keys come from: ``pooled`` when the
    seed's rules accept it, else the shortest context point's (the seed's world), else None.
    """

    axis: ContextAxis
    pooled: Analysis
    contexts: tuple[Analysis, ...]
    answer: Analysis | None
    problems: tuple[Problem, ...]
    confidence: float

    @property
    def servers(self) -> ServerNoise | None:
        """What the grid's P(eps-good) rest on about server starts, over every point (None
        where no point has a confidence report)."""
        reports = [c.report for c in self.contexts if c.report is not None]
        if not reports:
            return None
        return combined_servers([r.servers for r in reports], reports[0].settings.server_cv)

    @property
    def deployable(self) -> bool:
        """Whether a schedule can be built: every context's anchors start at 1."""
        return self.not_deployable_reason is None

    @property
    def not_deployable_reason(self) -> str | None:
        return _not_deployable_reason(self.contexts)

    @property
    def ok(self) -> bool:
        """No error anywhere in the grid (the exit status of the CLI)."""
        return not any(problem.severity is Severity.ERROR for problem in self.problems)

    def grid(self) -> list[dict[str, Any]]:
        """One object per (batch anchor, context point), by batch size then prompt length: the
        pick, its status and P(eps-good), and every K measured there. Built once (shared: read
        it, do not change it)."""
        return self._grid

    @functools.cached_property
    def _grid(self) -> list[dict[str, Any]]:
        rows = []
        for point, analysis in zip(self.axis.points, self.contexts, strict=True):
            rows += _grid_rows(point, analysis, self.confidence)
        return sorted(rows, key=lambda row: (row["batch_size"], row["prompt_tokens"]))

    @functools.cached_property
    def typed_grid(self) -> tuple[ContextGrid | None, list[Problem]]:
        """The grid the context formats export, built from the analyses themselves (no
        JSON): the same grid :func:`lib.context_grid.context_grid_of` reads back from the
        result file (tested); None and the problems of a grid that cannot be exported (by the
        rules the file's reader applies, :func:`lib.context_grid.unexportable_grid_problems`)."""
        cells: dict[tuple[int, int], GridCell] = {}
        points = tuple(
            GridPoint(point.prompt_tokens, point.context_tokens, point.output_tokens)
            for point in self.axis.points
        )
        for point, analysis in zip(points, self.contexts, strict=True):
            cells.update(_grid_cells(point, analysis, self.confidence))
        anchors = tuple(sorted({batch for batch, _ in cells}))
        problems = unexportable_grid_problems(cells, anchors, points, "the result")
        if problems:
            return None, problems + not_deployable_refusal(
                not self.deployable, self.not_deployable_reason, "the result"
            )
        source = (self.answer or self.pooled).result
        settings = source.settings
        return (
            assemble_grid(
                cells,
                points,
                objective=settings.objective,
                direction=settings.direction,
                configured_global_k=source.configured_global_k,
                observed_k=source.max_k_observed,
                max_batch_size=source.max_batch_size,
                tolerance=float(self.axis.tolerance),
                axis_field=self.axis.field,
                deployable=self.deployable,
                not_deployable_reason=self.not_deployable_reason,
                relative_tolerance=float(settings.relative_tolerance),
            ),
            [],
        )

    def context_points_to_measure(self) -> list[dict[str, Any]]:
        """Where measuring another prompt length would tell most: between two neighbouring
        context points where some batch size picks a different K, at their geometric mean
        (context effects are multiplicative: attention cost grows with the length). Each
        proposal names the batch sizes that disagree and their two picks; cells without a K
        disagree with nothing.

        >>> ContextAnalysis.between(512, 8192)
        2048
        """
        picks = {(c["batch_size"], c["prompt_tokens"]): c["selected_k"] for c in self.grid()}
        batches = sorted({batch for batch, _ in picks})
        proposals = []
        for lower, upper in itertools.pairwise(self.axis.points):
            disagreeing = []
            for batch in batches:
                below = picks.get((batch, lower.prompt_tokens))
                above = picks.get((batch, upper.prompt_tokens))
                if below is not None and above is not None and below != above:
                    disagreeing.append({"batch_size": batch, "k_below": below, "k_above": above})
            if disagreeing:
                proposals.append(
                    {
                        "prompt_tokens": self.between(lower.prompt_tokens, upper.prompt_tokens),
                        "between": [lower.prompt_tokens, upper.prompt_tokens],
                        "batch_sizes": disagreeing,
                    }
                )
        return proposals

    def measurement_plan(self) -> dict[str, Any]:
        """The context measurement plan (``tune-spec-k DIR --plan-json PATH`` on a context
        sweep): each context point's own measurement plan (:mod:`lib.measurement_plan`), its
        rows with the point's ``prompt_tokens`` first, and the prompt lengths to measure next
        (:meth:`context_points_to_measure`). ``total_more_runs`` counts the reruns and new
        anchors only: a new prompt length is a new sweep (``plan --context-lengths``)."""
        reruns: list[dict[str, Any]] = []
        new_anchors: list[dict[str, Any]] = []
        for point, analysis in zip(self.axis.points, self.contexts, strict=True):
            if analysis.plan is None:
                continue
            plan = analysis.plan.to_json()
            reruns += [{"prompt_tokens": point.prompt_tokens, **row} for row in plan["reruns"]]
            new_anchors += [
                {"prompt_tokens": point.prompt_tokens, **row} for row in plan["new_anchors"]
            ]
        return {
            "context_field": self.axis.field,
            "confidence": self.confidence,
            "total_more_runs": sum(row["more_runs"] for row in reruns)
            + sum(len(row["ks"]) * row["runs_per_k"] for row in new_anchors),
            "reruns": reruns,
            "new_anchors": new_anchors,
            "context_points_to_measure": self.context_points_to_measure(),
        }

    def measurement_plan_text(self) -> str:
        """The context measurement plan file's exact text (same input, same bytes)."""
        return json.dumps(self.measurement_plan(), indent=2, allow_nan=False) + "\n"

    @staticmethod
    def between(lower: int, upper: int) -> int:
        """The geometric mean of two prompt lengths, rounded to the nearest token."""
        return round(math.sqrt(lower * upper))


def _not_deployable_reason(contexts: Sequence[Analysis]) -> str | None:
    """Why no schedule can be built from the grid (None when one can): vLLM's schedule must
    cover batch size 1, so the smallest anchor measured at any context must be 1."""
    anchors = sorted({anchor for context in contexts for anchor in _anchors(context)})
    if anchors and anchors[0] != 1:
        return (
            f"the batch-size anchors start at {anchors[0]}, not 1: vLLM's schedule must"
            " cover batch size 1, so the grid cannot be deployed as measured"
        )
    return None


def _anchors(analysis: Analysis) -> list[int]:
    return [int(anchor) for anchor in analysis.result.decisions["anchor"].to_list()]


def _statuses(
    analysis: Analysis, confidence: float
) -> list[tuple[int, int | None, float | None, str, float | None]]:
    """Per anchor of one context point: (anchor, selected K, its P(eps-good), status, selected
    median). A cell is undecided without a K; unresolved when its P(eps-good) is missing or
    below ``confidence`` or an error (other than the schedule's own) names it; else resolved."""
    result = analysis.result
    failing = {
        problem.anchor
        for problem in result.problems
        if problem.severity is Severity.ERROR and problem.rule not in _SCHEDULE_RULES
    }
    p_of: dict[tuple[int, int], float | None] = {}
    if analysis.report is not None:
        cells = analysis.report.cells.select("anchor", "k", "p_eps_good").rows()
        p_of = {(anchor, k): p for anchor, k, p in cells}
    rows = []
    for decision in result.decisions.to_dicts():
        anchor, k = decision["anchor"], decision["selected_k"]
        p = None if k is None else p_of.get((anchor, k))
        if k is None:
            status = "undecided"
        elif anchor in failing or None in failing or p is None or p < confidence:
            status = "unresolved"
        else:
            status = "resolved"
        rows.append((anchor, k, p, status, finite_or_none(decision["selected_median"])))
    return rows


def _grid_rows(point: ContextPoint, analysis: Analysis, confidence: float) -> list[dict[str, Any]]:
    result = analysis.result
    candidates: dict[int, list[dict[str, Any]]] = {}
    for cell in result.cells.sort("anchor", "k").to_dicts():
        candidates.setdefault(cell["anchor"], []).append(
            {**candidate_json(cell), "verdict": cell["status"], "reason": cell["reason"]}
        )
    blocks = analysis.report.blocks() if analysis.report is not None else {}
    return [
        {
            "batch_size": anchor,
            "prompt_tokens": point.prompt_tokens,
            "context_tokens": point.context_tokens,
            "selected_k": k,
            "selected_median_objective": median,
            "status": status,
            "p_eps_good": p,
            # What a follow-up reruns here (plan --follow-up), as batch_decisions' confidence.
            "contenders": blocks.get(anchor, {}).get("contenders", []),
            "runs_needed": blocks.get(anchor, {}).get("runs_needed", {}),
            "candidates": candidates.get(anchor, []),
        }
        for anchor, k, p, status, median in _statuses(analysis, confidence)
    ]


def _grid_cells(
    point: GridPoint, analysis: Analysis, confidence: float
) -> dict[tuple[int, int], GridCell]:
    """One context point's cells of the typed grid, from the analysis itself: each kept
    candidate's finite median and conservative score, the selected K (-1: undecided), its
    status and P(eps-good), as :func:`_grid_rows` writes them."""
    medians: dict[int, dict[int, float]] = {}
    scores: dict[int, dict[int, float]] = {}
    kept = analysis.result.cells.filter(pl.col("status") == "kept")
    for anchor, k, median, score in kept.select("anchor", "k", "median", "conservative").rows():
        if finite_or_none(median) is not None:
            medians.setdefault(anchor, {})[k] = median
            if finite_or_none(score) is not None:
                scores.setdefault(anchor, {})[k] = score
    return {
        (anchor, point.prompt_tokens): GridCell(
            anchor,
            point,
            -1 if k is None or status == "undecided" else k,
            status,
            tuple(sorted(medians.get(anchor, {}).items())),
            tuple(sorted(scores.get(anchor, {}).items())),
            p_eps_good=p,
        )
        for anchor, k, p, status, _ in _statuses(analysis, confidence)
    }


def _in_context(problem: Problem, point: ContextPoint) -> Problem:
    """A problem of one context point's analysis, saying which point."""
    return dataclasses.replace(
        problem,
        message=f"at {point.label()}: {problem.message}",
        extra={**problem.extra, "prompt_tokens": point.prompt_tokens},
    )


def analyse_contexts(
    sweep: Sweep,
    axis: ContextAxis,
    settings: Settings,
    options: Options | None = None,
) -> ContextAnalysis:
    """The whole analysis once per context point, and the seed's pooled answer.

    Problems, in order: the loader's (once), the axis's, the catalogue's about the
    direction (once, :func:`lib.objectives.direction_problems`), each context point's own (its
    message saying which point), then what concerns the grid as a whole: a warning that the
    seed's answer pools prompt lengths (or could not be given), and a warning when the
    anchors do not start at 1 (the grid stands; no schedule can be deployed from it). The
    per-point ``anchors-not-from-1`` errors are replaced by that one warning.
    """
    options = options or Options()
    pooled = analyse(sweep, settings, options)
    contexts = tuple(
        analyse(axis.sweep_at(sweep, index), settings, options) for index in range(len(axis.points))
    )
    # What the catalogue says of the settings holds for the whole grid: said once.
    settings_problems = direction_problems(settings)
    problems: list[Problem] = [*sweep.problems, *axis.problems, *settings_problems]
    said = {problem.rule for problem in settings_problems}
    reason = _not_deployable_reason(contexts)
    for point, context in zip(axis.points, contexts, strict=True):
        problems += [
            _in_context(problem, point)
            for problem in context.result.problems
            if (reason is None or problem.rule not in _SCHEDULE_RULES) and problem.rule not in said
        ]
    lengths = ", ".join(str(point.prompt_tokens) for point in axis.points)
    answer: Analysis | None = None
    if pooled.result.ok:
        answer = pooled
        problems.append(
            Problem(
                Severity.WARNING,
                "pooled-contexts",
                f"the batch-only schedule (the seed's answer) pools {len(axis.points)} prompt"
                f" lengths ({lengths} tokens) into one cell per (batch size, K); the context"
                " grid tunes each length: export it with tune-spec-k export --format"
                " vllm-context (a schedule per context or for a --context-mix),"
                " vllm-rfc-48944 or vllm-pr-54801",
                field=axis.field,
                value=lengths,
            )
        )
    else:
        shortest = contexts[0]
        rules = sorted({problem.rule for problem in pooled.result.errors})
        if shortest.result.ok:
            answer = shortest
        given = (
            f"the batch-only schedule given is the shortest context's ({axis.points[0].label()})"
            if answer is not None
            else "no batch-only schedule is given"
        )
        problems.append(
            Problem(
                Severity.WARNING,
                "pooled-contexts",
                f"pooled over its {len(axis.points)} prompt lengths ({lengths} tokens), the"
                f" seed's rules reject the sweep ({len(pooled.result.errors)} errors: "
                + ", ".join(rules)
                + f"); {given}; the context grid tunes each length",
                field=axis.field,
                value=lengths,
            )
        )
    if reason is not None:
        problems.append(
            Problem(
                Severity.WARNING,
                "not-deployable",
                reason + "; the grid is reported, exports are refused",
                field="anchor",
                value=str(min(a for c in contexts for a in _anchors(c))),
                expected="an anchor at batch size 1",
            )
        )
    return ContextAnalysis(axis, pooled, contexts, answer, tuple(problems), options.confidence)
