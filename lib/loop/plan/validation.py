"""The validation plan: the tuned schedule served as a dynamic config next to the alternatives a
user would otherwise deploy: static-K servers (``num_speculative_tokens: K``, no schedule) and a
server without speculation (K=0), on seeds the tuning did not use; ``tune-spec-k check`` reads
the result."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.deploy.decisions import SCHEDULE_KEY
from lib.deploy.formats.vllm_pr_54801 import SEQ_LEN_KEY
from lib.deploy.formats.vllm_rfc_48944 import RFC_48944_KEY
from lib.deploy.result_file import ResultFile, read_result_file
from lib.files import read_json
from lib.keys import parse_json_string
from lib.loop.check.schedule_file import context_schedule_file, speculative_config_of
from lib.loop.plan.combos import bench_params, replicated
from lib.loop.plan.design import SweepDesign, design_flag
from lib.loop.plan.inputs import other_prompt_field, refusal
from lib.loop.plan.sweep_plan import SweepPlan, SweepStep
from lib.loop.plan.tuning import replica_notes, seeds_text, warmup_notes
from lib.problems import Problem, Severity, show_value
from lib.schedule import Schedule
from lib.settings import RANDOM_PROMPT_LENGTH

__all__ = ["validation_plan"]

DYNAMIC_COMBO = "dynamic"
NO_SPECULATION_COMBO = "no-spec"


def static_combo_name(k: int) -> str:
    return f"static-k{k}"


def validation_plan(
    design: SweepDesign,
    result_file: str | Path,
    results_dir: str,
    experiment_name: str,
    static_ks: Sequence[int] | None = None,
    context_schedule: str | Path | None = None,
) -> tuple[SweepPlan | None, list[Problem]]:
    """The tuned schedule (``result_file``: a tune-spec-k result JSON) as a dynamic server,
    next to static-K servers and a server without speculation, at the result's anchors, on
    seeds the tuning did not use (:func:`held_out_first_seed`).

    With ``context_schedule`` (the ``-o`` file of ``tune-spec-k export --format
    vllm-rfc-48944`` or ``vllm-pr-54801`` of that result): the dynamic server serves its
    ``speculative_config`` and every server runs at every anchor and prompt length of the
    result's grid (:func:`_context_dynamic`)."""
    problems = design.incomplete()
    if problems:
        return None, problems
    result, problems = read_result_file(result_file)
    if result is None:
        return None, problems
    if context_schedule is not None:
        found, problems = _context_dynamic(result, context_schedule)
    else:
        found, problems = _batch_dynamic(result)
    if found is None:
        return None, problems
    dynamic, anchors, prompts = dict(found.config), found.anchors, found.prompts
    if dynamic.get("method") in (None, "<method>"):
        dynamic["method"] = design.method
    for key, name in (("method", "method"), ("model", "draft_model")):
        tuned, designed = dynamic.get(key), getattr(design, name)
        if designed is not None and tuned is not None and tuned != designed:
            return None, [
                refusal(
                    result_file,
                    f"the result was tuned with speculative_config.{key} {tuned!r}, the design has"
                    f" {design_flag(name)} {designed!r}: validate the configuration that was tuned",
                )
            ]
    dynamic.update(found.tables)
    shared = {key: value for key, value in dynamic.items() if key not in _SCHEDULE_FIELDS}
    chosen = (
        sorted(set(static_ks))
        if static_ks is not None
        else sorted({k for k in design.ks if k > 0} | set(found.scheduled_ks))
    )
    if any(k < 1 for k in chosen):
        problem = Problem(
            Severity.ERROR,
            "invalid-static-ks",
            "a static server needs K >= 1 (K=0 is the no-spec server)",
            value=str(chosen),
            expected="K >= 1",
        )
        return None, [problem]
    engine = design.engine_params
    serve: dict[str, Any] = {DYNAMIC_COMBO: {**engine, "speculative_config": dynamic}}
    for k in chosen:
        serve[static_combo_name(k)] = {
            **engine,
            "speculative_config": {**shared, "num_speculative_tokens": k},
        }
    serve[NO_SPECULATION_COMBO] = dict(engine)
    serve = replicated(design, serve)
    validation_design = _with_anchors(design, anchors)
    if prompts:
        validation_design = dataclasses.replace(validation_design, context_lengths=prompts)
        problems = validation_design.invalid()
        if problems:
            return None, problems
    first_seed = held_out_first_seed(result)
    step = SweepStep(
        name="validation",
        serve_params=serve,
        bench_params=bench_params(
            validation_design, anchors, design.num_runs, dict.fromkeys(anchors, first_seed)
        ),
        runs_per_cell=design.num_runs,
        results_dir=results_dir,
        experiment_name=experiment_name,
        purpose=f"{found.purpose} against static K={chosen} and no speculation",
    )
    notes = [
        "static-K servers run num_speculative_tokens=K without a schedule, and K=0 is a server"
        " without speculation: the deployments the schedule replaces, so the check also shows"
        " the Dynamic SD engine's own cost (vLLM issue #49548 measured +6.6% TPOT at"
        " concurrency 2 and +21.6% at 189)",
        f"every server runs each anchor with"
        f" {seeds_text(range(first_seed, first_seed + design.num_runs))}: the tuning ran at most"
        f" {first_seed} counted run(s) per cell, with seeds from 0, so the check measures"
        " prompts the schedule was not chosen on (where every tuning run was counted)",
        *replica_notes(
            design,
            (step,),
            "arm",
            "tune-spec-k check pools the runs of an arm's servers at each anchor",
        ),
        *warmup_notes(design),
    ]
    if prompts:
        notes.append(
            f"every server runs every anchor at each prompt length of the result's grid,"
            f" {list(prompts)} ({RANDOM_PROMPT_LENGTH} per bench combo), and holds"
            f" --max-model-len {validation_design.max_model_len_held}; the check judges the"
            " context schedule per prompt length at the K it runs there"
        )
    schedule_file = "TUNING_JSON" if context_schedule is None else str(context_schedule)
    notes.append(
        f"check with: tune-spec-k check {results_dir}/{experiment_name} --schedule {schedule_file}"
    )
    return SweepPlan("validation", validation_design, (step,), tuple(notes)), []


#: The speculative_config fields a static server leaves out: the startup maximum and the tables.
_SCHEDULE_FIELDS = (
    "num_speculative_tokens",
    SCHEDULE_KEY,
    RFC_48944_KEY,
    SEQ_LEN_KEY,
    "ctx_agg",
)


@dataclass(frozen=True)
class _Dynamic:
    """What a validation's dynamic server serves, and where: its ``speculative_config`` before
    the schedule (the tuned method and drafter), the schedule's fields, the Ks they run, the
    anchors, the prompt lengths (none: the design's one) and what the sweep is for."""

    config: Mapping[str, Any]
    tables: Mapping[str, Any]
    scheduled_ks: tuple[int, ...]
    anchors: tuple[int, ...]
    prompts: tuple[int, ...]
    purpose: str


def _batch_dynamic(result: ResultFile) -> tuple[_Dynamic | None, list[Problem]]:
    """The result's own schedule and speculative_config, at its anchors."""
    config = result.speculative_config
    if config is None or result.schedule is None or not result.schedule.ranges:
        return None, [
            refusal(
                result.source,
                "the tuning result has no 'speculative_config' with a schedule (expected the JSON"
                " written by tune-spec-k)",
            )
        ]
    schedule = result.schedule.to_json()
    anchors = sorted({anchor.batch_size for anchor in result.anchors})
    if not anchors:
        return None, [
            refusal(
                result.source,
                "the tuning result has no 'batch_decisions': no anchors to validate at",
            )
        ]
    return _Dynamic(
        config,
        {SCHEDULE_KEY: schedule},
        tuple(sorted({int(k) for _, _, k in schedule if k > 0})),
        tuple(anchors),
        (),
        f"the schedule {json.dumps(schedule)}",
    ), []


def _context_dynamic(
    result: ResultFile, export_file: str | Path
) -> tuple[_Dynamic | None, list[Problem]]:
    """A context schedule exported from the result: served as the export's
    ``speculative_config`` (beside the result's method and drafter), at every anchor and
    prompt length of the result's grid, each prompt length as ``random_input_len`` (a grid
    read from another field is refused: the sweep could not reproduce its prompts)."""
    data, problems = read_json(export_file)
    if problems:
        return None, problems
    exported = _exported(data, str(export_file))
    if isinstance(exported, list):
        return None, exported
    format, ks = exported
    if result.grid is None:
        return None, list(result.grid_problems) or [
            refusal(
                result.source,
                "the tuning result has no context_grid: a context schedule is validated at the"
                " grid's anchors and prompt lengths",
            )
        ]
    if result.context_field != RANDOM_PROMPT_LENGTH:
        return None, other_prompt_field(result, "a validation")
    tuned = result.speculative_config or {}
    return _Dynamic(
        {key: value for key, value in tuned.items() if key not in _SCHEDULE_FIELDS},
        speculative_config_of(data)[0],
        tuple(k for k in ks if k > 0),
        result.grid.anchors,
        tuple(point.prompt_tokens for point in result.grid.points),
        f"the {format} schedule of {export_file}",
    ), []


def _exported(data: Any, source: str) -> tuple[str, tuple[int, ...]] | list[Problem]:
    """The format of an export of a context format and every K its config runs: a context
    schedule (:func:`lib.loop.check.schedule_file.context_schedule_file`), or
    ``vllm-context``'s batch schedule; else why not (the file, the field and what was expected)."""
    schedule, problems = context_schedule_file(data, source)
    if schedule is not None:
        return schedule.format, tuple(sorted(schedule.ks))
    if problems:
        return problems
    if not isinstance(data, dict) or data.get("format") != "vllm-context":
        return [
            refusal(
                source,
                "not an export of a context format: expected the -o file of tune-spec-k export"
                " --format vllm-context, vllm-rfc-48944 or vllm-pr-54801",
                "format",
            )
        ]
    config, prefix = speculative_config_of(data)
    raw = parse_json_string(config.get(SCHEDULE_KEY))
    batch, violations = Schedule.parse(raw)
    if batch is None:
        return [
            refusal(
                source,
                f"the vllm-context schedule breaks vLLM's rule: {violation}",
                prefix + SCHEDULE_KEY,
                show_value(raw),
                "[[lo, hi, K], ...] starting at 1, sorted, no overlap",
            )
            for violation in violations
        ]
    return "vllm-context", tuple(sorted({k for _, _, k in batch.ranges}))


def held_out_first_seed(result: ResultFile) -> int:
    """The first seed of a validation sweep: the most runs any cell of the tuning result has.
    The tuning's runs of a cell used seeds 0 .. its runs - 1 (its follow-ups continue them,
    :func:`lib.loop.plan.follow_up.follow_up_plan`; a sweep of one seed used one), so the
    check sees prompt sets the schedule was not chosen on; 0 for a result without runs. The
    counts are usable runs: a cell whose failed runs were not counted may have used a seed at
    or above it. The cells of a context grid count too."""
    anchors = [*result.anchors, *(anchor for _, anchor in result.context_cells)]
    return max(
        (candidate.num_runs for anchor in anchors for candidate in anchor.candidates),
        default=0,
    )


def _with_anchors(design: SweepDesign, anchors: Sequence[int]) -> SweepDesign:
    return dataclasses.replace(design, anchors=tuple(anchors), max_batch_size=max(anchors))
