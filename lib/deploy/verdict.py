"""The verdict: may this tuning be deployed as it is? One answer for the CLI, the result JSON
and the app, computed here once from everything the analysis knows.

States: ``cannot-tune`` (an error: no schedule to deploy), ``provisional`` (a schedule, but at
least one reason below applies) and ``ready`` (none applies). Each reason is one rule, one
small function, and carries its size (a probability, a loss in percent) and its fix:

- :func:`error_reasons`: every kind of error (cannot tune);
- :func:`anchor_reasons`: an anchor whose status the confidence model does not call resolved
  (with the flagged runs treated as docs/confidence.md says: the status already does), or whose
  reported pick is not one of the K the model calls sure;
- :func:`switch_reasons`: a stretch between two anchors where nothing was measured and the
  deployed schedule (step or interpolated) is predicted to lose more than the tie tolerance,
  or bets that much on the model alone;
- :func:`capture_reasons`: batch sizes the deployed schedule runs past the CUDA-graph capture
  ceiling (no graphs) and ranges the ceiling capped (capped, not measured);
- :func:`warning_reasons`: the analysis's own warnings that say the numbers or the direction
  are in doubt (:data:`VERDICT_WARNINGS`: cross-anchor cliffs, a latency maximised, ...);
- :func:`no_speculation_reason`: K=0 at every batch size: serve without speculation;
- :func:`draft_settings_reasons`: a config without its method or draft model.

A context analysis adds :func:`context_loss_reasons`: the deployable vLLM config losing more
than the tie tolerance at some (batch size, prompt length).
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

from lib.deploy.ceiling import CaptureCeiling
from lib.deploy.constraints import CeilingCheck, past_max_num_seqs
from lib.deploy.registry import grid_exports
from lib.flags import flag_name
from lib.measurement_plan import rerun_text
from lib.numbers import percent_text, probability_text
from lib.problems import Problem, Severity
from lib.schedule import Schedule, emitted_schedule
from lib.settings import Fields, Settings
from lib.unmeasured import UNMEASURED_RULE, UNMEASURED_RULED_OUT_RULE

if TYPE_CHECKING:
    from lib.analysis import Analysis
    from lib.confidence import ConfidenceReport
    from lib.context import ContextAnalysis
    from lib.measurement_plan import MeasurementPlan
    from lib.schedule import TuningResult
    from lib.switch_points import SwitchPoints

__all__ = [
    "BATCH_NOT_RUN_FIXES",
    "NO_DRAFT_MODEL_METHODS",
    "VERDICT_WARNINGS",
    "Reason",
    "Verdict",
    "anchor_reasons",
    "batch_not_run_reasons",
    "capture_reasons",
    "cell_engines",
    "context_loss_reasons",
    "context_verdict",
    "deployed_engine_reason",
    "draft_settings_reasons",
    "error_reasons",
    "no_speculation_reason",
    "point_reasons",
    "runs_on_deployed_engine",
    "switch_reasons",
    "unimodal_assumption",
    "unmeasured_reasons",
    "unmeasured_tail_reason",
    "verdict_in",
    "verdict_of",
    "warning_reasons",
]

State = Literal["ready", "provisional", "cannot-tune"]

_TITLES: Mapping[State, str] = {
    "ready": "Ready to deploy",
    "provisional": "Provisional",
    "cannot-tune": "Cannot tune",
}

#: The warnings that put the answer itself in doubt, each with its fix. Other warnings (data
#: health the gates already handled, notes) are listed with the problems, not in the verdict.
VERDICT_WARNINGS: Mapping[str, str] = {
    "cross-anchor-cliff": "measure the cells again (a server restart between them, or an"
    " execution-mode change, e.g. CUDA graphs lost past the capture ceiling); the stretch"
    " between the anchors is not interpolated",
    "latency-maximized": "give --objective-direction minimize (a latency is better smaller)",
    "schedule-disabled": "use a method or engine mode where vLLM keeps Dynamic SD (the"
    " warning names them), or deploy one static K",
}

#: Speculative methods that need no separate draft model (they draft from the target's own
#: layers or from the prompt); any other method's config needs ``model``.
NO_DRAFT_MODEL_METHODS = frozenset({"ngram", "ngram_gpu", "suffix", "mtp"})


@dataclass(frozen=True)
class Reason:
    """Why the verdict is not ``ready``: the rule, what it found (with its size), the size as
    a number (``size_unit``: ``"%"`` for a loss, ``"P"`` for a probability; None when the rule
    has no size) and what to do."""

    rule: str
    message: str
    fix: str
    size: float | None = None
    size_unit: str = ""

    def line(self) -> str:
        return f"{self.message}; fix: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "message": self.message,
            "fix": self.fix,
            "size": None if self.size is None else round(self.size, 4),
            "size_unit": self.size_unit or None,
        }


@dataclass(frozen=True)
class Verdict:
    """The state and every reason for it (empty when ``ready``), and what its "resolved"
    rests on (``assumption``: how much server starts differ, measured or assumed:
    :meth:`lib.noise_summary.ServerNoise.statement`; None where no P(eps-good) is known)."""

    state: State
    reasons: tuple[Reason, ...]
    assumption: str | None = None
    #: Which traffic mix the verdict judged on (:mod:`lib.deploy.traffic`); None: none weighed.
    traffic: str | None = None

    @property
    def title(self) -> str:
        return _TITLES[self.state]

    def lines(self) -> list[str]:
        """What the CLI prints: ``verdict: ...`` then one indented line per reason."""
        basis = [] if self.assumption is None else [f"  assumes: {self.assumption}"]
        basis += [] if self.traffic is None else [f"  traffic: {self.traffic}"]
        if self.state == "ready":
            return [
                "verdict: ready (every pick resolved; nothing between the anchors, at the"
                " capture ceiling or in the data calls it into doubt)",
                *basis,
            ]
        count = len(self.reasons)
        head = f"verdict: {self.state} ({count} reason{'s' if count != 1 else ''})"
        return [head, *(f"  - {reason.line()}" for reason in self.reasons), *basis]

    def to_json(self) -> dict[str, Any]:
        found = {
            "state": self.state,
            "reasons": [reason.to_json() for reason in self.reasons],
            "assumption": self.assumption,
        }
        return found if self.traffic is None else {**found, "traffic": self.traffic}


def _verdict(
    errors: Sequence[Reason], others: Sequence[Reason], assumption: str | None = None
) -> Verdict:
    if errors:
        return Verdict("cannot-tune", tuple(errors))
    return Verdict("provisional" if others else "ready", tuple(others), assumption)


# --------------------------------------------------------------------------- the rules


#: The fix of each kind of refusal a sweep commonly meets, in the CLI's flags (the app words
#: the same fixes with its controls: :mod:`lib.app.guide`). Other errors: what was expected.
REFUSAL_FIXES: Mapping[str, str] = {
    "too-few-runs": f"rerun those cells, or lower {flag_name(Settings, 'min_runs')} to their"
    " runs for a provisional schedule",
    "noisy-objective": "rerun those cells, or raise"
    f" {flag_name(Settings, 'max_objective_relative_mad')} to rank them anyway",
    "undecided-anchor": "fix the errors of the anchor's rejected cells (listed above)",
    "mixed-global-k": f"{flag_name(Settings, 'allow_mixed_global_k')} to compare static-K"
    " servers (the engine is deployed with the largest)",
    "missing-k": f"{flag_name(Fields, 'k_var')} naming the K field (each server ran one K:"
    f" {flag_name(Fields, 'k_var')} speculative_config.num_speculative_tokens)",
    "unstable-acceptance": f"drop {flag_name(Settings, 'strict_acceptance_stability')} to warn"
    f" instead, or raise {flag_name(Settings, 'max_acceptance_relative_mad')}",
}


def error_reasons(problems: Iterable[Problem]) -> list[Reason]:
    """One reason per kind (rule) of error, in the order first found: its first message, how
    many more, and the fix (:data:`REFUSAL_FIXES`, else what was expected)."""
    by_rule: dict[str, list[Problem]] = {}
    for problem in problems:
        if problem.severity is Severity.ERROR:
            by_rule.setdefault(problem.rule, []).append(problem)
    reasons = []
    for rule, found in by_rule.items():
        more = f" (and {len(found) - 1} more like it)" if len(found) > 1 else ""
        expected = found[0].expected
        if rule in REFUSAL_FIXES:
            fix = REFUSAL_FIXES[rule]
        elif expected:
            fix = f"give {expected}"
        else:
            fix = "correct the input (see the problems)"
        reasons.append(Reason(rule, found[0].message + more, fix))
    return reasons


def anchor_reasons(
    result: TuningResult,
    report: ConfidenceReport,
    plan: MeasurementPlan | None,
    max_num_seqs: int | None = None,
) -> list[Reason]:
    """Per anchor, by the confidence model's status (docs/confidence.md): ``unresolved`` is a
    reason (size: the pick's P(eps-good), the value the status rests on: without the flagged
    runs where the anchor has some); a resolved anchor whose reported pick (the seed's rule
    may differ from the confident rule) is not among the K whose P(eps-good) reaches the
    confidence is one too. The fix is the measurement plan's reruns at that anchor, if any.
    An anchor past a known ``max_num_seqs`` is never run by the server
    (:func:`~lib.deploy.constraints.past_max_num_seqs`): no reason, and no measurement asked
    there."""
    picks = dict(zip(result.decisions["anchor"], result.decisions["selected_k"], strict=True))
    cells = {(row["anchor"], row["k"]): row for row in report.cells.to_dicts()}
    reasons = []
    for row in report.anchors.to_dicts():
        anchor, rule_k = row["anchor"], row["selected_k"]
        if past_max_num_seqs(anchor, max_num_seqs):
            continue
        picked = picks.get(anchor)
        if row["status"] == "resolved" and (picked is None or picked in row["qualifying_k"]):
            continue
        k = picked if picked is not None else rule_k
        p = _status_p(cells.get((anchor, k)))
        confidence = report.settings.confidence
        rule_part = (
            ""
            if rule_k == k
            else f"; the confident rule's K={rule_k} has"
            f" {probability_text(_status_p(cells.get((anchor, rule_k))))}"
        )
        if row["status"] != "resolved":
            why = "; ".join(row["reasons"]) or "no K is sure enough"
            message = (
                f"batch size {anchor} is unresolved ({why}): the deployed K={k} has"
                f" P(eps-good) {probability_text(p)}{rule_part}; contenders"
                f" {list(row['contenders'])}"
            )
            rule = "unresolved-anchor"
        else:
            message = (
                f"batch size {anchor}: the deployed K={k} has P(eps-good)"
                f" {probability_text(p)}, below {confidence:g}{rule_part}"
            )
            rule = "unsure-pick"
        reasons.append(Reason(rule, message, _rerun_fix(plan, anchor), p, "P"))
    return reasons


def _status_p(cell: Mapping[str, Any] | None) -> float | None:
    """The P(eps-good) an anchor's status rests on: without the flagged runs where known."""
    if cell is None:
        return None
    clean = cell.get("p_eps_good_without_flagged")
    return clean if clean is not None else cell.get("p_eps_good")


def _rerun_fix(plan: MeasurementPlan | None, anchor: int) -> str:
    rows = (
        []
        if plan is None
        else plan.reruns.filter(plan.reruns["batch_size"] == anchor).rows(named=True)
    )
    wanted = [rerun_text(row) for row in rows if row["more_runs"]]
    if not wanted:
        return "more runs will not settle it (a tie within the noise): either K is fine"
    return ", ".join(wanted) + " (tune-spec-k plan --follow-up RESULT writes the sweep)"


def switch_reasons(
    switch_points: SwitchPoints,
    emitted: str,
    tolerance: float,
    plan: MeasurementPlan | None,
    max_num_seqs: int | None = None,
) -> list[Reason]:
    """Per switch between neighbouring anchors whose picks differ, where the interpolated
    curves say the best K changes between them (``changed_batch_sizes > 0``) by more than the
    tie tolerance at some batch size (``max_gain_percent > 100 * tolerance``; equal is not
    more): with the step schedule deployed, it runs the lower pick there and is predicted to
    lose that much; with the interpolated schedule, it switches there on the model alone, and
    loses that much where the model is wrong. The fix: measure an anchor in the stretch (the
    measurement plan's, where it proposes one).

    With a known ``max_num_seqs`` N (:func:`~lib.deploy.constraints.past_max_num_seqs`), a stretch
    the server never runs is no reason: the step schedule's loss starts at the switch point (none
    when it is past N), the interpolated schedule's at the lower anchor (none when that is N or
    more); the stretch named ends at N, and an anchor proposed past N is never asked for."""
    reasons = []
    for row in switch_points.switches.to_dicts():
        loss = row["max_gain_percent"]
        if not row["changed_batch_sizes"] or loss <= 100 * tolerance:
            continue
        lower, upper, from_k, to_k = (
            row["lower_anchor"],
            row["upper_anchor"],
            row["from_k"],
            row["to_k"],
        )
        at = row["switch_at"]
        first_at_risk = at if emitted == "step" else lower + 1
        if past_max_num_seqs(first_at_risk, max_num_seqs):
            continue
        last_run = upper - 1 if max_num_seqs is None else min(upper - 1, max_num_seqs)
        if emitted == "step":
            message = (
                f"between batch sizes {lower} and {upper} nothing was measured: the step"
                f" schedule runs K={from_k} from {at} to {last_run}, where the interpolated"
                f" curves predict K={to_k} better by up to {percent_text(loss)}"
            )
        else:
            message = (
                f"between batch sizes {lower} and {upper} nothing was measured: the"
                f" interpolated schedule switches to K={to_k} at {at} on the model alone; where"
                f" the model is wrong it loses up to {percent_text(loss)}"
            )
        proposed = (
            []
            if plan is None
            else [
                b
                for b in plan.new_anchors["batch_size"].to_list()
                if lower < b < upper and not past_max_num_seqs(b, max_num_seqs)
            ]
        )
        where = (
            f"batch size {', '.join(map(str, proposed))}, the measurement plan's new anchor"
            if proposed
            else f"an anchor near batch size {min(at, last_run)}"
        )
        fix = f"measure {where} (tune-spec-k DIR --plan-json PATH writes the plan)"
        if emitted == "step":
            fix += ", or deploy the interpolated schedule (--interpolated-schedule)"
        reasons.append(Reason("unmeasured-switch", message, fix, loss, "%"))
    return reasons


#: The capture check's findings that put the deployed schedule in doubt (an unreached range
#: is never run: it needs no fix).
_CAPTURE_RULES = frozenset({"graphless-range", "capped-range"})


def capture_reasons(check: CeilingCheck) -> list[Reason]:
    """The capture rule's findings on the deployed schedule
    (:meth:`lib.deploy.constraints.CeilingCheck.findings`, the ones its warnings print): each
    range run past the ceiling without CUDA graphs (C assumed: the seed's schedule kept), and
    each range the known ceiling capped (capped, not measured; size: its expected loss where
    the neighbouring anchors give one)."""
    return [
        Reason(
            finding.rule,
            finding.message,
            finding.fix or "",
            finding.size,
            "%" if finding.size is not None else "",
        )
        for finding in check.findings()
        if finding.rule in _CAPTURE_RULES
    ]


def warning_reasons(problems: Iterable[Problem]) -> list[Reason]:
    """One reason per warning whose rule is in :data:`VERDICT_WARNINGS`, with that fix."""
    return [
        Reason(problem.rule, problem.message, VERDICT_WARNINGS[problem.rule])
        for problem in problems
        if problem.severity is Severity.WARNING and problem.rule in VERDICT_WARNINGS
    ]


#: The warnings that say the runs at an anchor did not run the anchor's batch, each with its
#: fix: the server could not hold that many requests (``max_num_seqs`` below the anchor, from
#: :func:`lib.deploy.tuning.sweep_engine_facts`), or Little's law says the runs held far fewer
#: (:mod:`lib.effective_batch`).
BATCH_NOT_RUN_FIXES: Mapping[str, str] = {
    "max-num-seqs-below-anchor": "rerun the anchor on a server started with --max-num-seqs at"
    " least the anchor (tune-spec-k plan writes it), or drop the anchor",
    "effective-batch-below-anchor": "rerun the anchor with more prompts per run (--num-prompts:"
    " the ramp-up and the tail weigh less), on a server and a client that keep that many"
    " requests in flight",
}


def _unmeasured_by_anchor(problems: Iterable[Problem], rule: str) -> dict[int, list[Problem]]:
    found: dict[int, list[Problem]] = {}
    for problem in problems:
        if problem.rule == rule and problem.anchor is not None and problem.k is not None:
            found.setdefault(problem.anchor, []).append(problem)
    return found


def unmeasured_reasons(problems: Iterable[Problem]) -> list[Reason]:
    """One reason per anchor with a K not measured there that the K measured there do not
    rule out (:data:`lib.unmeasured.UNMEASURED_RULE`): the K could be the best there, so the
    pick is not known to be. Its first finding's message and, as the fix, the cells to
    measure."""
    reasons = []
    for anchor, found in sorted(_unmeasured_by_anchor(problems, UNMEASURED_RULE).items()):
        ks = ", ".join(f"K={p.k}" for p in found)
        more = f" ({len(found) - 1} more K alike)" if len(found) > 1 else ""
        reasons.append(
            Reason(
                UNMEASURED_RULE,
                f"batch size {anchor}: {found[0].message}{more}",
                f"measure {ks} at batch size {anchor} (tune-spec-k plan --follow-up RESULT"
                " asks one run of each)",
            )
        )
    return reasons


def unimodal_assumption(problems: Iterable[Problem]) -> str | None:
    """The assumption under which unmeasured cells were ruled out
    (:data:`lib.unmeasured.UNMEASURED_RULED_OUT_RULE`), naming the cells per K; None where
    none was."""
    by_k: dict[int, list[int]] = {}
    for anchor, found in _unmeasured_by_anchor(problems, UNMEASURED_RULED_OUT_RULE).items():
        for problem in found:
            assert problem.k is not None
            by_k.setdefault(problem.k, []).append(anchor)
    if not by_k:
        return None
    cells = "; ".join(
        f"K={k} at batch sizes {', '.join(map(str, sorted(anchors)))}"
        for k, anchors in sorted(by_k.items())
    )
    return (
        f"throughput unimodal in K where a K was not measured (ruled out without measuring:"
        f" {cells}; measure them to check)"
    )


def batch_not_run_reasons(problems: Iterable[Problem]) -> list[Reason]:
    """One reason per anchor and rule of :data:`BATCH_NOT_RUN_FIXES`: the warnings that say
    the anchor's runs ran a smaller batch than the anchor, so its pick was made for a batch
    size other than the one the schedule deploys it at. The first warning's message, the Ks
    (and, in a context sweep, the prompt lengths) it covers, how many more, and the fix. A
    warning without an anchor counts for the sweep."""
    by_anchor: dict[tuple[str, int | None], list[Problem]] = {}
    for problem in problems:
        if problem.severity is Severity.WARNING and problem.rule in BATCH_NOT_RUN_FIXES:
            by_anchor.setdefault((problem.rule, problem.anchor), []).append(problem)
    reasons = []
    for (rule, anchor), found in by_anchor.items():
        ks = sorted({p.k for p in found if p.k is not None})
        prompts = sorted({p.extra["prompt_tokens"] for p in found if "prompt_tokens" in p.extra})
        cells = [f"K={ks}"] if ks else []
        if prompts:
            cells.append(f"{'/'.join(map(str, prompts))}-token prompts")
        where = [f"batch size {anchor}"] if anchor is not None else []
        if cells:
            where.append(f"({', '.join(cells)})")
        more = f" (and {len(found) - 1} more like it)" if len(found) > 1 else ""
        head = f"{' '.join(where)}: " if where else ""
        reasons.append(Reason(rule, head + found[0].message + more, BATCH_NOT_RUN_FIXES[rule]))
    return reasons


def unmeasured_tail_reason(
    ceiling: CaptureCeiling, last_anchor: int, carried_k: int
) -> Reason | None:
    """The rule: vLLM carries the last range's K to every batch size up to its
    ``max_num_seqs`` N, so with N known and above the largest anchor A (strict: N == A is
    measured), batch sizes A+1..N run ``carried_k`` where nothing was measured (the seed's
    rule: no extrapolation past the largest anchor). None where N is not known (the check
    then stops at the schedule's end and says so) or N <= A. The size: the share of the
    batch sizes 1..N that lie past A, in percent.

    >>> from lib.deploy.constraints import CaptureCeiling
    >>> known = CaptureCeiling(512, False, "assumed", 256, True, "--max-num-seqs")
    >>> unmeasured_tail_reason(known, 16, 3).size
    93.75
    >>> unmeasured_tail_reason(known, 256, 3) is None
    True
    """
    seqs = ceiling.max_num_seqs
    if not ceiling.max_num_seqs_known or seqs <= last_anchor:
        return None
    share = 100 * (seqs - last_anchor) / seqs
    first = last_anchor + 1
    span = str(first) if first == seqs else f"{first}-{seqs}"
    return Reason(
        "unmeasured-tail",
        f"batch sizes {span} ({percent_text(share)} of the batch sizes up to max_num_seqs={seqs},"
        f" from {ceiling.max_num_seqs_source}) were never measured: vLLM carries K={carried_k}"
        f" from the largest anchor {last_anchor} to all of them",
        f"measure up to batch size {seqs} (tune-spec-k plan --max-num-seqs {seqs} plans"
        f" anchors up to it), or serve with --max-num-seqs {last_anchor}",
        share,
        "%",
    )


#: How a cell's server ran: ``None`` without speculation, else its global K (the
#: ``num_speculative_tokens`` it was started with; -1 where the record states none).
ServerEngine = int | None
#: Each kept cell's servers, by (anchor, K).
CellEngines = Mapping[tuple[int, int], frozenset[ServerEngine]]


def runs_on_deployed_engine(engines: Collection[ServerEngine], global_k: int) -> bool:
    """The rule: a cell was measured on the deployed engine (Dynamic SD started with
    ``num_speculative_tokens`` = ``global_k``) when one of its servers speculated with that
    very global K. A server without speculation (``None``: no drafter, no Dynamic SD tax) or
    with another global K (sized for another maximum: a static-K sweep, mixed globals) is
    another engine; an empty collection (no server known) is not the deployed one.

    >>> runs_on_deployed_engine({7}, 7), runs_on_deployed_engine({3}, 7)
    (True, False)
    >>> runs_on_deployed_engine({None}, 7), runs_on_deployed_engine({None, 7}, 7)
    (False, True)
    """
    return global_k in engines


def _engine_text(engines: Collection[ServerEngine]) -> str:
    named = []
    if None in engines:
        named.append("a server without speculation")
    if -1 in engines:
        named.append("a server whose global K the records do not state")
    ks = sorted(e for e in engines if e is not None and e >= 0)
    if ks:
        named.append(f"servers started with num_speculative_tokens={'/'.join(map(str, ks))}")
    return " or ".join(named)


def deployed_engine_reason(
    picks: Mapping[int, int], engines: CellEngines, global_k: int
) -> Reason | None:
    """The deployed engine ran in no measurement of some pick: the config starts vLLM with
    ``num_speculative_tokens`` = ``global_k`` and a schedule, so every pick whose cell
    (:func:`runs_on_deployed_engine`) ran only on other servers (one server per K, as a
    static-K sweep runs; K=0 on a server without speculation) was measured on an engine the
    schedule never runs: its K runs on an engine sized for ``global_k``, and K=0 pays Dynamic
    SD's tax (engines.md). One reason naming each such pick; None where every pick ran on it
    (a pick with no cell known is left to the other rules)."""
    off = [
        (anchor, k, engines[(anchor, k)])
        for anchor, k in sorted(picks.items())
        if (anchor, k) in engines and not runs_on_deployed_engine(engines[(anchor, k)], global_k)
    ]
    if not off:
        return None
    grouped: dict[tuple[int, str], list[int]] = {}
    for anchor, k, on in off:
        grouped.setdefault((k, _engine_text(on)), []).append(anchor)
    cells = "; ".join(
        f"K={k} at batch size{'s' if len(anchors) > 1 else ''} {', '.join(map(str, anchors))}"
        f" ran on {engine}"
        for (k, engine), anchors in grouped.items()
    )
    return Reason(
        "deployed-engine-unmeasured",
        f"the deployed engine (num_speculative_tokens={global_k} with the schedule) ran in no"
        f" measurement of {len(off)} pick(s): {cells}",
        "measure the schedule before relying on it: tune-spec-k plan --validate RESULT writes"
        ' the sweep that runs it beside static-K servers (README, "Sweeps that vary K'
        ' statically")',
    )


def cell_engines(result: TuningResult) -> dict[tuple[int, int], frozenset[ServerEngine]]:
    """Each cell's servers (:data:`ServerEngine`) over the runs its gates kept."""
    runs = result.sweep.runs
    if not {"speculation", "global_k", "source", "position"} <= set(runs.columns):
        return {}
    kept = (
        runs.filter(pl.col("anchor").is_not_null() & pl.col("k").is_not_null())
        .join(
            result.excluded_runs.select("source", "position"), on=["source", "position"], how="anti"
        )
        .select(
            "anchor",
            "k",
            pl.when(pl.col("speculation").fill_null(False))
            .then(pl.col("global_k").fill_null(-1))
            .otherwise(None)
            .alias("engine"),
        )
        .unique()
    )
    found: dict[tuple[int, int], set[ServerEngine]] = {}
    for anchor, k, engine in kept.rows():
        found.setdefault((anchor, k), set()).add(engine)
    return {cell: frozenset(engines) for cell, engines in found.items()}


def no_speculation_reason(schedule: Schedule) -> Reason | None:
    """K=0 at every batch size: serving with the schedule keeps the drafter loaded and pays
    Dynamic SD's K=0 tax (engines.md: TPOT +7.4 % on vLLM V1, +16.7 % on MRv2, against a server
    without speculation) for no draft; serve without ``--speculative-config``. None when some
    range runs K > 0 (or there is no range)."""
    if not schedule.ranges or schedule.largest_k > 0:
        return None
    return Reason(
        "no-speculation",
        "the schedule runs K=0 at every batch size: speculation never pays on this sweep",
        "serve without --speculative-config (a Dynamic SD engine at K=0 still loads the"
        " drafter and pays its cost; tune-spec-k plan --validate measures it beside a server"
        " without speculation)",
    )


def draft_settings_reasons(config: Mapping[str, Any]) -> list[Reason]:
    """The config to paste lacks what vLLM needs: a ``method`` (the sweep recorded none: the
    ``"<method>"`` placeholder), or, for a method that drafts with its own model (any outside
    :data:`NO_DRAFT_MODEL_METHODS`), the draft ``model``."""
    method = config.get("method")
    if not isinstance(method, str) or method == "<method>":
        return [
            Reason(
                "missing-method",
                'the sweep recorded no speculative method: the config says "<method>"',
                'replace "<method>" with the server\'s method (e.g. eagle3, ngram) before pasting',
            )
        ]
    if method.lower() in NO_DRAFT_MODEL_METHODS or method.lower().endswith("_mtp"):
        return []
    if config.get("model"):
        return []
    return [
        Reason(
            "missing-draft-model",
            f"the sweep did not record the draft model of method {method}: the config has no"
            ' "model"',
            'add "model": "<the drafter the sweep served>" to the config before pasting',
        )
    ]


# --------------------------------------------------------------------------- verdicts


def verdict_of(analysis: Analysis, capture: CeilingCheck | None) -> Verdict:
    """The verdict of a batch-only analysis after the deployment layer (``capture``: the
    capture check of its schedule, :attr:`lib.deploy.tuning.Deployment.check`; None when there
    is no schedule to check)."""
    result = analysis.result
    errors = error_reasons(result.problems)
    if errors or not result.ok or result.schedule is None:
        fallback = [Reason("no-schedule", "no schedule could be built", "see the problems")]
        return _verdict(errors or fallback, [])
    reasons: list[Reason] = []
    report = analysis.report
    ceiling = capture.ceiling if capture is not None else None
    seqs = ceiling.max_num_seqs if ceiling is not None and ceiling.max_num_seqs_known else None
    if report is not None:
        reasons += anchor_reasons(result, report, analysis.plan, seqs)
        if analysis.switch_points is not None:
            reasons += switch_reasons(
                analysis.switch_points,
                emitted_schedule(result),
                report.tolerance,
                analysis.plan,
                seqs,
            )
    picks = dict(zip(result.decisions["anchor"], result.decisions["selected_k"], strict=True))
    if capture is not None:
        reasons += capture_reasons(capture)
        last = max(picks, default=None)
        if last is not None:
            carried = capture.schedule.k_at(capture.ceiling.max_num_seqs, result.deploy_global_k)
            tail = unmeasured_tail_reason(capture.ceiling, last, carried)
            reasons += [tail] if tail is not None else []
    reasons += batch_not_run_reasons(result.problems)
    reasons += unmeasured_reasons(result.problems)
    reasons += warning_reasons(result.problems)
    no_speculation = no_speculation_reason(result.schedule)
    if no_speculation is not None:
        reasons.append(no_speculation)
    else:
        engine = deployed_engine_reason(picks, cell_engines(result), result.deploy_global_k)
        reasons += [engine] if engine is not None else []
        reasons += draft_settings_reasons(result.speculative_config())
    return _verdict(
        [],
        reasons,
        _assumptions(
            None if report is None else report.servers.statement(),
            capture.ceiling if capture is not None else None,
            unimodal_assumption(result.problems),
        ),
    )


def _assumptions(
    servers: str | None, ceiling: CaptureCeiling | None, unimodal: str | None = None
) -> str | None:
    """What the verdict rests on, one text: how much server starts differ (``servers``), the
    vLLM release whose rules the capture check applied, where it was assumed
    (:meth:`lib.deploy.ceiling.CaptureCeiling.assumption`), and the unimodality that ruled
    unmeasured cells out (:func:`unimodal_assumption`)."""
    parts = [servers, ceiling.assumption() if ceiling is not None else None, unimodal]
    found = [part for part in parts if part]
    return "; ".join(found) if found else None


def _answer_ceiling(analysis: ContextAnalysis) -> CaptureCeiling | None:
    """The capture ceiling the context answer's schedule was checked against, if any."""
    answer = analysis.answer
    if answer is None:
        return None
    check = getattr(answer.result.additions.get("deployment"), "check", None)
    return check.ceiling if isinstance(check, CeilingCheck) else None


def verdict_in(result: TuningResult) -> Verdict | None:
    """The verdict :func:`lib.deploy.tuning.deploy_analysis` gave ``result`` (None before)."""
    found = result.additions.get("verdict")
    return found if isinstance(found, Verdict) else None


def context_loss_reasons(analysis: ContextAnalysis, tolerance: float) -> list[Reason]:
    """The deployable vLLM config of the grid (``vllm-context``: one K per batch size, the
    default context mix) losing more than the tie tolerance (``> 100 * tolerance`` percent;
    equal is not more) against the cell's own pick at some (batch size, prompt length): one
    reason with the worst cell. The fix names the registry's other context formats that lose
    no more than the tolerance (none may: then only the traffic's mix can say what counts)."""
    summaries = {}
    for name, exported, _ in grid_exports(analysis):
        summary = getattr(exported, "summary", None)
        if summary is not None:
            summaries[name] = summary
    deployable = summaries.get("vllm-context")
    if deployable is None or deployable.largest_at is None:
        return []
    loss = deployable.largest_loss_percent
    if not math.isfinite(loss) or loss <= 100 * tolerance:
        return []
    batch, prompt = deployable.largest_at
    within = [
        name
        for name, summary in summaries.items()
        if name != "vllm-context" and summary.largest_loss_percent <= 100 * tolerance
    ]
    fix = (
        f"an engine with {' or '.join(within)} (open vLLM proposals: tune-spec-k export --format"
        f" {within[0]}) loses no more than the tolerance; else"
        if within
        else "no context format loses less than the tolerance here;"
    )
    fix += " give --context-mix with your traffic's prompt lengths to weigh what is lost"
    return [
        Reason(
            "context-loss",
            f"the deployable vLLM config (one K per batch size) loses {percent_text(loss)} at"
            f" batch size {batch} with {prompt}-token prompts against that cell's own pick",
            fix,
            loss,
            "%",
        )
    ]


#: The rules of a context point's own verdict the grid's verdict already states in its own
#: words: its unresolved cells (an unsure pick's P is below the confidence: unresolved there
#: too), the answer's warnings (counted from the grid's problems), the anchors whose runs did
#: not run their batch (one reason per anchor across the prompt lengths, from the grid's
#: problems: :func:`batch_not_run_reasons`), K=0 everywhere and the draft settings.
_GRID_STATES = frozenset(
    {
        "unresolved-anchor",
        "unsure-pick",
        "no-schedule",
        "no-speculation",
        "missing-method",
        "missing-draft-model",
        *VERDICT_WARNINGS,
        *BATCH_NOT_RUN_FIXES,
    }
)


def point_reasons(analysis: ContextAnalysis) -> list[Reason]:
    """Every reason a context point's own verdict gives (the batch rules: the capture ceiling,
    unmeasured switches, extrapolation, ...: :func:`verdict_of` of the point, deployed by
    :func:`lib.deploy.tuning.deploy_contexts`), saying which prompt length, but those the grid
    states itself (:data:`_GRID_STATES`). A point refused outright (``cannot-tune``) adds
    nothing: its errors are the grid's. Before deployment (no point verdict) there is none,
    so a grid is never ``ready`` on fewer rules than each of its prompt lengths alone."""
    reasons = []
    for point, context in zip(analysis.axis.points, analysis.contexts, strict=True):
        found = verdict_in(context.result)
        if found is None or found.state == "cannot-tune":
            continue
        reasons += [
            dataclasses.replace(reason, message=f"at {point.label()}: {reason.message}")
            for reason in found.reasons
            if reason.rule not in _GRID_STATES
        ]
    return reasons


#: Each grid's verdict, found once: the CLI prints it and writes it, the app shows it and
#: downloads it, and the loss rule exports every context format. Weak keys: an analysis the
#: app no longer shows takes its verdict with it.
_CONTEXT_VERDICTS: weakref.WeakKeyDictionary[ContextAnalysis, Verdict] = weakref.WeakKeyDictionary()


def context_verdict(analysis: ContextAnalysis) -> Verdict:
    """The verdict of a (batch x context) grid: errors, or a grid that cannot be deployed,
    cannot tune; each cell the grid does not call resolved is a reason, as is the vLLM
    config's loss across prompt lengths (:func:`context_loss_reasons`) and each anchor whose
    runs did not run its batch (:func:`batch_not_run_reasons`), then the answer's warnings,
    K=0 everywhere and draft settings. Computed once per analysis."""
    found = _CONTEXT_VERDICTS.get(analysis)
    if found is None:
        found = _CONTEXT_VERDICTS[analysis] = _context_verdict(analysis)
    return found


def _context_verdict(analysis: ContextAnalysis) -> Verdict:
    errors = error_reasons(analysis.problems)
    if not errors and analysis.not_deployable_reason is not None:
        errors = [
            Reason(
                "not-deployable",
                f"no schedule can be deployed: {analysis.not_deployable_reason}",
                "measure batch anchors that start at 1 at every prompt length",
            )
        ]
    if errors:
        return _verdict(errors, [])
    reasons: list[Reason] = []
    for cell in analysis.grid():
        if cell["status"] == "resolved":
            continue
        p = cell["p_eps_good"]
        reasons.append(
            Reason(
                "unresolved-cell",
                f"batch size {cell['batch_size']} at {cell['prompt_tokens']}-token prompts:"
                f" K={cell['selected_k']} is {cell['status']} (P(eps-good)"
                f" {probability_text(p)})",
                "more runs there (tune-spec-k DIR --plan-json at that prompt length)",
                p,
                "P",
            )
        )
    reasons += point_reasons(analysis)
    tolerance = analysis.pooled.report.tolerance if analysis.pooled.report is not None else 0.0
    reasons += context_loss_reasons(analysis, tolerance)
    answer = analysis.answer
    reasons += batch_not_run_reasons(analysis.problems)
    if answer is not None and answer.result.schedule is not None:
        reasons += warning_reasons(analysis.problems)
        no_speculation = no_speculation_reason(answer.result.schedule)
        if no_speculation is not None:
            reasons.append(no_speculation)
        else:
            reasons += draft_settings_reasons(answer.result.speculative_config())
    servers = analysis.servers
    return _verdict(
        [],
        reasons,
        _assumptions(None if servers is None else servers.statement(), _answer_ceiling(analysis)),
    )
