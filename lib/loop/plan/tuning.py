"""The tuning plan (the seed's design): a K x anchor matrix in one sweep. Every serve combo keeps
the global ``speculative_config.num_speculative_tokens`` at the largest K (it sizes buffers and
CUDA graphs, so every candidate runs on the same engine) and sets K with a one-range schedule
``[[1, max_batch_size, K]]``, K=0 included the same way. Bench combos set ``max_concurrency`` to
each anchor, from 1 to the deployment maximum.

Also the notes every kind of plan shares (its seeds, replicas and warm-up), which the
follow-up and validation plans reuse."""

from __future__ import annotations

from collections.abc import Sequence

from lib.loop.plan.combos import SERVE_ORDER_SEED, bench_params, tuning_serve_params
from lib.loop.plan.design import SweepDesign
from lib.loop.plan.sweep_plan import SweepPlan, SweepStep
from lib.problems import Problem
from lib.settings import DEFAULT_REPLICA_VAR, RANDOM_PROMPT_LENGTH

__all__ = [
    "RANDOM_TOKENS_NOTE",
    "TUNER_READS_REPLICAS",
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
    """The seed's K x anchor matrix in one sweep (None and the problems of a bad design)."""
    problems = design.invalid()
    if problems:
        return None, problems
    step = SweepStep(
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
    notes = [
        f"every server starts with num_speculative_tokens={design.startup_k} and runs K through"
        f" the one-range schedule [[1, {design.deploy_max}, K]] (the seed's design: one engine"
        " configuration for every candidate, K=0 included)",
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
