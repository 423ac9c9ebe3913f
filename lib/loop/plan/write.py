"""The files of a plan, and writing them: each step's params files, ``run.sh``, ``command.txt``
and ``sweep_plan.json`` (the design, which ``--design`` reads back). A plan's folder is written
whole or not at all (:func:`lib.files.write_folder`): never a mix of an old plan's files and a
new one's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lib.files import folder_unwritable_reason, write_folder
from lib.loop.plan.run_script import run_script
from lib.loop.plan.sweep_plan import BENCH_PARAMS, RUN_SCRIPT, SERVE_PARAMS, SweepPlan
from lib.problems import Problem

__all__ = ["DESIGN_FILE", "PLAN_FILE_NAMES", "plan_files", "plan_folder_reason", "write_plan"]

COMMAND_FILE = "command.txt"
DESIGN_FILE = "sweep_plan.json"
#: The names of a plan's files, in its folder or a step's: what replacing a plan folder may
#: remove (anything else in it is the user's, and the plan is refused).
PLAN_FILE_NAMES = (SERVE_PARAMS, BENCH_PARAMS, RUN_SCRIPT, COMMAND_FILE, DESIGN_FILE)


def plan_files(plan: SweepPlan, plan_dir: str) -> dict[str, str]:
    """Relative path -> text of every file of the plan (params, run.sh, command.txt and the
    design, which ``--design`` reads back for a follow-up or validation plan)."""
    texts: dict[str, str] = {}
    for step in plan.steps:
        folder = plan.step_folder(step)
        prefix = f"{folder}/" if folder else ""
        texts[prefix + SERVE_PARAMS] = _json_text(step.serve_params)
        texts[prefix + BENCH_PARAMS] = _json_text(step.bench_params)
    texts[RUN_SCRIPT] = run_script(plan)
    texts[COMMAND_FILE] = "\n\n".join(plan.commands(plan_dir)) + "\n"
    texts[DESIGN_FILE] = _json_text(
        {
            "kind": plan.kind,
            "design": plan.design.to_json(),
            "steps": [
                {
                    "name": step.name,
                    "folder": plan.step_folder(step),
                    "num_runs": step.runs_per_cell,
                    "results": f"{step.results_dir}/{step.experiment_name}",
                    "purpose": step.purpose,
                }
                for step in plan.steps
            ],
            "notes": list(plan.notes),
        }
    )
    return texts


def plan_folder_reason(plan_dir: str | Path) -> str | None:
    """Why a plan could not be written to ``plan_dir``, or None: the folder is replaced whole,
    so where it exists it may hold only a plan's files (:data:`PLAN_FILE_NAMES`, at any
    depth: an earlier plan's steps), and its parent must be writable
    (:func:`lib.files.folder_unwritable_reason`)."""
    return folder_unwritable_reason(plan_dir, PLAN_FILE_NAMES)


def write_plan(plan: SweepPlan, plan_dir: str | Path) -> tuple[list[Path], list[Problem]]:
    """Write ``plan_dir`` as the plan's folder, whole (:func:`lib.files.write_folder`: the
    files in a new folder beside it, then one rename; parent folders made as needed,
    ``run.sh`` executable); returns the paths, or the problem that left everything as it
    was."""
    root = Path(plan_dir)
    texts = plan_files(plan, str(plan_dir))
    problems = write_folder(root, list(texts.items()), executable={RUN_SCRIPT})
    return ([] if problems else [root / relative for relative in texts]), problems


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"
