"""The files a follow-up or validation plan is made from (tuning results, measurement plans,
exports, earlier designs): the refusal of one that cannot be planned from, and its whole
numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lib.deploy.result_file import ResultFile
from lib.problems import Problem, Severity
from lib.settings import RANDOM_PROMPT_LENGTH

__all__ = ["other_prompt_field", "refusal", "whole_or_none"]


def refusal(
    path: str | Path,
    message: str,
    field: str | None = None,
    value: str | None = None,
    expected: str | None = None,
) -> Problem:
    """Why an input file cannot be planned from: ``field`` of ``path`` holds ``value``."""
    return Problem(
        Severity.ERROR,
        "invalid-plan-input",
        message,
        files=(str(path),),
        field=field,
        value=value,
        expected=expected,
    )


def other_prompt_field(result: ResultFile, plan: str) -> list[Problem]:
    """The refusal of a grid whose prompt length was not ``random_input_len``: ``plan`` (a
    follow-up, a validation) sets prompt lengths as that key, which would not reproduce the
    grid's prompts."""
    return [
        refusal(
            result.source,
            f"the grid's prompt length was read from {result.context_field!r}; {plan}"
            f" plans prompt lengths as {RANDOM_PROMPT_LENGTH} (plan --context-lengths), which"
            " would not reproduce these prompts: plan it with the sweep's own dataset",
            "context_axis.field",
        )
    ]


def whole_or_none(value: Any) -> int | None:
    """``value`` when it is a whole number (a JSON integer, not a bool), else None.

    >>> whole_or_none(3), whole_or_none(3.0), whole_or_none(True)
    (3, None, None)
    """
    return value if isinstance(value, int) and not isinstance(value, bool) else None
