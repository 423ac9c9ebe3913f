"""lib/loop/plan/write.py: writing a plan's files."""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path

import pytest
from signal_runs import EXPECTED_STATUS, snapshot, stop_at
from vllm_sweep import LLAMA_FLAGS, llama_design, planned

from lib.cli.main import main
from lib.loop.plan.sweep_plan import BENCH_PARAMS, RUN_SCRIPT, SERVE_PARAMS
from lib.loop.plan.write import plan_files, plan_folder_reason, write_plan


def test_write_plan_reports_a_file_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the plan folder should be")
    written, problems = write_plan(planned(llama_design()), blocker / "plan")
    assert written == []
    assert [p.rule for p in problems] == ["unwritable-file"]


def test_a_plan_replaces_the_previous_one_whole(tmp_path: Path) -> None:
    # An earlier plan's step folder does not linger beside the new plan's files.
    plan = planned(llama_design())
    folder = tmp_path / "plan"
    (folder / "old-step").mkdir(parents=True)
    (folder / "old-step" / SERVE_PARAMS).write_text("[]")
    (folder / RUN_SCRIPT).write_text("old")
    written, problems = write_plan(plan, folder)
    assert problems == []
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == (
        sorted(plan_files(plan, str(folder)))
    )
    assert sorted(written) == sorted(folder / name for name in plan_files(plan, str(folder)))


def test_a_folder_with_other_files_is_not_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "plan"
    folder.mkdir()
    (folder / "notes.md").write_text("mine")
    assert plan_folder_reason(folder) is not None
    written, problems = write_plan(planned(llama_design()), folder)
    assert written == [] and [p.rule for p in problems] == ["unwritable-file"]
    assert [p.name for p in folder.iterdir()] == ["notes.md"]


#: `tune-spec-k plan` flags of an earlier plan and of the new one written over it.
_OLD = [
    "--model",
    "m",
    "--method",
    "eagle3",
    "--draft-model",
    "d",
    "--ks",
    "0,3",
    "--anchors",
    "1,8",
]
_NEW = [*LLAMA_FLAGS]
_RANDOM = random.Random(3819)
_STOPS = [
    (number, round(_RANDOM.uniform(0.2, 2.5), 2))
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)
    for _ in range(2)
]


@pytest.fixture(scope="module")
def old_and_new(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], ...]:
    """The files of the earlier plan and of the new one, each written whole to ``plan``."""
    found = []
    for flags in (_OLD, _NEW):
        here = tmp_path_factory.mktemp("whole")
        cwd = os.getcwd()
        os.chdir(here)
        try:
            assert main(["plan", "-o", "plan", *flags]) == 0
        finally:
            os.chdir(cwd)
        found.append(snapshot(here / "plan"))
    # The earlier plan as a follow-up of two steps writes it: each step's params in a folder
    # of its own (the new plan has none: a folder left over would make a mix).
    old = found[0]
    params = {name: old.pop(name) for name in (SERVE_PARAMS, BENCH_PARAMS)}
    for step in ("rerun-1", "anchors-2"):
        old.update({f"{step}/{name}": data for name, data in params.items()})
    assert set(found[0]) != set(found[1])
    return tuple(found)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes found in /proc")
@pytest.mark.parametrize(("number", "delay"), _STOPS)
def test_a_plan_stopped_by_a_signal_is_the_old_one_or_the_new_one(
    tmp_path: Path, old_and_new: tuple[dict[str, bytes], ...], number: int, delay: float
) -> None:
    old, new = old_and_new
    folder = tmp_path / "plan"
    for name, data in old.items():  # the earlier plan, written with the same -o
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    argv = ["plan", "-o", "plan", *_NEW]
    stopped = stop_at(argv, number, delay, cwd=tmp_path, write_seconds=0.15)
    assert stopped.left == []
    assert "Traceback" not in stopped.stderr
    assert stopped.status in (EXPECTED_STATUS[number], 0), stopped.stderr[-2000:]
    assert snapshot(folder) in (old, new)  # never a mix
    if number != signal.SIGKILL:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]  # no temporary left
