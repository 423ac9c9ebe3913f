"""lib/deploy/tuning.py: the server settings a sweep's records state, and the capture rule
applied to an analysis."""

from __future__ import annotations

from pathlib import Path

from sweep_builder import record, write_combo, write_grid

from lib.analysis import analyse
from lib.deploy.result_file import result_document
from lib.deploy.tuning import deploy_analysis, sweep_engine_facts
from lib.settings import DeploySettings, Settings
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
    deployed, deployment = deploy_analysis(analysis, DeploySettings())
    assert deployment is not None
    # Assumed C: the schedule is kept; 128 * 4 = 512 fits, 129..255 at K=3 do not.
    assert deployed.result.schedule == analysis.result.schedule
    assert [(g.lo, g.hi) for g in deployment.check.graphless] == [(129, 255)]
    assert result_document(deployed.result)["deployment"]["capture_ceiling"]["known"] is False
    capped, deployment = deploy_analysis(analysis, DeploySettings(max_cudagraph_capture_size=512))
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
