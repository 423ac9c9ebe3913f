"""Which arm of a validation sweep each run belongs to, by its ``speculative_config``:

================== =====================================================================
arm                the run's server
================== =====================================================================
``dynamic``        the schedule under test (``--schedule``), or else the one multi-range
                   schedule (a batch schedule, or a context schedule setting more than one K)
``static K=k``     ``num_speculative_tokens: k`` without a schedule
``K=k (1-range)``  a one-range schedule ``[[1, hi, k]]``: the seed's sweep design
``other ...``      another schedule
``no speculation`` no ``speculative_config``: K=0 without the Dynamic SD engine
================== =====================================================================

A context schedule (PR #48944's 5-tuples, PR #54801's table pair) runs the K its tables give at
the run's context point's decode-time context (:func:`arm_of`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from lib.deploy.decisions import SCHEDULE_KEY
from lib.deploy.deployed import ContextSchedule, context_schedule_key, context_schedule_of
from lib.files import read_json
from lib.keys import MISSING, lookup, parse_json_string, stated_k
from lib.schedule import Schedule
from lib.sweeps import Sweep

__all__ = [
    "DYNAMIC",
    "NO_SPECULATION",
    "UnderTest",
    "arm_of",
    "clamped_lookup",
    "configs_by_row",
    "dynamic_candidates",
    "normalized",
    "schedule_text",
    "served_global_k",
]

DYNAMIC = "dynamic"
NO_SPECULATION = "no speculation"
#: A schedule under test: one K per batch size, or a K per (batch size, context).
UnderTest = Schedule | ContextSchedule


def normalized(raw: Any) -> Schedule | None:
    """A valid schedule with its ranges sorted (so equal schedules compare equal), or None."""
    schedule, _ = Schedule.parse(raw) if isinstance(raw, list) else (None, [])
    return None if schedule is None else Schedule(tuple(sorted(schedule)))


def configs_by_row(sweep: Sweep) -> list[Any]:
    """Each run's ``speculative_config`` (MISSING where absent), read back from its file: the
    loader keeps numbers only, and the arm depends on the schedule list."""
    cache: dict[str, Any] = {}
    configs = []
    for source, position in sweep.runs.select("source", "position").iter_rows():
        if source not in cache:
            # The loader's reader (regular files only, a BOM allowed): it read this file already.
            cache[source] = read_json(sweep.root / source)[0]
        data = cache[source]
        record = data[position] if isinstance(data, list) and position < len(data) else data
        config = lookup(record, "speculative_config") if isinstance(record, dict) else MISSING
        configs.append(parse_json_string(config))
    return configs


def schedule_text(schedule: UnderTest) -> str:
    """A schedule under test as one line of JSON: a batch schedule's ``[[lo, hi, K], ...]``, a
    context schedule's format and tables."""
    if isinstance(schedule, Schedule):
        return schedule.json_text()
    return json.dumps(schedule.to_json())


def served_global_k(config: Any) -> int | None:
    """The ``num_speculative_tokens`` a server was started with, to which vLLM clamps every K
    of its schedule (silently: ``../shared/docs/engines.md``, section 4): a JSON integer as
    written (:func:`lib.keys.stated_k`), else None (none stated, or not a number vLLM takes).

    >>> served_global_k({"num_speculative_tokens": 3}), served_global_k({}), served_global_k(None)
    (3, None, None)
    """
    if not isinstance(config, dict):
        return None
    return stated_k(config.get("num_speculative_tokens"))


def clamped_lookup(k_at: Callable[[int], int], global_k: int | None) -> Callable[[int], int]:
    """The K vLLM runs per batch size: the schedule's (``k_at``) clamped to the server's
    ``global_k`` (:func:`served_global_k`); the schedule's own where no global K is known.

    >>> clamped_lookup(lambda b: 7 if b < 64 else 0, 3)(1), clamped_lookup(lambda b: 7, None)(1)
    (3, 7)
    """
    if global_k is None:
        return k_at
    return lambda batch_size: min(k_at(batch_size), global_k)


def arm_of(
    config: Any, anchor: int | None, context: int | None, dynamic: UnderTest | None
) -> tuple[str, str, int | None]:
    """(arm, kind, K at the anchor) of one run; ``context``: the decode-time context of its
    context point (None: unknown), where a context schedule's K is looked up."""
    if config is MISSING or config is None:
        return NO_SPECULATION, "plain", 0
    if not isinstance(config, dict):
        return "unreadable", "unknown", None
    global_k = served_global_k(config)
    if context_schedule_key(config) is not None:
        return _context_arm_of(config, anchor, context, dynamic)
    schedule = normalized(parse_json_string(config.get(SCHEDULE_KEY)))
    if schedule is not None:
        k = schedule.k_at(anchor or 1, global_k)
        if schedule == dynamic:
            return DYNAMIC, "dynamic", k
        if len(schedule) == 1:
            return f"K={k} (1-range)", "one-range", k
        return "other schedule " + schedule.json_text(), "other", k
    if global_k is not None:
        return f"static K={global_k}", "static", global_k
    return "unreadable", "unknown", None


def _context_arm_of(
    config: dict[str, Any], anchor: int | None, context: int | None, dynamic: UnderTest | None
) -> tuple[str, str, int | None]:
    """(arm, kind, K) of a run served with a context schedule: the dynamic arm when it is the
    one under test, else another schedule; K at the anchor and ``context``, clamped to
    ``num_speculative_tokens`` as the engine clamps its tables (None where the context is
    unknown); unreadable where its tables break their format's rules (no engine ran it)."""
    served, _ = context_schedule_of(config)
    if served is None:
        return "unreadable", "unknown", None
    k = None if context is None else served.k_at(anchor or 1, context)
    global_k = served_global_k(config)
    if k is not None and global_k is not None:
        k = min(k, global_k)
    if served == dynamic:
        return DYNAMIC, "dynamic", k
    return "other schedule " + schedule_text(served), "other", k


def dynamic_candidates(configs: Sequence[Any]) -> list[UnderTest]:
    """The schedules served that set more than one K: multi-range batch schedules (sorted),
    then context schedules (by their text)."""
    batch: set[Schedule] = set()
    context: dict[str, ContextSchedule] = {}
    for config in configs:
        if not isinstance(config, dict):
            continue
        if context_schedule_key(config) is None:
            served = normalized(parse_json_string(config.get(SCHEDULE_KEY)))
            if served is not None and len({r[2] for r in served}) > 1:
                batch.add(served)
            continue
        found, _ = context_schedule_of(config)
        if found is not None and len(found.ks) > 1:
            context[schedule_text(found)] = found
    return [*sorted(batch), *(context[text] for text in sorted(context))]
