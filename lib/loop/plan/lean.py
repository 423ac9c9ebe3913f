"""The lean design (``tune-spec-k plan --design lean``): every (anchor, K) measured once, plus a
noise probe, a few cells measured as the full design measures every cell.

Published speculative-K sweeps measure each (batch size, K) once; the seed's design repeats
every cell ``--num-runs`` times, most of it where one K wins by far. One run per cell says which
K leads but not how sure that is: the tuner needs replicated cells to estimate the run noise
(docs/confidence.md). The lean design buys them where they tell the most, at a fixed cost:

- **Probe K** (:func:`probe_ks`): K=0 and the largest K. Without measurements no K is known to
  lead, so the rule takes the two ends of the range: they bracket the noise of the K between
  them (a K's run-to-run spread grows with how much it drafts, since acceptance varies from
  prompt set to prompt set, and K=0 drafts nothing), and they are the K the published
  schedules pick at the two ends of the batch range (the largest K at batch 1, K=0 at the
  deployment maximum), so they are contenders where the probe runs.
- **Probe anchors** (:func:`probe_anchors`): the smallest, the middle (the anchor nearest the
  geometric midpoint) and the largest. Noise differs several-fold between batch sizes on
  real sweeps (docs/confidence.md), so one pooled number would not do: three points spread on
  the log scale show how it changes.
- **Probe cells** run ``--num-runs`` seeded runs on each of ``--server-replicas`` servers (the
  full design's measurement of a cell): the first server is the K's grid server, the others
  new server starts (replicas), so the probe measures the between-server spread too where
  replicas are asked for.

Each K's grid runs on one server start: the probe K's grid and probe runs share a sweep
(``probe``, writing the tuning's experiment folder), the other K have one of their own
(``grid``), the probe's new starts a third (``probe-replicas``), each an experiment inside the
first's. A sweep starts a server per serve combo and runs every bench combo on
it, so K with different bench combos cannot share one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from lib.loop.plan.combos import bench_params, tuning_serve_params
from lib.loop.plan.design import SweepDesign
from lib.loop.plan.sweep_plan import SweepStep

__all__ = [
    "PROBE_STEP",
    "bracket_ks",
    "decode_steps",
    "first_ks",
    "lean_steps",
    "probe_anchors",
    "probe_ks",
]

#: The names of the lean design's sweeps (each a plan subfolder; the second and third also
#: experiment folders inside the first's).
PROBE_STEP = "probe"
GRID_STEP = "grid"
PROBE_REPLICAS_STEP = "probe-replicas"


def probe_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """The K the noise probe repeats: the smallest and the largest K, that is K=0 and the
    largest (a design holds K=0 and a K >= 1); see the module doc for why.

    >>> probe_ks([0, 1, 3, 5, 7]), probe_ks([3, 0])
    ((0, 7), (0, 3))
    """
    return tuple(sorted({min(ks), max(ks)}))


def probe_anchors(anchors: Sequence[int]) -> tuple[int, ...]:
    """The anchors the noise probe repeats: the smallest, the largest and the one nearest
    their geometric midpoint on the log scale (a tie goes to the smaller); every anchor where
    there are three or fewer.

    >>> probe_anchors([1, 2, 4, 8, 16, 32, 64, 128, 256])
    (1, 16, 256)
    >>> probe_anchors([1, 64, 128, 256]), probe_anchors([1, 8])
    ((1, 64, 256), (1, 8))
    """
    ordered = sorted(anchors)
    if len(ordered) <= 3:
        return tuple(ordered)
    low, high = ordered[0], ordered[-1]
    centre = (math.log(low) + math.log(high)) / 2
    inner = ordered[1:-1]
    middle = min(inner, key=lambda anchor: (abs(math.log(anchor) - centre), anchor))
    return (low, middle, high)


def first_ks(design: SweepDesign) -> tuple[int, ...]:
    """The K the lean design measures at every anchor: ``--first-ks`` where given (a
    bracketed design: the rest are measured where these cannot rule them out,
    :mod:`lib.unmeasured`), else every K.

    >>> from lib.loop.plan.design import SweepDesign
    >>> first_ks(SweepDesign(ks=(0, 1, 2, 3, 5), first_ks=(0, 2, 5)))
    (0, 2, 5)
    >>> first_ks(SweepDesign(ks=(0, 1, 3)))
    (0, 1, 3)
    """
    return tuple(sorted(design.first_ks or design.ks))


def bracket_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """A bracketed design's first K (``--first-ks``): the two ends of the K range and the K
    nearest their middle (a tie goes to the smaller), every K where there are three or fewer.
    At each anchor the three split the range in two: the follow-up measures the K of the
    half where the curve can still peak (:mod:`lib.unmeasured`).

    >>> bracket_ks([0, 1, 2, 3, 5]), bracket_ks(range(8)), bracket_ks([0, 3])
    ((0, 2, 5), (0, 3, 7), (0, 3))
    """
    ordered = sorted(ks)
    if len(ordered) <= 3:
        return tuple(ordered)
    centre = (ordered[0] + ordered[-1]) / 2
    middle = min(ordered[1:-1], key=lambda k: (abs(k - centre), k))
    return (ordered[0], middle, ordered[-1])


def lean_steps(
    design: SweepDesign, results_dir: str, experiment_name: str
) -> tuple[SweepStep, ...]:
    """The lean design's sweeps. The first writes the tuning's experiment folder
    (``results_dir/experiment_name``), as the full design's one sweep does; the others are
    experiments inside it (``-o results_dir/experiment_name -e grid``), as a follow-up's are,
    so tuning that folder reads them all, and the app, seeing combo folders in it, lists it as
    one experiment:

    - ``probe``: the probe K on their first server, every anchor once (seed 0) and the probe
      anchors ``num_runs`` times (seeds 0 .. num_runs - 1);
    - ``grid``: every other K on one server, every anchor once (none when the probe K are
      all the K); with ``--first-ks`` only the other K among them (:func:`first_ks`);
    - ``probe-replicas`` (with ``server_replicas`` R >= 2): the probe K on R - 1 new server
      starts, replicas ``first_replica + 1`` .. ``first_replica + R - 1`` in shuffled blocks
      (:func:`lib.loop.plan.combos.replicated`), the probe anchors ``num_runs`` times each.

    The first servers are one replica, ``first_replica``: unmarked (``k3``) when that is 0,
    as a design without replicas names them."""
    first = dataclasses.replace(design, server_replicas=1)
    probed_ks, probed_anchors = probe_ks(design.ks), probe_anchors(design.anchors)
    inside = f"{results_dir}/{experiment_name}"
    probe_bench: dict[str, Any] = {}
    for anchor in sorted(design.anchors):
        runs = design.num_runs if anchor in probed_anchors else 1
        probe_bench.update(bench_params(design, [anchor], runs))
    where = f"batch sizes {list(probed_anchors)}"
    steps = [
        _step(
            PROBE_STEP,
            tuning_serve_params(first, probed_ks),
            probe_bench,
            design.num_runs,
            results_dir,
            experiment_name,
            f"K={list(probed_ks)} at every anchor once, and {design.num_runs} times at {where}"
            " (the noise probe)",
        )
    ]
    others = [k for k in sorted(first_ks(design)) if k not in probed_ks]
    if others:
        steps.append(
            _step(
                GRID_STEP,
                tuning_serve_params(first, others),
                bench_params(design, design.anchors, 1),
                1,
                inside,
                GRID_STEP,
                f"K={others} at every anchor once",
            )
        )
    if design.server_replicas > 1:
        replicas = dataclasses.replace(
            design,
            first_replica=design.first_replica + 1,
            server_replicas=design.server_replicas - 1,
        )
        steps.append(
            _step(
                PROBE_REPLICAS_STEP,
                tuning_serve_params(replicas, probed_ks),
                bench_params(design, probed_anchors, design.num_runs),
                design.num_runs,
                inside,
                PROBE_REPLICAS_STEP,
                f"K={list(probed_ks)} at {where}, {design.num_runs} times on each of"
                f" {design.server_replicas - 1} new server start(s) (the noise probe's"
                " replicas)",
            )
        )
    return tuple(steps)


def _step(
    name: str,
    serve: dict[str, Any],
    bench: dict[str, Any],
    runs: int,
    results_dir: str,
    experiment_name: str,
    purpose: str,
) -> SweepStep:
    return SweepStep(
        name=name,
        serve_params=dict(serve),
        bench_params=dict(bench),
        runs_per_cell=runs,
        results_dir=results_dir,
        experiment_name=experiment_name,
        purpose=purpose,
    )


def decode_steps(steps: Sequence[SweepStep], output_tokens: int) -> int:
    """The GPU-time estimate of a plan's benchmark runs, in decode steps of a server that does
    not speculate: per run ``ceil(num_prompts / max_concurrency)`` waves of ``output_tokens``
    steps each (a run's requests decode side by side, ``max_concurrency`` at a time). Step
    times differ with the batch size and K, the same way in every design of one set of
    anchors and K, so the ratio of two designs' counts estimates the ratio of their GPU time;
    server starts come on top.

    >>> step = SweepStep("s", {"k0": {}, "k7": {}}, {"c1": {"max_concurrency": 1,
    ...     "num_prompts": 32}, "c64": {"max_concurrency": 64, "num_prompts": 512}}, 1, "r",
    ...     "e", "")
    >>> decode_steps([step], 128)  # 2 servers x (32 + 8 waves) x 128 steps
    10240
    """
    total = 0
    for step in steps:
        waves = sum(
            math.ceil(combo["num_prompts"] / combo["max_concurrency"])
            for combo in step.bench_params.values()
        )
        total += len(step.serve_params) * waves * output_tokens
    return total
