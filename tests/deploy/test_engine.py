"""lib/deploy/engine.py: what is known of the engine, each value with where it was stated; a
result file keeps the stated ones (and only those) for a later export."""

from __future__ import annotations

import json
from pathlib import Path

from paths import SAMPLE_SWEEPS

from lib.analysis import analyse
from lib.deploy.engine import EngineFacts, Fact
from lib.deploy.result_file import read_result_file, result_text
from lib.deploy.tuning import deploy_analysis
from lib.settings import DeploySettings, Settings
from lib.sweeps import load_experiment


def test_nothing_stated_is_none_never_a_default() -> None:
    facts = EngineFacts()
    assert (facts.max_cudagraph_capture_size, facts.max_num_seqs) == (None, None)
    assert facts.max_num_batched_tokens is None


def test_facts_compare_by_value_and_source() -> None:
    assert Fact(512, "--max-cudagraph-capture-size") == Fact(512, "--max-cudagraph-capture-size")
    assert Fact(512, "--max-cudagraph-capture-size") != Fact(512, "the sweep's serve params")


def _written(tmp_path: Path, deploy: DeploySettings) -> Path:
    analysis = analyse(load_experiment(SAMPLE_SWEEPS / "sonnet-like"), Settings())
    deployed, _ = deploy_analysis(analysis, deploy)
    path = tmp_path / "result.json"
    path.write_text(result_text(deployed.result))
    return path


def test_a_stated_ceiling_is_kept_by_the_result_file_with_its_source(tmp_path: Path) -> None:
    deploy = DeploySettings(max_cudagraph_capture_size=512, max_num_seqs=128)
    read, problems = read_result_file(_written(tmp_path, deploy))
    assert problems == [] and read is not None
    assert read.engine.max_cudagraph_capture_size == Fact(
        512, "the result's --max-cudagraph-capture-size"
    )
    assert read.engine.max_num_seqs == Fact(128, "the result's --max-num-seqs")


def test_an_assumed_ceiling_is_not_a_fact(tmp_path: Path) -> None:
    path = _written(tmp_path, DeploySettings())
    # The file says what was assumed, marked not known ...
    ceiling = json.loads(path.read_text())["deployment"]["capture_ceiling"]
    assert ceiling["known"] is False
    # ... and reads back as nothing stated.
    read, _ = read_result_file(path)
    assert read is not None and read.engine == EngineFacts()
