"""What is known of the engine a schedule will run on: each server setting the deployment rules
read (:class:`EngineFacts`), with where it was stated (:class:`Fact`: a flag, the sweep's serve
parameters, a saved ``/server_info``), or None where nothing said it. The result file records
them; :func:`lib.deploy.constraints.resolve_ceiling` turns them into the capture ceiling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lib.schedule import Schedule

__all__ = [
    "SM100_GPUS",
    "EngineFacts",
    "Fact",
    "Gpu",
    "GpuMemory",
    "TextFact",
    "VllmCap",
    "gpu_of",
]

#: GPU names of NVIDIA's SM100 family (compute capability 10.x), as ``nvidia-smi`` spells them.
SM100_GPUS = ("B200", "GB200", "B300", "GB300")
_MEMORY = re.compile(r"(\d+)\s*GB\b", re.IGNORECASE)
#: The memory of GPUs whose names do not state it, in GiB (NVIDIA's data sheets).
_GPU_MEMORY = {"H200": 141, "B200": 180, "GB200": 186, "B300": 288, "GB300": 288}


@dataclass(frozen=True)
class Fact:
    """A value the sweep or the user stated, and where it was stated."""

    value: int
    source: str


@dataclass(frozen=True)
class TextFact:
    """A text the sweep or the user stated (a version, GPU names), and where it was stated."""

    value: str
    source: str


@dataclass(frozen=True)
class GpuMemory:
    """The memory of one of the server's GPUs in GiB, as stated (``--gpu-memory-gib``), and
    where."""

    value: float
    source: str


@dataclass(frozen=True)
class Gpu:
    """What the capture rule needs of a GPU: its memory in GiB (None: not known) and whether
    it is of the SM100 family, read from its name (``name``, as recorded)."""

    name: str
    memory_gib: float | None
    sm100: bool


def gpu_of(models: str) -> Gpu:
    """The GPU a saved server config's ``nvidia_gpu_models`` names (the first one listed):
    its memory from the ``NNGB`` in its name, else from the few names that state none
    (:data:`_GPU_MEMORY`); SM100 from :data:`SM100_GPUS`.

    >>> gpu_of("GPU 0: NVIDIA H100 80GB HBM3\\nGPU 1: NVIDIA H100 80GB HBM3")
    Gpu(name='NVIDIA H100 80GB HBM3', memory_gib=80, sm100=False)
    >>> gpu_of("GPU 0: NVIDIA B200")
    Gpu(name='NVIDIA B200', memory_gib=180, sm100=True)
    >>> gpu_of("NVIDIA L4").memory_gib is None
    True
    """
    first = models.strip().splitlines()[0] if models.strip() else ""
    name = first.split(":", 1)[1].strip() if first.startswith("GPU") and ":" in first else first
    words = set(re.split(r"[^A-Za-z0-9]+", name.upper()))
    stated = _MEMORY.search(name)
    memory = int(stated.group(1)) if stated else None
    if memory is None:
        memory = next((gib for model, gib in _GPU_MEMORY.items() if model in words), None)
    return Gpu(name, memory, any(model in words for model in SM100_GPUS))


@dataclass(frozen=True)
class EngineFacts:
    """What is known of the server that will run the schedule: each setting the capture rule
    reads, with its source, or None when nothing said it. ``vllm_version`` and ``gpu`` (the
    GPU names) say which release's rules apply and which GPU defaults; the
    ``decode_*``/``prefill_ceiling`` fields are vLLM 0.34's decode graph settings where a saved
    server config states them explicitly (:mod:`lib.deploy.releases`, ``ceiling_fields``)."""

    max_cudagraph_capture_size: Fact | None = None
    max_num_seqs: Fact | None = None
    max_num_batched_tokens: Fact | None = None
    vllm_version: TextFact | None = None
    gpu: TextFact | None = None
    #: 0.34: the largest token graph C0 (PIECEWISE decode steps run up to it).
    prefill_ceiling: Fact | None = None
    #: 0.34: an explicit request ceiling R of the decode graphs.
    decode_requests: Fact | None = None
    #: 0.34: an explicit token budget of the decode graphs.
    decode_tokens: Fact | None = None
    #: The server's data parallelism (vLLM turns Dynamic SD off above 1: ``dp_disables_dsd``).
    data_parallel_size: Fact | None = None
    #: The memory of one GPU where stated (it wins over the GPU ``gpu`` names).
    gpu_memory_gib: GpuMemory | None = None
    #: The server's tensor parallelism where stated (SGLang's defaults read it).
    tensor_parallel_size: Fact | None = None


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
