"""The context-length axis of a sweep: its context points (:func:`find_context_axis`), or the
one prompt length a validation sweep ran at (:func:`sole_context_point`), each run placed at
its point, every run that cannot be placed named with its reason.

A batch-only schedule is a short-context observation: with long prompts the verify step is
dominated by attention over the context and speculation can pay again at high batch
(``docs/context.md``); :mod:`lib.context` tunes the sweep once per point found here.

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
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lib.problems import Problem, Severity, show_value
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
    context_var_reason,
    prompt_length_expected,
    prompt_length_reason,
)
from lib.sweeps import Sweep

__all__ = [
    "ContextAxis",
    "ContextPoint",
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
