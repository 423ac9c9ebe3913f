"""The verdict per anchor on the dynamic arm of a validation sweep (:func:`judge`), and the
settings of the whole check (:class:`CheckSettings`).

Per anchor, with the confidence machinery of :mod:`lib.confidence` (the arms play the part of
K: pooled log-scale noise, seeded Monte-Carlo), three probabilities that the dynamic arm is
within the relative tolerance of the best:

- among the static arms with K > 0 (``vs_best_static``),
- against the K=0 baseline (``vs_k0``): the server without speculation where there is one,
  else the one-range K=0 arm,
- among every arm (``overall``).

Verdict per anchor: **ok** when both comparisons reach the confidence; **loss** when either
is at most ``1 - confidence`` (the dynamic server is confidently worse by more than the
tolerance); **inconclusive** otherwise. A missing comparison is stated, not guessed.

Dynamic SD has a cost of its own: vLLM issue #49548 measured +6.6 % TPOT at concurrency 2 and
+21.6 % at 189 for a schedule-enabled engine at K=0 against a plain server. Where the schedule
runs K=k and a static K=k (or, for K=0, a server without speculation) was measured, the report
gives that overhead directly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from lib.confidence import ConfidenceSettings, assess
from lib.loop.check.arms import DYNAMIC, NO_SPECULATION
from lib.noise_summary import ServerNoise
from lib.numbers import percent_text
from lib.problems import Problem, Severity
from lib.schedule import Schedule, tune
from lib.settings import ContextSettings, Fields, Options, Settings
from lib.sweeps import Sweep
from lib.traffic import TrafficMix
from lib.traffic_value import ArmSet, TrafficValue, traffic_value

__all__ = [
    "ARM_SCHEMA",
    "REPORTED_OVERHEAD",
    "VERDICT_SCHEMA",
    "CheckSettings",
    "frames_json",
    "judge",
    "traffic_of",
]

DRAFTS_FIELD = "spec_decode_num_drafts"
#: The cost of the Dynamic SD engine reported in vLLM issue #49548 (TPOT, at K=0).
REPORTED_OVERHEAD = "vLLM issue #49548 measured +6.6% TPOT at concurrency 2 and +21.6% at 189"

#: One row per (anchor, arm) with enough runs.
ARM_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64(),
        "arm": pl.Utf8(),
        "kind": pl.Utf8(),  # dynamic / static / one-range / plain
        "k": pl.Int64(),  # the K the arm runs at this anchor
        "num_runs": pl.Int64(),
        "median": pl.Float64(),
        "relative_mad": pl.Float64(),
        "p_eps_good": pl.Float64(),  # among every arm at the anchor; null without noise estimate
    }
)

#: One row per anchor: the verdict and its numbers.
VERDICT_SCHEMA = pl.Schema(
    {
        "anchor": pl.Int64(),
        "verdict": pl.Utf8(),  # ok / loss / inconclusive
        "dynamic_k": pl.Int64(),
        "dynamic_median": pl.Float64(),
        "best_static": pl.Utf8(),
        "vs_best_static_percent": pl.Float64(),  # + means the dynamic arm is better
        "p_vs_best_static": pl.Float64(),
        "k0_arm": pl.Utf8(),
        "vs_k0_percent": pl.Float64(),
        "p_vs_k0": pl.Float64(),
        "p_overall": pl.Float64(),
        "same_k_arm": pl.Utf8(),  # the static arm running the dynamic arm's K here
        # How much worse the dynamic arm is than that arm (see _overhead); + means worse.
        "overhead_percent": pl.Float64(),
        "reasons": pl.List(pl.Utf8),
    }
)


@dataclass(frozen=True)
class CheckSettings:
    """How the arms are compared: the tuning settings the check uses (objective, direction,
    minimum runs, relative tolerance), the confidence and seed, and the batch-size field."""

    tuning: Settings = field(default_factory=Settings)
    options: Options = field(default_factory=Options)
    fields: Fields = field(default_factory=Fields)
    #: Whether and how the validation sweep's prompt length is an axis (judged per context point).
    context: ContextSettings = field(default_factory=ContextSettings)

    @property
    def maximize(self) -> bool:
        return self.tuning.maximize

    @property
    def confidence(self) -> float:
        return self.options.confidence

    def confidence_settings(self) -> ConfidenceSettings:
        # The arms' codes stand in for K but have no order: no shape to doubt (leader_peak).
        return ConfidenceSettings.of(self.options, ordered_k=False)

    def invalid(self) -> list[str]:
        return self.tuning.invalid() + self.confidence_settings().invalid() + self.context.invalid()

    def to_json(self) -> dict[str, Any]:
        return {
            "objective": self.tuning.objective,
            "direction": self.tuning.direction,
            "relative_tolerance": self.tuning.relative_tolerance,
            "confidence": self.options.confidence,
            "min_runs": self.tuning.min_runs,
            "seed": self.options.seed,
            "server_cv": self.options.server_cv,
            "batch_size_var": self.fields.batch_size_var,
        }


def frames_json(verdicts: pl.DataFrame, arms: pl.DataFrame) -> dict[str, Any]:
    """A judgement's ``anchors`` (the verdicts) and ``arms`` as JSON rows: NaN and infinity
    become null."""
    return {
        "anchors": [_finite_row(row) for row in verdicts.to_dicts()],
        "arms": [_finite_row(row) for row in arms.to_dicts()],
    }


def _finite_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        key: (None if isinstance(value, float) and not math.isfinite(value) else value)
        for key, value in row.items()
    }


def _arm_codes(runs: pl.DataFrame) -> dict[str, int]:
    """Arms as the small integers the policy ranks (standing in for K); order only fixes
    which code each arm gets, not any result."""
    order = {"plain": 0, "one-range": 1, "static": 2, "other": 3, "dynamic": 4, "unknown": 5}
    arms = runs.select("arm", "kind", "arm_k").unique().to_dicts()
    arms.sort(
        key=lambda a: (order[a["kind"]], a["arm_k"] if a["arm_k"] is not None else -1, a["arm"])
    )
    codes: dict[str, int] = {}
    for arm in arms:
        codes.setdefault(arm["arm"], len(codes))
    return codes


def _p_eps_good(
    sweep: Sweep,
    runs: pl.DataFrame,
    arms: Sequence[str],
    codes: dict[str, int],
    settings: CheckSettings,
) -> tuple[dict[tuple[int, str], float | None], pl.DataFrame, list[Problem], ServerNoise]:
    """P(eps-good) per (anchor, arm) among ``arms`` (via :func:`lib.confidence.assess`), the
    cells of the tuning (median, relative MAD) and the problems the policy's gates found."""
    chosen = runs.filter(pl.col("arm").is_in(list(arms)))
    chosen = chosen.with_columns(
        pl.col("arm").replace_strict(codes, return_dtype=pl.Int64).alias("k"),
        pl.lit(None, pl.Int64).alias("global_k"),
    ).drop("arm", "kind", "arm_k")
    subset = dataclasses.replace(sweep, runs=chosen, k_var="arm")
    result = tune(
        subset,
        settings.tuning,
    )
    report = assess(result, settings.confidence_settings())
    names = {code: arm for arm, code in codes.items()}
    p = {
        (row["anchor"], names[row["k"]]): row["p_eps_good"]
        for row in report.cells.select("anchor", "k", "p_eps_good").to_dicts()
    }
    cells = result.cells.with_columns(
        pl.col("k").replace_strict(names, return_dtype=pl.Utf8).alias("arm")
    )
    return p, cells, list(result.problems), report.servers


def traffic_of(
    sweep: Sweep, runs: pl.DataFrame, settings: CheckSettings, mix: TrafficMix
) -> TrafficValue | None:
    """The dynamic arm weighed on ``mix`` (:mod:`lib.traffic_value`) against the best static
    arm, the schedule-enabled engine at K=0 and the server without a drafter, each where the
    sweep has it: the confidence model over every arm at once, the dynamic arm as a one-range
    "schedule" of its code. None without a dynamic arm or anchors."""
    codes = _arm_codes(runs)
    if DYNAMIC not in codes:
        return None
    chosen = runs.with_columns(
        pl.col("arm").replace_strict(codes, return_dtype=pl.Int64).alias("k"),
        pl.lit(None, pl.Int64).alias("global_k"),
    ).drop("arm", "kind", "arm_k")
    result = tune(dataclasses.replace(sweep, runs=chosen, k_var="arm"), settings.tuning)
    report = assess(result, settings.confidence_settings())
    anchors = report.runs["anchor"].unique().sort().to_list()
    if not anchors:
        return None
    kind_of = dict(runs.select("arm", "kind").unique().iter_rows())
    zero = [a for a in codes if a != NO_SPECULATION and _is_k0(a, runs)]
    statics = [a for a in codes if kind_of[a] in ("static", "one-range") and a not in zero]
    ks = {
        codes[a]: (found[0] if len(found) == 1 else None)
        for a in codes
        for found in [runs.filter(pl.col("arm") == a)["arm_k"].unique().to_list()]
    }
    arms = ArmSet(
        statics=tuple(codes[a] for a in statics),
        k0=codes[zero[0]] if zero else None,
        no_drafter=codes.get(NO_SPECULATION),
        labels={code: arm for arm, code in codes.items()},
        ks=ks,
    )
    dynamic = Schedule(((1, max(anchors), codes[DYNAMIC]),))
    return traffic_value(mix, dynamic, report, settings.tuning.objective, None, arms)


def judge(
    sweep: Sweep,
    runs: pl.DataFrame,
    settings: CheckSettings,
    schedule_k: Callable[[int], int],
) -> tuple[pl.DataFrame, pl.DataFrame, list[Problem], ServerNoise]:
    """The verdict per anchor of ``runs``; ``schedule_k``: the K the schedule under test runs
    at a batch size (at these runs' context)."""
    codes = _arm_codes(runs)
    every = list(codes)
    p_all, cells, found, servers = _p_eps_good(sweep, runs, every, codes, settings)
    problems = [
        p
        for p in found
        if p.rule in ("failed-run", "failed-requests", "incomplete-run")
        or (p.rule.endswith("-objective") and p.rule != "noisy-objective")
    ]
    problems += [
        _arm_warning(p, codes) for p in found if p.rule in ("too-few-runs", "noisy-objective")
    ]
    kind_of = dict(runs.select("arm", "kind").unique().iter_rows())
    k_at = {
        (anchor, arm): k
        for anchor, arm, k in runs.select("anchor", "arm", "arm_k").unique().iter_rows()
    }
    eligible = cells.filter(pl.col("num_runs") >= settings.tuning.min_runs)
    arm_rows = [
        {
            "anchor": row["anchor"],
            "arm": row["arm"],
            "kind": kind_of[row["arm"]],
            "k": k_at.get((row["anchor"], row["arm"])),
            "num_runs": row["num_runs"],
            "median": row["median"],
            "relative_mad": row["relative_mad"],
            "p_eps_good": p_all.get((row["anchor"], row["arm"])),
        }
        for row in eligible.sort("anchor", "arm").to_dicts()
    ]
    arm_frame = pl.DataFrame(arm_rows, schema=ARM_SCHEMA)
    statics = [a for a in every if kind_of[a] in ("static", "one-range") and not _is_k0(a, runs)]
    k0_arm = (
        NO_SPECULATION
        if NO_SPECULATION in codes
        else next((a for a in every if kind_of[a] == "one-range" and _is_k0(a, runs)), None)
    )
    p_static = _p_eps_good(sweep, runs, [DYNAMIC, *statics], codes, settings)[0] if statics else {}
    p_k0 = _p_eps_good(sweep, runs, [DYNAMIC, k0_arm], codes, settings)[0] if k0_arm else {}
    drafting = _dynamic_drafting(runs)
    verdicts = []
    for anchor in sorted(arm_frame["anchor"].unique().to_list()):
        at = {row["arm"]: row for row in arm_frame.filter(pl.col("anchor") == anchor).to_dicts()}
        row = _verdict(anchor, at, statics, k0_arm, p_static, p_k0, p_all, settings)
        row["reasons"] += _smaller_batch_notes(anchor, row, schedule_k, drafting.get(anchor))
        verdicts.append(row)
    return arm_frame, pl.DataFrame(verdicts, schema=VERDICT_SCHEMA), problems, servers


def _dynamic_drafting(runs: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """Per anchor, (dynamic runs that drafted tokens, dynamic runs)."""
    dynamic = runs.filter(pl.col("arm") == DYNAMIC)
    drafted = (
        (pl.col(DRAFTS_FIELD).fill_null(0) > 0)
        if DRAFTS_FIELD in dynamic.columns
        else pl.lit(False)
    )
    counts = dynamic.group_by("anchor").agg(drafted.sum().alias("drafted"), pl.len().alias("runs"))
    return {a: (int(d), int(n)) for a, d, n in counts.iter_rows()}


def _smaller_batch_notes(
    anchor: int,
    row: dict[str, Any],
    k_at: Callable[[int], int],
    drafting: tuple[int, int] | None,
) -> list[str]:
    """A run at concurrency C spends its ramp-up and drain at smaller batch sizes, where the
    schedule (``k_at``: its K per batch size) may run another K: say so where that makes the
    dynamic arm differ from a server running the anchor's K throughout."""
    if row["dynamic_k"] is None:
        return []
    below = sorted({k_at(b) for b in range(1, anchor + 1)})
    if below == [row["dynamic_k"]]:
        return []
    notes = [
        f"the schedule runs K={row['dynamic_k']} at {anchor} requests but K in {below} below it:"
        " ramp-up and drain run at smaller batch sizes, so the dynamic server is not a"
        f" K={row['dynamic_k']} server throughout (its gains and overhead include this)"
    ]
    if row["dynamic_k"] == 0 and drafting is not None and drafting[0]:
        notes.append(
            f"the dynamic server drafted tokens in {drafting[0]} of {drafting[1]} run(s) here"
            f" ({DRAFTS_FIELD} > 0) although its K at {anchor} is 0"
        )
    return notes


def _arm_warning(problem: Problem, codes: dict[str, int]) -> Problem:
    """A cell problem of the policy as a warning about an arm: too few runs leave the arm out
    at that anchor; a noisy arm is weighed through the anchor's pooled noise, not rejected."""
    names = {code: arm for arm, code in codes.items()}
    arm = names.get(problem.k, "?") if problem.k is not None else "?"
    if problem.rule == "noisy-objective":
        return dataclasses.replace(
            problem,
            severity=Severity.WARNING,
            k=None,
            message=f"{arm}: the runs disagree; the check weighs this noise through the"
            " anchor's pooled estimate",
            expected=None,
        )
    return dataclasses.replace(
        problem,
        severity=Severity.WARNING,
        k=None,
        message=f"{arm}: {problem.message}, so it is left out at this batch size",
    )


def _is_k0(arm: str, runs: pl.DataFrame) -> bool:
    ks = runs.filter(pl.col("arm") == arm)["arm_k"].unique().to_list()
    return ks == [0]


def _gain(dynamic: float, other: float, maximize: bool) -> float | None:
    """Percent by which the dynamic arm is better (negative: worse)."""
    if other <= 0 or dynamic <= 0:
        return None
    return ((dynamic / other) if maximize else (other / dynamic)) * 100 - 100


def _overhead(dynamic: float, same_k: float, maximize: bool) -> float | None:
    """Percent by which the objective moved the wrong way from the same-K server to the dynamic
    one: ``1 - dynamic / same_k`` when maximising, ``dynamic / same_k - 1`` when minimising (so a
    TPOT overhead reads as vLLM issue #49548 reports it)."""
    if dynamic <= 0 or same_k <= 0:
        return None
    return ((1 - dynamic / same_k) if maximize else (dynamic / same_k - 1)) * 100


def _verdict(
    anchor: int,
    at: dict[str, dict[str, Any]],
    statics: list[str],
    k0_arm: str | None,
    p_static: dict[tuple[int, str], float | None],
    p_k0: dict[tuple[int, str], float | None],
    p_all: dict[tuple[int, str], float | None],
    settings: CheckSettings,
) -> dict[str, Any]:
    reasons: list[str] = []
    dynamic = at.get(DYNAMIC)
    row: dict[str, Any] = dict.fromkeys(VERDICT_SCHEMA)
    row.update(anchor=anchor, reasons=reasons)
    if dynamic is None:
        reasons.append(
            f"the dynamic arm has fewer than {settings.tuning.min_runs} usable runs here"
        )
        row["verdict"] = "inconclusive"
        return row
    row.update(dynamic_k=dynamic["k"], dynamic_median=dynamic["median"])
    present = [a for a in statics if a in at]
    sign = 1 if settings.maximize else -1
    comparisons: list[float | None] = []
    if present:
        best = max(present, key=lambda a: (sign * at[a]["median"], -(at[a]["k"] or 0)))
        row.update(
            best_static=best,
            vs_best_static_percent=_gain(dynamic["median"], at[best]["median"], settings.maximize),
            p_vs_best_static=p_static.get((anchor, DYNAMIC)),
        )
        comparisons.append(row["p_vs_best_static"])
    else:
        reasons.append("no static K > 0 server measured here: the comparison is missing")
    if k0_arm is not None and k0_arm in at:
        row.update(
            k0_arm=k0_arm,
            vs_k0_percent=_gain(dynamic["median"], at[k0_arm]["median"], settings.maximize),
            p_vs_k0=p_k0.get((anchor, DYNAMIC)),
        )
        comparisons.append(row["p_vs_k0"])
        if k0_arm != NO_SPECULATION:
            reasons.append(
                "K=0 here is the schedule-enabled engine, not a server without speculation: the"
                " Dynamic SD engine's own cost is not measured"
            )
    else:
        reasons.append("no K=0 server measured here: the comparison is missing")
    row["p_overall"] = p_all.get((anchor, DYNAMIC))
    same = _same_k_arm(dynamic["k"], at)
    if same is not None:
        overhead = _overhead(dynamic["median"], at[same]["median"], settings.maximize)
        row.update(same_k_arm=same, overhead_percent=overhead)
        if dynamic["k"] == 0 and same == NO_SPECULATION and overhead is not None:
            reasons.append(
                "the schedule runs K=0 here: the Dynamic SD engine costs"
                f" {percent_text(overhead, 2)} of"
                f" {settings.tuning.objective} against a server without speculation"
                f" ({REPORTED_OVERHEAD})"
                if overhead >= 0
                else "the schedule runs K=0 here and measured"
                f" {percent_text(-overhead, 2)} better than a"
                " server without speculation: at K=0 throughout it could not be, so either"
                " it speculated at the smaller batch sizes of ramp-up and drain, or this is"
                " noise or drift between the two servers' runs"
            )
    confident = settings.confidence
    if any(p is not None and p <= 1 - confident for p in comparisons):
        row["verdict"] = "loss"
    elif comparisons and all(p is not None and p >= confident for p in comparisons):
        row["verdict"] = "ok"
    else:
        row["verdict"] = "inconclusive"
        if any(p is None for p in comparisons):
            reasons.append("no replicate runs: the noise cannot be estimated")
        elif comparisons:
            reasons.append(
                f"P(at least as good) between {1 - confident:.2f} and {confident:g}: more runs"
                " would settle it"
            )
    return row


def _same_k_arm(k: int | None, at: dict[str, dict[str, Any]]) -> str | None:
    if k is None:
        return None
    if k == 0:
        return NO_SPECULATION if NO_SPECULATION in at else None
    for arm in (f"static K={k}", f"K={k} (1-range)"):
        if arm in at:
            return arm
    return None
