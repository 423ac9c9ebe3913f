"""lib/loop/plan/run_script.py: run.sh, run as bash runs it. (What vLLM makes of it is
tests/cli/test_plan.py's.)"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

from vllm_sweep import llama_design, planned

from lib.loop.plan.write import write_plan


def test_run_script_dry_run_without_vllm_prints_every_sweep(tmp_path: Path) -> None:
    """Without `vllm` on PATH, `run.sh --dry-run` prints each step's command as `commands`
    gives it (params beside the script, every extra argument appended) and runs nothing."""
    one = planned(llama_design(serve_args='--served-model-name "it\'s"'))
    (step,) = one.steps
    second = dataclasses.replace(step, name="more", experiment_name="more")
    plan = dataclasses.replace(one, steps=(step, second))
    plan_dir = tmp_path / "plan"
    _, problems = write_plan(plan, plan_dir)
    assert problems == []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dirname, bash = shutil.which("dirname"), shutil.which("bash")
    assert dirname is not None and bash is not None
    (bin_dir / "dirname").symlink_to(dirname)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [bash, str(plan_dir / "run.sh"), "--dry-run", "--resume"],
        cwd=work,
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    expected = [f"{command} --dry-run --resume" for command in plan.commands(str(plan_dir))]
    assert done.stdout.splitlines() == expected
    assert "/more/serve_params.json" in expected[1]
    assert list(work.iterdir()) == []
