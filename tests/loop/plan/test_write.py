"""lib/loop/plan/write.py: writing a plan's files."""

from __future__ import annotations

from pathlib import Path

from vllm_sweep import llama_design, planned

from lib.loop.plan.write import write_plan


def test_write_plan_reports_a_file_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the plan folder should be")
    written, problems = write_plan(planned(llama_design()), blocker / "plan")
    assert written == []
    assert [p.rule for p in problems] == ["unwritable-file"]
