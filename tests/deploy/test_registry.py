"""lib/deploy/registry.py: the formats are found, not listed, so a new format is one module
(and its test); a flag a format does not read is an error."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grid_builder import PUBLISHED, result_json, write

import lib.deploy.formats
from lib.cli.main import main
from lib.deploy import registry
from lib.deploy.decisions import Decisions
from lib.deploy.registry import export, format_named, formats
from lib.deploy.settings import ExportSettings
from lib.schedule import Schedule
from lib.settings import DeploySettings

SONNET = Decisions(Schedule(((1, 63, 7), (64, 256, 0))), 7, "test", "test.json")

#: A whole new batch format, as a module would hold it.
EXAMPLE_FORMAT = """
from lib.deploy.engine_format import BatchExport, EngineFormat


def build(decisions, settings, ceiling):
    config = {"ranges": decisions.schedule.to_json()}
    return BatchExport("example", config, config, decisions.schedule.largest_k), []


FORMAT = EngineFormat(
    name="example", label="Example engine", file_name="example.json", position=99, build=build
)
"""


#: A whole new context format: the grid's selected K at the shortest context, as one batch
#: schedule (what the context formats share comes from lib.deploy.grid).
EXAMPLE_CONTEXT_FORMAT = """
import functools

from lib.deploy.engine_format import EngineFormat
from lib.deploy.grid import CONTEXT_FLAGS, build_context_format, cell_losses, finished_export
from lib.schedule import Schedule


def export(grid, mix, global_k, settings):
    picks = [row[0].selected_k for row in grid.rows]
    schedule = Schedule.from_picks(grid.anchors, picks, grid.max_batch_size)
    config = {"num_speculative_tokens": global_k, "shortest": schedule.to_json()}
    losses = cell_losses(grid, lambda batch, _: schedule.k_at(batch), mix)
    return finished_export(
        grid, "example-context", config, losses, mix, details={}, detail_lines=()
    ), []


FORMAT = EngineFormat(
    name="example-context",
    label="Example: the shortest context's schedule",
    file_name="example_context.json",
    position=98,
    build=functools.partial(build_context_format, "example-context", export),
    flags=frozenset(CONTEXT_FLAGS),
    needs_grid=True,
)
"""


@pytest.fixture
def example_format(tmp_path: Path) -> Iterator[None]:
    """Two more format modules on the formats package's path, a batch one and a context one
    (a folder of its own: the repository is not written to)."""
    folder = tmp_path / "formats"
    folder.mkdir()
    (folder / "example.py").write_text(EXAMPLE_FORMAT)
    (folder / "example_context.py").write_text(EXAMPLE_CONTEXT_FORMAT)
    lib.deploy.formats.__path__.append(str(folder))
    registry.formats.cache_clear()
    try:
        yield
    finally:
        lib.deploy.formats.__path__.remove(str(folder))
        registry.formats.cache_clear()


def test_the_registered_formats_in_order() -> None:
    names = [f.name for f in formats()]
    assert names == [
        "trtllm",
        "vllm",
        "sglang",
        "vllm-context",
        "vllm-rfc-48944",
        "vllm-pr-54801",
    ]
    assert len({f.file_name for f in formats()}) == len(names)
    assert [f.name for f in formats() if f.needs_grid] == names[3:]


@pytest.mark.usefixtures("example_format")
def test_a_new_format_is_one_module(tmp_path: Path) -> None:
    assert format_named("example").label == "Example engine"
    source = tmp_path / "in.json"
    source.write_text(json.dumps([[1, 63, 7], [64, 256, 0]]))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["export", str(source), "--format", "example"])
    assert status == 0
    assert json.loads(out.getvalue().splitlines()[0]) == {"ranges": [[1, 63, 7], [64, 256, 0]]}


@pytest.mark.usefixtures("example_format")
def test_a_new_context_format_is_one_module(tmp_path: Path) -> None:
    assert [f.name for f in formats() if f.needs_grid][-2:] == ["vllm-pr-54801", "example-context"]
    source = write(tmp_path, result_json(PUBLISHED))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["export", str(source), "--format", "example-context"])
    assert status == 0
    # The shortest context's picks (tests/grid_builder.py's PUBLISHED): K=3 at batch 1 (150 >
    # 100), K=0 at batch 256 (2000 > 1600): ranges [1, 255] K=3 and [256, 256] K=0.
    assert json.loads(out.getvalue().splitlines()[0]) == {
        "num_speculative_tokens": 3,
        "shortest": [[1, 255, 3], [256, 256, 0]],
    }


def test_a_flag_the_format_does_not_read_is_an_error_naming_who_reads_it() -> None:
    exported, problems = export(SONNET, ExportSettings(format="vllm", cap_draft_len=True))
    assert exported is None
    (problem,) = problems
    assert problem.rule == "flag-not-for-format"
    assert "--cap-draft-len applies only to --format trtllm" in problem.message
    exported, problems = export(
        SONNET, ExportSettings(format="trtllm"), DeploySettings(max_cudagraph_capture_size=512)
    )
    assert exported is None
    assert (
        "--max-cudagraph-capture-size applies only to --format vllm, vllm-context"
        in problems[0].message
    )


def test_an_unknown_format_is_an_error() -> None:
    exported, problems = export(SONNET, ExportSettings(format="nope"))
    assert exported is None and problems[0].rule == "unknown-format"


def test_grid_exports_are_each_context_formats_export_built_once_per_settings() -> None:
    """The exports the CLI's lines and the verdict share: every grid format in the registry's
    order, each the same as a fresh export; the same tuple again for the same analysis, a new
    one for another analysis (even of the same sweep)."""
    from paths import SAMPLE_SWEEPS

    from lib.context import analyse_contexts
    from lib.context_axis import find_context_axis
    from lib.deploy.decisions import context_decisions
    from lib.deploy.registry import export, formats, grid_export, grid_exports
    from lib.deploy.settings import ExportSettings
    from lib.settings import ContextSettings, Settings
    from lib.sweeps import load_experiment

    sweep = load_experiment(SAMPLE_SWEEPS / "long-context")
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    analysis = analyse_contexts(sweep, axis, Settings())
    shared = grid_exports(analysis)
    names = [f.name for f in formats() if f.needs_grid]
    assert [name for name, _, _ in shared] == names and len(names) == 3
    for name, exported, problems in shared:
        fresh, fresh_problems = export(context_decisions(analysis), ExportSettings(format=name))
        assert exported is not None and fresh is not None, name
        assert (exported.text(), problems) == (fresh.text(), fresh_problems)
    # The same objects again for the same analysis; built anew for another (even of the
    # same sweep) and for other settings.
    again = grid_exports(analysis)
    assert all(a[1] is b[1] for a, b in zip(again, shared, strict=True))
    other = analyse_contexts(sweep, axis, Settings(min_runs=2))
    assert all(a[1] is not b[1] for a, b in zip(grid_exports(other), shared, strict=True))
    longest = f"{axis.points[-1].prompt_tokens}:1"
    mixed = ExportSettings(format="vllm-context", context_mix=longest)
    exported, problems = grid_export(analysis, mixed)
    fresh, fresh_problems = export(context_decisions(analysis), mixed)
    assert exported is not None and fresh is not None
    assert (exported.text(), problems) == (fresh.text(), fresh_problems)
    assert exported is not shared[0][1] and grid_export(analysis, mixed)[0] is exported
    assert exported.text() != shared[0][1].text()  # the mix changes the file


#: The smallest global K each format's engine starts with: vLLM's num_speculative_tokens and
#: SGLang's --speculative-num-steps start at 1; TensorRT-LLM's max_draft_len may be 0
#: (first_k_rule says for which methods).
ENGINE_MINIMUM = {
    "trtllm": 0,
    "vllm": 1,
    "sglang": 1,
    "vllm-context": 1,
    "vllm-rfc-48944": 1,
    "vllm-pr-54801": 1,
}


@pytest.mark.parametrize("name", [f.name for f in formats()])
@pytest.mark.parametrize("given", [-1, 0, 1, 2, 3])
def test_a_global_k_below_the_engines_minimum_is_refused_by_every_format(
    tmp_path: Path, name: str, given: int
) -> None:
    """Issue 38, kind 13: ``--global-k 0`` was replaced by the file's global K (``given or
    ...`` takes 0 for "not given") in vllm, sglang and the context formats, and -1 crashed
    vllm (a division by 1 + K). One rule for every format: a given global K below the
    format's engine minimum (1; TensorRT-LLM 0) is refused naming the flag; at or above it,
    any export holds the given K, never the file's (3, with the schedule [[1, 256, 3]])."""
    engine_format = format_named(name)
    least = ENGINE_MINIMUM[name]
    source = write(tmp_path, result_json(PUBLISHED))
    decisions, problems = registry.read_decisions(source, for_grid=engine_format.needs_grid)
    assert decisions is not None and problems == []
    exported, problems = export(decisions, ExportSettings(format=name, global_k=given))
    rules = [problem.rule for problem in problems]
    if given < least:
        assert exported is None and rules == ["global-k-below-engine-minimum"]
        (problem,) = problems
        assert (problem.field, problem.value, problem.expected) == (
            "--global-k",
            str(given),
            f">= {least}",
        )
        return
    assert "global-k-below-engine-minimum" not in rules
    if exported is not None:
        config = dict(exported.config)
        stated = config.get("num_speculative_tokens", config.get("max_draft_len"))
        if name == "sglang":
            stated = int(exported.lines()[1].split("--speculative-num-steps ")[1].split()[0])
        assert stated == given


def test_the_engine_minimum_of_each_format() -> None:
    assert {f.name: f.least_global_k for f in formats()} == ENGINE_MINIMUM


#: Batch 1: K=3 wins (150 > 100); batch 256: K=0 (5000 > 4000). Tuned: [[1, 255, 3],
#: [256, 256, 0]]. (tests/deploy/test_tuning.py's CELLS.)
CAPPED_CELLS = {
    (1, 0): [100.0, 101.0, 99.0],
    (1, 3): [150.0, 151.0, 149.0],
    (256, 0): [5000.0, 5050.0, 4950.0],
    (256, 3): [4000.0, 4040.0, 3960.0],
}
TUNED = [[1, 255, 3], [256, 256, 0]]
#: With C=512 known, K=3 keeps its graphs up to 512 // 4 = 128, K=2 up to 170, K=1 up to 255.
CAPPED = [[1, 128, 3], [129, 170, 2], [171, 255, 1], [256, 256, 0]]


def _schedule_of(name: str, config: dict[str, Any]) -> list[list[int]]:
    """The schedule an export's config deploys, read back by the format's own reader."""
    read = format_named(name).read
    assert read is not None
    found = read(config, "x.json")
    assert found is not None and found[0] is not None, found
    if name == "sglang":  # its file has no upper bound: the last range ends at its start
        return [list(r) for r in found[0].schedule.ranges[:-1]] + [[256, 256, 0]]
    return found[0].schedule.to_json()


@pytest.mark.parametrize("ceiling", [512, None])
def test_vllms_capture_cap_reaches_vllm_only_on_every_path(
    tmp_path: Path, ceiling: int | None
) -> None:
    """Issue 38, kind 6: a result tuned under a known C held vLLM's capped schedule, and
    TensorRT-LLM and SGLang were built from it (K=1 at 171-255 where K=3 was measured best),
    silently. vLLM's cap is vLLM's (it keys decode graphs by tokens per step): every other
    engine gets the schedule as tuned with a note naming C, on both paths: a tuning in memory
    (the app's downloads: lib.deploy.tuning.deployed_decisions) and ``export`` of its
    result file. With C assumed nothing is capped, and no note is added."""
    from sweep_builder import write_grid

    from lib.analysis import analyse
    from lib.deploy.result_file import result_text
    from lib.deploy.tuning import deploy_analysis, deployed_decisions
    from lib.loop.export import export_file
    from lib.settings import Settings
    from lib.sweeps import load_experiment

    sweep = load_experiment(write_grid(tmp_path / "s", CAPPED_CELLS, global_k=3))
    deploy = DeploySettings(max_cudagraph_capture_size=ceiling, vllm_version="0.33.0")
    deployed, _ = deploy_analysis(analyse(sweep, Settings()), deploy)
    result = deployed.result
    assert result.schedule is not None
    assert result.schedule.to_json() == (CAPPED if ceiling else TUNED)
    path = tmp_path / "result.json"
    path.write_text(result_text(result))
    in_memory = deployed_decisions(result)
    for engine_format in formats():
        if engine_format.needs_grid:
            continue
        settings = ExportSettings(format=engine_format.name)
        memory, problems = export(in_memory, settings)
        assert memory is not None, problems
        from_file, problems = export_file(path, settings)
        assert from_file is not None, problems
        assert from_file.lines() == memory.lines(), engine_format.name
        expected = CAPPED if engine_format.reads_ceiling and ceiling else TUNED
        assert _schedule_of(engine_format.name, dict(memory.config)) == expected
        notes = [note for note in memory.notes if "capture ceiling" in note]
        if engine_format.reads_ceiling or ceiling is None:
            assert notes == [], engine_format.name
        else:
            (note,) = notes
            assert note.startswith(f"the schedule as tuned, {json.dumps(TUNED)}")
            assert "C=512 tokens per decode step (from --max-cudagraph-capture-size)" in note
            assert f"--format {engine_format.name}'s engine keys its graphs by batch size" in note


def test_engine_decisions_on_both_sides_of_the_rule() -> None:
    from lib.deploy.engine import VllmCap

    tuned = Schedule(((1, 255, 3), (256, 256, 0)))
    capped = Decisions(
        Schedule(((1, 128, 3), (129, 170, 2), (171, 255, 1), (256, 256, 0))),
        3,
        "t",
        "t",
        vllm_cap=VllmCap(tuned, 512, "--max-cudagraph-capture-size"),
    )
    for engine_format in formats():
        given, note = registry.engine_decisions(capped, engine_format)
        if engine_format.reads_ceiling:
            assert (given, note) == (capped, None)
        else:
            assert given.schedule == tuned and given.vllm_cap is None and note is not None
    # Nothing capped: every format gets the decisions as they are.
    for engine_format in formats():
        assert registry.engine_decisions(SONNET, engine_format) == (SONNET, None)
