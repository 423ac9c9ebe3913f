"""``rounds.json``: the log of a ``tune-spec-k run`` experiment, a record per round (its plan,
runs, GPU time, verdict, unresolved anchors, P(eps-good) per anchor and schedule), why the loop
stopped and what the seed's full grid would have cost. One writer (:func:`rounds_text`) and
one typed reader (:func:`rounds_of`); ``tune-spec-k run`` reads it back to resume, the app to
show the rounds.

It also holds the run's arguments (``arguments``: the design and the tuning settings, as JSON):
a run resumed with other arguments is refused, since its rounds would mix two experiments.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lib.files import read_json
from lib.keys import MISSING
from lib.loop.plan.design import design_from
from lib.problems import Problem, Severity
from lib.settings import ROUNDS_FILE, Settings

__all__ = [
    "ROUNDS_FILE",
    "ROUNDS_VERSION",
    "RoundCost",
    "RoundRecord",
    "RunLog",
    "design_ks_of",
    "rounds_of",
    "rounds_text",
    "with_design_ks",
]

ROUNDS_VERSION = 1

#: Where a round is: its plan written (``planned``), its sweep done (``measured``), tuned
#: (``tuned``: the round is complete), or its sweep failed (``failed``: resumed next time).
Status = Literal["planned", "measured", "tuned", "failed"]
_STATUSES: tuple[Status, ...] = ("planned", "measured", "tuned", "failed")


@dataclass(frozen=True)
class RoundCost:
    """GPU time of a round (:mod:`lib.loop.run.accounting`): its runs and their summed
    ``duration``; its server starts, the seconds counted for them, and how many of those
    were measured from the records' timestamps (the rest at ``start_basis``'s value)."""

    runs: int = 0
    run_seconds: float = 0.0
    server_starts: int = 0
    start_seconds: float = 0.0
    measured_starts: int = 0
    start_basis: str = ""

    @property
    def seconds(self) -> float:
        return self.run_seconds + self.start_seconds


@dataclass(frozen=True)
class RoundRecord:
    """One round: its number, plan folder (relative to the experiment), what it measures and
    why (``purpose``, saying where the design departs from the user's), the plan's size and
    estimate, its status, what it cost, how often it was resumed, and the tuning after it
    (verdict, unresolved anchors, each anchor's pick and its P(eps-good), the schedule). The
    cells the plan asked for (``asked``: (anchor, K) -> runs they had before) decide whether
    the round added anything (:func:`lib.loop.run.stopping.added_nothing`)."""

    number: int
    plan_dir: str
    purpose: str
    planned_runs: int
    planned_starts: int
    estimated_seconds: float
    status: Status = "planned"
    cost: RoundCost = field(default_factory=RoundCost)
    resumes: int = 0
    asked: Mapping[tuple[int, int], int] = field(default_factory=dict)
    verdict: str | None = None
    unresolved: tuple[int, ...] = ()
    picks: Mapping[int, int | None] = field(default_factory=dict)
    p_eps_good: Mapping[int, float | None] = field(default_factory=dict)
    schedule: tuple[tuple[int, int, int], ...] | None = None
    failure: str | None = None


@dataclass(frozen=True)
class RunLog:
    """Every round so far, the arguments they were run with, and, once the loop ended, the
    stop rule and its text and the seed's full grid's estimated GPU seconds."""

    arguments: Mapping[str, Any]
    rounds: tuple[RoundRecord, ...] = ()
    stop_rule: str | None = None
    stop_text: str | None = None
    full_grid_seconds: float | None = None

    @property
    def spent_seconds(self) -> float:
        return sum(record.cost.seconds for record in self.rounds)


def rounds_text(log: RunLog) -> str:
    """The JSON text of ``rounds.json`` (deterministic: fields in order, numbers rounded)."""
    data = {
        "version": ROUNDS_VERSION,
        "arguments": log.arguments,
        "rounds": [_round_json(record) for record in log.rounds],
        "stop": None if log.stop_rule is None else {"rule": log.stop_rule, "text": log.stop_text},
        "gpu_seconds": round(log.spent_seconds, 3),
        "full_grid_gpu_seconds": None
        if log.full_grid_seconds is None
        else round(log.full_grid_seconds, 3),
    }
    return json.dumps(data, indent=2) + "\n"


def _round_json(record: RoundRecord) -> dict[str, Any]:
    cost = record.cost
    return {
        "round": record.number,
        "plan": record.plan_dir,
        "purpose": record.purpose,
        "planned_runs": record.planned_runs,
        "planned_server_starts": record.planned_starts,
        "estimated_gpu_seconds": round(record.estimated_seconds, 3),
        "status": record.status,
        "runs": cost.runs,
        "run_seconds": round(cost.run_seconds, 3),
        "server_starts": cost.server_starts,
        "server_start_seconds": round(cost.start_seconds, 3),
        "measured_server_starts": cost.measured_starts,
        "server_start_basis": cost.start_basis,
        "gpu_seconds": round(cost.seconds, 3),
        "resumes": record.resumes,
        "asked": [
            {"batch_size": anchor, "k": k, "runs_before": runs}
            for (anchor, k), runs in sorted(record.asked.items())
        ],
        "verdict": record.verdict,
        "unresolved_anchors": list(record.unresolved),
        "anchors": [
            {
                "batch_size": anchor,
                "selected_k": record.picks.get(anchor),
                "p_eps_good": record.p_eps_good.get(anchor),
            }
            for anchor in sorted(set(record.picks) | set(record.p_eps_good))
        ],
        "schedule": None if record.schedule is None else [list(r) for r in record.schedule],
        "failure": record.failure,
    }


# --------------------------------------------------------------------------- the reader


class _Invalid(Exception):
    def __init__(self, field: str, value: Any, expected: str) -> None:
        super().__init__(field)
        self.field, self.value, self.expected = field, value, expected


def rounds_of(data: Any, source: str) -> tuple[RunLog | None, list[Problem]]:
    """The typed log in ``data`` (parsed from ``source``), or None and an ``invalid-rounds``
    error naming the field, its value and what was expected (what :func:`rounds_text`
    writes)."""
    try:
        return _run_log(data), []
    except _Invalid as invalid:
        shown = json.dumps(invalid.value)
        problem = Problem(
            Severity.ERROR,
            "invalid-rounds",
            "not a rounds.json that tune-spec-k run wrote",
            files=(source,),
            field=invalid.field,
            value=shown if len(shown) <= 80 else shown[:77] + "...",
            expected=invalid.expected,
        )
        return None, [problem]


def _run_log(data: Any) -> RunLog:
    if not isinstance(data, dict):
        raise _Invalid("(top level)", data, "an object")
    if data.get("version") != ROUNDS_VERSION:
        raise _Invalid("version", data.get("version"), f"{ROUNDS_VERSION}")
    arguments = data.get("arguments")
    if not isinstance(arguments, dict):
        raise _Invalid("arguments", arguments, "an object")
    rounds = data.get("rounds")
    if not isinstance(rounds, list):
        raise _Invalid("rounds", rounds, "a list")
    stop = data.get("stop")
    if stop is not None and not (isinstance(stop, dict) and isinstance(stop.get("rule"), str)):
        raise _Invalid("stop", stop, "null or an object with a 'rule' string")
    records = tuple(_round(entry, f"rounds[{i}]") for i, entry in enumerate(rounds))
    if [record.number for record in records] != list(range(len(records))):
        raise _Invalid("rounds", [r.number for r in records], "rounds numbered 0, 1, 2, ...")
    return RunLog(
        arguments=arguments,
        rounds=records,
        stop_rule=None if stop is None else stop["rule"],
        stop_text=None if stop is None else _text_or_none(stop, "text", "stop"),
        full_grid_seconds=_number_or_none(data, "full_grid_gpu_seconds", ""),
    )


def _round(entry: Any, path: str) -> RoundRecord:
    if not isinstance(entry, dict):
        raise _Invalid(path, entry, "an object")
    status = entry.get("status")
    if status not in _STATUSES:
        raise _Invalid(f"{path}.status", status, " or ".join(_STATUSES))
    schedule = entry.get("schedule")
    ranges = None
    if schedule is not None:
        if not isinstance(schedule, list) or not all(
            isinstance(r, list) and len(r) == 3 and all(_is_whole(v) for v in r) for r in schedule
        ):
            raise _Invalid(f"{path}.schedule", schedule, "null or a list of [lo, hi, K]")
        ranges = tuple((r[0], r[1], r[2]) for r in schedule)
    asked = {}
    for index, cell in enumerate(_list(entry, "asked", path)):
        where = f"{path}.asked[{index}]"
        asked[(_whole(cell, "batch_size", where), _whole(cell, "k", where))] = _whole(
            cell, "runs_before", where
        )
    picks: dict[int, int | None] = {}
    p_eps_good: dict[int, float | None] = {}
    for index, row in enumerate(_list(entry, "anchors", path)):
        where = f"{path}.anchors[{index}]"
        anchor = _whole(row, "batch_size", where)
        picks[anchor] = _whole_or_none(row, "selected_k", where)
        p_eps_good[anchor] = _number_or_none(row, "p_eps_good", where)
    unresolved = _list(entry, "unresolved_anchors", path)
    if not all(_is_whole(a) for a in unresolved):
        raise _Invalid(f"{path}.unresolved_anchors", unresolved, "whole batch sizes")
    verdict = entry.get("verdict")
    if verdict is not None and not isinstance(verdict, str):
        raise _Invalid(f"{path}.verdict", verdict, "null or a string")
    return RoundRecord(
        number=_whole(entry, "round", path),
        plan_dir=_text(entry, "plan", path),
        purpose=_text(entry, "purpose", path),
        planned_runs=_whole(entry, "planned_runs", path),
        planned_starts=_whole(entry, "planned_server_starts", path),
        estimated_seconds=_number(entry, "estimated_gpu_seconds", path),
        status=status,
        cost=RoundCost(
            runs=_whole(entry, "runs", path),
            run_seconds=_number(entry, "run_seconds", path),
            server_starts=_whole(entry, "server_starts", path),
            start_seconds=_number(entry, "server_start_seconds", path),
            measured_starts=_whole(entry, "measured_server_starts", path),
            start_basis=_text(entry, "server_start_basis", path),
        ),
        resumes=_whole(entry, "resumes", path),
        asked=asked,
        verdict=verdict,
        unresolved=tuple(unresolved),
        picks=picks,
        p_eps_good=p_eps_good,
        schedule=ranges,
        failure=_text_or_none(entry, "failure", path),
    )


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _at(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _whole(entry: Any, name: str, path: str) -> int:
    value = entry.get(name) if isinstance(entry, dict) else None
    if not isinstance(value, int) or not _is_whole(value):
        raise _Invalid(_at(path, name), value, "a whole number >= 0")
    return value


def _whole_or_none(entry: dict[str, Any], name: str, path: str) -> int | None:
    return None if entry.get(name) is None else _whole(entry, name, path)


def _number(entry: dict[str, Any], name: str, path: str) -> float:
    value = entry.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _Invalid(_at(path, name), value, "a number >= 0")
    return float(value)


def _number_or_none(entry: Any, name: str, path: str) -> float | None:
    if not isinstance(entry, dict):
        raise _Invalid(path, entry, "an object")
    return None if entry.get(name) is None else _number(entry, name, path)


def _text(entry: dict[str, Any], name: str, path: str) -> str:
    value = entry.get(name)
    if not isinstance(value, str):
        raise _Invalid(_at(path, name), value, "a string")
    return value


def _text_or_none(entry: dict[str, Any], name: str, path: str) -> str | None:
    return None if entry.get(name) is None else _text(entry, name, path)


def _list(entry: dict[str, Any], name: str, path: str) -> list[Any]:
    value = entry.get(name)
    if not isinstance(value, list):
        raise _Invalid(_at(path, name), value, "a list")
    return value


def design_ks_of(folder: str | os.PathLike[str]) -> tuple[int, ...]:
    """The K of the design a ``tune-spec-k run`` experiment in ``folder`` measured (its
    ``rounds.json`` arguments: a bracketed round 0 leaves some unmeasured at some anchors, or
    everywhere); () for any other folder, or where ``rounds.json`` cannot be read (the app's
    rounds view and a resumed ``run`` say why)."""
    path = Path(folder) / ROUNDS_FILE
    if not path.is_file():
        return ()
    data, _ = read_json(path)
    log = rounds_of(data, str(path))[0] if data is not MISSING else None
    if log is None:
        return ()
    design, _ = design_from(None, log.arguments.get("design", {}))
    return tuple(sorted(design.ks)) if design is not None else ()


def with_design_ks(settings: Settings, folder: str | os.PathLike[str]) -> Settings:
    """``settings`` with ``design_ks`` from the experiment's ``rounds.json`` where none was
    given (:func:`design_ks_of`): ``tune-spec-k R/E`` and the app tune a loop's experiment as
    its rounds were tuned, judging every K of its design where it was not measured."""
    if settings.design_ks:
        return settings
    found = design_ks_of(folder)
    return dataclasses.replace(settings, design_ks=found) if found else settings
