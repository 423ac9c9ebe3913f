"""lib/loop/plan/combos.py: the serve and bench combos: the engine settings in every serve
combo, server replicas and their order."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from plan_inputs import sonnet_result
from vllm_sweep import llama_design, planned, planned_k, vllm_record, vllm_records_params

from lib.loop.plan.combos import SERVE_ORDER_SEED
from lib.loop.plan.design import design_from
from lib.loop.plan.follow_up import follow_up_plan
from lib.loop.plan.follow_up_needs import follow_up_needs
from lib.loop.plan.validation import validation_plan
from lib.loop.plan.write import plan_files


def test_engine_settings_go_into_every_serve_combo_and_every_record(tmp_path: Path) -> None:
    """--max-num-seqs and --max-cudagraph-capture-size are one-valued serve keys of every combo
    of every kind of plan, so the sweep passes them to every server (as vLLM's flags of the same
    names) and copies them into every record; the serve command's --max-num-seqs agrees."""
    design = llama_design(max_num_seqs=512, max_cudagraph_capture_size=2048)
    engine = {"max_num_seqs": 512, "max_cudagraph_capture_size": 2048}
    tuning = planned(design)
    needs = follow_up_needs([_sonnet_plan_json(tmp_path)])[0]
    assert needs is not None
    follow_up, problems = follow_up_plan(design, needs, "r", "followup")
    assert follow_up is not None, problems
    validation, problems = validation_plan(design, sonnet_result(tmp_path), "r", "v")
    assert validation is not None, problems
    for plan in (tuning, follow_up, validation):
        for step in plan.steps:
            for name, combo in step.serve_params.items():
                assert {key: combo.get(key) for key in engine} == engine, (plan.kind, name)
        assert "--max-num-seqs 512" in plan.commands("plan")[0]
    assert validation.steps[0].serve_params["no-spec"] == engine
    serve = vllm_records_params(tuning.steps[0].serve_params)
    record = vllm_record(serve[0], {"max_concurrency": 1, "num_prompts": 32}, 0)
    assert {key: record[key] for key in engine} == engine
    stored = design.to_json()
    assert {key: stored[key] for key in engine} == engine
    assert design_from(stored, {})[0] == design


def test_without_engine_settings_the_plan_is_as_before() -> None:
    """No flag, no key: the serve combos hold only speculative_config, the stored design has
    no engine keys (earlier plans' sweep_plan.json read and write the same), and the servers'
    --max-num-seqs is the deployment maximum."""
    plan = planned(llama_design())
    assert all(
        list(combo) == ["speculative_config"] for combo in plan.steps[0].serve_params.values()
    )
    stored = llama_design().to_json()
    assert "max_num_seqs" not in stored and "max_cudagraph_capture_size" not in stored
    assert "--max-num-seqs 256" in plan.commands("plan")[0]


def _sonnet_plan_json(tmp_path: Path) -> Path:
    path = tmp_path / "measurement_plan.json"
    path.write_text(
        json.dumps(
            {
                "reruns": [{"batch_size": 1, "k": 3, "runs": 3, "more_runs": 2}],
                "new_anchors": [{"batch_size": 8, "ks": [0, 3], "runs_per_k": 3}],
            }
        )
    )
    return path


def _k_of_combos(serve_params: dict[str, Any]) -> dict[str, int]:
    return {name: planned_k(combo) for name, combo in serve_params.items()}


def test_one_server_replica_is_the_plan_without_replicas() -> None:
    """R = 1 (the default) writes what a plan wrote before replicas: a serve combo per K named
    k<K>, in K order, without a seed, and a design without the replica keys (so its files
    are byte for byte the earlier ones; the committed samples' params are checked against
    them above)."""
    plan = planned(llama_design(server_replicas=1))
    (step,) = plan.steps
    assert list(step.serve_params) == ["k0", "k1", "k3", "k7"]
    assert all("seed" not in combo for combo in step.serve_params.values())
    stored = plan.design.to_json()
    assert "server_replicas" not in stored and "first_replica" not in stored
    assert not any("replica" in note for note in plan.notes)
    assert plan_files(plan, "p") == plan_files(planned(llama_design()), "p")


def test_two_server_replicas_are_two_combos_per_k_differing_only_in_the_seed() -> None:
    """R = 2: each K's combo twice, named <combo>-seed=<r> for r = 0, 1, which lib.servers
    reads back as the K's configuration and the replica; each is the R = 1 combo with the
    serve param seed r added, nothing else; the design records R."""
    from lib.servers import configuration_of, replica_of

    single = planned(llama_design()).steps[0].serve_params
    plan = planned(llama_design(server_replicas=2))
    serve = plan.steps[0].serve_params
    assert len(serve) == 2 * len(single)
    for name, combo in serve.items():
        configuration, replica = configuration_of(name), replica_of(name)
        assert replica in {"0", "1"} and configuration in single, name
        assert combo == {**single[configuration], "seed": int(str(replica))}
    assert sorted(serve) == sorted(f"{k}-seed={r}" for k in single for r in (0, 1))
    assert plan.design.to_json()["server_replicas"] == 2
    assert design_from(plan.design.to_json(), {})[0] == plan.design
    # 4 K x 2 replicas: 8 server starts, said in the summary and the notes.
    assert "8 server start(s)" in plan.summary_line()
    assert any("8 server starts, 2x the servers of one per K" in note for note in plan.notes)


def test_replicas_run_in_shuffled_blocks_the_same_every_time() -> None:
    """The serve combos' order (the sweep's order of server starts) is a permutation of every
    (K, replica), in blocks of one replica of every K, each block's K order drawn by
    random.Random(SERVE_ORDER_SEED) one block after the other (the documented rule, computed
    here from it); the same design gives the same order."""
    design = llama_design(server_replicas=3)
    names = list(planned(design).steps[0].serve_params)
    assert names == list(planned(design).steps[0].serve_params)
    draw = random.Random(SERVE_ORDER_SEED)
    expected = []
    for replica in range(3):
        block = ["k0", "k1", "k3", "k7"]
        draw.shuffle(block)
        expected += [f"{combo}-seed={replica}" for combo in block]
    assert names == expected
    assert sorted(names) == sorted(f"k{k}-seed={r}" for k in (0, 1, 3, 7) for r in range(3))
    # Not K order in every block: the shuffle moved something (true for this seed).
    assert any(names[i : i + 4] != sorted(names[i : i + 4]) for i in (0, 4, 8))
