"""What a confidence report's P(eps-good) rest on, over the whole sweep: the server starts
(measured from replicas, or ``--server-cv`` assumed; :class:`ServerNoise`) and, in a lean sweep,
the run noise (measured, borrowed over batch size, or ``--run-cv`` assumed; :class:`RunNoise`),
with the one sentence the verdict's ``assumes:`` line and every front end say of them, and
their JSON. :mod:`lib.confidence` builds them; a context grid combines its points'
(:func:`combined_servers`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lib.flags import flag_name
from lib.noise_model import LEAN_DESIGN
from lib.numbers import json_float, percent_text
from lib.settings import Options

__all__ = ["RunNoise", "ServerNoise", "ServerPoint", "combined_servers", "relative_sd"]


@dataclass(frozen=True)
class ServerPoint:
    """One prompt length of a context grid: the batch anchors whose P(eps-good) measured the
    server offsets from replicas there, and those that assumed ``--server-cv``."""

    prompt_tokens: int
    measured_at: tuple[int, ...] = ()
    assumed_at: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunNoise:
    """Where the report's run noise came from, over the whole sweep, when some anchor has no
    cell with two runs (a lean sweep, docs/confidence.md, "Lean sweeps"): the anchors that
    measured it, those that borrowed it from them (through :mod:`lib.noise_model`) and those
    that assumed ``--run-cv`` (``assumed_cv``). A context grid's (:func:`combined_servers`)
    lists the batch sizes of every prompt length together."""

    assumed_cv: float
    measured_at: tuple[int, ...] = ()
    borrowed_at: tuple[int, ...] = ()
    assumed_at: tuple[int, ...] = ()
    #: The measured anchors a borrowed noise was fitted to, their cells with two or more runs
    #: and degrees of freedom.
    borrowed_from: tuple[int, ...] = ()
    borrowed_cells: int = 0
    borrowed_df: int = 0

    def statement(self) -> str | None:
        """What the single-run anchors' P(eps-good) rest on, in one sentence (None where
        every anchor measured its noise)."""
        parts = []
        if self.borrowed_at:
            parts.append(
                f"single-run batch sizes {_sizes(self.borrowed_at)}: run noise borrowed from"
                f" batch sizes {_sizes(self.borrowed_from)} ({self.borrowed_cells} cells,"
                f" {self.borrowed_df} degrees of freedom) through a noise model over batch size"
            )
        if self.assumed_at:
            parts.append(
                f"no replicate runs: P(eps-good) assumes runs vary by"
                f" {percent_text(self.assumed_cv * 100)} ({flag_name(Options, 'run_cv')};"
                f" measure it with {LEAN_DESIGN})"
            )
        return "; ".join(parts) or None

    def to_json(self) -> dict[str, Any]:
        return {
            "assumed_run_cv": self.assumed_cv,
            "measured_at": list(self.measured_at),
            "borrowed_at": list(self.borrowed_at),
            "borrowed_from": list(self.borrowed_from),
            "borrowed_cells": self.borrowed_cells,
            "borrowed_df": self.borrowed_df,
            "assumed_at": list(self.assumed_at),
            "statement": self.statement(),
        }


def _sizes(anchors: Sequence[int]) -> str:
    return ", ".join(str(anchor) for anchor in anchors)


@dataclass(frozen=True)
class ServerNoise:
    """What the report's P(eps-good) take of server starts, over the whole sweep
    (docs/confidence.md, "Servers"): which anchors measured the server offsets from replicas,
    which assumed ``--server-cv``, and the measured sd pooled over the anchors that have it
    (``sum(df * excess) / sum(df)`` of each anchor's method-of-moments excess, then clipped
    at 0; log scale).

    A context grid's (:func:`combined_servers`) has ``points``, one per prompt length with its
    own anchors; its ``measured_at`` and ``assumed_at`` are then the batch sizes measured (or
    assumed) at some prompt length, and only ``points`` says where."""

    assumed_cv: float
    measured_at: tuple[int, ...] = ()
    assumed_at: tuple[int, ...] = ()
    measured_sd: float | None = None
    measured_df: int = 0
    points: tuple[ServerPoint, ...] = ()
    #: Lean sweeps only: where the run noise came from (None where every anchor measured it).
    runs: RunNoise | None = None

    @property
    def measured_cv(self) -> float | None:
        """The measured sd as a relative one (None without replicas)."""
        return None if self.measured_sd is None else relative_sd(self.measured_sd)

    def statement(self) -> str | None:
        """The assumptions every "resolved" and the verdict rest on: the servers'
        (:meth:`server_statement`), then in a lean sweep the run noise's
        (:meth:`RunNoise.statement`); None where no anchor's noise is known."""
        parts = [self.server_statement(), None if self.runs is None else self.runs.statement()]
        return "; ".join(part for part in parts if part) or None

    def server_statement(self) -> str | None:
        """The assumption about server starts, in one sentence (None where no anchor's noise
        is known: then no P is stated at all)."""
        flag = flag_name(Options, "server_cv")
        assumed = (
            f"assumes servers vary by at most {percent_text(self.assumed_cv * 100)} ({flag};"
            " measure it with tune-spec-k plan --server-replicas)"
        )
        if self.measured_cv is None:
            return f"no server replicas: P(eps-good) {assumed}" if self.assumed_at else None
        measured = (
            f"servers of one configuration vary by {percent_text(self.measured_cv * 100)}"
            f" (measured, {self.measured_df} degrees of freedom)"
        )
        if not self.assumed_at:
            return f"server replicas: {measured}"
        return (
            f"server replicas at {self.measured_where()}: {measured}; elsewhere P(eps-good)"
            f" {assumed}"
        )

    def measured_where(self) -> str:
        """Where the offsets were measured: the batch sizes, and in a context grid the batch
        sizes of each prompt length, so that "elsewhere" is every other (batch size, prompt
        length), never a batch size measured at one prompt length as if at all (one prompt
        length: its batch sizes).

        >>> ServerNoise(0.01, (1, 8), (64,)).measured_where()
        'batch sizes 1, 8'
        >>> points = (ServerPoint(512, (1, 8), ()), ServerPoint(2048, (), (1, 8)))
        >>> ServerNoise(0.01, (1, 8), (1, 8), points=points).measured_where()
        'batch sizes 1, 8 at 512 prompt tokens'
        """

        if len(self.points) <= 1:  # one prompt length: its batch sizes are all there is
            return "batch sizes " + _sizes(self.measured_at)
        return "; ".join(
            f"batch sizes {_sizes(point.measured_at)} at {point.prompt_tokens} prompt tokens"
            for point in self.points
            if point.measured_at
        )

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "assumed_server_cv": self.assumed_cv,
            "measured_server_cv": json_float(self.measured_cv, 6),
            "measured_df": self.measured_df,
            "measured_at": list(self.measured_at),
            "assumed_at": list(self.assumed_at),
            "statement": self.statement(),
        }
        if self.runs is not None:
            found["run_noise"] = self.runs.to_json()
        return found


def combined_servers(parts: Sequence[tuple[int, ServerNoise]], assumed_cv: float) -> ServerNoise:
    """Several prompt lengths' server noise as one (a context grid's points, each given with
    its prompt tokens): each point's anchors kept apart (:attr:`ServerNoise.points`), and the
    measured sd pooled by degrees of freedom (``sqrt(sum(df * sd^2) / sum(df))``)."""
    df = sum(part.measured_df for _, part in parts)
    squares = sum(part.measured_df * (part.measured_sd or 0.0) ** 2 for _, part in parts)
    lean = [part.runs for _, part in parts if part.runs is not None]

    def union(name: str) -> tuple[int, ...]:
        return tuple(sorted({a for runs in lean for a in getattr(runs, name)}))

    runs = (
        RunNoise(
            lean[0].assumed_cv,
            union("measured_at"),
            union("borrowed_at"),
            union("assumed_at"),
            union("borrowed_from"),
            sum(runs.borrowed_cells for runs in lean),
            sum(runs.borrowed_df for runs in lean),
        )
        if lean
        else None
    )
    return ServerNoise(
        assumed_cv=assumed_cv,
        measured_at=tuple(sorted({a for _, part in parts for a in part.measured_at})),
        assumed_at=tuple(sorted({a for _, part in parts for a in part.assumed_at})),
        measured_sd=math.sqrt(squares / df) if df else None,
        measured_df=df,
        points=tuple(
            ServerPoint(prompt, part.measured_at, part.assumed_at) for prompt, part in parts
        ),
        runs=runs,
    )


def relative_sd(log_sd: float) -> float:
    """A log-scale standard deviation as the relative one of its log-normal, the inverse of
    :attr:`ConfidenceSettings.server_log_variance`."""
    return math.sqrt(math.expm1(log_sd**2))
