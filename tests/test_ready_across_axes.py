"""`ready` means ready on every path (issue 38, "Must work"): Hypothesis draws sweeps with the
axes together (one or two prompt lengths, server replicas of some cells, a saved server config,
the capture flags) and the verdict the CLI and the app give (``analyse_sweep(...).verdict``, the
one function both call: tests/test_verdict_agreement.py) is never ``ready`` where a rule of one
axis alone says otherwise:

- each prompt length tuned alone (only its folders, a batch-only sweep) is ``ready`` too;
- the deployed schedule of each prompt length runs no range past the CUDA-graph capture ceiling
  and no range the ceiling capped (capped, not measured);
- every anchor's pick is resolved at every prompt length.

The examples are derandomised, as in tests/test_properties.py.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_properties import REPRODUCIBLE

from lib.analysis import analyse
from lib.app.context import analyse_sweep
from lib.context_axis import find_context_axis
from lib.deploy.tuning import Deployment, deploy_analysis
from lib.deploy.verdict import verdict_in
from lib.schedule import TuningResult
from lib.settings import ContextSettings, DeploySettings, Options, Settings
from lib.sweeps import load_experiment

NUM_PROMPTS = 8
#: The capture check's findings that put a deployed schedule in doubt.
CAPTURE_RULES = {"graphless-range", "capped-range"}


@st.composite
def axis_sweeps(draw: st.DrawFn) -> tuple[dict[str, Any], DeploySettings]:
    """relative path -> JSON value of one sweep, and the capture flags it is tuned with."""
    anchors = sorted({1} | draw(st.sets(st.sampled_from([4, 16, 64, 256]), max_size=2)))
    ks = sorted(draw(st.sets(st.sampled_from([0, 1, 3, 5]), min_size=2, max_size=3)))
    prompts = sorted(draw(st.sets(st.sampled_from([512, 8192]), min_size=1, max_size=2)))
    noise = draw(st.sampled_from([0.002, 0.01, 0.05]))
    # Speculation's gain per draft token at batch 1, and the batch size where it halves.
    gain = draw(st.floats(0.02, 0.3))
    half_at = draw(st.sampled_from([4, 16, 64, 512]))
    replicated = draw(st.sets(st.tuples(st.sampled_from(anchors), st.sampled_from(ks))))
    files: dict[str, Any] = {}
    for prompt in prompts:
        for anchor in anchors:
            for k in ks:
                # Longer prompts keep the gain to larger batches (attention dominates).
                speed = 1 + k * gain / (1 + anchor / (half_at * prompt / 512)) - 0.03 * k
                servers = [0, 1] if (anchor, k) in replicated else [0]
                for server in servers:
                    offset = 1 + (draw(st.floats(-0.02, 0.02)) if server else 0.0)
                    replica = f"-seed={server}" if len(servers) > 1 else ""
                    folder = f"SERVE--k{k}{replica}-BENCH--c{anchor}-p{prompt}"
                    for run in range(3):
                        jitter = 1 + noise * draw(st.floats(-1, 1))
                        files[f"{folder}/run={run}.json"] = {
                            "max_concurrency": anchor,
                            "num_prompts": NUM_PROMPTS,
                            "completed": NUM_PROMPTS,
                            "failed": 0,
                            "output_throughput": 100.0 * anchor * speed * offset * jitter,
                            "run_number": run,
                            "random_input_len": prompt,
                            "total_input_tokens": prompt * NUM_PROMPTS,
                            "total_output_tokens": 128 * NUM_PROMPTS,
                            "speculative_config": {
                                "method": "ngram",
                                "num_speculative_tokens": max(ks),
                                "num_speculative_tokens_per_batch_size": [[1, anchors[-1], k]],
                            },
                        }
    if draw(st.booleans()):
        saved = {
            "compilation_config": {"max_cudagraph_capture_size": draw(st.sampled_from([64, 512]))},
            "scheduler_config": {"max_num_seqs": draw(st.sampled_from([256, 1024]))},
        }
        files["server_info.json"] = {"vllm_config": saved}
    deploy = DeploySettings(
        max_cudagraph_capture_size=draw(st.sampled_from([None, None, 128, 1024])),
        max_num_seqs=draw(st.sampled_from([None, 256, 2048])),
    )
    return files, deploy


def _write(root: Path, files: dict[str, Any], prompt: int | None = None) -> Path:
    """The sweep below ``root`` (only ``prompt``'s folders when given; the saved server config,
    at the top, in every case: it is the server's, whatever the prompt)."""
    for relative, value in files.items():
        folder = relative.split("/")[0] if "/" in relative else None
        if prompt is not None and folder is not None and not folder.endswith(f"-p{prompt}"):
            continue
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    return root


def _capture_findings(result: TuningResult) -> set[str]:
    deployment = result.additions.get("deployment")
    assert isinstance(deployment, Deployment)
    return {finding.rule for finding in deployment.check.findings()} & CAPTURE_RULES


@settings(REPRODUCIBLE, max_examples=40)
@given(drawn=axis_sweeps())
def test_the_verdict_is_never_ready_where_one_axis_alone_says_otherwise(
    drawn: tuple[dict[str, Any], DeploySettings],
) -> None:
    files, deploy = drawn
    with tempfile.TemporaryDirectory() as scratch:
        root = _write(Path(scratch) / "sweep", files)
        sweep = load_experiment(root)
        axis, _ = find_context_axis(sweep, ContextSettings())
        shown = analyse_sweep(sweep, Settings(), Options(), axis, None, deploy)
        event(f"{shown.verdict.state}, {'grid' if axis is not None else 'batch'}")
        if shown.verdict.state != "ready":
            return
        prompts = sorted({int(p.split("-p")[-1].split("/")[0]) for p in files if "-p" in p})
        for prompt in prompts:
            alone = load_experiment(_write(Path(scratch) / f"alone-{prompt}", files, prompt))
            deployed, _ = deploy_analysis(analyse(alone, Settings(), Options()), deploy)
            verdict = verdict_in(deployed.result)
            assert verdict is not None and verdict.state == "ready", (prompt, verdict)
        points = shown.grid.contexts if shown.grid is not None else (shown.analysis,)
        for point in points:
            assert _capture_findings(point.result) == set()
            report = point.report
            assert report is not None
            assert set(report.anchors["status"].to_list()) == {"resolved"}
