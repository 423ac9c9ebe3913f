"""The check per context point: a validation sweep that varied the prompt length, or a context
schedule under test, is judged at each context point on that point's runs alone
(:func:`judge_contexts`), or at the sweep's one prompt length; a context schedule at the K its
tables give at the point's decode-time context.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lib.context_axis import ContextAxis, ContextPoint
from lib.loop.check.arms import UnderTest, clamped_lookup
from lib.loop.check.judge import CheckSettings, frames_json, judge
from lib.noise_summary import ServerNoise, combined_servers
from lib.problems import Problem
from lib.schedule import Schedule
from lib.sweeps import Sweep

__all__ = [
    "ContextCheck",
    "judge_contexts",
    "one_length_statement",
    "placed_points",
    "row_contexts",
]


@dataclass(frozen=True, eq=False)
class ContextCheck:
    """The arms and verdicts at one context point of a validation sweep that varied the prompt
    length: the schedule under test judged on that point's runs alone. With a context schedule
    under test, ``context_tokens`` is the point's decode-time context, where its K was looked
    up."""

    prompt_tokens: int
    arms: pl.DataFrame
    verdicts: pl.DataFrame
    context_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        context = {} if self.context_tokens is None else {"context_tokens": self.context_tokens}
        return {
            "prompt_tokens": self.prompt_tokens,
            **context,
            **frames_json(self.verdicts, self.arms),
        }


def row_contexts(
    sweep: Sweep, points: Sequence[ContextPoint], axis: ContextAxis | None
) -> list[int | None]:
    """Each run's decode-time context: its context point's (None where unplaced), or with one
    point, that point's; None everywhere without a point."""
    if axis is not None:
        return [
            None if index is None else axis.points[index].context_tokens
            for index in axis.runs["context_point"].to_list()
        ]
    context = points[0].context_tokens if points else None
    return [context] * sweep.runs.height


def one_length_statement(point: ContextPoint, label: str | None) -> str:
    """What a context schedule judged at a sweep's one prompt length rests on."""
    output = (
        f"prompt + output / 2 = {point.prompt_tokens} + {point.output_tokens} / 2"
        if point.output_tokens is not None
        else "the prompt alone: no output length in the records"
    )
    return (
        "the validation sweep did not vary the prompt length: the context schedule is judged"
        f" at its one prompt length, {point.prompt_tokens} tokens (the median of {label} over"
        f" the runs), at decode-time context {point.context_tokens} ({output}), the K it runs"
        " there"
    )


def placed_points(
    axis: ContextAxis | None, points: Sequence[ContextPoint], runs: pl.DataFrame
) -> list[tuple[ContextPoint, pl.DataFrame]]:
    """Each context point with its runs: the axis's placement, or every run at the one point."""
    if axis is None:
        return [(points[0], runs)]
    placed = axis.runs.select("source", "position", "context_point")
    return [
        (
            point,
            runs.join(
                placed.filter(pl.col("context_point") == index).drop("context_point"),
                on=["source", "position"],
                how="semi",
            ),
        )
        for index, point in enumerate(axis.points)
    ]


def judge_contexts(
    sweep: Sweep,
    placed: Sequence[tuple[ContextPoint, pl.DataFrame]],
    settings: CheckSettings,
    schedule: UnderTest,
    global_k: int | None = None,
) -> tuple[tuple[ContextCheck, ...], list[Problem], ServerNoise | None]:
    """The arms judged at each context point (:func:`lib.context_axis.find_context_axis`, or a
    sweep's one prompt length), on that point's runs alone, never their runs pooled: a batch
    schedule under test (one K per batch size, as today's vLLM runs it whatever the prompt),
    or a context schedule at the K it runs at the point's decode-time context, against the
    alternatives at every prompt length. Each point's problems say which point they are at.
    ``global_k``: the dynamic server's ``num_speculative_tokens``, to which vLLM clamps the
    schedule's K (:func:`lib.loop.check.arms.clamped_lookup`)."""
    contexts = []
    problems: list[Problem] = []
    servers: list[tuple[int, ServerNoise]] = []
    for point, at in placed:
        context = None if isinstance(schedule, Schedule) else point.context_tokens
        arm_frame, verdicts, found, noise = judge(
            sweep,
            at,
            settings,
            clamped_lookup(_k_at_point(schedule, point.context_tokens), global_k),
        )
        contexts.append(ContextCheck(point.prompt_tokens, arm_frame, verdicts, context))
        where = f"at {point.prompt_tokens} prompt tokens: "
        problems += [dataclasses.replace(p, message=where + p.message) for p in found]
        servers.append((point.prompt_tokens, noise))
    # Replicas may cover some prompt lengths only: each point's anchors are its own.
    combined = combined_servers(servers, servers[0][1].assumed_cv) if servers else None
    return tuple(contexts), problems, combined


def _k_at_point(schedule: UnderTest, context: int) -> Callable[[int], int]:
    """The K the schedule runs per batch size at one context point."""
    if isinstance(schedule, Schedule):
        return schedule.k_at
    return functools.partial(schedule.k_at, context=context)
