"""lib/loop/plan/lean.py and ``--design lean``: one run per (anchor, K) plus a noise probe, run as
vLLM runs the sweeps and read back by the tuner; its cost printed beside the full grid's."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from plan_inputs import servers_per_cell
from vllm_sweep import llama_design, planned, planned_k, run_planned_sweeps

from lib.loop.plan.design import SweepDesign, design_from
from lib.loop.plan.lean import decode_steps, probe_anchors, probe_ks
from lib.loop.plan.write import write_plan
from lib.sweeps import Sweep, load_experiment

#: 9 anchors x 5 K, the issue's lean sweep.
NINE_ANCHORS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FIVE_KS = (0, 1, 3, 5, 7)


def lean_design(**changes: Any) -> SweepDesign:
    return llama_design(ks=FIVE_KS, anchors=NINE_ANCHORS, layout="lean", **changes)


def test_the_probe_takes_the_ends_of_the_k_range() -> None:
    assert probe_ks([0, 1, 3, 5, 7]) == (0, 7)
    assert probe_ks([7, 0]) == (0, 7)


@pytest.mark.parametrize(
    ("anchors", "probed"),
    [
        # log2 midpoint of 1 and 256 is 4: 16 exactly.
        (NINE_ANCHORS, (1, 16, 256)),
        # midpoint sqrt(1 x 256) = 16: 8 and 32 are equally far on the log scale, the smaller wins.
        ((1, 8, 32, 256), (1, 8, 256)),
        # sqrt(1 x 100) = 10: 9 is nearer than 12 on the log scale (log 10/9 < log 12/10).
        ((1, 9, 12, 100), (1, 9, 100)),
        # three anchors or fewer: every one.
        ((1, 64, 256), (1, 64, 256)),
        ((1,), (1,)),
    ],
)
def test_the_probe_anchors_are_the_ends_and_the_geometric_middle(
    anchors: tuple[int, ...], probed: tuple[int, ...]
) -> None:
    assert probe_anchors(anchors) == probed


def _runs_per_cell(tmp_path: Path, design: SweepDesign) -> tuple[dict[tuple[int, int], int], Sweep]:
    plan = planned(design)
    _, problems = write_plan(plan, tmp_path / "plan")
    assert problems == []
    run_planned_sweeps(
        tmp_path / "plan",
        tmp_path,
        # Each server measures apart (identical records would read as copies of one run).
        lambda serve, bench, _: {
            "output_throughput": 100.0
            + planned_k(serve)
            + bench["seed"]
            + serve.get("seed", 0) / 10
        },
    )
    # Every sweep is an experiment inside the plan's one results folder (-o r -e e: r/e).
    sweep = load_experiment(tmp_path / "r" / "e")
    counts = sweep.runs.group_by("anchor", "k").len()
    return {(a, k): n for a, k, n in counts.iter_rows()}, sweep


def test_a_lean_sweep_measures_each_cell_once_and_the_probe_three_times(tmp_path: Path) -> None:
    runs, sweep = _runs_per_cell(tmp_path, lean_design())
    # The probe: K=0 and K=7 at anchors 1, 16, 256, --num-runs (3) times; every other cell once.
    expected = {
        (a, k): 3 if k in (0, 7) and a in (1, 16, 256) else 1 for a in NINE_ANCHORS for k in FIVE_KS
    }
    assert runs == expected
    # 45 cells + 2 K x 3 anchors x 2 more runs = 57 runs, on one server per K.
    assert sum(runs.values()) == 57
    assert set(servers_per_cell(sweep).values()) == {1}
    seeds = sweep.runs.filter(sweep.runs["k"] == 3)["seed"].unique().to_list()
    assert seeds == [0]


def test_with_replicas_the_probe_runs_on_new_server_starts(tmp_path: Path) -> None:
    runs, sweep = _runs_per_cell(tmp_path, lean_design(server_replicas=3))
    servers = servers_per_cell(sweep)
    probe = {(a, k) for a in (1, 16, 256) for k in (0, 7)}
    # A probe cell: 3 runs on each of 3 servers (its grid server and 2 new starts); the rest once
    # on one server.
    assert {cell: (runs[cell], servers[cell]) for cell in probe} == dict.fromkeys(probe, (9, 3))
    assert {runs[c] for c in runs if c not in probe} == {1}
    assert {servers[c] for c in servers if c not in probe} == {1}
    plan = planned(lean_design(server_replicas=3))
    # 5 first servers + 2 probe K x 2 new starts.
    assert sum(len(step.serve_params) for step in plan.steps) == 9


def test_the_cost_is_printed_beside_the_full_grid_s() -> None:
    plan = planned(lean_design())
    full = planned(dataclasses.replace(lean_design(), layout="full"))
    # Default prompts max(32, 8 c): ceil(prompts / c) waves = 32, 16, 8 at c = 1, 2, 4, then 8
    # at each of the 6 anchors from 8: 104 waves per K and seed, 128 steps each.
    waves = 32 + 16 + 8 + 8 * 6
    full_steps = 5 * 3 * waves * 128
    lean_steps = (5 * waves + 2 * 2 * (32 + 8 + 8)) * 128
    assert decode_steps(full.steps, 128) == full_steps
    assert decode_steps(plan.steps, 128) == lean_steps
    note = plan.notes[0]
    assert note.startswith("lean design: 57 benchmark runs on 5 server start(s); the full grid")
    assert f"runs 135 on 5: {round(100 * 57 / 135)} % of its runs" in note
    assert f"about {round(100 * lean_steps / full_steps)} % of its GPU time" in note
    assert f"{lean_steps} against {full_steps}" in note
    assert sum(step.runs for step in full.steps) == 135


def test_the_full_design_is_the_seed_s_one_sweep() -> None:
    full = planned(llama_design(layout="full"))
    assert [step.name for step in full.steps] == ["tuning"]
    assert "layout" not in full.design.to_json()
    assert planned(lean_design()).design.to_json()["layout"] == "lean"


def test_decode_steps_round_up_a_last_partial_wave() -> None:
    step = planned(llama_design(anchors=(1, 3), num_prompts=10, num_runs=1)).steps[0]
    # ceil(10 / 1) + ceil(10 / 3) = 10 + 4 waves per K, 4 K, 128 steps a wave.
    assert decode_steps([step], 128) == 4 * (10 + math.ceil(10 / 3)) * 128


def test_a_stored_layout_neither_full_nor_lean_is_refused_naming_the_flag() -> None:
    design, problems = design_from({"layout": "medium"}, {})
    assert problems == [] and design is not None
    bad = dataclasses.replace(design, model="m", method="ngram", anchors=(1, 8)).invalid()
    assert [(p.field, p.value, p.expected) for p in bad] == [("--design", "medium", "full or lean")]


def test_with_two_k_and_three_anchors_every_cell_is_probed() -> None:
    # The probe K are every K and the probe anchors every anchor: one sweep, the full grid.
    plan = planned(llama_design(ks=(0, 7), anchors=(1, 64, 256), layout="lean"))
    assert [step.name for step in plan.steps] == ["probe"]
    assert set(plan.steps[0].seeds().values()) == {(0, 1, 2)}
    assert plan.notes[0].startswith(
        "lean design: 18 benchmark runs on 2 server start(s); the full grid (--design full, the"
        " same flags) runs 18 on 2: 100 % of its runs and about 100 % of its GPU time"
    )
