"""lib/loop/plan/follow_up_needs.py: what a follow-up must measure, read from a tuning result
and its measurement plan, and the inputs refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plan_inputs import context_result, noisy_result

from lib.deploy.result_file import result_text
from lib.loop.plan.follow_up_needs import follow_up_needs


def test_follow_up_from_the_result_alone_reruns_contenders(tmp_path: Path) -> None:
    path, _, report = noisy_result(tmp_path)
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert needs.result_file == str(path)
    unresolved = report.anchors.filter(report.anchors["status"] == "unresolved").to_dicts()
    expected_cells = {(row["anchor"], k) for row in unresolved for k in row["contenders"]}
    assert set(needs.more_runs) == expected_cells
    assert all(runs >= 1 for runs in needs.more_runs.values())
    assert any("--plan-json" in note for note in needs.notes)


def test_follow_up_measures_the_capture_boundaries_of_the_result(tmp_path: Path) -> None:
    path, result, _ = noisy_result(tmp_path)
    data = json.loads(result_text(result))
    # What tune writes when K=5 would run past C from batch 86 (lib/deploy/tuning.py).
    data["deployment"] = {
        "anchors_to_measure": [{"batch_size": 86, "ks": [4, 5], "reason": "boundary"}]
    }
    path.write_text(json.dumps(data))
    needs, problems = follow_up_needs([path])
    assert needs is not None, problems
    assert 86 in needs.new_anchors
    assert needs.more_runs[(86, 4)] == needs.more_runs[(86, 5)] == 3
    # Without the block, no such anchor.
    del data["deployment"]
    path.write_text(json.dumps(data))
    needs, _ = follow_up_needs([path])
    assert needs is not None and 86 not in needs.new_anchors


def test_a_grid_read_from_another_field_is_refused(tmp_path: Path) -> None:
    path = context_result(tmp_path, lambda d: d["context_axis"].update(field="my_len"))
    needs, problems = follow_up_needs([path])
    assert needs is None and problems[0].field == "context_axis.field"
    assert "'my_len'" in problems[0].message


def test_a_damaged_grid_is_refused_not_planned_as_batch_only(tmp_path: Path) -> None:
    def damage(data: dict[str, Any]) -> None:
        data["context_grid"][0]["prompt_tokens"] = "512"

    needs, problems = follow_up_needs([context_result(tmp_path, damage)])
    assert needs is None
    assert problems and problems[0].field is not None and "context_grid[0]" in problems[0].field
