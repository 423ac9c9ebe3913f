"""What is known of the engine a schedule will run on: each server setting the deployment rules
read (:class:`EngineFacts`), with where it was stated (:class:`Fact`: a flag, the sweep's serve
parameters, a saved ``/server_info``), or None where nothing said it. The result file records
them; :func:`lib.deploy.constraints.resolve_ceiling` turns them into the capture ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lib.schedule import Schedule

__all__ = ["EngineFacts", "Fact", "VllmCap"]


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


@dataclass(frozen=True)
class VllmCap:
    """A tuning's schedule capped for vLLM alone: the schedule as tuned (``tuned``, from the
    measurements) and the CUDA-graph capture ceiling it was capped to, ``ceiling`` tokens per
    decode step, with where that was stated (``source``). vLLM keys its decode graphs by
    tokens per step, batch x (1 + K), so a K past the ceiling runs without a graph there;
    engines that key their graphs by batch size (TensorRT-LLM, SGLang) have no such ceiling
    and deploy ``tuned`` (:func:`lib.deploy.registry.engine_decisions`)."""

    tuned: Schedule
    ceiling: int
    source: str
