"""The schedule a ``--schedule`` file holds for ``tune-spec-k check`` (and ``plan
--validate-export``): a context schedule in an export or a ``speculative_config``
(:func:`context_schedule_file`), with an error per broken rule; anything else is read as a batch
schedule by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lib.deploy.decisions import SCHEDULE_KEY
from lib.deploy.deployed import (
    CONTEXT_SCHEDULE_FORMATS,
    ContextSchedule,
    context_schedule_key,
    context_schedule_of,
)
from lib.deploy.formats.vllm_pr_54801 import SEQ_LEN_KEY
from lib.deploy.formats.vllm_rfc_48944 import RFC_48944_KEY
from lib.keys import MISSING, parse_json_string
from lib.problems import Problem, Severity, show_value

__all__ = ["context_schedule_file", "speculative_config_of"]


def speculative_config_of(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The ``speculative_config`` a file holds (an export's or a result's; a JSON string is
    read as JSON), else the file itself, and the prefix naming its fields in a problem.

    >>> speculative_config_of({"speculative_config": '{"num_speculative_tokens": 3}'})
    ({'num_speculative_tokens': 3}, 'speculative_config.')
    """
    nested = parse_json_string(data.get("speculative_config"))
    return (nested, "speculative_config.") if isinstance(nested, dict) else (data, "")


def context_schedule_file(data: Any, source: str) -> tuple[ContextSchedule | None, list[Problem]]:
    """The context schedule a ``--schedule`` file holds: a ``tune-spec-k export`` file of
    ``vllm-rfc-48944`` or ``vllm-pr-54801`` (its ``speculative_config``), or a
    ``speculative_config`` (bare, or under that key) holding ``speculative_token_schedule``
    (PR #48944, or its alias ``num_speculative_tokens_per_batch_size`` with 5-item entries) or
    ``num_speculative_tokens_per_seq_len`` (PR #54801) (:func:`context_schedule_of`). Any
    other file is not one (None, no problem: it is read as a batch schedule; a ``vllm-context``
    export is one batch schedule). An error per broken rule, naming the file, the field, its
    value and what was expected; also a context format's export without its table, and a
    table of the other format than the file says.

    >>> export = {"format": "vllm-pr-54801", "speculative_config": {}}
    >>> context_schedule_file(export, "x.json")[1][0].field
    'speculative_config.num_speculative_tokens_per_seq_len'
    >>> context_schedule_file({"format": "vllm-context"}, "x.json")
    (None, [])
    """
    if not isinstance(data, dict):
        return None, []
    config, prefix = speculative_config_of(data)
    kind = data.get("format")
    schedule, violations = context_schedule_of(config)
    key = context_schedule_key(config)
    expected = {
        "vllm-rfc-48944": f"{RFC_48944_KEY}: [[bs_lo, bs_hi, ctx_lo, ctx_hi, K], ...] by PR"
        " #48944's rules (docs/context.md, Exports)",
        "vllm-pr-54801": f"{SCHEDULE_KEY} [[lo, hi, K], ...] by vLLM's rules beside"
        f" {SEQ_LEN_KEY} [[len_lo, len_hi, K], ...] from 1, contiguous (docs/context.md,"
        " Exports)",
    }

    def bad(field: str, message: str, value: Any, wanted: str) -> Problem:
        return Problem(
            Severity.ERROR,
            "invalid-context-schedule",
            message,
            files=(source,),
            field=prefix + field,
            value=None if value is MISSING else show_value(value),
            expected=wanted,
        )

    if key is None:
        if kind not in CONTEXT_SCHEDULE_FORMATS:
            return None, []
        field = RFC_48944_KEY if kind == "vllm-rfc-48944" else SEQ_LEN_KEY
        return None, [
            bad(field, f"the file says format {kind} but holds no {field}", MISSING, expected[kind])
        ]
    if schedule is None:
        wanted = expected["vllm-pr-54801" if SEQ_LEN_KEY in config else "vllm-rfc-48944"]
        return None, [
            bad(
                name,
                f"the context schedule breaks its format's rule: {rule}",
                config.get(name, MISSING),
                wanted,
            )
            for name, rule in violations
        ]
    if kind in CONTEXT_SCHEDULE_FORMATS and kind != schedule.format:
        return None, [
            bad(
                key,
                f"the file says format {kind} but holds a {schedule.format} table",
                kind,
                expected[kind],
            )
        ]
    return schedule, []
