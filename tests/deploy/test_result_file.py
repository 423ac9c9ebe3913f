"""lib/deploy/result_file.py: the result JSON's one writer and its one typed reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sweep_builder import WORKED_EXAMPLE, write_grid

from lib.analysis import analyse
from lib.context import ContextAnalysis
from lib.context_grid import ContextPoint as GridPoint
from lib.context_grid import GridCell, unexportable_grid_problems
from lib.deploy.decisions import context_decisions
from lib.deploy.registry import read_decisions
from lib.deploy.result_file import (
    context_document,
    context_text,
    read_result_file,
    result_file_of,
    result_text,
)
from lib.deploy.tuning import deploy_analysis
from lib.deploy.verdict import context_verdict
from lib.settings import DeploySettings, Settings
from lib.sweeps import load_experiment


def _written(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_the_reader_gives_back_what_the_writer_wrote(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path / "sweep", WORKED_EXAMPLE))
    analysis, _ = deploy_analysis(
        analyse(sweep, Settings()), DeploySettings(max_cudagraph_capture_size=512)
    )
    result, report = analysis.result, analysis.report
    assert report is not None
    read, problems = read_result_file(_written(tmp_path, result_text(result)))
    assert problems == [] and read is not None
    assert read.schedule == result.schedule
    assert read.configured_global_k == result.configured_global_k
    assert (read.objective, read.direction) == (result.settings.objective, "maximize")
    # Every cell's evidence, compared with the frames in memory (an independent path: the
    # frames, not the JSON).
    cells = {(c.batch_size, c.k): c for anchor in read.anchors for c in anchor.candidates}
    for row in result.cells.to_dicts():
        cell = cells[row["anchor"], row["k"]]
        assert (cell.num_runs, cell.median, cell.relative_mad) == (
            row["num_runs"],
            row["median"],
            row["relative_mad"],
        )
    for row in report.cells.to_dicts():
        anchor = next(a for a in read.anchors if a.batch_size == row["anchor"])
        assert anchor.confidence is not None
        assert anchor.confidence.p_eps_good[row["k"]] == row["p_eps_good"]
    statuses = {row["anchor"]: row["status"] for row in report.anchors.to_dicts()}
    assert {a.batch_size: a.confidence.status for a in read.anchors if a.confidence} == statuses
    # The ceiling was given as a flag: the file says so, and the reader keeps it as known.
    fact = read.engine.max_cudagraph_capture_size
    assert fact is not None and fact.value == 512
    # The confidence and tie tolerance it was decided at (the defaults here).
    assert (read.confidence_level, read.tie_tolerance) == (
        report.settings.confidence,
        result.settings.relative_tolerance,
    )


def test_a_seed_result_has_no_confidence_no_ceiling_and_no_grid(tmp_path: Path) -> None:
    seed = {
        "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
        "configured_global_num_speculative_tokens": 3,
        "selection": {"objective_metric": "output_throughput"},
        "batch_decisions": [
            {
                "batch_size": 1,
                "selected_k": 3,
                "candidates": [
                    {"batch_size": 1, "k": 3, "num_runs": 3, "median_objective": 150.0},
                    {"batch_size": 1, "k": 0, "num_runs": 3, "median_objective": None},
                ],
            }
        ],
    }
    read, problems = result_file_of(seed, "seed.json")
    assert problems == [] and read is not None
    assert not read.has_confidence and not read.has_grid
    assert read.engine.max_cudagraph_capture_size is None
    assert read.medians() == {1: {3: 150.0}}  # a null median is no evidence, not 0
    assert read.candidate_ks == (0, 3)
    # The seed's file has no decision_policy: its selection's tolerance, no confidence.
    assert (read.confidence_level, read.tie_tolerance) == (None, None)
    with_tolerance = {**seed, "selection": {"relative_tolerance": 0.02}}
    read, _ = result_file_of(with_tolerance, "seed.json")
    assert read is not None and read.tie_tolerance == 0.02


def _with(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
        "batch_decisions": [
            {"batch_size": 1, "candidates": [{"batch_size": 1, "k": 3, "num_runs": 3}]}
        ],
    }
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"a": 1}, None, "not a tuning result"),
        ([1, 2], None, "not a tuning result"),
        (
            _with(num_speculative_tokens_per_batch_size=[[2, 8, 1]]),
            "num_speculative_tokens_per_batch_size",
            "not a valid schedule",
        ),
        (_with(batch_decisions={"1": 3}), "batch_decisions", "not a list"),
        (_with(batch_decisions=[3]), "batch_decisions[0]", "not an object"),
        (
            _with(batch_decisions=[{"batch_size": "1", "candidates": []}]),
            "batch_decisions[0].batch_size",
            "whole batch size",
        ),
        (_with(batch_decisions=[{"batch_size": 1}]), "batch_decisions[0].candidates", "no"),
        (
            _with(batch_decisions=[{"batch_size": 1, "candidates": [{"k": 1}]}]),
            "batch_decisions[0].candidates[0].batch_size",
            "whole number",
        ),
        (
            _with(
                batch_decisions=[
                    {"batch_size": 1, "candidates": [{"batch_size": 1, "k": 1.5, "num_runs": 3}]}
                ]
            ),
            "batch_decisions[0].candidates[0].k",
            "whole number",
        ),
        (
            _with(selection={"objective_direction": "up"}),
            "selection.objective_direction",
            "'maximize' or 'minimize'",
        ),
        (
            _with(problems=[{"rule": "cross-anchor-cliff", "k": 5, "extra": {}}]),
            "problems[0].extra.lower_batch_size",
            "needs a whole number",
        ),
        (
            _with(
                problems=[
                    {"rule": "other"},
                    {
                        "rule": "cross-anchor-cliff",
                        "k": "5",
                        "extra": {"lower_batch_size": 4, "upper_batch_size": 8},
                    },
                ]
            ),
            "problems[1].k",
            "needs a whole number",
        ),
    ],
)
def test_a_damaged_result_is_refused_naming_the_field(
    data: Any, field: str | None, message: str
) -> None:
    read, problems = result_file_of(data, "r.json")
    assert read is None
    (problem,) = problems
    assert (problem.rule, problem.files, problem.field) == ("not-a-result", ("r.json",), field)
    assert message in problem.message


def test_counts_are_whole_numbers_as_everywhere_a_float_whole_one_included() -> None:
    # lib.keys.whole_number's rule: 3.0 is 3 (JSON writers differ), 1.5 and true are not.
    def batch(value: Any) -> int | None:
        read, _ = result_file_of(
            _with(batch_decisions=[{"batch_size": value, "candidates": []}]), "r"
        )
        return read.anchors[0].batch_size if read is not None else None

    assert (batch(1), batch(1.0), batch(1.5), batch(True), batch(-1)) == (1, 1, None, None, None)


@pytest.mark.parametrize(
    ("deployment", "field", "cap"),
    [
        # Nothing capped (C assumed, or within it): no cap, whatever else the block holds.
        ({"capped_ranges": [], "tuned_schedule": "damaged"}, None, None),
        ({}, None, None),
        # Capped: the schedule as tuned and the ceiling it was capped to.
        (
            {
                "capped_ranges": [{"lo": 5, "hi": 8}],
                "tuned_schedule": [[1, 8, 7]],
                "capture_ceiling": {"size": 32, "source": "--max-cudagraph-capture-size"},
            },
            None,
            ([[1, 8, 7]], 32, "--max-cudagraph-capture-size"),
        ),
        # Capped, and what it was capped from or to is damaged: refused, naming the field.
        (
            {"capped_ranges": [{"lo": 5}], "tuned_schedule": [[2, 8, 7]]},
            "deployment.tuned_schedule",
            None,
        ),
        (
            {
                "capped_ranges": [{"lo": 5}],
                "tuned_schedule": [[1, 8, 7]],
                "capture_ceiling": {"size": 0},
            },
            "deployment.capture_ceiling.size",
            None,
        ),
    ],
)
def test_the_cap_a_result_took_for_vllm_is_read_or_the_file_refused(
    deployment: dict[str, Any], field: str | None, cap: Any
) -> None:
    """Issue 38, kind 6: ``export`` gives engines other than vLLM the schedule as tuned, which
    a capped result holds in ``deployment.tuned_schedule``."""
    read, problems = result_file_of(_with(deployment=deployment), "r.json")
    if field is not None:
        assert read is None and [p.field for p in problems] == [field]
        return
    assert read is not None and problems == []
    found = read.vllm_cap
    assert (None if found is None else (found.tuned.to_json(), found.ceiling, found.source)) == cap


def test_confidence_keys_are_ks_in_ascii_digits_others_left_out() -> None:
    """Issue 38, kind 16: a confidence key "²" (``str.isdigit()`` yes, ``int()`` no) was a
    traceback; "٣" was read as K=3. Both are left out, as any damaged entry is."""
    keys = {"3": 0.9, "\u00b2": 0.5, "\u0663": 0.4, "-1": 0.3, " 1": 0.2, str(2**31): 0.1}
    entry = {
        "batch_size": 1,
        "candidates": [{"batch_size": 1, "k": 3, "num_runs": 3}],
        "confidence": {"status": "resolved", "p_eps_good": keys, "num_servers": {"\u00b2": 2}},
    }
    read, problems = result_file_of(_with(batch_decisions=[entry]), "r.json")
    assert read is not None and problems == []
    confidence = read.anchors[0].confidence
    assert confidence is not None
    assert (confidence.p_eps_good, confidence.num_servers) == ({3: 0.9}, {})


def test_the_context_grid_is_read_and_its_problems_reach_the_export(
    tmp_path: Path, long_context: ContextAnalysis
) -> None:
    analysis = long_context
    read, problems = read_result_file(
        _written(tmp_path, context_text(analysis, context_verdict(analysis)))
    )
    assert problems == [] and read is not None
    assert read.grid == analysis.typed_grid[0] and read.grid is not None
    # A damaged cell: the grid's reader refuses it, and the export says why (not "no grid").
    text = context_text(analysis, context_verdict(analysis))
    data = context_document(analysis, context_verdict(analysis))
    # The file's text is the document's (result_text writes the grid's rows uncopied).
    assert text == json.dumps(data, indent=2, allow_nan=False) + "\n"
    data["context_grid"][0]["candidates"][0]["k"] = "three"
    # The document is the caller's to change: the analysis's rows and its file stay as they were.
    assert analysis.grid()[0]["candidates"][0]["k"] != "three"
    assert context_text(analysis, context_verdict(analysis)) == text
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    read, problems = read_result_file(_written(damaged, data))
    assert problems == [] and read is not None and read.grid is None
    assert [p.rule for p in read.grid_problems] == ["invalid-context-grid"]
    decisions, _ = read_decisions(damaged / "result.json", for_grid=True)
    assert decisions is not None and decisions.grid_problems == read.grid_problems


def _cell(batch: int, prompt: int, selected: int, median: float) -> GridCell:
    point = GridPoint(prompt, prompt + 50, 100)
    return GridCell(batch, point, selected, "resolved", ((selected, median),), ())


def test_an_unexportable_grid_in_memory_is_refused_by_the_files_rules() -> None:
    points = (GridPoint(512, 562, 100), GridPoint(8192, 8242, 100))
    complete = {
        (1, 512): _cell(1, 512, 3, 100.0),
        (1, 8192): _cell(1, 8192, 3, 50.0),
    }
    assert unexportable_grid_problems(complete, (1,), points, "r") == []
    # Empty: nothing to export.
    assert [p.rule for p in unexportable_grid_problems({}, (), points, "r")] == [
        "incomplete-context-grid"
    ]
    # A cell missing: named.
    missing = {(1, 512): complete[1, 512]}
    (problem,) = unexportable_grid_problems(missing, (1,), points, "r")
    assert problem.rule == "incomplete-context-grid" and "batch 1 at prompt 8192" in problem.message
    # A selected median of exactly 0 is unusable (losses are ratios to it); just above is not.
    zero = {**complete, (1, 8192): _cell(1, 8192, 3, 0.0)}
    (problem,) = unexportable_grid_problems(zero, (1,), points, "r")
    assert problem.rule == "invalid-context-grid" and "batch 1 at prompt 8192" in problem.message
    tiny = {**complete, (1, 8192): _cell(1, 8192, 3, 1e-9)}
    assert unexportable_grid_problems(tiny, (1,), points, "r") == []


def test_an_analysis_in_memory_and_its_file_give_the_same_context_decisions(
    tmp_path: Path, long_context: ContextAnalysis
) -> None:
    analysis = long_context
    in_memory = context_decisions(analysis)
    path = _written(tmp_path, context_text(analysis, context_verdict(analysis)))
    read, problems = read_decisions(path, for_grid=True)
    assert problems == [] and read is not None
    assert (read.grid, read.global_k) == (in_memory.grid, in_memory.global_k)


@pytest.mark.parametrize(("p", "read"), [(1.0, True), (0.0, True), (None, True), (1.01, False),
                                         (-0.01, False), ("0.9", False)])  # fmt: skip
def test_a_grid_cells_p_eps_good_is_a_probability_or_null(
    long_context: ContextAnalysis, p: Any, read: bool
) -> None:
    data = context_document(long_context, context_verdict(long_context))
    data["context_grid"][0]["p_eps_good"] = p
    found, problems = result_file_of(data, "r.json")
    assert problems == [] and found is not None
    assert (found.grid is not None) is read
    if read:
        assert found.grid is not None and found.grid.cells[0].p_eps_good == p
    else:
        assert [problem.field for problem in found.grid_problems] == ["context_grid[0].p_eps_good"]
