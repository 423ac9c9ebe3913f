"""What to measure next: reruns that would resolve the unresolved anchors, and new anchors where
neighbouring picks disagree (``docs/confidence.md``, "The measurement plan").

- **Reruns.** At an unresolved anchor every contender (P(eps-good) >= 0.05) is rerun up to the
  runs the noise calls for, ``12.4 * (s / delta)^2`` per contender (80 % power to separate a
  gap ``delta`` at relative noise ``s``), at least one more run and at most 10 in all. A
  contender already at 10 runs is **noise-limited**: it and its rivals are a tie, and the
  smaller K is the sensible choice. A flagged run at an unresolved anchor is re-measured too.
  A contender measured once (a lean sweep) gets one more run, and only where it matters
  (:mod:`lib.second_runs`).
- **New anchors.** Where two neighbouring anchors pick different K and one of the two picks is
  worse than the other by more than the tie tolerance at either anchor, where to switch matters:
  the plan suggests a new anchor at the geometric midpoint ``sqrt(lower * upper)`` (rounded),
  measured for every K of the sweep and of its design (the seed requires the same K set at
  every anchor), less the K a bracketed design ruled out at both neighbours
  (:func:`new_anchor_ks`), as often as the sweep measured its cells (:func:`new_anchor_runs`).
  Where either pick falls off a cliff between the two anchors (:mod:`lib.cliffs`) the
  midpoint is proposed whatever the disagreement: nothing between them is interpolable, and
  the midpoint narrows down where the cliff starts.

:func:`measurement_plan` returns the two frames; :meth:`MeasurementPlan.to_json` writes them
(``--plan-json``); :mod:`lib.present.text` prints them.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lib.cliffs import CLIFF_RULE, Cliff, spanning
from lib.confidence import (
    MAX_RUNS_NEEDED,
    MAX_SERVERS_NEEDED,
    MIN_RUNS_NEEDED,
    ConfidenceReport,
    servers_dominate,
)
from lib.noise_summary import relative_sd
from lib.numbers import percent_text
from lib.posterior import cell_mean_sd
from lib.schedule import TuningResult
from lib.second_runs import SecondRuns, second_runs
from lib.unmeasured import UNMEASURED_RULE, UNMEASURED_RULED_OUT_RULE

__all__ = [
    "NEW_ANCHOR_SCHEMA",
    "RERUN_SCHEMA",
    "MeasurementPlan",
    "measurement_plan",
    "new_anchor_ks",
    "new_anchor_runs",
    "new_servers_text",
    "rerun_text",
]

#: One row per (anchor, K) to rerun.
RERUN_SCHEMA = pl.Schema(
    {
        "batch_size": pl.Int64,
        "k": pl.Int64,
        "runs": pl.Int64,  # usable runs so far
        "servers": pl.Int64,  # server starts they came from
        "target_runs": pl.Int64,
        "more_runs": pl.Int64,
        # new server starts for the more runs (a follow-up sweep starts at least one), and the
        # runs on each: several where server offsets dominate (see _new_servers)
        "new_servers": pl.Int64,
        "runs_per_new_server": pl.Int64,
        "noise_limited": pl.Boolean,
        "reason": pl.Utf8,
    }
)

#: One row per suggested new anchor.
NEW_ANCHOR_SCHEMA = pl.Schema(
    {
        "batch_size": pl.Int64(),
        "lower_anchor": pl.Int64(),
        "upper_anchor": pl.Int64(),
        "lower_k": pl.Int64(),
        "upper_k": pl.Int64(),
        "disagreement_percent": pl.Float64(),  # how much the worse pick loses at the worse anchor
        "ks": pl.List(pl.Int64),  # every K to measure there
        "runs_per_k": pl.Int64(),
        "reason": pl.Utf8(),
    }
)


@dataclass(frozen=True, eq=False)
class MeasurementPlan:
    """Reruns and new anchors; both frames empty when there is nothing to measure."""

    confidence: float
    tolerance: float
    reruns: pl.DataFrame
    new_anchors: pl.DataFrame
    #: How the rows are ordered when not as found (:func:`lib.traffic_plan.by_traffic`: by
    #: the traffic mix's share each one decides); None: as found.
    ordered_by: str | None = None

    @property
    def empty(self) -> bool:
        return self.reruns.is_empty() and self.new_anchors.is_empty()

    def to_json(self) -> dict[str, Any]:
        ordered = {} if self.ordered_by is None else {"ordered_by": self.ordered_by}
        return {
            **ordered,
            "confidence": self.confidence,
            "tie_tolerance": self.tolerance,
            "total_more_runs": int(self.reruns["more_runs"].sum())
            + sum(
                len(ks) * runs for ks, runs in self.new_anchors.select("ks", "runs_per_k").rows()
            ),
            "reruns": self.reruns.to_dicts(),
            "new_anchors": [
                {**row, "disagreement_percent": round(row["disagreement_percent"], 4)}
                for row in self.new_anchors.to_dicts()
            ],
        }

    def to_json_text(self) -> str:
        """The plan file's exact text: same input and settings give the same bytes."""
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"


def measurement_plan(
    result: TuningResult, report: ConfidenceReport, cliffs: Sequence[Cliff] = ()
) -> MeasurementPlan:
    """The plan for ``result``'s picks (either policy) from ``report``'s confidence;
    ``cliffs`` (:func:`lib.cliffs.find_cliffs`) mark the stretches not to interpolate."""
    return MeasurementPlan(
        confidence=report.settings.confidence,
        tolerance=report.tolerance,
        reruns=pl.concat([_reruns(report), _unmeasured(result)]),
        new_anchors=_new_anchors(result, report, cliffs),
    )


def _reruns(report: ConfidenceReport) -> pl.DataFrame:
    unresolved = report.anchors.filter(pl.col("status") == "unresolved")
    p_of = {(c["anchor"], c["k"]): c for c in report.cells.to_dicts()}
    flagged: dict[tuple[int, int], list[str]] = {}
    for run in report.runs.filter(pl.col("flagged")).to_dicts():
        flagged.setdefault((run["anchor"], run["k"]), []).append(
            f"run {run['run_number']} in {run['source']}"
        )
    rows = []
    for anchor_row in unresolved.to_dicts():
        anchor = anchor_row["anchor"]
        noise_known = anchor_row["pooled_log_sd"] is not None
        ks = sorted(set(anchor_row["contenders"]) | {k for (a, k) in flagged if a == anchor})
        lean = _second_runs(anchor_row, p_of, report)
        for k in ks:
            cell = p_of[(anchor, k)]
            runs, servers = cell["num_runs"], cell["num_servers"]
            reasons = []
            target = runs
            limited = False
            starts = 1
            if lean is not None and k in lean.more_runs:
                target = runs + lean.more_runs[k]
                reasons.append(lean.reasons[k])
            elif k in anchor_row["contenders"]:
                needed = cell["runs_needed"] or MIN_RUNS_NEEDED
                starts = max((cell["servers_needed"] or servers + 1) - servers, 1)
                cap = max(MAX_RUNS_NEEDED, runs) if starts == 1 else needed
                target = min(max(needed, runs + 1), cap)
                # Already at the cap and still unresolved: more runs are not worth it either.
                limited = bool(cell["noise_limited"]) or target == runs
                if not noise_known:
                    reasons.append(
                        f"no replicate runs yet: {MIN_RUNS_NEEDED} runs estimate the noise"
                    )
                else:
                    reasons.append(f"contender, P(eps-good)={cell['p_eps_good']:.2f}")
                    reasons.append(
                        _servers_or_runs(anchor_row, runs, servers, starts, target - runs)
                    )
                if limited:
                    past = (
                        f"{MAX_RUNS_NEEDED} runs"
                        if starts == 1
                        else f"{MAX_SERVERS_NEEDED} server starts"
                    )
                    reasons.append(
                        f"noise-limited: past {past} the gap to its rival is within the noise,"
                        " so treat them as tied and keep the smaller K"
                    )
            if (anchor, k) in flagged:
                target = max(target, runs + len(flagged[(anchor, k)]))
                reasons.append("re-measure the flagged " + ", ".join(flagged[(anchor, k)]))
            more = target - runs
            starts = min(starts, max(more, 1))
            rows.append(
                {
                    "batch_size": anchor,
                    "k": k,
                    "runs": runs,
                    "servers": servers,
                    "target_runs": target,
                    "more_runs": more,
                    "new_servers": starts,
                    "runs_per_new_server": math.ceil(more / starts) if more else 0,
                    "noise_limited": limited,
                    "reason": "; ".join(reasons),
                }
            )
    return pl.DataFrame(rows, schema=RERUN_SCHEMA)


def _unmeasured(result: TuningResult) -> pl.DataFrame:
    """A row per cell not measured that the K measured at its anchor do not rule out
    (:data:`lib.unmeasured.UNMEASURED_RULE`): as many runs as a new anchor's K get
    (:func:`new_anchor_runs`), on one new server start."""
    runs = _new_cell_runs(result)
    rows = [
        {
            "batch_size": problem.anchor,
            "k": problem.k,
            "runs": 0,
            "servers": 0,
            "target_runs": runs,
            "more_runs": runs,
            "new_servers": 1,
            "runs_per_new_server": runs,
            "noise_limited": False,
            "reason": f"{problem.message}; measure it",
        }
        for problem in result.problems
        if problem.rule == UNMEASURED_RULE
    ]
    return pl.DataFrame(rows, schema=RERUN_SCHEMA)


def _second_runs(
    anchor_row: Mapping[str, Any],
    p_of: Mapping[tuple[int, int], Mapping[str, Any]],
    report: ConfidenceReport,
) -> SecondRuns | None:
    """The lean rule (:mod:`lib.second_runs`) at an unresolved anchor, from its cells' runs,
    P(eps-good) (without the flagged runs where the anchor has any: what its status rests on)
    and geometric means."""
    anchor = anchor_row["anchor"]
    cells = [cell for (a, _), cell in p_of.items() if a == anchor]
    return second_runs(
        runs={cell["k"]: cell["num_runs"] for cell in cells},
        p_eps_good={
            cell["k"]: cell["p_eps_good_without_flagged"]
            if cell["p_eps_good_without_flagged"] is not None
            else cell["p_eps_good"]
            for cell in cells
        },
        centres={cell["k"]: cell["geometric_mean"] for cell in cells},
        contenders=anchor_row["contenders"],
        confidence=report.settings.confidence,
        tolerance=report.tolerance,
    )


def new_servers_text(row: Mapping[str, Any]) -> str:
    """Where a rerun (a :data:`RERUN_SCHEMA` row) needs several new server starts, on how
    many (`` on 3 new server starts (3 runs each)``); nothing for the one every follow-up
    sweep starts."""
    if row["new_servers"] > 1:
        return (
            f" on {row['new_servers']} new server starts ({row['runs_per_new_server']} runs each)"
        )
    return ""


def rerun_text(row: Mapping[str, Any]) -> str:
    """A rerun in words: ``6 more run(s) of K=3`` and :func:`new_servers_text`."""
    return f"{row['more_runs']} more run(s) of K={row['k']}{new_servers_text(row)}"


def _servers_or_runs(
    anchor: Mapping[str, Any], runs: int, servers: int, starts: int, more: int
) -> str:
    """Why the plan asks for new server starts or for more runs, with the expected effect of
    each on the standard error of the cell's mean, for the same number of more runs: spread
    over ``starts`` new servers, or all on one new server (:func:`lib.confidence.cell_mean_sd`;
    the runs so far counted evenly over their servers)."""
    run_sd, server_sd = anchor["pooled_log_sd"] or 0.0, anchor["server_log_sd"] or 0.0
    if more <= 0:
        return "no more runs needed"
    per_server = max(round(runs / servers), 1)
    so_far = [per_server] * servers
    now = cell_mean_sd(run_sd, server_sd, so_far)
    spread = cell_mean_sd(run_sd, server_sd, so_far + _shares(more, max(starts, 2)))
    one = cell_mean_sd(run_sd, server_sd, [*so_far, more])
    kind = "measured" if anchor["servers_measured"] else "assumed"
    share = f"(servers {percent_text(_percent_of(server_sd))} apart, {kind};"
    share += f" runs {percent_text(_percent_of(run_sd))})"
    effect = (
        f"the standard error of its mean, {percent_text(_percent_of(now))} now, becomes"
        f" {percent_text(_percent_of(spread))} with {more} more runs on {max(starts, 2)} new"
        f" server starts, {percent_text(_percent_of(one))} with them on one"
    )
    if servers_dominate(run_sd, server_sd, runs, servers):
        return f"server offsets dominate {share}: new server starts, not more runs: {effect}"
    return f"run noise dominates {share}: more runs: {effect}"


def _percent_of(log_sd: float) -> float:
    return relative_sd(log_sd) * 100


def _shares(runs: int, servers: int) -> list[int]:
    """``runs`` spread as evenly as possible over ``servers`` (the first get one more)."""
    base, extra = divmod(runs, servers)
    return [base + (1 if i < extra else 0) for i in range(servers) if base or i < extra]


def _new_cell_runs(result: TuningResult) -> int:
    """Runs of a cell measured for the first time (a new anchor's, or a K a bracket left
    open): :func:`new_anchor_runs` of the median runs of ``result``'s cells."""
    typical = result.cells["num_runs"].median()
    return new_anchor_runs(typical if isinstance(typical, float) else None)


def new_anchor_runs(typical: float | None) -> int:
    """Runs per K at a new anchor, from the median runs of the sweep's cells: as many
    (rounded), at least :data:`MIN_RUNS_NEEDED`, enough for a noise estimate, except in a lean
    sweep (its median cell has one run: ``tune-spec-k plan --design lean``), whose new anchor
    is measured once per K as its anchors were (its second runs, where they matter, come from
    the next follow-up, :mod:`lib.second_runs`).

    >>> new_anchor_runs(1.0), new_anchor_runs(2.0), new_anchor_runs(5.0), new_anchor_runs(None)
    (1, 3, 5, 3)
    """
    if typical is not None and round(typical) == 1:
        return 1
    return max(MIN_RUNS_NEEDED, round(typical) if typical is not None else 0)


def new_anchor_ks(
    every_k: Sequence[int], lower: int, upper: int, ruled_out: Collection[tuple[int, int]]
) -> list[int]:
    """The K to measure at a new anchor between ``lower`` and ``upper``: every K of the sweep
    and of its design (``--design-ks``), less those ruled out unmeasured at both neighbours
    (:mod:`lib.unmeasured`: a bracketed design's K that cannot lead on either side). A K
    ruled out on one side only is measured: the best K may change in between.

    >>> new_anchor_ks([0, 1, 2, 3, 5], 16, 32, {(16, 1), (32, 1), (16, 3)})
    [0, 2, 3, 5]
    """
    return [k for k in every_k if not ((lower, k) in ruled_out and (upper, k) in ruled_out)]


def _new_anchors(
    result: TuningResult, report: ConfidenceReport, cliffs: Sequence[Cliff]
) -> pl.DataFrame:
    scores = {
        (row["anchor"], row["k"]): row["mean_score"]
        for row in report.cells.select("anchor", "k", "mean_score").to_dicts()
    }
    picks = [
        (a, k)
        for a, k in zip(result.decisions["anchor"], result.decisions["selected_k"], strict=True)
        if k is not None
    ]
    ruled_out = {
        (problem.anchor, problem.k)
        for problem in result.problems
        if problem.rule == UNMEASURED_RULED_OUT_RULE
        and problem.anchor is not None
        and problem.k is not None
    }
    every_k = sorted(set(result.cells["k"].to_list()) | set(result.settings.design_ks))
    runs_per_k = _new_cell_runs(result)
    tolerance = -math.log1p(-report.tolerance)
    rows = []
    for (lower, lower_k), (upper, upper_k) in itertools.pairwise(picks):
        middle = round(math.sqrt(lower * upper))
        if lower_k == upper_k or not lower < middle < upper:
            continue
        needed = [(lower, lower_k), (lower, upper_k), (upper, lower_k), (upper, upper_k)]
        if not all(math.isfinite(scores.get(cell, math.nan)) for cell in needed):
            continue
        loss_below = scores[(lower, lower_k)] - scores[(lower, upper_k)]
        loss_above = scores[(upper, upper_k)] - scores[(upper, lower_k)]
        loss = max(loss_below, loss_above)
        across = spanning(cliffs, lower, upper, (lower_k, upper_k))
        if loss <= tolerance and not across:
            continue
        where, worse, better = (
            (upper, lower_k, upper_k) if loss_above >= loss_below else (lower, upper_k, lower_k)
        )
        percent = math.expm1(loss) * 100
        reason = (
            f"K={lower_k} at {lower} and K={upper_k} at {upper}: at {where} K={worse} is"
            f" {percent_text(percent)} worse than K={better}, beyond the"
            f" {report.tolerance * 100:g}%"
            f" tolerance, so where to switch matters; {middle} is the geometric midpoint"
        )
        if across:
            named = ", ".join(f"K={cliff.k}" for cliff in across)
            reason = (
                f"{named} falls off a cliff between {lower} and {upper} ({CLIFF_RULE}): the"
                f" stretch is not interpolable; {middle}, the geometric midpoint, narrows down"
                " where it starts"
            )
        rows.append(
            {
                "batch_size": middle,
                "lower_anchor": lower,
                "upper_anchor": upper,
                "lower_k": lower_k,
                "upper_k": upper_k,
                "disagreement_percent": percent,
                "ks": new_anchor_ks(every_k, lower, upper, ruled_out),
                "runs_per_k": runs_per_k,
                "reason": reason,
            }
        )
    return pl.DataFrame(rows, schema=NEW_ANCHOR_SCHEMA)
