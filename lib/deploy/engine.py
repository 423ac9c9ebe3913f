"""What is known of the engine a schedule will run on: each server setting the deployment rules
read (:class:`EngineFacts`), with where it was stated (:class:`Fact`: a flag, the sweep's serve
parameters, a saved ``/server_info``), or None where nothing said it. The result file records
them; :func:`lib.deploy.constraints.resolve_ceiling` turns them into the capture ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineFacts", "Fact"]


@dataclass(frozen=True)
class Fact:
    """A value the sweep or the user stated, and where it was stated."""

    value: int
    source: str


@dataclass(frozen=True)
class EngineFacts:
    """What is known of the server that will run the schedule: each setting the capture rule
    reads, with its source, or None when nothing said it."""

    max_cudagraph_capture_size: Fact | None = None
    max_num_seqs: Fact | None = None
    max_num_batched_tokens: Fact | None = None
