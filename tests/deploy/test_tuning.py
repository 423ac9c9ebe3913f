"""lib/deploy/tuning.py: the server settings a sweep's records state, and the capture rule
applied to an analysis, and to every prompt length of a context sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sweep_builder import (
    CONTEXT_GRID,
    record,
    write_combo,
    write_context_grid,
    write_grid,
    write_json,
)

from lib.analysis import analyse
from lib.context import ContextAnalysis, analyse_contexts
from lib.context_axis import find_context_axis
from lib.deploy.result_file import result_document
from lib.deploy.tuning import (
    anchors_above_max_num_seqs,
    deploy_analysis,
    deploy_contexts,
    sweep_engine_facts,
)
from lib.deploy.verdict import verdict_in
from lib.schedule import Schedule
from lib.server_info import read_server_settings
from lib.settings import ContextSettings, DeploySettings, Options, Settings
from lib.sweeps import load_experiment

CELLS = {
    (1, 0): [100.0, 101.0, 99.0],
    (1, 3): [150.0, 151.0, 149.0],
    (256, 0): [5000.0, 5050.0, 4950.0],
    (256, 3): [4000.0, 4040.0, 3960.0],
}


def test_servers_that_differ_give_the_safest_values_and_a_warning(tmp_path: Path) -> None:
    root = write_grid(tmp_path / "sweep", CELLS, global_k=3, max_num_seqs=256)
    for k, size in ((0, 512), (3, 256)):
        runs = [
            record(
                8,
                k,
                run_number=n,
                output_throughput=600.0 + n,
                max_num_seqs=128,
                compilation_config={"cudagraph_capture_sizes": [1, 2, 4, size]},
            )
            for n in range(3)
        ]
        write_combo(tmp_path / "sweep" / f"SERVE--other-k{k}-BENCH--c8", runs)
    facts, problems = sweep_engine_facts(load_experiment(root))
    assert facts.max_cudagraph_capture_size is not None and facts.max_num_seqs is not None
    # C: the smaller of 512 and 256 (the largest capture size each lists); max_num_seqs: 256.
    assert (facts.max_cudagraph_capture_size.value, facts.max_num_seqs.value) == (256, 256)
    assert sorted(p.field for p in problems) == ["max_cudagraph_capture_size", "max_num_seqs"]


def test_a_sweep_that_states_nothing_has_no_facts(tmp_path: Path) -> None:
    facts, problems = sweep_engine_facts(load_experiment(write_grid(tmp_path / "s", CELLS)))
    assert (facts.max_cudagraph_capture_size, facts.max_num_seqs, problems) == (None, None, [])


def test_the_analysis_gets_its_deployment_block(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path / "s", CELLS, global_k=3))
    analysis = analyse(sweep, Settings())
    assert analysis.result.schedule is not None
    assert analysis.result.schedule.to_json() == [[1, 255, 3], [256, 256, 0]]
    deployed, deployment = deploy_analysis(analysis, DeploySettings(vllm_version="0.33.0"))
    assert deployment is not None
    # Assumed C: the schedule is kept; 128 * 4 = 512 fits, 129..255 at K=3 do not.
    assert deployed.result.schedule == analysis.result.schedule
    assert [(g.lo, g.hi) for g in deployment.check.graphless] == [(129, 255)]
    assert result_document(deployed.result)["deployment"]["capture_ceiling"]["known"] is False
    capped, deployment = deploy_analysis(
        analysis, DeploySettings(max_cudagraph_capture_size=512, vllm_version="0.33.0")
    )
    assert capped.result.schedule is not None and deployment is not None
    assert capped.result.schedule.to_json() == [
        [1, 128, 3],
        [129, 170, 2],
        [171, 255, 1],
        [256, 256, 0],
    ]
    # Measured past 512: batch 256 with K=3 (1024 tokens).
    assert deployment.past_ceiling == ((256, 3),)
    assert any(p.rule == "measured-past-capture-ceiling" for p in capped.result.problems)


def test_no_schedule_no_deployment(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path / "s", {(2, 0): [1.0, 1.0, 1.0]}))
    analysis = analyse(sweep, Settings())
    deployed, deployment = deploy_analysis(analysis, DeploySettings())
    # Nothing to check: the result is the analysis's, with only its verdict added.
    assert deployment is None and deployed.result.schedule == analysis.result.schedule
    assert deployed.result.problems == analysis.result.problems
    assert list(deployed.result.additions) == [*analysis.result.additions, "verdict"]


# --------------------------------------------------------------------------- issue 38, kind 7


@pytest.mark.parametrize(
    "fields",
    [
        {"compilation_config.max_cudagraph_capture_size": 256},
        {"compilation-config.max_cudagraph_capture_size": "256"},
        {"compilation_config.max-cudagraph-capture-size": 256.0},
        {"compilation_config": {"max_cudagraph_capture_size": 256.0}},
        {"compilation_config": json.dumps({"max_cudagraph_capture_size": 256.0})},
        {"compilation_config.cudagraph_capture_sizes": [1, 2, 4, 256.0]},
        {"compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 256]}},
    ],
    ids=[
        "dotted",
        "dotted-dashes-text",
        "dotted-dashed-key-float",
        "nested-float",
        "json-text-float",
        "dotted-sizes",
        "nested-sizes",
    ],
)
def test_every_spelling_of_the_capture_ceiling_is_read(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    # Issue 38, kind 7: vLLM's dotted serve argument and a whole float used to leave C assumed.
    facts, problems = sweep_engine_facts(load_experiment(write_grid(tmp_path, CELLS, **fields)))
    assert facts.max_cudagraph_capture_size is not None and problems == []
    assert facts.max_cudagraph_capture_size.value == 256
    assert facts.max_cudagraph_capture_size.source == "the records' compilation_config"


@pytest.mark.parametrize("value", [0, 1.5, -256, "abc", True, None, [256]])
def test_a_capture_size_that_is_not_a_whole_number_of_at_least_1_is_not_taken(
    tmp_path: Path, value: Any
) -> None:
    folder = write_grid(tmp_path, CELLS, **{"compilation_config.max_cudagraph_capture_size": value})
    facts, _ = sweep_engine_facts(load_experiment(folder))
    assert facts.max_cudagraph_capture_size is None


def test_servers_differing_only_in_a_dotted_capture_size_are_both_read(tmp_path: Path) -> None:
    # The loader reuses a record's params when the fields they read agree: the dotted
    # compilation_config fields are among them, so the second server's C is not lost.
    root = tmp_path / "sweep"
    for k, size in ((0, 512), (3, 256)):
        runs = [
            record(1, k, run_number=n, **{"compilation_config.max_cudagraph_capture_size": size})
            for n in range(3)
        ]
        write_combo(root / f"SERVE--k{k}-BENCH--c1", runs, run_files=False)
    facts, problems = sweep_engine_facts(load_experiment(root))
    assert facts.max_cudagraph_capture_size is not None
    assert facts.max_cudagraph_capture_size.value == 256
    assert [p.rule for p in problems] == ["servers-differ"]


# --------------------------------------------------------------------------- issue 38, kind 3


def _save_config(folder: Path, max_num_seqs: int) -> None:
    write_json(
        folder / "server_info.json",
        {"vllm_config": {"scheduler_config": {"max_num_seqs": max_num_seqs}}},
    )


def test_a_server_below_its_anchor_is_a_warning_per_anchor(tmp_path: Path) -> None:
    # Anchors 1 and 256: the combo folders of 256 saved max_num_seqs 255 (one below: a
    # warning), those of 1 saved 1 (equal: none).
    root = write_grid(tmp_path / "s", CELLS)
    for combo in root.iterdir():
        _save_config(combo, 1 if combo.name.endswith("c1") else 255)
    sweep = load_experiment(root)
    saved = read_server_settings(root)
    problems = anchors_above_max_num_seqs(sweep, saved[0])
    (problem,) = problems
    assert (problem.rule, problem.anchor, problem.value) == (
        "max-num-seqs-below-anchor",
        256,
        "255",
    )
    assert problem.expected == ">= 256 (the anchor)"
    assert problem.files == (
        "SERVE--k0-BENCH--c256/summary.json",
        "SERVE--k3-BENCH--c256/summary.json",
    )
    _, found = sweep_engine_facts(sweep, saved)
    # The tuning's facts carry it (and say the servers differ: 1 and 255).
    assert [p.rule for p in found] == ["max-num-seqs-below-anchor", "servers-differ"]


def test_a_config_saved_at_the_root_covers_every_run_and_the_records_win(tmp_path: Path) -> None:
    root = write_grid(tmp_path / "s", CELLS)
    _save_config(root, 8)
    saved, _ = read_server_settings(root)
    # The root's config: every run; anchor 256 is above 8, anchor 1 is not.
    assert [p.anchor for p in anchors_above_max_num_seqs(load_experiment(root), saved)] == [256]
    # A run's own record states its server's max_num_seqs: it wins over a saved config.
    stated = write_grid(tmp_path / "r", CELLS, max_num_seqs=256)
    _save_config(stated, 8)
    saved, _ = read_server_settings(stated)
    assert anchors_above_max_num_seqs(load_experiment(stated), saved) == []
    # And a record below its anchor is a warning with nothing saved.
    low = write_grid(tmp_path / "low", CELLS, max_num_seqs=100)
    (problem,) = anchors_above_max_num_seqs(load_experiment(low), [])
    assert (problem.anchor, problem.value) == (256, "100")
    assert "the records' max_num_seqs" in problem.message


# --------------------------------------------------------------------------- context sweeps


def _context_grid(tmp_path: Path) -> ContextAnalysis:
    sweep = load_experiment(write_context_grid(tmp_path / "grid", CONTEXT_GRID))
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    return analyse_contexts(sweep, axis, Settings(), Options())


def test_every_prompt_length_and_the_answer_are_deployed_as_a_batch_sweep_is(
    tmp_path: Path,
) -> None:
    """Issue 38, kind 1: the capture flags were accepted and ignored on a context sweep. Each
    point is now what deploy_analysis makes of it alone, under the same flags."""
    grid = _context_grid(tmp_path)
    deploy = DeploySettings(max_cudagraph_capture_size=128, max_num_seqs=64)
    deployed = deploy_contexts(grid, deploy)
    for alone, point in zip(grid.contexts, deployed.contexts, strict=True):
        expected, _ = deploy_analysis(alone, deploy)
        assert point.result.schedule == expected.result.schedule
        assert verdict_in(point.result) == verdict_in(expected.result)
    # CONTEXT_GRID: K=3 at batch 1 at both lengths; C=128 caps K=3 from batch 33 (33 x 4 = 132
    # > 128) to K=2, and from 43 (43 x 3 = 129 > 128) to K=1: the 8192-token point's [1, 64, 3].
    assert deployed.contexts[1].result.schedule == Schedule(((1, 32, 3), (33, 42, 2), (43, 64, 1)))
    # The seed keys' answer is the deployed shortest point (the pooled sweep mixes lengths).
    assert grid.answer is grid.contexts[0]
    assert deployed.answer is deployed.contexts[0]
    # The grid itself (the picks per cell) is the analysis's, untouched.
    assert deployed.grid() == grid.grid()
    # What the deployment found is among the grid's problems, saying which prompt length.
    capped = [p for p in deployed.problems if p.rule == "capped-range"]
    assert capped and all(
        p.message.startswith(("at 512 tokens: ", "at 8192 tokens: ")) for p in capped
    )
    assert not [p for p in grid.problems if p.rule == "capped-range"]


def test_without_a_ceiling_the_points_keep_their_schedules(tmp_path: Path) -> None:
    grid = _context_grid(tmp_path)
    deployed = deploy_contexts(grid, DeploySettings())
    # C assumed (512): 64 x (1 + 3) = 256 <= 512, so nothing is capped, byte for byte.
    for before, after in zip(grid.contexts, deployed.contexts, strict=True):
        assert after.result.schedule == before.result.schedule


def test_a_ceiling_beyond_every_count_is_never_taken(tmp_path: Path) -> None:
    """Issue 38: the loader refuses such a sweep (invalid-engine-setting); the facts never
    take the value either (the app asks for them on what it loaded): C is not 2^31."""
    for size in (2**31, 10**300):
        root = write_grid(
            tmp_path / f"s{len(str(size))}",
            CELLS,
            compilation_config={"max_cudagraph_capture_size": size},
            max_num_seqs=2**31,
        )
        facts, _ = sweep_engine_facts(load_experiment(root))
        assert (facts.max_cudagraph_capture_size, facts.max_num_seqs) == (None, None)
    root = write_grid(
        tmp_path / "limit",
        CELLS,
        compilation_config={"cudagraph_capture_sizes": [1, 2**31 - 1]},
        max_num_seqs=2**31 - 1,
    )
    facts, _ = sweep_engine_facts(load_experiment(root))
    assert facts.max_cudagraph_capture_size is not None and facts.max_num_seqs is not None
    assert facts.max_cudagraph_capture_size.value == facts.max_num_seqs.value == 2**31 - 1
