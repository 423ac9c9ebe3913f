"""lib/loop/run/trim.py: a round over the budget cut to what fits: no new anchor, then whole
sweeps (one server start each) greedily, those measuring cells for the first time first."""

from __future__ import annotations

from lib.loop.plan.design import SweepDesign
from lib.loop.plan.sweep_plan import SweepPlan, SweepStep
from lib.loop.run.trim import (
    StepCost,
    affordable_steps,
    measured_anchors_only,
    one_server_per_sweep,
    plan_cells,
    restricted,
)


def _serve(k: int) -> dict[str, object]:
    return {"speculative_config": {"num_speculative_tokens_per_batch_size": [[1, 256, k]]}}


def _step(name: str, ks: list[int], anchors: list[int]) -> SweepStep:
    bench = {f"c{a}-seed0": {"max_concurrency": a, "num_prompts": 32} for a in anchors}
    serve = {f"k{k}": _serve(k) for k in ks}
    return SweepStep(name, serve, bench, 1, "R", name, "")


def _plan(*steps: SweepStep) -> SweepPlan:
    return SweepPlan("follow-up", SweepDesign(), steps)


def test_a_trimmed_round_measures_no_new_anchor() -> None:
    # Measured: anchors 1 and 4 at K=0 and 5. The plan: K=3 at 1 (open) and at the new
    # anchor 2; K=0 at 1 (a second run) and at 2; K=5 at 2 only.
    before = {(1, 0): 1, (1, 5): 1, (4, 0): 1, (4, 5): 1}
    plan = _plan(_step("a", [3], [1, 2]), _step("b", [0], [1, 2]), _step("c", [5], [2]))
    trimmed = measured_anchors_only(plan, before)
    assert plan_cells(trimmed) == {(1, 3), (1, 0)}
    assert [step.name for step in trimmed.steps] == ["a", "b"]
    # Only new anchors: nothing to run trimmed.
    assert measured_anchors_only(_plan(_step("c", [5], [2])), before).steps == ()


def test_each_server_start_becomes_a_sweep_of_its_own() -> None:
    plan = _plan(_step("r", [0, 3], [1, 4]), _step("s", [5], [1]))
    split = one_server_per_sweep(plan)
    assert [(s.name, s.experiment_name, list(s.serve_params)) for s in split.steps] == [
        ("r-1", "r-1", ["k0"]),
        ("r-2", "r-2", ["k3"]),
        ("s", "s", ["k5"]),
    ]
    # The same cells, runs and server starts.
    assert plan_cells(split) == plan_cells(plan)
    assert sum(s.runs for s in split.steps) == sum(s.runs for s in plan.steps)


def test_a_shared_bench_combo_is_kept_only_where_every_k_of_it_qualifies() -> None:
    step = _step("a", [0, 3], [1, 4])
    kept = restricted(_plan(step), lambda cell: cell != (4, 0))
    assert plan_cells(kept) == {(1, 0), (1, 3)}


def test_affordable_steps_fit_exactly_and_not_a_second_more() -> None:
    steps = [StepCost("a", 60.0, 2, 2), StepCost("b", 40.0, 1, 1)]
    assert affordable_steps(steps, 100.0) == ("a", "b")
    assert affordable_steps(steps, 99.999) == ("a",)
    assert affordable_steps(steps, 59.999) == ("b",)
    assert affordable_steps(steps, 39.999) == ()
    assert affordable_steps([], 100.0) == ()
