"""lib/app/context.py: the app's context grid, its picker, the heatmap's losses and the
downloads, which must be the CLI's files byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from paths import SAMPLE_SWEEPS
from sweep_builder import CONTEXT_GRID, write_context_grid

from lib.app import context as view
from lib.cli.main import main
from lib.context_axis import find_context_axis
from lib.deploy.decisions import SCHEDULE_KEY
from lib.deploy.result_file import context_text, result_text
from lib.deploy.verdict import context_verdict
from lib.present.charts.headline import headline_chart
from lib.settings import ContextSettings, DeploySettings, Options, Settings
from lib.sweeps import load_experiment


def _shown(tmp_path: Path, point: int | None = None, **context: str) -> view.SweepAnalysis:
    sweep = load_experiment(write_context_grid(tmp_path, CONTEXT_GRID))
    axis, _ = find_context_axis(sweep, ContextSettings(**context))
    return view.analyse_sweep(sweep, Settings(), Options(), axis, point)


def test_the_page_details_the_chosen_context_point(tmp_path: Path) -> None:
    shown = _shown(tmp_path, point=1)
    assert shown.grid is not None and shown.point == 1
    # The point's analysis, deployed (its schedule checked by the capture rule).
    assert shown.analysis.result.cells.equals(shown.grid.contexts[1].result.cells)
    # At 8192 tokens K=3 wins at both batch sizes.
    assert shown.analysis.result.decisions["selected_k"].to_list() == [3, 3]
    assert list(view.point_labels(shown.grid.axis)) == [
        "512 prompt tokens (~576 at decode)",
        "8192 prompt tokens (~8256 at decode)",
    ]
    assert shown.problems == shown.grid.problems
    assert shown.result_text() == context_text(shown.grid, context_verdict(shown.grid))
    # Out of range (the picker's value from another experiment): the shortest.
    assert _shown(tmp_path / "again", point=7).point == 0


def test_the_detailed_point_is_deployed_so_its_k_track_marks_what_c_caps(tmp_path: Path) -> None:
    """At 8192 tokens K=3 wins at 1 and 64 (CONTEXT_GRID): with C=128 known, K=3 runs with
    graphs up to 128 // 4 = 32, so 33-64 is capped, and the headline's K track of the
    detailed point says "capped, not measured" there, as the point's vLLM download caps it.
    With C assumed (vLLM's default for max_num_seqs 64 is far above 64 * 4), nothing is."""
    sweep = load_experiment(write_context_grid(tmp_path, CONTEXT_GRID))
    axis, _ = find_context_axis(sweep, ContextSettings())
    known = DeploySettings(max_cudagraph_capture_size=128, max_num_seqs=64)
    shown = view.analyse_sweep(sweep, Settings(), Options(), axis, 1, known)
    schedule = shown.analysis.result.schedule
    assert schedule is not None and schedule.k_at(32) == 3 and schedule.k_at(33) < 3
    spec = headline_chart(shown.analysis.result, shown.analysis.report).to_dict()
    stretches = [
        (row["lo"], row["status"]) for row in spec["data"]["values"] if row["layer"] == "deployed"
    ]
    assert (33, "capped, not measured") in stretches
    (vllm,) = [d for d in view.engine_downloads(shown.analysis.result, known) if d.format == "vllm"]
    assert vllm.text is not None
    assert json.loads(vllm.text)[SCHEDULE_KEY] == schedule.to_json()
    # Issue 38, kind 6: vLLM's cap is vLLM's; TensorRT-LLM and SGLang get K=3 up to 64 as
    # tuned (their draft_len_schedule / slot keys), each saying so in a note.
    downloads = {d.format: d for d in view.engine_downloads(shown.analysis.result, known)}
    assert downloads["trtllm"].text is not None and downloads["sglang"].text is not None
    assert json.loads(downloads["trtllm"].text)["draft_len_schedule"] == {"1": 3, "64": 3}
    assert {k: v for k, v in json.loads(downloads["sglang"].text).items() if k.isdigit()} == {
        "1": {"candidate_steps": [3]}
    }
    for name in ("trtllm", "sglang"):
        assert any("C=128 tokens per decode step" in line for line in downloads[name].lines)
    assert not any("C=128 tokens per decode step" in line for line in downloads["vllm"].lines)
    assumed = view.analyse_sweep(sweep, Settings(), Options(), axis, 1, DeploySettings())
    spec = headline_chart(assumed.analysis.result, None).to_dict()
    assert all(
        row["status"] != "capped, not measured"
        for row in spec["data"]["values"]
        if row["layer"] == "deployed"
    )


def test_without_an_axis_the_page_shows_the_whole_sweep(tmp_path: Path) -> None:
    shown = _shown(tmp_path, context_var="none")
    assert shown.grid is None and shown.point is None and view.point_labels(None) == {}
    assert shown.result_text() == result_text(shown.analysis.result)


def test_heatmap_losses_are_the_vllm_export_s(tmp_path: Path) -> None:
    grid = _shown(tmp_path).grid
    assert grid is not None
    batch_only, losses, problems = view.heatmap_losses(grid, None)
    # The default mix is the shortest context: its picks, K=3 at 1 and K=0 at 64.
    assert problems == [] and batch_only == {1: 3, 64: 0}
    # Batch 64 at 8192 runs K=0 (2000) where K=3 gives 2600: 1 - 2000 / 2600 = 23.1 %.
    assert round(losses[(64, 8192)], 1) == 23.1
    assert losses[(1, 512)] == 0.0
    # Weighting the long context heavily turns batch 64 to K=3.
    batch_only, _, _ = view.heatmap_losses(grid, "512:0.1,8192:0.9")
    assert batch_only == {1: 3, 64: 3}
    _, _, problems = view.heatmap_losses(grid, "777:1")
    assert problems and problems[0].severity.value == "error"


def test_downloads_are_the_cli_s_files(tmp_path: Path) -> None:
    root = write_context_grid(tmp_path / "sweep", CONTEXT_GRID)
    result = tmp_path / "result.json"
    assert main([str(root), "--output-json", str(result)]) == 0
    axis, _ = find_context_axis(load_experiment(root), ContextSettings())
    grid = view.analyse_sweep(load_experiment(root), Settings(), Options(), axis).grid
    assert grid is not None
    mix = "512:0.7,8192:0.3"
    for download in view.context_downloads(grid, mix, ctx_agg="max"):
        written = tmp_path / download.filename
        extra = ["--ctx-agg", "max"] if download.format == "vllm-rfc-48944" else []
        command = ["export", str(result), "--format", download.format, "--context-mix", mix]
        assert main([*command, *extra, "-o", str(written)]) == 0
        assert download.text == written.read_text(encoding="utf-8"), download.format


def test_a_mix_with_non_ascii_digits_is_refused_in_every_download_not_raised(
    tmp_path: Path,
) -> None:
    """Issue 22: "512²:1" passed str.isdigit() and failed int(): a traceback in the CLI and
    the app's export section gone. Each context download and the heatmap now carry the mix's
    refusal (an error naming --context-mix), as `export --context-mix` exits 2 with it."""
    grid = _shown(tmp_path).grid
    assert grid is not None
    downloads = view.context_downloads(grid, "512²:1")
    assert downloads and all(d.text is None for d in downloads)
    for download in downloads:
        (problem,) = [p for p in download.problems if p.severity.value == "error"]
        assert problem.field == "--context-mix" and "512²" in (problem.value or problem.message)
    _, _, problems = view.heatmap_losses(grid, "512²:1")
    assert problems and problems[0].field == "--context-mix"


def test_an_mtp_sweeps_sglang_download_is_the_cli_export_with_nextn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39: sonnet-like served as an MTP model (its records' method and model rewritten)
    tunes to [[1, 63, 7], [64, 256, 0]] as before; its SGLang download runs NEXTN, which SGLang
    0.5.23 resolves to EAGLE, and is the CLI's export line for line."""
    sweep = tmp_path / "mtp"
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", sweep)
    for path in sweep.rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        text = text.replace('"method": "eagle3"', '"method": "mtp"')
        text = text.replace("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "deepseek-ai/DeepSeek-V3")
        path.write_text(text, encoding="utf-8")
    shown = view.analyse_sweep(load_experiment(sweep), Settings(), Options(), None)
    downloads = {d.format: d for d in view.engine_downloads(shown.analysis.result)}
    sglang = downloads["sglang"]
    assert sglang.problems == () and sglang.text is not None
    assert {k: v for k, v in json.loads(sglang.text).items() if k.isdigit()} == {
        "1": {"candidate_steps": [7]},
        "64": {"candidate_steps": [0]},
    }
    assert sglang.lines[1].startswith("--speculative-algorithm NEXTN ")
    result = tmp_path / "result.json"
    assert main([str(sweep), "--output-json", str(result)]) == 0
    capsys.readouterr()
    out = tmp_path / "sglang.json"
    assert main(["export", str(result), "--format", "sglang", "-o", str(out)]) == 0
    assert list(sglang.lines) == capsys.readouterr().out.splitlines()[:-1]  # less "Wrote"
    assert sglang.text == out.read_text()
