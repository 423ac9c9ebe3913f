"""lib/deploy/engine_format.py: what every format is built on: a batch export's file and
printed lines, the global-K rule, and which formats the capture rule checks."""

from __future__ import annotations

import json

from lib.deploy.engine_format import BatchExport, global_k_problem
from lib.deploy.registry import formats


def test_a_batch_export_prints_the_config_first_then_paste_notes_and_warnings() -> None:
    exported = BatchExport(
        "example",
        config={"a": [[1, 8, 3]]},
        file={"a": [[1, 8, 3]], "b": 1},
        largest_k=3,
        paste=("--flag x",),
        warnings=("careful",),
        notes=("fyi",),
    )
    assert exported.lines() == [
        '{"a": [[1, 8, 3]]}',
        "--flag x",
        "note: fyi",
        "warning: careful",
    ]
    # The file is the indented JSON of `file`, not of the one-line config, and ends a line.
    assert exported.text().endswith("}\n")
    assert json.loads(exported.text()) == {"a": [[1, 8, 3]], "b": 1}


def test_the_global_k_rule_names_the_flag_the_value_and_the_smallest_allowed() -> None:
    problem = global_k_problem(2, 5, "schedule's")
    assert (problem.rule, problem.field, problem.value) == ("global-k-too-small", "--global-k", "2")
    assert problem.expected == ">= 5"
    assert "below the schedule's largest K 5" in problem.message
    # A schedule of K=0 everywhere still needs num_speculative_tokens >= 1 (vLLM's minimum).
    assert global_k_problem(0, 0, "schedule's").expected == ">= 1"


def test_the_capture_rule_checks_exactly_the_formats_that_run_on_vllm_with_a_batch_schedule() -> (
    None
):
    assert [f.name for f in formats() if f.reads_ceiling] == ["vllm", "vllm-context"]
