"""The params files of a sweep: its serve combos (a server each) and bench combos (a benchmark
run each).

Params files are dicts of named combos (``vllm bench sweep serve`` also reads lists of dicts);
nested dicts such as ``speculative_config`` stay nested: the sweep passes them to the command
as JSON and copies them into every record as they are.

**Repeats** are seeds (:func:`bench_params`): one bench combo per (anchor, repeat) with the
repeat's ``seed`` (``vllm bench serve --seed``, which samples the prompts), each run once
(``--num-runs 1``), rather than one combo run N times with one seed, which would send the same
prompts N times. Every K sees the same prompts for the same seed at an anchor, so the K are
compared on paired prompt sets; the bench combos of a serve combo share its one server start.

**Replicas** are server starts (:func:`replicated`): ``--server-replicas R`` writes each serve
combo R times, ``<combo>-seed=<r>`` with ``vllm serve --seed r``, in shuffled blocks, so the
between-server spread is measured and drift over the sweep is noise, not a bias between K.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from lib.loop.plan.design import MIN_PROMPTS, PROMPTS_PER_SLOT, SweepDesign
from lib.servers import replica_combo_name
from lib.settings import DEFAULT_REPLICA_VAR, RANDOM_PROMPT_LENGTH, REPEAT_SEED

__all__ = [
    "SERVE_ORDER_SEED",
    "bench_params",
    "context_workload",
    "replicated",
    "seeded_combos",
    "tuning_serve_params",
]


def speculative_config(design: SweepDesign, **fields: Any) -> dict[str, Any]:
    """The design's ``speculative_config`` (method, draft model, options) plus ``fields``."""
    config: dict[str, Any] = {"method": design.method}
    if design.draft_model:
        config["model"] = design.draft_model
    config.update(design.speculative_options)
    config.update(fields)
    return config


def k_combo_name(k: int) -> str:
    return f"k{k}"


def anchor_combo_name(anchor: int) -> str:
    return f"c{anchor}"


#: The seed of the serve combos' order in a plan with replicas (:func:`replicated`): fixed, so
#: the same design always writes the same files.
SERVE_ORDER_SEED = 23


def replicated(design: SweepDesign, combos: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The serve combos of a design with replicas: each combo once per replica value ``r``
    (:attr:`SweepDesign.replica_values`), named ``<combo>-seed=<r>``
    (:func:`lib.servers.replica_combo_name`), its params with the serve param ``seed: r`` added
    (``vllm serve --seed r``, the sampler's seed, which a temperature-0 benchmark does not
    see) and nothing else changed. The sweep starts the servers in file order; they come in
    blocks, one per replica value, each holding every combo once in an order drawn by
    ``random.Random(SERVE_ORDER_SEED)``, so drift over the sweep falls on every K alike (noise
    between a K's servers, never a bias between K). ``combos`` as they are without replicas."""
    values = design.replica_values
    if not values:
        return dict(combos)
    order = random.Random(SERVE_ORDER_SEED)
    serve: dict[str, Any] = {}
    for value in values:
        names = list(combos)
        order.shuffle(names)
        for name in names:
            marked = replica_combo_name(name, DEFAULT_REPLICA_VAR, value)
            serve[marked] = {**combos[name], DEFAULT_REPLICA_VAR: value}
    return serve


def tuning_serve_params(design: SweepDesign, ks: Sequence[int]) -> dict[str, Any]:
    """One serve combo per K (per replica, :func:`replicated`): the global maximum fixed, K set
    by a one-range schedule."""
    combos = {
        k_combo_name(k): {
            **design.engine_params,
            "speculative_config": speculative_config(
                design,
                num_speculative_tokens=design.startup_k,
                num_speculative_tokens_per_batch_size=[[1, design.deploy_max, k]],
            ),
        }
        for k in sorted(ks)
    }
    return replicated(design, combos)


def prompts_for(design: SweepDesign, anchor: int) -> int:
    if design.num_prompts is not None:
        return design.num_prompts
    return max(MIN_PROMPTS, PROMPTS_PER_SLOT * anchor)


def workloads(design: SweepDesign, anchors: Sequence[int]) -> dict[str, Any]:
    """What is measured at each anchor, before the repeats: one combo per anchor,
    ``max_concurrency`` (the anchor the tuner reads) and the number of prompts; with context
    lengths, one per (anchor, length) (:func:`context_workload`)."""
    if not design.context_lengths:
        return {
            anchor_combo_name(anchor): {
                "max_concurrency": anchor,
                "num_prompts": prompts_for(design, anchor),
            }
            for anchor in sorted(anchors)
        }
    return dict(
        context_workload(design, anchor, length)
        for anchor in sorted(anchors)
        for length in sorted(design.context_lengths)
    )


def context_workload(design: SweepDesign, anchor: int, length: int) -> tuple[str, dict[str, Any]]:
    """The name and params of the workload at (``anchor``, prompt ``length``): the length as
    ``random_input_len`` (a swept key, so every record holds it)."""
    params = {
        "max_concurrency": anchor,
        "num_prompts": prompts_for(design, anchor),
        RANDOM_PROMPT_LENGTH: length,
    }
    return f"{anchor_combo_name(anchor)}-p{length}", params


def seeded_combos(
    workload: str, params: Mapping[str, Any], first: int, runs: int
) -> dict[str, Any]:
    """A workload's bench combos, one per repeat: seeds ``first`` .. ``first + runs - 1``, each
    added to its params and named ``<workload>-seed<seed>``."""
    return {
        f"{workload}-seed{seed}": {**params, REPEAT_SEED: seed}
        for seed in range(first, first + runs)
    }


def bench_params(
    design: SweepDesign,
    anchors: Sequence[int],
    runs: int,
    first_seeds: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """The bench combos: each workload (:func:`workloads`) once per repeat, the repeat's
    ``seed`` added, named ``<workload>-seed<seed>``, in workload order and then seed order (a
    cell's runs follow each other, as ``--num-runs`` ran them).

    Repeat r at an anchor has seed ``first_seeds[anchor] + r`` (the first seed 0 where not
    given), r = 0 .. ``runs`` - 1: the repeats of a cell sample different prompts, and every
    K and prompt length at the anchor sees the same prompts for the same repeat (the K are
    compared on paired prompt sets). The sweep passes the key as ``--seed`` (it would replace
    a ``--seed`` of the bench command, which has none)."""
    combos: dict[str, Any] = {}
    for name, params in workloads(design, anchors).items():
        first = (first_seeds or {}).get(params["max_concurrency"], 0)
        combos.update(seeded_combos(name, params, first, runs))
    return combos
