"""lib.policy: the confident rule's picks and warnings, the seed policy with the confidence
blocks, and where the two rules differ.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from confidence_helpers import INDEPENDENT, NOISY_SAMPLE, anchor_row, p_of, report_of, worked
from sweep_builder import write_grid

from lib.confidence import assess
from lib.deploy.result_file import result_document
from lib.policy import apply_policy, policy_differences
from lib.problems import Severity
from lib.schedule import Schedule, tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def test_confident_rule_takes_the_smallest_k_that_reaches_the_confidence(tmp_path: Path) -> None:
    # K=1 and K=3 are 0.07 % apart with 0.2 % noise: both surely eps-good; K=0 far behind.
    write_grid(
        tmp_path,
        {
            (1, 0): [100.0, 100.3, 99.7],
            (1, 1): [150.0, 150.3, 149.7],
            (1, 3): [150.1, 150.4, 149.8],
        },
    )
    result, report = report_of(tmp_path)
    assert anchor_row(report, 1)["qualifying_k"] == [1, 3]
    confident = apply_policy(result, report, "confident")
    assert confident.decisions["selected_k"].to_list() == [1]
    assert confident.decisions["tied_k"].to_list() == [[1, 3]]
    assert confident.schedule == Schedule(((1, 1, 1),))


def test_unresolved_anchor_gets_a_provisional_pick_and_a_warning(tmp_path: Path) -> None:
    result, report = report_of(worked(tmp_path))
    confident = apply_policy(result, report, "confident")
    assert confident.ok
    warnings = [p for p in confident.problems if p.rule == "unresolved-anchor"]
    (warning,) = warnings
    assert warning.severity is Severity.WARNING and warning.anchor == 1
    assert "provisional K=4" in warning.message
    assert warning.files == ("SERVE--k4-BENCH--c1/summary.json",)
    block = result_document(confident)["batch_decisions"][0]["confidence"]
    assert block["status"] == "unresolved" and block["provisional"] is True


def test_confident_rule_ranks_cells_the_noise_gate_rejects() -> None:
    if not NOISY_SAMPLE.is_dir():
        pytest.skip(f"sample sweep {NOISY_SAMPLE} not generated")
    result = tune(load_experiment(NOISY_SAMPLE), Settings())
    assert not result.ok and [p.rule for p in result.errors] == ["noisy-objective"]
    confident = apply_policy(result, assess(result, INDEPENDENT), "confident")
    assert confident.ok
    (noisy,) = [p for p in confident.problems if p.rule == "noisy-objective"]
    assert noisy.severity is Severity.WARNING
    assert confident.cells.filter(pl.col("status") == "rejected").is_empty()


def test_seed_policy_keeps_every_seed_value_and_adds_the_block(tmp_path: Path) -> None:
    result, report = report_of(worked(tmp_path))
    plain = result_document(result)
    annotated = result_document(apply_policy(result, report, "seed"))
    for decision in annotated["batch_decisions"]:
        block = decision.pop("confidence")
        assert list(block)[:4] == ["status", "p_eps_good", "contenders", "runs_needed"]
    policy = annotated.pop("decision_policy")
    assert policy["policy"] == "seed" and policy["confidence"] == 0.9
    assert annotated == plain


def test_policy_differences_show_where_the_rules_disagree(tmp_path: Path) -> None:
    result, report = report_of(worked(tmp_path))
    differences = policy_differences(
        apply_policy(result, report, "seed"), apply_policy(result, report, "confident")
    )
    rows = {row["anchor"]: row for row in differences.to_dicts()}
    # The seed ties K=2 with K=3 at batch 1 (its MAD penalty), the confident rule leans K=4.
    assert (rows[1]["seed_k"], rows[1]["confident_k"], rows[1]["differs"]) == (2, 4, True)
    assert rows[1]["seed_p_eps_good"] == p_of(report, 1)[2]
    assert (rows[64]["seed_k"], rows[64]["confident_k"], rows[64]["differs"]) == (1, 1, False)
