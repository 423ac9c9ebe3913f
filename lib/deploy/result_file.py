"""The result JSON (``speculative_k_schedule.json``): its one writer and its one typed reader.

The file is the edge between a tuning and everything that runs later (``export``, ``diff``,
``plan --follow-up``, ``plan --validate``, a CI job): nothing in the program passes it between
stages. Inside, a tuning is typed (:class:`~lib.schedule.TuningResult`,
:class:`~lib.context.ContextAnalysis`, :class:`~lib.deploy.decisions.Decisions`).

- Writer: :func:`result_document` (the JSON value) and :func:`result_text` (the file's exact
  bytes) of a tuning, :func:`context_document` and :func:`context_text` of a context analysis
  with its verdict: the seed's keys in the seed's order, then tune-spec-k's additions.
- Reader: :func:`read_result_file` / :func:`result_file_of` give a :class:`ResultFile`: the
  schedule, the global K, the objective and its direction, the draft settings, per anchor the
  pick, each candidate's evidence (runs, median, relative MAD) and the confidence analysis's
  numbers (status, P(eps-good) per K, contenders, runs needed), the capture ceiling the result
  was tuned under and the capture boundaries it asked to measure, and the context grid. Every
  front end that reads a result reads this, so a field means the same thing everywhere.

The reader accepts the seed's files too (no confidence, no deployment, no grid): what a file
does not hold is None or empty, never guessed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lib.cliffs import CLIFF_RULE
from lib.context_grid import INTERPOLATED_KEY, ContextGrid, context_grid_of
from lib.deploy.engine import EngineFacts, Fact, GpuMemory, TextFact, VllmCap
from lib.files import read_json
from lib.keys import MISSING, stated_k, whole_number, whole_number_text
from lib.problems import Problem, Severity
from lib.schedule import (
    NO_SCHEDULE,
    JsonValue,
    Schedule,
    candidate_json,
    finite_or_none,
    interpolated_schedule,
)
from lib.settings import Direction
from lib.unmeasured import UNMEASURED_RULE

if TYPE_CHECKING:
    from lib.context import ContextAnalysis
    from lib.schedule import TuningResult

__all__ = [
    "AnchorConfidence",
    "ResultAnchor",
    "ResultCandidate",
    "ResultFile",
    "context_document",
    "context_text",
    "is_result",
    "read_result_file",
    "result_document",
    "result_file_of",
    "result_text",
    "seed_path_order",
]

#: The result's schedule key: the seed's first output key, fixed by the result format (vLLM's
#: field, ``schedule_field``, is :data:`lib.deploy.decisions.SCHEDULE_KEY`).
_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
#: The seed's key that makes a JSON object a tuning result.
_DECISIONS_KEY = "batch_decisions"
#: The key of a context analysis's grid.
_GRID_KEY = "context_grid"


# --------------------------------------------------------------------------- the writer


def result_document(result: TuningResult) -> dict[str, Any]:
    """The result JSON of a tuning (:func:`_tuning_document`). Floats that are not finite
    become null. The document is the caller's to change."""
    return _tuning_document(result)


def result_text(result: TuningResult) -> str:
    """The result file's exact text: same input and settings give the same bytes."""
    return _text(result_document(result))


def context_document(
    analysis: ContextAnalysis, verdict: JsonValue, *, copy_grid: bool = True
) -> dict[str, Any]:
    """The result JSON of a context analysis (:func:`_context_document`) with its ``verdict``
    (:func:`lib.deploy.verdict.context_verdict`). The document is the caller's to change;
    ``copy_grid=False`` (for a document only written) leaves the analysis's own grid rows in
    it."""
    return _context_document(analysis, verdict, copy_grid=copy_grid)


def context_text(analysis: ContextAnalysis, verdict: JsonValue) -> str:
    """The context result file's exact text: same input and settings give the same bytes."""
    # Written at once, never changed: the analysis's own grid rows serve.
    return _text(context_document(analysis, verdict, copy_grid=False))


def _text(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def _tuning_document(result: TuningResult) -> dict[str, Any]:
    """The seed's output keys, in the seed's order, then tune-spec-k's additions
    (``speculative_config``, ``problems``, then each of ``result.additions``)."""
    settings = result.settings
    selection = {
        "batch_size_metric": result.sweep.batch_size_var,
        "k_metric": result.sweep.k_var,
        "objective_metric": settings.objective,
        "objective_direction": settings.direction,
        "acceptance_metric": settings.acceptance,
        "min_runs": settings.min_runs,
        "relative_tolerance": settings.relative_tolerance,
        "uncertainty_penalty": settings.uncertainty_penalty,
        "max_objective_relative_mad": settings.max_objective_relative_mad,
        "max_acceptance_relative_mad": settings.max_acceptance_relative_mad,
        "strict_acceptance_stability": settings.strict_acceptance_stability,
        "max_batch_size": result.max_batch_size,
        "allow_mixed_global_k": settings.allow_mixed_global_k,
        # Written only when set, so a sweep of one K set writes the file it always wrote.
        **({"allow_unmeasured_k": True} if settings.allow_unmeasured_k else {}),
        **({"design_ks": sorted(settings.design_ks)} if settings.design_ks else {}),
    }
    candidates: dict[int, list[dict[str, Any]]] = {}
    effective = result.effective_batch.blocks() if result.effective_batch is not None else None
    for cell in result.cells.to_dicts():
        candidate = {"batch_size": cell["anchor"], **candidate_json(cell)}
        if effective is not None:
            candidate["effective_batch_size"] = effective.get((cell["anchor"], cell["k"]))
        candidates.setdefault(cell["anchor"], []).append(candidate)
    blocks = result.confidence.blocks() if result.confidence is not None else {}
    decisions = []
    for row in result.decisions.to_dicts():
        decision: dict[str, Any] = {
            "batch_size": row["anchor"],
            "selected_k": row["selected_k"],
            "selected_median_objective": finite_or_none(row["selected_median"]),
            "selected_conservative_objective": finite_or_none(row["selected_conservative"]),
            "selected_vs_best_percent": finite_or_none(row["vs_best_percent"]),
            "selected_vs_k0_percent": finite_or_none(row["vs_k0_percent"]),
            "candidates": candidates.get(row["anchor"], []),
        }
        block = blocks.get(row["anchor"])
        if block is not None:
            decision["confidence"] = dict(block)
        decisions.append(decision)
    return {
        _SCHEDULE_KEY: (result.schedule or NO_SCHEDULE).to_json(),
        "configured_global_num_speculative_tokens": result.configured_global_k,
        "max_num_speculative_tokens_observed": result.max_k_observed,
        "selection": selection,
        _DECISIONS_KEY: decisions,
        "input_summary_files": seed_path_order(result.sweep.input_files),
        "speculative_config": result.speculative_config(),
        "problems": [problem.to_json() for problem in result.problems],
        **{key: value.to_json() for key, value in result.additions.items()},
    }


def seed_path_order(paths: Iterable[str]) -> list[str]:
    """Relative paths in the order the seed lists them: it sorts ``Path`` objects, which
    compare component by component, so ``A/summary.json`` comes before ``A-2/summary.json``
    although ``-`` sorts before ``/`` as text.

    >>> seed_path_order(["A-2/summary.json", "A/summary.json", "A/b/summary.json"])
    ['A/b/summary.json', 'A/summary.json', 'A-2/summary.json']
    """
    return sorted(paths, key=lambda path: path.split("/"))


def _context_document(
    analysis: ContextAnalysis, verdict: JsonValue, *, copy_grid: bool
) -> dict[str, Any]:
    """The seed's keys of the analysis's answer (null schedule and config when there is none or
    the grid is not deployable), every problem, then ``context_axis``, ``context_grid`` (a copy
    of the analysis's rows with ``copy_grid``, for a caller that may change the document; the
    rows themselves without), ``context_measurement_plan`` and the grid's ``verdict``."""
    source = analysis.answer or analysis.pooled
    data = _tuning_document(source.result)
    if analysis.answer is None or not analysis.deployable:
        data[_SCHEDULE_KEY] = None
        data["speculative_config"] = None
    data["problems"] = [problem.to_json() for problem in analysis.problems]
    data["context_axis"] = {
        "field": analysis.axis.field,
        "tolerance": analysis.axis.tolerance,
        "points": [
            _point_json(point.to_json(), interpolated_schedule(context.result))
            for point, context in zip(analysis.axis.points, analysis.contexts, strict=True)
        ],
        "deployable": analysis.deployable,
        "not_deployable_reason": analysis.not_deployable_reason,
    }
    # The analysis keeps its rows for the heatmap.
    rows = analysis.grid()
    data["context_grid"] = copy.deepcopy(rows) if copy_grid else rows
    data["context_measurement_plan"] = analysis.context_points_to_measure()
    data["verdict"] = verdict.to_json()
    return data


def _point_json(point: dict[str, Any], interpolated: Schedule | None) -> dict[str, Any]:
    """A context point as the file holds it: with its interpolated schedule where the point's
    analysis emits one (:func:`lib.schedule.interpolated_schedule`), read back into
    :attr:`lib.context_grid.ContextPoint.interpolated`."""
    if interpolated is None:
        return point
    return {**point, INTERPOLATED_KEY: interpolated.to_json()}


# --------------------------------------------------------------------------- the reader


@dataclass(frozen=True)
class ResultCandidate:
    """One measured K at one anchor, as the file gives it: runs, median objective and its
    relative MAD (None where the file has null: a statistic that was not finite)."""

    batch_size: int
    k: int
    num_runs: int
    median: float | None
    relative_mad: float | None


@dataclass(frozen=True)
class AnchorConfidence:
    """The confidence analysis of one anchor (``batch_decisions[i].confidence``): its status
    (``resolved``, ``unresolved``, ...), P(eps-good) per K, the contenders and, per K, the runs
    its noise calls for."""

    status: str
    p_eps_good: Mapping[int, float]
    contenders: tuple[int, ...]
    runs_needed: Mapping[int, int]
    #: Per K, the server starts its runs came from, and the total a contender's runs should
    #: come from (none in files written before server replicas).
    num_servers: Mapping[int, int] = dataclasses.field(default_factory=dict)
    servers_needed: Mapping[int, int] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class ResultAnchor:
    """One batch-size anchor: the K picked there (None: undecided), every candidate measured,
    and the confidence analysis (None in the seed's files)."""

    batch_size: int
    selected_k: int | None
    candidates: tuple[ResultCandidate, ...]
    confidence: AnchorConfidence | None

    def candidate(self, k: int) -> ResultCandidate | None:
        return next((c for c in self.candidates if c.k == k), None)


@dataclass(frozen=True)
class ResultFile:
    """A result JSON, typed (see the module's docstring for what each part is).

    ``schedule``: None where the file has null (a context grid that cannot be deployed).
    ``configured_global_k``: the sweep's stated global K (the seed's key), None when unstated.
    ``speculative_config``: the config as written (its method may be the ``"<method>"``
    placeholder), None when the file has none. ``anchors_to_measure``: the capture boundaries
    the schedule crosses, each with the K to measure there. ``grid``: the context grid, None
    when the file has none or it cannot be read (``grid_problems`` say why; empty when there is
    no grid at all). ``not_interpolable``: (lower anchor, upper anchor, K) of each
    cross-anchor cliff the file's warnings report (:func:`_cliff_stretches`).
    """

    source: str
    schedule: Schedule | None
    configured_global_k: int | None
    objective: str
    direction: Direction
    speculative_config: Mapping[str, Any] | None
    anchors: tuple[ResultAnchor, ...]
    engine: EngineFacts
    anchors_to_measure: tuple[tuple[int, tuple[int, ...]], ...]
    grid: ContextGrid | None
    grid_problems: tuple[Problem, ...]
    not_interpolable: frozenset[tuple[int, int, int]] = frozenset()
    #: Each ``context_grid`` cell as an anchor at its prompt length, ``(prompt tokens,
    #: anchor)``: its pick, candidates (runs, medians) and confidence (status, the selected
    #: K's P(eps-good), contenders, runs needed), undecided cells included: what a follow-up
    #: reruns (:func:`lib.loop.plan.follow_up_needs.follow_up_needs`). Empty without a grid.
    context_cells: tuple[tuple[int, ResultAnchor], ...] = ()
    #: The grid's prompt-length field (``context_axis.field``), None without a grid.
    context_field: str | None = None
    #: The prompt lengths ``context_measurement_plan`` proposes to measure next.
    context_points_to_measure: tuple[int, ...] = ()
    #: Where ``schedule`` is the tuned schedule capped to vLLM's capture ceiling, the tuned one
    #: and the ceiling (:func:`_vllm_cap`); None where nothing was capped.
    vllm_cap: VllmCap | None = None
    #: The confidence the analysis decided at and its tie tolerance (``decision_policy``;
    #: the tolerance else ``selection.relative_tolerance``); None where the file has neither.
    confidence_level: float | None = None
    tie_tolerance: float | None = None
    #: The verdict's state (``verdict.state``: ready, provisional, cannot-tune); None in files
    #: without one (the seed's, older ones) or with another value.
    verdict_state: str | None = None
    #: The (anchor, K) cells a bracketed sweep did not measure that nothing ruled out (the
    #: ``problems`` of rule ``unmeasured-k``, :mod:`lib.unmeasured`): a follow-up measures them.
    unmeasured_cells: tuple[tuple[int, int], ...] = ()

    @property
    def has_grid(self) -> bool:
        return self.grid is not None or bool(self.grid_problems)

    @property
    def has_confidence(self) -> bool:
        return any(anchor.confidence is not None for anchor in self.anchors)

    @property
    def candidate_ks(self) -> tuple[int, ...]:
        return tuple(sorted({c.k for anchor in self.anchors for c in anchor.candidates}))

    def medians(self) -> dict[int, dict[int, float]]:
        """Per anchor, each candidate's median objective (candidates without one left out)."""
        return {
            anchor.batch_size: {c.k: c.median for c in anchor.candidates if c.median is not None}
            for anchor in self.anchors
        }


class _Invalid(Exception):
    """A field of the file that is not what the writer writes: the problem says which."""

    def __init__(
        self, source: str, message: str, field: str | None = None, value: Any = MISSING
    ) -> None:
        super().__init__(message)
        shown = None if value is MISSING else json.dumps(value)[:80]
        self.problem = Problem(
            Severity.ERROR, "not-a-result", message, files=(source,), field=field, value=shown
        )


def read_result_file(path: str | Path) -> tuple[ResultFile | None, list[Problem]]:
    """:func:`result_file_of` of a file, or None and why it could not be read."""
    data, problems = read_json(path)
    if data is MISSING:
        return None, problems
    return result_file_of(data, str(path))


def is_result(data: Any) -> bool:
    """True for a JSON object that claims to be a tuning result: it has ``batch_decisions``,
    or a ``context_grid`` (the grid is what the context formats read)."""
    return isinstance(data, dict) and (_DECISIONS_KEY in data or _GRID_KEY in data)


def _unmeasured_cells(data: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    """The ``problems`` of rule :data:`lib.unmeasured.UNMEASURED_RULE` as (anchor, K), sorted;
    entries without a whole anchor and K are not cells and are passed over."""
    found = set()
    for entry in _list(data.get("problems")):
        problem = _mapping(entry)
        anchor, k = whole_number(problem.get("anchor")), whole_number(problem.get("k"))
        if problem.get("rule") == UNMEASURED_RULE and anchor is not None and k is not None:
            found.add((anchor, k))
    return tuple(sorted(found))


def result_file_of(data: Any, source: str) -> tuple[ResultFile | None, list[Problem]]:
    """The typed result in ``data`` (parsed from ``source``), or None and a ``not-a-result``
    error naming the field, its value and what was expected.

    Refused: a value that is not an object with ``batch_decisions`` or a ``context_grid`` (a
    grid alone is read with no anchors: the context formats need only it); a schedule that is
    neither null nor valid for vLLM; ``batch_decisions`` that is not a list of objects, each
    with a whole ``batch_size`` and a ``candidates`` list of objects with whole
    ``batch_size``, ``k`` and ``num_runs``; an objective direction other than maximize or
    minimize. Accepted as absent
    (None, empty): ``confidence``, ``deployment``, ``speculative_config``, ``context_grid``
    (whose own reader, :func:`lib.context_grid.context_grid_of`, checks it when present)."""
    try:
        return _result_file(data, source), []
    except _Invalid as invalid:
        return None, [invalid.problem]


def _result_file(data: Any, source: str) -> ResultFile:
    if not is_result(data):
        raise _Invalid(
            source,
            "not a tuning result (expected the JSON written by tune-spec-k, with"
            f" '{_SCHEDULE_KEY}' and '{_DECISIONS_KEY}')",
        )
    schedule = None
    if data.get(_SCHEDULE_KEY) is not None:
        schedule, violations = Schedule.parse(data.get(_SCHEDULE_KEY))
        if schedule is None:
            raise _Invalid(source, "not a valid schedule: " + "; ".join(violations), _SCHEDULE_KEY)
    selection = _mapping(data.get("selection"))
    direction = selection.get("objective_direction", "maximize")
    if direction not in ("maximize", "minimize"):
        raise _Invalid(
            source, "expected 'maximize' or 'minimize'", "selection.objective_direction", direction
        )
    decisions = data.get(_DECISIONS_KEY, [] if _GRID_KEY in data else MISSING)
    if not isinstance(decisions, list):
        raise _Invalid(source, "missing or not a list", _DECISIONS_KEY, decisions)
    anchors = tuple(
        _anchor(entry, f"{_DECISIONS_KEY}[{i}]", source) for i, entry in enumerate(decisions)
    )
    config = data.get("speculative_config")
    grid, grid_problems = context_grid_of(data, source) if "context_grid" in data else (None, [])
    try:
        context_cells = _context_cells(data, source)
    except _Invalid as invalid:
        # A damaged grid is the grid's problem (the result's other parts stay readable).
        context_cells = ()
        grid_problems = grid_problems or [invalid.problem]
    return ResultFile(
        source=source,
        schedule=schedule,
        # Within the limit on any count, as every whole number the file holds.
        configured_global_k=whole_number(
            stated_k(data.get("configured_global_num_speculative_tokens"))
        ),
        objective=str(selection.get("objective_metric", "output_throughput")),
        direction="minimize" if direction == "minimize" else "maximize",
        speculative_config=config if isinstance(config, dict) else None,
        anchors=anchors,
        engine=_engine_of(data),
        vllm_cap=_vllm_cap(data, source),
        anchors_to_measure=_anchors_to_measure(data),
        grid=grid,
        grid_problems=tuple(grid_problems),
        not_interpolable=_cliff_stretches(data, source),
        context_cells=context_cells,
        context_field=_context_field(data),
        verdict_state=_verdict_state(data),
        unmeasured_cells=_unmeasured_cells(data),
        context_points_to_measure=tuple(
            p
            for p in (
                whole_number(_mapping(row).get("prompt_tokens"))
                for row in _list(data.get("context_measurement_plan"))
            )
            if p is not None and p >= 1
        ),
        confidence_level=_number(_mapping(data.get("decision_policy")).get("confidence")),
        tie_tolerance=_number(
            _mapping(data.get("decision_policy")).get(
                "tie_tolerance", selection.get("relative_tolerance")
            )
        ),
    )


def _verdict_state(data: Mapping[str, Any]) -> str | None:
    """``verdict.state`` where it is one of the verdict's states, else None."""
    state = _mapping(data.get("verdict")).get("state")
    return state if state in ("ready", "provisional", "cannot-tune") else None


def _context_field(data: Mapping[str, Any]) -> str | None:
    if _GRID_KEY not in data:
        return None
    field = _mapping(data.get("context_axis")).get("field")
    return field if isinstance(field, str) else None


def _context_cells(data: Mapping[str, Any], source: str) -> tuple[tuple[int, ResultAnchor], ...]:
    """The ``context_grid`` cells, each read as a ``batch_decisions`` entry is
    (:func:`_anchor`) at its whole ``prompt_tokens`` >= 1; its confidence from the cell's
    ``status``, ``p_eps_good`` (of the selected K), ``contenders`` and ``runs_needed``."""
    cells = []
    for index, row in enumerate(_list(data.get(_GRID_KEY))):
        path = f"{_GRID_KEY}[{index}]"
        if not isinstance(row, dict):
            raise _Invalid(source, "not an object", path)
        prompt = whole_number(row.get("prompt_tokens"))
        if prompt is None or prompt < 1:
            raise _Invalid(
                source,
                "expected a whole prompt length >= 1",
                f"{path}.prompt_tokens",
                row.get("prompt_tokens"),
            )
        batch = row.get("batch_size")
        candidates = row.get("candidates")
        if isinstance(candidates, list):
            candidates = [
                {"batch_size": batch, **c} if isinstance(c, dict) else c for c in candidates
            ]
        selected = whole_number(row.get("selected_k"))
        p = row.get("p_eps_good")
        block = {
            "status": row.get("status", ""),
            "p_eps_good": {} if selected is None or p is None else {str(selected): p},
            "contenders": row.get("contenders"),
            "runs_needed": row.get("runs_needed"),
        }
        entry = {**row, "candidates": candidates, "confidence": block}
        cells.append((prompt, _anchor(entry, path, source)))
    return tuple(cells)


def _cliff_stretches(data: Mapping[str, Any], source: str) -> frozenset[tuple[int, int, int]]:
    """The (lower anchor, upper anchor, K) of every ``cross-anchor-cliff`` warning in the
    file's ``problems`` (the writer writes each cliff's anchors in its ``extra`` and its K as
    ``k``). A file without problems has none; a cliff warning without whole anchors and K is
    refused, naming the field: read as no cliff, an export would interpolate across it."""
    problems = data.get("problems")
    if not isinstance(problems, list):
        return frozenset()
    found = set()
    for i, problem in enumerate(problems):
        if not isinstance(problem, dict) or problem.get("rule") != CLIFF_RULE:
            continue
        extra = _mapping(problem.get("extra"))
        values = {
            f"problems[{i}].extra.lower_batch_size": extra.get("lower_batch_size"),
            f"problems[{i}].extra.upper_batch_size": extra.get("upper_batch_size"),
            f"problems[{i}].k": problem.get("k"),
        }
        numbers = []
        for where, value in values.items():
            number = whole_number(value)
            if number is None:
                raise _Invalid(source, f"a {CLIFF_RULE} warning needs a whole number", where, value)
            numbers.append(number)
        lower, upper, k = numbers
        found.add((lower, upper, k))
    return frozenset(found)


def _anchor(entry: Any, path: str, source: str) -> ResultAnchor:
    """One ``batch_decisions`` entry."""
    if not isinstance(entry, dict):
        raise _Invalid(source, "not an object", path)
    batch = whole_number(entry.get("batch_size"))
    if batch is None:
        raise _Invalid(
            source, "expected a whole batch size", f"{path}.batch_size", entry.get("batch_size")
        )
    candidates = entry.get("candidates")
    if not isinstance(candidates, list):
        raise _Invalid(source, "no 'candidates' list", f"{path}.candidates")
    read = []
    for index, candidate in enumerate(candidates):
        where = f"{path}.candidates[{index}]"
        if not isinstance(candidate, dict):
            raise _Invalid(source, "not an object", where)
        numbers: dict[str, int] = {}
        for name in ("batch_size", "k", "num_runs"):
            number = whole_number(candidate.get(name))
            if number is None:
                raise _Invalid(
                    source, "expected a whole number >= 0", f"{where}.{name}", candidate.get(name)
                )
            numbers[name] = number
        read.append(
            ResultCandidate(
                batch_size=numbers["batch_size"],
                k=numbers["k"],
                num_runs=numbers["num_runs"],
                median=_number(candidate.get("median_objective")),
                relative_mad=_number(candidate.get("objective_relative_mad")),
            )
        )
    return ResultAnchor(
        batch_size=batch,
        selected_k=whole_number(entry.get("selected_k")),
        candidates=tuple(read),
        confidence=_confidence(entry.get("confidence")),
    )


def _confidence(block: Any) -> AnchorConfidence | None:
    """A confidence block; entries that are not numbers are left out (the block is evidence
    for planning, not a decision: a damaged entry means no evidence for that K)."""
    if not isinstance(block, dict):
        return None
    return AnchorConfidence(
        status=str(block.get("status", "")),
        p_eps_good=_by_k(block.get("p_eps_good"), _number),
        contenders=tuple(
            k for k in (whole_number(v) for v in _list(block.get("contenders"))) if k is not None
        ),
        runs_needed=_by_k(block.get("runs_needed"), whole_number),
        num_servers=_by_k(block.get("num_servers"), whole_number),
        servers_needed=_by_k(block.get("servers_needed"), whole_number),
    )


def _by_k(value: Any, convert: Any) -> dict[int, Any]:
    """A JSON object keyed by K (as strings), its values converted; bad entries left out."""
    found = {}
    for key, item in _mapping(value).items():
        k, converted = whole_number_text(key), convert(item)
        if k is not None and converted is not None:
            found[k] = converted
    return found


def _positive_number(value: Any) -> bool:
    """A JSON number > 0 and finite (never a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _engine_of(data: Mapping[str, Any]) -> EngineFacts:
    """What a result was tuned under, where it was stated (not assumed): the capture ceiling
    and max_num_seqs, the vLLM release and the GPU, and vLLM 0.34's explicit decode settings
    (``deployment.capture_ceiling``)."""
    ceiling = _mapping(_mapping(data.get("deployment")).get("capture_ceiling"))
    facts: dict[str, Any] = {}  # EngineFacts' fields, each a Fact or a GpuMemory
    for name, known in (("size", "known"), ("max_num_seqs", "max_num_seqs_known")):
        value = whole_number(ceiling.get(name))
        if value is not None and value >= 1 and ceiling.get(known) is True:
            target = "max_cudagraph_capture_size" if name == "size" else name
            source = ceiling.get("source" if name == "size" else "max_num_seqs_source")
            facts[target] = Fact(value, f"the result's {source}")
    for name, target in (
        ("explicit_decode_requests", "decode_requests"),
        ("decode_token_bound", "decode_tokens"),
    ):
        value = whole_number(ceiling.get(name))
        if value is not None and value >= 1:
            facts[target] = Fact(value, f"the result's {ceiling.get('decode_source')}")
    # The GPU's memory and tensor parallelism, where the tuning was given them.
    memory = ceiling.get("gpu_memory_gib")
    if isinstance(memory, int | float) and _positive_number(memory):
        facts["gpu_memory_gib"] = GpuMemory(
            float(memory), f"the result's {ceiling.get('gpu_memory_gib_source')}"
        )
    tensor_parallel = whole_number(ceiling.get("tensor_parallel_size"))
    if tensor_parallel is not None and tensor_parallel >= 1:
        facts["tensor_parallel_size"] = Fact(
            tensor_parallel, f"the result's {ceiling.get('tensor_parallel_size_source')}"
        )
    texts: dict[str, TextFact] = {}
    for name, target in (("vllm_version", "vllm_version"), ("gpu", "gpu")):
        value = ceiling.get(name)
        if isinstance(value, str) and value and ceiling.get(f"{name}_known") is True:
            texts[target] = TextFact(value, f"the result's {ceiling.get(f'{name}_source')}")
    return EngineFacts(**facts, vllm_version=texts.get("vllm_version"), gpu=texts.get("gpu"))


def _vllm_cap(data: Mapping[str, Any], source: str) -> VllmCap | None:
    """The cap a result took for vLLM: where ``deployment.capped_ranges`` lists any range, the
    schedule is the tuned one capped to the capture ceiling, and ``deployment.tuned_schedule``
    and ``deployment.capture_ceiling`` say what was capped to what. None where nothing was
    capped (a seed result, a result tuned with C assumed or within it). A capped result whose
    tuned schedule or ceiling is damaged is refused, naming the field: an export to another
    engine would otherwise take vLLM's capped schedule for the measured one."""
    deployment = _mapping(data.get("deployment"))
    if not _list(deployment.get("capped_ranges")):
        return None
    raw = deployment.get("tuned_schedule")
    tuned, violations = Schedule.parse(raw)
    if tuned is None:
        raise _Invalid(
            source,
            "not a valid schedule (the schedule as tuned, before the cap): "
            + "; ".join(violations),
            "deployment.tuned_schedule",
            raw,
        )
    ceiling = _mapping(deployment.get("capture_ceiling"))
    size = whole_number(ceiling.get("size"))
    if size is None or size < 1:
        raise _Invalid(
            source,
            "expected the capture ceiling the schedule was capped to, a whole number >= 1",
            "deployment.capture_ceiling.size",
            ceiling.get("size"),
        )
    stated = ceiling.get("source")
    return VllmCap(tuned, size, stated if isinstance(stated, str) else "the result")


def _anchors_to_measure(data: Mapping[str, Any]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The ``deployment.anchors_to_measure`` rows (capture boundaries), each a batch size >= 1
    with its K; malformed rows left out."""
    rows = []
    for row in _list(_mapping(data.get("deployment")).get("anchors_to_measure")):
        row = _mapping(row)
        batch = whole_number(row.get("batch_size"))
        ks = row.get("ks")
        if batch is None or batch < 1 or not isinstance(ks, list):
            continue
        rows.append((batch, tuple(k for k in map(whole_number, ks) if k is not None)))
    return tuple(rows)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
