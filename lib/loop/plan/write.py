"""The files of a plan, and writing them: each step's params files, ``run.sh``, ``command.txt``
and ``sweep_plan.json`` (the design, which ``--design`` reads back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lib.files import write_files
from lib.loop.plan.run_script import run_script
from lib.loop.plan.sweep_plan import BENCH_PARAMS, RUN_SCRIPT, SERVE_PARAMS, SweepPlan
from lib.problems import Problem

__all__ = ["DESIGN_FILE", "plan_files", "write_plan"]

COMMAND_FILE = "command.txt"
DESIGN_FILE = "sweep_plan.json"


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


def write_plan(plan: SweepPlan, plan_dir: str | Path) -> tuple[list[Path], list[Problem]]:
    """Write every file of the plan under ``plan_dir`` (folders made as needed, ``run.sh``
    executable); returns the paths, or the problem of the first that could not be written."""
    root = Path(plan_dir)
    files = [(root / relative, text) for relative, text in plan_files(plan, str(plan_dir)).items()]
    problems = write_files(files, make_folders=True, executable={root / RUN_SCRIPT})
    return ([] if problems else [path for path, _ in files]), problems


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"
