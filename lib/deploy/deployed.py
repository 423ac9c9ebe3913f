"""A deployed ``speculative_config``'s context schedule, read back: PR #48944's entries
(:class:`~lib.deploy.formats.vllm_rfc_48944.Rfc48944Schedule`) or PR #54801's two tables
(:class:`~lib.deploy.formats.vllm_pr_54801.Pr54801Schedule`), each held to its format's rules;
``tune-spec-k check`` judges a validation sweep's dynamic arm by it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lib.deploy.decisions import SCHEDULE_KEY
from lib.deploy.formats.vllm_pr_54801 import SEQ_LEN_KEY, Pr54801Schedule, seq_len_violations
from lib.deploy.formats.vllm_rfc_48944 import (
    RFC_48944_KEY,
    RFC_48944_LEGACY_KEY,
    Rfc48944Schedule,
    rfc_48944_violations,
)
from lib.keys import parse_json_string
from lib.schedule import Schedule

__all__ = [
    "CONTEXT_SCHEDULE_FORMATS",
    "ContextSchedule",
    "context_schedule_key",
    "context_schedule_of",
]

#: The context formats whose K depends on the context (``vllm-context`` is one batch schedule).
CONTEXT_SCHEDULE_FORMATS = (Rfc48944Schedule.format, Pr54801Schedule.format)

#: A deployed schedule whose K depends on the context too.
ContextSchedule = Rfc48944Schedule | Pr54801Schedule


def context_schedule_key(config: Mapping[str, Any]) -> str | None:
    """The key that makes a ``speculative_config`` a context schedule: PR #48944's
    :data:`RFC_48944_KEY`, PR #54801's :data:`SEQ_LEN_KEY`, or PR #48944's deprecated alias
    :data:`RFC_48944_LEGACY_KEY` holding 5-item entries; None for a batch schedule or none.

    >>> context_schedule_key({RFC_48944_LEGACY_KEY: [[1, 8, 1, 100, 3]]})
    'num_speculative_tokens_per_batch_size'
    >>> context_schedule_key({RFC_48944_LEGACY_KEY: [[1, 8, 3]]}) is None
    True
    """
    for key in (RFC_48944_KEY, SEQ_LEN_KEY):
        if key in config:
            return key
    legacy = parse_json_string(config.get(RFC_48944_LEGACY_KEY))
    if isinstance(legacy, list) and any(
        isinstance(entry, list) and len(entry) == 5 for entry in legacy
    ):
        return RFC_48944_LEGACY_KEY
    return None


def context_schedule_of(
    config: Mapping[str, Any],
) -> tuple[ContextSchedule | None, list[tuple[str, str]]]:
    """The context schedule a ``speculative_config`` holds, or None and each rule its tables
    break, as (the key, the rule) (none: the config is no context schedule,
    :func:`context_schedule_key`). PR #48944: the entries under exactly one of its two names,
    by :func:`rfc_48944_violations`; PR #54801: the length table (:func:`seq_len_violations`)
    beside a batch table (vLLM's rules), and no PR #48944 table with it. Tables written as JSON
    strings are read as JSON. ``num_speculative_tokens`` and ``ctx_agg`` are not part of the
    schedule.

    >>> context_schedule_of({SEQ_LEN_KEY: [[1, 9, 3]]})[1][0][0]
    'num_speculative_tokens_per_batch_size'
    >>> schedule, _ = context_schedule_of({RFC_48944_KEY: [[1, 8, 101, 999, 0], [1, 8, 1, 100, 3]]})
    >>> schedule.entries, schedule.k_at(4, 100), schedule.k_at(4, 101)
    (((1, 8, 1, 100, 3), (1, 8, 101, 999, 0)), 3, 0)
    """
    key = context_schedule_key(config)
    if key is None:
        return None, []
    if SEQ_LEN_KEY in config:
        if RFC_48944_KEY in config:
            return None, [(SEQ_LEN_KEY, f"beside {RFC_48944_KEY}: one context format at a time")]
        if SCHEDULE_KEY not in config:
            return None, [
                (SCHEDULE_KEY, "missing: PR #54801 pairs the length table with a batch table")
            ]
        table = parse_json_string(config[SEQ_LEN_KEY])
        batch, violations = Schedule.parse(parse_json_string(config[SCHEDULE_KEY]))
        found = [(SCHEDULE_KEY, v) for v in violations]
        found += [(SEQ_LEN_KEY, v) for v in seq_len_violations(table)]
        if batch is None or found:
            return None, found
        lengths = tuple(sorted((lo, hi, k) for lo, hi, k in table))
        return Pr54801Schedule(Schedule(tuple(sorted(batch.ranges))), lengths), []
    if RFC_48944_KEY in config and RFC_48944_LEGACY_KEY in config:
        return None, [
            (RFC_48944_KEY, f"beside {RFC_48944_LEGACY_KEY}: the schedule under one of its names")
        ]
    entries = parse_json_string(config[key])
    violations = rfc_48944_violations(entries)
    if violations:
        return None, [(key, v) for v in violations]
    ordered = tuple(sorted((a, b, c, d, e) for a, b, c, d, e in entries))
    return Rfc48944Schedule(ordered, key), []
