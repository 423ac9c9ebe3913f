"""lib/present/text.py: each result as the lines the CLI prints, checked against numbers worked
out by hand from the sweeps below."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import polars as pl
import pytest
from paths import SAMPLE_SWEEPS
from sweep_builder import GOOD_VALIDATION, WORKED_EXAMPLE, write_grid, write_validation
from vllm_sweep import llama_design, planned

from lib.analysis import Analysis, analyse
from lib.loop.check.judge import CheckSettings
from lib.loop.check.report import check_deployment
from lib.loop.diff import DiffReport
from lib.loop.plan.follow_up import follow_up_plan
from lib.loop.plan.follow_up_needs import FollowUpNeeds
from lib.loop.plan.sweep_plan import SweepPlan, SweepStep
from lib.present import text
from lib.problems import Problem, Severity
from lib.settings import Options, Settings
from lib.sweeps import load_experiment

# K=3 doubles K=0 at batch 1 and quarters it at 16 (tests/test_switch_points.py derives the
# crossover 16^(1/3) = 2.52 and the switch at 3).
CROSSING = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1600.0] * 3, (16, 3): [400.0] * 3}


def _analysis(root: Path, **options: object) -> Analysis:
    return analyse(load_experiment(root), Settings(), Options(**{"server_cv": 0.0, **options}))  # type: ignore[arg-type]


def test_decision_lines_are_the_seeds(tmp_path: Path) -> None:
    result = _analysis(write_grid(tmp_path, CROSSING)).result
    # Identical runs: MAD 0, conservative = median. Batch 1: K=3 at 200 vs K=0 at 100, +100 %.
    # The seed's format: vs_k0 as Python writes the float (200 / 100 - 1 = 1.0 -> 100.0).
    assert text.decision_lines(result) == [
        "batch_size=1: K=3, conservative_objective=200.00, vs_best=0.00%, vs_k0=100.0",
        "batch_size=16: K=0, conservative_objective=1600.00, vs_best=0.00%, vs_k0=0.0",
    ]
    assert text.anchor_detail_lines(result) == [
        "anchor 1: K=3 median=200.00 conservative=200.00 vs_best=+0.00% vs_k0=+100.00% tied=[3]",
        "anchor 16: K=0 median=1600.00 conservative=1600.00 vs_best=+0.00% vs_k0=+0.00% tied=[0]",
    ]


def test_speculative_config_line_is_quoted_for_a_shell(tmp_path: Path) -> None:
    result = _analysis(write_grid(tmp_path, CROSSING)).result
    line = text.speculative_config_line(result)
    assert line.startswith("--speculative-config '{") and line.endswith("}'")
    assert '"num_speculative_tokens_per_batch_size": [[1, 15, 3], [16, 16, 0]]' in line


def test_confidence_lines_say_resolved_or_not_and_why(tmp_path: Path) -> None:
    analysis = _analysis(write_grid(tmp_path, WORKED_EXAMPLE))
    assert analysis.report is not None
    lines = text.confidence_lines(analysis.report, analysis.result)
    # docs/confidence.md's worked example: batch 1 is unresolved (provisional K=4 once the
    # flagged 160 run is set aside), the seed's K=2 has its (calibrated) P printed beside it;
    # batch 64 resolved at K=1.
    assert lines[0].startswith("batch_size=1: unresolved, provisional K=4")
    assert "contenders=" in lines[0] and "flagged: K=4 run" in lines[0]
    cells = analysis.report.cells
    k2 = cells.filter((pl.col("anchor") == 1) & (pl.col("k") == 2))["p_eps_good"].item()
    assert f"the reported pick K=2 has P(eps-good)={k2:.2f}" in lines[0]
    assert lines[1].startswith("batch_size=64: resolved, K=1 P(eps-good)=0.9")


def test_switch_point_lines_give_the_crossover_and_the_gain(tmp_path: Path) -> None:
    analysis = _analysis(write_grid(tmp_path, CROSSING))
    assert analysis.switch_points is not None
    lines = text.switch_point_lines(analysis.switch_points)
    assert lines[1].startswith(
        "  K=3 -> K=0 between 1 and 16: curves cross at 2.5; switch at 3 (step schedule: 16)"
    )
    assert lines[2].startswith("  interpolated schedule [[1, 2, 3], [3, 16, 0]]: expected +")


def test_measurement_plan_lines_group_reruns_by_anchor(tmp_path: Path) -> None:
    analysis = _analysis(write_grid(tmp_path, WORKED_EXAMPLE))
    assert analysis.plan is not None
    lines = text.measurement_plan_lines(analysis.plan)
    assert lines[0] == "measurement plan (confidence 0.9, tie tolerance 1%):"
    assert lines[1] == "  batch_size=1:"
    assert lines[2].startswith("    K=2: 7 more run(s) (3 -> 10)")
    assert lines[-1].startswith("  new anchor batch_size=8: measure K=[0, 1, 2, 3, 4]")


def test_sweep_plan_lines_summarise_then_give_the_command() -> None:
    plan = planned(llama_design())
    lines = text.sweep_plan_lines(plan, "plan")
    # 4 K x 4 anchors x 3 runs = 48 benchmark runs, one server start per K.
    assert lines[0] == "tuning plan: 1 sweep(s), 4 server start(s), 48 benchmark runs"
    assert lines[1].startswith(
        "  tuning: servers [k0, k1, k3, k7] x concurrency [1, 64, 128, 256] x 3 run(s)"
        " (seeds 0-2) -> r/e: "
    )
    assert lines[-1].startswith("vllm bench sweep serve --serve-cmd ")
    assert lines[-1] == plan.commands("plan")[0]


def test_a_replicated_sweep_names_each_k_once_and_its_replicas() -> None:
    """4 K x 2 replicas = 8 server starts, 8 x 4 anchors x 3 runs = 96 runs; the step line
    names each K once (in the order of the first block of the shuffled combos) and the
    replicas' serve seeds, not 8 combo names."""
    plan = planned(llama_design(server_replicas=2))
    lines = text.sweep_plan_lines(plan, "plan")
    assert lines[0] == "tuning plan: 1 sweep(s), 8 server start(s), 96 benchmark runs"
    first_block = [name.removesuffix("-seed=0") for name in list(plan.steps[0].serve_params)[:4]]
    assert sorted(first_block) == ["k0", "k1", "k3", "k7"]
    assert lines[1].startswith(
        f"  tuning: servers [{', '.join(first_block)}] x 2 replica(s) (serve seeds 0-1,"
        " shuffled) x concurrency [1, 64, 128, 256] x 3 run(s) (seeds 0-2) -> r/e: "
    )


def test_a_sweep_whose_anchors_start_at_other_seeds_names_each() -> None:
    """A follow-up continues each cell's seeds: anchor 4 is new (seeds from 0), anchor 16 had
    3 runs (seeds from 3); one run gives one seed."""
    more = {(4, 0): 2, (16, 0): 2}
    needs = FollowUpNeeds(more, {(4, 0): 0, (16, 0): 3}, (4,), None, (0, 3), ())
    plan, problems = follow_up_plan(llama_design(ks=(0, 3), anchors=(1, 16)), needs, "r", "f")
    assert plan is not None, problems
    line = text.sweep_plan_lines(plan, "plan")[1]
    assert " x 2 run(s) (seeds 0-1 at concurrency 4; seeds 3-4 at concurrency 16) -> " in line
    one = planned(llama_design(num_runs=1))
    assert " x 1 run(s) (seed 0) -> " in text.sweep_plan_lines(one, "plan")[1]


def test_check_lines_give_a_verdict_per_anchor(tmp_path: Path) -> None:
    report = check_deployment(write_validation(tmp_path / "v", GOOD_VALIDATION), CheckSettings())
    lines = text.check_lines(report)
    assert lines[0] == "schedule under test: [[1, 63, 7], [64, 256, 0]]"
    # The capture check's line, on the newest vLLM assumed (0.34: R = min(S, 512 / (1 + 0))
    # with the K=0 tier; 63 * 8 = 504 tokens at most, within the default C0 = 512).
    assert lines[1] == report.deployment_summary
    assert lines[1].startswith("capture ceiling: vLLM 0.34.0 (assumed")
    assert "C0=512" in lines[1]
    assert lines[2].startswith("batch_size=1: OK; dynamic K=7 median=318.00")
    assert "Dynamic SD overhead vs static K=7: +0.00%" in lines[2]
    assert not any(line.startswith("LOSS") for line in lines)


def test_diff_lines_end_with_the_verdict(sample_diff: DiffReport) -> None:
    lines = text.diff_lines(sample_diff)
    assert lines[0].startswith("A: [[1, 63, 7], [64, 256, 0]]  (")
    assert lines[2] == "objective: output_throughput (maximize)"
    assert lines[3].startswith("batch_size=1: K 7 -> 0; output_throughput 315.28 -> 206.50")
    assert lines[-1] == (
        "materially different (thresholds: K loss 2.0%, objective change 5.0%, confidence 0.9)"
    )


@pytest.mark.parametrize(
    ("lines", "expected"),
    [([], "<ul></ul>"), (["mean_tpot_ms < 5"], "<ul><li>mean_tpot_ms &lt; 5</li></ul>")],
)
def test_html_list_escapes(lines: list[str], expected: str) -> None:
    assert text.html_list(lines) == expected


def test_problems_and_blocks_as_html() -> None:
    problem = Problem(Severity.ERROR, "noisy-objective", "a <b> c")
    assert text.problem_list_html([problem]) == f"<ul><li>{problem.describe()}</li></ul>".replace(
        "<b>", "&lt;b&gt;"
    )
    assert text.text_block_html(["a", "  <b>"]) == (
        '<pre style="white-space: pre-wrap; font-size: 0.85em">a\n  &lt;b&gt;</pre>'
    )


def test_every_context_config_is_paste_ready_with_the_draft_settings() -> None:
    from lib.context import analyse_contexts
    from lib.context_axis import find_context_axis
    from lib.settings import ContextSettings

    sweep = load_experiment(SAMPLE_SWEEPS / "long-context")
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    analysis = analyse_contexts(sweep, axis, Settings())
    shared = (analysis.answer or analysis.pooled).result.speculative_config()
    configs = [line for line in text.context_export_lines(analysis) if not line.startswith(" ")]
    assert len(configs) == 3  # vllm-context, vllm-rfc-48944, vllm-pr-54801
    for line in configs:
        name, argument = line.split(": ", 1)
        # What a shell passes to vllm serve: the flag, then one JSON argument.
        flag, value = shlex.split(argument)
        config = json.loads(value)
        assert flag == "--speculative-config"
        assert (config["method"], config["model"]) == (shared["method"], shared["model"])
        assert config["num_speculative_tokens"] >= 1, name


def _step(cells: list[tuple[int, int | None]]) -> SweepStep:
    bench = {
        f"c{anchor}-p{length}-seed0": {
            "max_concurrency": anchor,
            **({} if length is None else {"random_input_len": length}),
            "seed": 0,
        }
        for anchor, length in cells
    }
    return SweepStep("followup-1", {"k0": {}, "k3": {}}, bench, 1, "/r", "e", "the cells")


@pytest.mark.parametrize(
    ("cells", "shown"),
    [
        ([(8, None), (1, None)], "x concurrency [1, 8] x 1 run(s)"),
        # The whole product: anchors x lengths, each sorted by number.
        (
            [(64, 16384), (1, 1024), (1, 16384), (64, 1024)],
            "x concurrency [1, 64] x prompt tokens [1024, 16384] x",
        ),
        # Some cells at some lengths: the pairs, never the product they do not make.
        ([(64, 8192), (1, 1024)], "x cells [1 x 1024 tokens, 64 x 8192 tokens] x"),
    ],
)
def test_a_sweep_line_says_which_cells_each_server_measures(
    cells: list[tuple[int, int | None]], shown: str
) -> None:
    plan = SweepPlan("follow-up", llama_design(), (_step(cells),))
    line = text.sweep_plan_lines(plan, "plan")[1]
    assert line.startswith("  followup-1: servers [k0, k3] ") and shown in line
