"""The tuning plan (the seed's design): a K x anchor matrix in one sweep. Every serve combo keeps
the global ``speculative_config.num_speculative_tokens`` at the largest K (it sizes buffers and
CUDA graphs, so every candidate runs on the same engine) and sets K with a one-range schedule
``[[1, max_batch_size, K]]``, K=0 included the same way. Bench combos set ``max_concurrency`` to
each anchor, from 1 to the deployment maximum.

Also the notes every kind of plan shares (its seeds, replicas and warm-up), which the
follow-up and validation plans reuse."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from lib.loop.plan.combos import SERVE_ORDER_SEED, bench_params, tuning_serve_params
from lib.loop.plan.design import SweepDesign
from lib.loop.plan.lean import decode_steps, lean_steps, probe_anchors, probe_ks
from lib.loop.plan.sweep_plan import SweepPlan, SweepStep
from lib.problems import Problem
from lib.settings import DEFAULT_REPLICA_VAR, RANDOM_PROMPT_LENGTH

__all__ = [
    "RANDOM_TOKENS_NOTE",
    "TUNER_READS_REPLICAS",
    "lean_cost_note",
    "replica_notes",
    "seeds_text",
    "tuning_plan",
    "warmup_notes",
]

#: Why a tuning on the random dataset does not measure what a deployment sees: said in every
#: such plan's notes. The seed's own random control (vLLM PR #49163: Llama 3.1 8B, EAGLE3,
#: single H100) measured acceptance lengths of 1.09-1.15 and chose K=0 everywhere, where the
#: Sonnet dataset chose K=7 up to batch 63.
RANDOM_TOKENS_NOTE = (
    "the random dataset's prompts are token sequences no text has: the drafter cannot predict"
    " what follows them (acceptance length 1.09-1.15 in the seed's own random control), so"
    " speculation looks useless (that control chose K=0 at every batch size); tune on natural"
    " text for a"
    " deployment (--dataset sonnet --dataset-path vLLM's benchmarks/sonnet.txt, or sharegpt,"
    " custom, hf with a file of your traffic)"
)

#: How the tuner reads a tuning sweep's replicas (lib.gates.server_gate, lib.servers).
TUNER_READS_REPLICAS = "tune-spec-k reads a K's replicas as one cell with several servers"


def seeds_text(seeds: Sequence[int]) -> str:
    """Seeds as the plan's notes and summary name them.

    >>> seeds_text(range(3)), seeds_text([4]), seeds_text([0, 2])
    ('seeds 0-2', 'seed 4', 'seeds 0, 2')
    """
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(str(seed) for seed in seeds)


def warmup_notes(design: SweepDesign) -> list[str]:
    """What ``--warmup-num-prompts`` costs with seeded repeats (none without it)."""
    if not design.warmup_num_prompts:
        return []
    return [
        f"the sweep warms up before every bench combo ({design.warmup_num_prompts} prompts,"
        " not measured), so a cell gets a warm-up before each of its seeded runs"
    ]


def replica_notes(
    design: SweepDesign, steps: Sequence[SweepStep], unit: str = "K", read_as: str = ""
) -> list[str]:
    """What a plan's server replicas cost and buy, and how they are ordered (none without
    replicas); ``unit`` is what each server runs (a K, or a validation arm), ``read_as`` how
    the reading command treats the replicas."""
    values = design.replica_values
    if not values:
        return []
    starts = sum(len(step.serve_params) for step in steps)
    return [
        f"{len(values)} server(s) per {unit}, serve combos <combo>-{DEFAULT_REPLICA_VAR}=<r>"
        f" started with vLLM serve's --{DEFAULT_REPLICA_VAR} r for serve {seeds_text(values)}"
        f" (the sampler's seed, which a temperature-0 benchmark does not see): {starts} server"
        f" starts, {len(values)}x the servers of one per {unit}, each a start of its own"
        " (about a minute on the CPU build, minutes for a large model on a GPU). They measure"
        " how much servers of one configuration differ, which runs on one server cannot"
        + (f": {read_as}" if read_as else ""),
        f"the serve combos run in {len(values)} block(s), each holding every {unit} once in an"
        f" order drawn by random.Random({SERVE_ORDER_SEED}): drift over the sweep shows up as"
        f" noise between the servers of a {unit}, not as a bias between them",
    ]


def tuning_plan(
    design: SweepDesign, results_dir: str, experiment_name: str
) -> tuple[SweepPlan | None, list[Problem]]:
    """The seed's K x anchor matrix in one sweep, or with ``--design lean`` the lean design's
    sweeps (:func:`lib.loop.plan.lean.lean_steps`); None and the problems of a bad design."""
    problems = design.invalid()
    if problems:
        return None, problems
    if design.layout == "lean":
        return _lean_plan(design, results_dir, experiment_name), []
    step = _full_step(design, results_dir, experiment_name)
    notes = [
        _engine_note(design),
        f"each ({'anchor, prompt length' if design.context_lengths else 'anchor'}, K) runs"
        f" {design.num_runs} time(s), with"
        f" {seeds_text(range(design.num_runs))}: a bench combo per seed, each run once (the"
        " repeats send different prompts; every K gets the same prompts for the same seed), and"
        + (
            f" each of a K's {design.server_replicas} servers serves all of them"
            if design.replica_values
            else " a server serves all of them (one start per K)"
        ),
        *replica_notes(design, (step,), read_as=TUNER_READS_REPLICAS),
        *warmup_notes(design),
        f"tune with: tune-spec-k {results_dir}/{experiment_name}",
    ]
    if design.dataset == "random":
        notes.append(RANDOM_TOKENS_NOTE)
    if design.context_lengths:
        notes.append(
            f"the prompt length is a second axis ({RANDOM_PROMPT_LENGTH} per bench combo);"
            f" every server holds --max-model-len {design.max_model_len_held}"
            f" (the longest prompt plus {design.output_tokens} output tokens); the tuner finds"
            " the axis itself and tunes K per (batch size, prompt length)"
        )
    return SweepPlan("tuning", design, (step,), tuple(notes)), []


def _full_step(design: SweepDesign, results_dir: str, experiment_name: str) -> SweepStep:
    """The seed's design: every K at every anchor (and prompt length), ``num_runs`` times."""
    return SweepStep(
        name="tuning",
        serve_params=tuning_serve_params(design, design.ks),
        bench_params=bench_params(design, design.anchors, design.num_runs),
        runs_per_cell=design.num_runs,
        results_dir=results_dir,
        experiment_name=experiment_name,
        purpose=f"every K in {sorted(design.ks)} at every anchor in {sorted(design.anchors)}"
        + (
            f" and every prompt length in {sorted(design.context_lengths)}"
            if design.context_lengths
            else ""
        ),
    )


def _engine_note(design: SweepDesign) -> str:
    return (
        f"every server starts with num_speculative_tokens={design.startup_k} and runs K through"
        f" the one-range schedule [[1, {design.deploy_max}, K]] (the seed's design: one engine"
        " configuration for every candidate, K=0 included)"
    )


def _lean_plan(design: SweepDesign, results_dir: str, experiment_name: str) -> SweepPlan:
    """The lean design's plan: its sweeps inside one experiment folder, and notes saying what
    it measures, why the probe is where it is, and what it costs beside the full grid."""
    experiment = f"{results_dir}/{experiment_name}"
    steps = lean_steps(design, results_dir, experiment_name)
    full = _full_step(dataclasses.replace(design, layout="full"), results_dir, experiment_name)
    ks, anchors = probe_ks(design.ks), probe_anchors(design.anchors)
    replicas = design.server_replicas
    notes = [
        lean_cost_note(design, steps, full),
        _engine_note(design),
        f"each (anchor, K) runs once, with seed 0, except the noise probe: K={list(ks)} at"
        f" batch sizes {list(anchors)} run {design.num_runs} times"
        f" ({seeds_text(range(design.num_runs))})"
        + (
            f" on each of {replicas} servers (the K's grid server and {replicas - 1} new start(s))"
            if replicas > 1
            else " on the K's one server"
        )
        + ": the replicated cells give the tuner its noise estimate",
        "the probe K are the two ends of the K range, K=0 and the largest: before any"
        " measurement no K is known to lead, and the two ends bracket the noise of the K"
        " between them (K=0 drafts nothing; the more a K drafts, the more its runs vary with"
        " the prompts' acceptance) and are the K that usually lead at the smallest and the"
        " largest batch size; the probe anchors are the smallest, the middle (nearest the"
        " geometric midpoint) and the largest, since the noise changes with the batch size",
        "every K's grid runs on one server start: K sharing their bench combos share a sweep"
        f" ({', '.join(step.name for step in steps)}); the first writes {experiment}, the"
        " others experiments inside it",
        *_lean_replica_notes(design, steps),
        *warmup_notes(design),
        *_bracket_notes(design),
        f"tune with: tune-spec-k {experiment}"
        + (f" --design-ks {','.join(map(str, sorted(design.ks)))}" if design.first_ks else "")
        + " (every sweep of the plan at once), then follow up: tune-spec-k plan --follow-up"
        " plans second runs only where the result needs them"
        + (", and the K not measured first only where they could lead" if design.first_ks else ""),
    ]
    if design.dataset == "random":
        notes.append(RANDOM_TOKENS_NOTE)
    return SweepPlan("tuning", design, steps, tuple(notes))


def _bracket_notes(design: SweepDesign) -> list[str]:
    """What a bracketed design (``--first-ks``) leaves out and how it is filled in."""
    skipped = sorted(set(design.ks) - set(design.first_ks)) if design.first_ks else []
    if not skipped:
        return []
    return [
        f"bracketed: K={skipped} are not measured in this plan; at each anchor, the K measured"
        " there rule one out where a measured K between it and another measured K is beaten"
        " by that other K beyond the tie tolerance (throughput unimodal in K: docs/loop.md),"
        " and the follow-up measures the rest"
    ]


def _lean_replica_notes(design: SweepDesign, steps: Sequence[SweepStep]) -> list[str]:
    """What the probe's replicas are (none without ``--server-replicas``)."""
    if design.server_replicas < 2:
        return []
    values = range(design.first_replica + 1, design.first_replica + design.server_replicas)
    return [
        f"the probe's new server starts are replicas, serve combos <combo>-{DEFAULT_REPLICA_VAR}"
        f"=<r> started with vLLM serve's --{DEFAULT_REPLICA_VAR} r for serve"
        f" {seeds_text(values)} (the sampler's seed, which a temperature-0 benchmark does not"
        f" see), in blocks each holding every probe K once in an order drawn by"
        f" random.Random({SERVE_ORDER_SEED}): they measure how much servers of one"
        f" configuration differ, which runs on one server cannot; {TUNER_READS_REPLICAS}",
    ]


def lean_cost_note(design: SweepDesign, steps: Sequence[SweepStep], full: SweepStep) -> str:
    """The lean plan's benchmark runs, server starts and estimated GPU time beside those of
    the full grid of the same flags (:func:`lib.loop.plan.lean.decode_steps`)."""
    runs, full_runs = sum(step.runs for step in steps), full.runs
    starts = sum(len(step.serve_params) for step in steps)
    work = decode_steps(steps, design.output_tokens)
    full_work = decode_steps([full], design.output_tokens)
    return (
        f"lean design: {runs} benchmark runs on {starts} server start(s); the full grid"
        f" (--design full, the same flags) runs {full_runs} on {len(full.serve_params)}:"
        f" {_share(runs, full_runs)} of its runs and about {_share(work, full_work)} of its"
        f" GPU time (estimated as decode steps without speculation, ceil(prompts /"
        f" concurrency) x {design.output_tokens} output tokens a run: {work} against"
        f" {full_work}), plus its server starts (each loads the model and captures the CUDA"
        " graphs)"
    )


def _share(part: int, whole: int) -> str:
    """``part`` as a whole percentage of ``whole``.

    >>> _share(57, 135)
    '42 %'
    """
    return f"{round(100 * part / whole)} %"
