"""lib/loop/plan/inputs.py: the refusal of a file a plan cannot be made from, and whole numbers
as JSON holds them."""

from __future__ import annotations

import json
from pathlib import Path

from plan_inputs import context_result

from lib.deploy.result_file import read_result_file
from lib.loop.plan.inputs import other_prompt_field, refusal, whole_or_none


def test_a_refusal_names_the_file_the_field_its_value_and_what_was_expected() -> None:
    problem = refusal(Path("plan.json"), "not usable", "reruns[0].k", "-1", "a whole number")
    assert (problem.rule, problem.message, problem.files) == (
        "invalid-plan-input",
        "not usable",
        ("plan.json",),
    )
    assert (problem.field, problem.value, problem.expected) == (
        "reruns[0].k",
        "-1",
        "a whole number",
    )


def test_a_grid_of_another_prompt_field_is_refused_for_the_plan_named(tmp_path: Path) -> None:
    path = context_result(tmp_path, lambda d: d["context_axis"].update(field="my_len"))
    result, problems = read_result_file(path)
    assert result is not None, problems
    (problem,) = other_prompt_field(result, "a validation")
    assert (problem.files, problem.field) == ((str(path),), "context_axis.field")
    assert "read from 'my_len'; a validation plans prompt lengths as random_input_len" in (
        problem.message
    )


def test_whole_numbers_are_json_integers_not_bools_or_floats() -> None:
    values = json.loads('[0, 7, 7.0, true, "7", null]')
    assert [whole_or_none(value) for value in values] == [0, 7, None, None, None, None]
