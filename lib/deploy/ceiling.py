"""vLLM's CUDA-graph capture ceiling for a schedule, resolved once: which vLLM release serves
(its rules are rows of :mod:`lib.deploy.releases`), on which GPU, and every setting its capture
rule reads, each with where it was stated or what was assumed (:class:`CaptureCeiling`,
:func:`resolve_ceiling`); and the rule itself per K tier (:func:`graph_bounds`).

Two rules, by release (``capture_rule``):

- ``token-ceiling`` (0.33 and older): decode graphs are keyed by tokens per step, so a step of
  b requests at K(b) has a graph iff ``b * (1 + K(b)) <= C``, C the final
  ``max_cudagraph_capture_size``; past it none (``../shared/docs/engines.md``, section 1).
- ``decode-requests`` (0.34): decode graphs are keyed by (requests, query length), each tier
  looks only at its own, and the request ceiling R is shared by every tier and set by the
  schedule's smallest K: with S = max_num_seqs, M = max_num_batched_tokens and C0 the token
  graphs' ceiling, ``R ~ min(S, floor(C0 / (1 + Kmin)))``; a step runs FULL iff ``b <= R`` and
  ``b * (1 + K(b)) <= M``, else PIECEWISE iff ``b * (1 + K(b)) <= C0``, else none. On SM100
  R = S and the token bound is ``min(M, 8192)``. Explicit decode settings
  (``max_decode_cudagraph_capture_requests``, ``max_decode_cudagraph_capture_tokens``)
  replace R and bound the tokens (``../shared/docs/engines-2026-12.md``, 1b).

Where each setting comes from: the flags, else what the sweep recorded (records, a saved
``/server_info``), else vLLM's defaults for the release and the GPU (``max_num_seqs`` 1024 on
70 GiB or more from 0.33, 256 below), and the text says which. Every function here is pure and
costs O(K tiers), never O(batch sizes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lib.deploy import releases
from lib.deploy.engine import EngineFacts, Fact, Gpu, GpuMemory, gpu_of
from lib.deploy.releases import Release
from lib.flags import flag_name
from lib.schedule import Range, Schedule, merge_picks
from lib.settings import DeploySettings

__all__ = [
    "ASSUMED_GPU",
    "DECODE_REQUESTS_FLAG",
    "DECODE_TOKENS_FLAG",
    "GPU_MEMORY_FLAG",
    "CaptureCeiling",
    "GpuAssumption",
    "GraphlessRange",
    "VllmRelease",
    "assumed_capture_size",
    "capped_schedule",
    "capture_sizes",
    "default_max_num_seqs",
    "dense_runs",
    "full_past_ceiling",
    "graph_bounds",
    "graphless_ranges",
    "largest_capture_size",
    "piecewise_ranges",
    "release_refusals",
    "request_ceiling",
    "resolve_ceiling",
    "resolve_gpu",
    "resolve_release",
    "schedule_requests",
    "smallest_k",
    "stated_gpu_memory",
    "tokens_per_step",
]

#: The GPU assumed when the sweep recorded none: the class most Dynamic SD serving runs on.
ASSUMED_GPU = Gpu("an H100-class GPU (80 GiB, outside SM100)", 80, False)


def tokens_per_step(batch_size: int, k: int) -> int:
    """Tokens one decode step verifies: each of ``batch_size`` requests its token and K drafts.

    >>> tokens_per_step(86, 5)
    516
    """
    return batch_size * (1 + k)


#: vLLM's default capture sizes as runs (first, last or None: up to the ceiling, step): fact
#: ``capture_sizes``, one row for every release with Dynamic SD, so the newest's.
_CAPTURE_RUNS = releases.size_runs("vllm", "capture_sizes", releases.newest("vllm"))


def capture_sizes(largest: int) -> list[int]:
    """vLLM's default capture sizes up to ``largest`` (fact ``capture_sizes``): 1, 2, 4, then
    steps of 8 to 256, then of 16 (``config/vllm.py``, 0.24 and 0.33).

    >>> capture_sizes(40)
    [1, 2, 4, 8, 16, 24, 32, 40]
    >>> capture_sizes(512)[-3:]
    [480, 496, 512]
    """
    return [
        size
        for first, last, step in _CAPTURE_RUNS
        for size in range(first, min(largest, last if last is not None else largest) + 1, step)
    ]


def largest_capture_size(tokens: int) -> int:
    """The largest default capture size at or below ``tokens`` (0 below 1), in O(runs of
    ``capture_sizes``): the last of :func:`capture_sizes` of it.

    >>> largest_capture_size(300), largest_capture_size(510), largest_capture_size(7)
    (288, 496, 4)
    """
    best = 0
    for first, last, step in _CAPTURE_RUNS:
        if first <= tokens:
            top = tokens if last is None else min(tokens, last)
            best = max(best, first + (top - first) // step * step)
    return best


@dataclass(frozen=True)
class VllmRelease:
    """The vLLM release whose rules apply: ``known`` when stated (``source``: where), else the
    newest known release, assumed (``source``: the assumption, with the flag that states it).
    """

    release: Release
    known: bool
    source: str

    def describe(self) -> str:
        """``vLLM 0.34.0 (from --vllm-version)`` or ``vLLM 0.34.0 (assumed: ...)``."""
        return f"vLLM {self.release} ({_where(self.known, self.source)})"


@dataclass(frozen=True)
class GpuAssumption:
    """The GPU the defaults are read for: recorded (``known``; ``source`` where), or
    :data:`ASSUMED_GPU` with what was assumed. ``memory`` is its memory where stated by
    ``--gpu-memory-gib`` (directly or through a result file), ``tensor_parallel`` the server's
    tensor parallelism where stated: both recorded in the result file for the exports."""

    gpu: Gpu
    known: bool
    source: str
    memory: GpuMemory | None = None
    tensor_parallel: Fact | None = None

    def describe(self) -> str:
        """The GPU and where it came from; a memory its name does not state is said to be
        counted as large (:func:`default_max_num_seqs`)."""
        unknown = (
            "; memory not in its name: counted as large" if self.gpu.memory_gib is None else ""
        )
        return f"{self.gpu.name} ({_where(self.known, self.source)}{unknown})"


def _where(known: bool, source: str) -> str:
    """Where a stated value came from (``from ...``), or the assumption itself."""
    return f"from {source}" if known else source


def resolve_release(flags: EngineFacts, sweep: EngineFacts) -> VllmRelease:
    """The release: ``--vllm-version``, else what the sweep saved (a server config's
    ``system_env.vllm_version``), else the newest known release, assumed and said so. A
    release newer than every known one is read with the newest known release's facts, and
    the source says so.

    >>> resolve_release(EngineFacts(), EngineFacts()).describe()  # doctest: +ELLIPSIS
    'vLLM 0.34.0 (assumed: the newest release tune-spec-k knows; give --vllm-version...)'
    """
    stated = flags.vllm_version or sweep.vllm_version
    if stated is not None:
        release = Release.parse(stated.value)
        # A saved config of a release before Dynamic SD (a sweep of static K on an old server)
        # says nothing of the release that will serve the schedule.
        if release is not None and releases.fact("vllm", "schedule_field", release) is None:
            release = None
        if release is not None:
            source = stated.source
            if releases.newer_than_known("vllm", release):
                newest = releases.newest("vllm")
                source += f"; newer than the newest known release {newest}, whose rules apply"
            return VllmRelease(release, True, source)
    newest = releases.newest("vllm")
    return VllmRelease(
        newest,
        False,
        "assumed: the newest release tune-spec-k knows; give --vllm-version, or save the"
        " server config (tune-spec-k plan does)",
    )


def release_refusals(version: str | None) -> list[str]:
    """Why ``--vllm-version`` cannot be used (empty when it can): a release before every row
    of the schedule's field (``schedule_field``: Dynamic SD exists from 0.24.0) has no
    schedule to deploy. (Its form is checked by :meth:`lib.settings.DeploySettings.invalid`.)

    >>> release_refusals("0.20.1"), release_refusals("0.33.0"), release_refusals(None)
    (['--vllm-version 0.20.1: expected a vLLM release with Dynamic SD (0.24 and newer)'], [], [])
    """
    release = Release.parse(version) if version is not None else None
    if release is None or releases.fact("vllm", "schedule_field", release) is not None:
        return []
    rows = [f for f in releases.FACTS if f.engine == "vllm" and f.name == "schedule_field"]
    since = ", ".join(str(f.releases) for f in rows)
    return [f"--vllm-version {version}: expected a vLLM release with Dynamic SD ({since})"]


#: The flag that states the GPU's memory, named where a GPU default is assumed.
GPU_MEMORY_FLAG = flag_name(DeploySettings, "gpu_memory_gib")
#: The flags of vLLM 0.34's explicit decode settings (they win over a saved server config's).
DECODE_REQUESTS_FLAG = flag_name(DeploySettings, "max_decode_cudagraph_capture_requests")
DECODE_TOKENS_FLAG = flag_name(DeploySettings, "max_decode_cudagraph_capture_tokens")


def stated_gpu_memory(flags: EngineFacts, sweep: EngineFacts) -> GpuMemory | None:
    """The memory of one of the server's GPUs, where something states it: ``--gpu-memory-gib``
    (``flags``), else what the sweep's result recorded of it, else the memory the GPU a saved
    server config names has (:func:`~lib.deploy.engine.gpu_of`); None: not known. What both
    vLLM's defaults (:func:`resolve_gpu`) and SGLang's read.

    >>> from lib.deploy.engine import TextFact
    >>> stated_gpu_memory(EngineFacts(), EngineFacts(gpu=TextFact("GPU 0: NVIDIA L40S 48GB", "f")))
    GpuMemory(value=48, source='f')
    """
    stated = flags.gpu_memory_gib or sweep.gpu_memory_gib
    if stated is not None:
        return stated
    if sweep.gpu is not None:
        memory = gpu_of(sweep.gpu.value).memory_gib
        if memory is not None:
            return GpuMemory(memory, sweep.gpu.source)
    return None


def resolve_gpu(sweep: EngineFacts, flags: EngineFacts | None = None) -> GpuAssumption:
    """The GPU: its memory from ``--gpu-memory-gib`` (``flags``) where given, with the name
    and SM100 family of the GPU a saved server config names (``system_env.nvidia_gpu_models``;
    a GPU given only by its memory counts as outside SM100, said); else the GPU the saved
    config names; else :data:`ASSUMED_GPU`, said so with the flag that states it.

    >>> resolve_gpu(EngineFacts(), EngineFacts(gpu_memory_gib=GpuMemory(40, "--gpu-memory-gib"))
    ...             ).describe()
    'a GPU of 40 GiB (SM100 not known: counted outside it) (from --gpu-memory-gib)'
    """
    flags = flags or EngineFacts()
    named = gpu_of(sweep.gpu.value) if sweep.gpu is not None else None
    memory = flags.gpu_memory_gib or sweep.gpu_memory_gib
    tensor_parallel = flags.tensor_parallel_size or sweep.tensor_parallel_size
    if memory is not None:
        if named is not None and sweep.gpu is not None:
            gpu = Gpu(f"{named.name}, {memory.value:g} GiB", memory.value, named.sm100)
            source = f"{memory.source}; the GPU from {sweep.gpu.source}"
        else:
            gpu = Gpu(
                f"a GPU of {memory.value:g} GiB (SM100 not known: counted outside it)",
                memory.value,
                False,
            )
            source = memory.source
        return GpuAssumption(gpu, True, source, memory, tensor_parallel)
    if named is not None and sweep.gpu is not None:
        return GpuAssumption(named, True, sweep.gpu.source, None, tensor_parallel)
    return GpuAssumption(
        ASSUMED_GPU,
        False,
        f"assumed: no GPU recorded; give {GPU_MEMORY_FLAG}",
        None,
        tensor_parallel,
    )


def default_max_num_seqs(release: Release, gpu: Gpu) -> int:
    """vLLM's ``max_num_seqs`` when not given: ``large_gpu_max_num_seqs`` on a GPU of
    ``large_gpu_gib`` or more where the release has that rule (0.33 and newer), else
    ``default_max_num_seqs``. A GPU whose memory is not known counts as large (the safer
    reading: more batch sizes run).

    >>> h100 = Gpu("H100", 80, False)
    >>> l40 = Gpu("L40S", 48, False)
    >>> default_max_num_seqs(Release.parse("0.34.0"), h100), default_max_num_seqs(
    ...     Release.parse("0.34.0"), l40), default_max_num_seqs(Release.parse("0.32.0"), h100)
    (1024, 256, 256)
    """
    large = releases.number_or_none("vllm", "large_gpu_gib", release)
    if large is not None and (gpu.memory_gib is None or gpu.memory_gib >= large):
        return releases.number("vllm", "large_gpu_max_num_seqs", release)
    return releases.number("vllm", "default_max_num_seqs", release)


def assumed_capture_size(
    max_num_seqs: int,
    global_k: int,
    max_num_batched_tokens: int | None = None,
    platform: int | None = None,
) -> int:
    """The C (0.34: C0) vLLM's defaults give: ``C0 = min(2 * max_num_seqs * (1 + K),
    platform)``, then at most ``max_num_batched_tokens``, then the largest default capture
    size at or below that. ``platform`` None: ``platform_ceiling`` (off SM100).

    >>> assumed_capture_size(256, 7)
    512
    >>> assumed_capture_size(4, 3)  # 2 * 4 * 4 = 32
    32
    >>> assumed_capture_size(256, 7, max_num_batched_tokens=300)  # 300 -> the size 288
    288
    >>> assumed_capture_size(256, 7, platform=1024)
    1024
    """
    if platform is None:
        platform = releases.number("vllm", "platform_ceiling", releases.newest("vllm"))
    largest = min(2 * max_num_seqs * (1 + global_k), platform)
    if max_num_batched_tokens is not None:
        largest = min(largest, max_num_batched_tokens)
    return largest_capture_size(max(largest, 1))


@dataclass(frozen=True)
class CaptureCeiling:
    """The capture ceiling a schedule is checked against, up to ``max_num_seqs``.

    ``size`` is C: the final ``max_cudagraph_capture_size`` (0.33 and older), the token
    graphs' ceiling C0 (0.34). ``known`` is True when it was stated (a flag, the sweep's
    records, a saved server config); False when it is vLLM's default as
    :func:`assumed_capture_size` computes it, and then ``source`` says what was assumed. The
    same holds for ``max_num_seqs`` (how far the check goes).

    ``vllm`` is the release whose rule applies (None: a ceiling given alone, checked by the
    token-ceiling rule of 0.33 and older); ``gpu`` the GPU its defaults are read for. 0.34
    reads besides: ``engine_seqs`` (S as the server runs it, stated or its default),
    ``decode_requests`` (an explicit request ceiling R, else None: computed from the
    schedule), ``decode_tokens`` (the token bound of FULL graphs, M or an explicit budget;
    None: not known, assumed not to bind) and ``decode_source`` (where those came from).
    ``ignored``: what the capture line says of 0.34's decode flags given for an older release.
    """

    size: int
    known: bool
    source: str
    max_num_seqs: int
    max_num_seqs_known: bool
    max_num_seqs_source: str
    vllm: VllmRelease | None = None
    gpu: GpuAssumption | None = None
    engine_seqs: int | None = None
    decode_requests: int | None = None
    decode_tokens: int | None = None
    decode_source: str = ""
    ignored: str = ""

    @property
    def rule(self) -> str:
        """The release's ``capture_rule`` (``token-ceiling`` when no release is named)."""
        if self.vllm is None:
            return "token-ceiling"
        return releases.text("vllm", "capture_rule", self.vllm.release)

    @property
    def by_requests(self) -> bool:
        """Whether 0.34's decode-requests rule applies."""
        return self.rule == "decode-requests"

    @property
    def sm100(self) -> bool:
        return self.gpu is not None and self.gpu.gpu.sm100

    def fact(self, name: str) -> str:
        """A text fact of the release (the newest known where none is named)."""
        release = self.vllm.release if self.vllm is not None else releases.newest("vllm")
        return releases.text("vllm", name, release)

    @property
    def name(self) -> str:
        """What the ceiling is called in the release's rule: C (tokens per decode step), C0
        on 0.34 (the token graphs' ceiling)."""
        return "C0" if self.by_requests else "C"

    def assumption(self) -> str | None:
        """The release's rules, where the release was assumed (what the verdict's
        ``assumes:`` says); None where it was stated."""
        if self.vllm is None or self.vllm.known:
            return None
        return f"vLLM {self.vllm.release}'s capture rule and defaults ({self.vllm.source})"

    def describe(self) -> str:
        """One line: C and max_num_seqs with where each came from (and, where named, the
        release and the GPU).

        >>> CaptureCeiling(512, True, "--max-cudagraph-capture-size", 256, False,
        ...                "assumed: vLLM's default").describe()
        "C=512 (from --max-cudagraph-capture-size), max_num_seqs=256 (assumed: vLLM's default)"
        """
        c = f"from {self.source}" if self.known else self.source
        n = (
            f"from {self.max_num_seqs_source}"
            if self.max_num_seqs_known
            else (self.max_num_seqs_source)
        )
        line = f"{self.name}={self.size} ({c}), max_num_seqs={self.max_num_seqs} ({n})"
        if self.vllm is None:
            return line
        head = self.vllm.describe()
        if self.gpu is not None:
            head += f" on {self.gpu.describe()}"
        return f"{head}: {line}" + (f"; {self.ignored}" if self.ignored else "")


def resolve_ceiling(
    flags: EngineFacts, sweep: EngineFacts, global_k: int, largest_batch: int
) -> CaptureCeiling:
    """C and max_num_seqs for the check: each from the flags first, else from the sweep, else
    assumed; the release (:func:`resolve_release`) and the GPU (:func:`resolve_gpu`) say
    which rule and which defaults. Without a stated max_num_seqs the check covers batch sizes
    up to ``largest_batch`` (the schedule's last), and an assumed C is
    :func:`assumed_capture_size` of vLLM's default max_num_seqs for the release and GPU (or
    ``largest_batch`` when larger: the sweep ran that many requests at once), the engine's
    ``global_k`` and any known ``max_num_batched_tokens``.

    On 0.34 (``decode-requests``) C is the token graphs' ceiling C0: the flag (the value given
    to ``vllm serve --max-cudagraph-capture-size``), a saved 0.34 server config's largest
    token graph, the records' explicit ``max_cudagraph_capture_size``, else assumed; never a
    0.34 server's resolved ``max_cudagraph_capture_size`` (the widest graph of any kind).

    >>> from lib.deploy.engine import Fact, TextFact
    >>> old = EngineFacts(vllm_version=TextFact("0.33.0", "--vllm-version"))
    >>> resolve_ceiling(old, EngineFacts(), 7, 256).describe()  # doctest: +ELLIPSIS
    "vLLM 0.33.0 (from --vllm-version) on an H100-class GPU ...: C=512 (assumed: vLLM 0.33.0's...
    >>> flags = EngineFacts(max_cudagraph_capture_size=Fact(512, "--max-cudagraph-capture-size"))
    >>> resolve_ceiling(flags, EngineFacts(), 5, 128).known
    True
    """
    vllm = resolve_release(flags, sweep)
    gpu = resolve_gpu(sweep, flags)
    release = vllm.release
    seqs = flags.max_num_seqs or sweep.max_num_seqs
    if seqs is not None:
        max_num_seqs, seqs_known, seqs_source = seqs.value, True, seqs.source
        engine_seqs = seqs.value
    else:
        default = default_max_num_seqs(release, gpu.gpu)
        # Past the schedule's last batch size vLLM carries the last K up to max_num_seqs; not
        # knowing it, the check stops where the schedule does and says so.
        max_num_seqs, seqs_known = largest_batch, False
        seqs_source = (
            "assumed: the schedule's last batch size; vLLM carries the last K to the"
            f" server's max_num_seqs (default {default} on {gpu.gpu.name}): give"
            " --max-num-seqs"
        )
        engine_seqs = max(default, largest_batch)
    batched = flags.max_num_batched_tokens or sweep.max_num_batched_tokens
    by_requests = releases.text("vllm", "capture_rule", release) == "decode-requests"
    explicit_tokens = flags.decode_tokens or sweep.decode_tokens
    decode_tokens, decode_source = (
        _decode_tokens(explicit_tokens, batched) if by_requests else (None, "")
    )
    stated = flags.max_cudagraph_capture_size or (
        (sweep.prefill_ceiling or sweep.max_cudagraph_capture_size)
        if by_requests
        else sweep.max_cudagraph_capture_size
    )
    if stated is not None and by_requests and stated is not sweep.prefill_ceiling:
        # On 0.34 a stated max_cudagraph_capture_size is what vllm serve was given: vLLM
        # keeps the largest capture size at or below it and max_num_batched_tokens (#54933:
        # 42 becomes 40); a saved config's token graph sizes are already resolved.
        bound = min(stated.value, batched.value) if batched else stated.value
        size, known = largest_capture_size(bound), True
        source = stated.source + (f", resolved to {size}" if size != stated.value else "")
    elif stated is not None:
        size, known, source = stated.value, True, stated.source
    else:
        platform = releases.number(
            "vllm", "sm100_platform_ceiling" if gpu.gpu.sm100 else "platform_ceiling", release
        )
        size = assumed_capture_size(
            engine_seqs, global_k, batched.value if batched else None, platform
        )
        where = "on SM100" if gpu.gpu.sm100 else "outside SM100"
        known, source = (
            False,
            (
                f"assumed: vLLM {release}'s default for max_num_seqs={engine_seqs},"
                f" num_speculative_tokens={global_k}"
                + (f", max_num_batched_tokens={batched.value}" if batched else "")
                + f" on a GPU {where} (platform ceiling {platform})"
            ),
        )
    requests = (flags.decode_requests or sweep.decode_requests) if by_requests else None
    return CaptureCeiling(
        size,
        known,
        source,
        max_num_seqs,
        seqs_known,
        seqs_source,
        vllm=vllm,
        gpu=gpu,
        engine_seqs=engine_seqs,
        decode_requests=requests.value if requests is not None else None,
        decode_tokens=decode_tokens,
        decode_source=(
            decode_source
            + (
                f"; max_decode_cudagraph_capture_requests from {requests.source}"
                if requests
                else ""
            )
        ),
        ignored="" if by_requests else _ignored_decode_flags(flags, release),
    )


def _ignored_decode_flags(flags: EngineFacts, release: Release) -> str:
    """What the capture line says of 0.34's decode flags given for a release that keys its
    decode graphs by tokens per step (0.33 and older): they are ignored; empty when none was
    given."""
    given = [
        fact.source
        for fact in (flags.decode_requests, flags.decode_tokens)
        if fact is not None and fact.source in (DECODE_REQUESTS_FLAG, DECODE_TOKENS_FLAG)
    ]
    if not given:
        return ""
    return (
        f"{' and '.join(given)} ignored: vLLM {release} keys its decode CUDA graphs by tokens"
        " per step, not by requests"
    )


def _decode_tokens(explicit: Fact | None, batched: Fact | None) -> tuple[int | None, str]:
    """0.34's token bound of FULL decode graphs: the smaller of M (max_num_batched_tokens)
    and an explicit ``max_decode_cudagraph_capture_tokens`` (``explicit``: the flag, else a
    saved server config's), where stated; None: neither."""
    found = [f for f in (batched, explicit) if f is not None]
    if not found:
        return None, ""
    chosen = min(found, key=lambda f: f.value)
    name = "max_num_batched_tokens" if chosen is batched else "max_decode_cudagraph_capture_tokens"
    return chosen.value, f"{name}={chosen.value} from {chosen.source}"


def request_ceiling(ceiling: CaptureCeiling, ks: Iterable[int]) -> int:
    """vLLM 0.34's request ceiling R of the decode graphs for a schedule whose tiers run the
    Ks ``ks``: an explicit one where stated; on SM100 the engine's max_num_seqs; else the
    largest ``min(cdiv(s, q), S)`` over the default token sizes s <= C0 and the tiers' query
    lengths q = 1 + K with ``cdiv(s, q) * q <= C0`` (``config/vllm.py#L2662-L2670``), about
    ``min(S, floor(C0 / (1 + Kmin)))``: the smallest K sets it for every tier.

    >>> c = CaptureCeiling(512, True, "t", 256, True, "t", engine_seqs=256)
    >>> request_ceiling(c, [3, 1, 0]), request_ceiling(c, [7]), request_ceiling(c, [2])
    (256, 64, 166)
    """
    seqs = ceiling.engine_seqs if ceiling.engine_seqs is not None else ceiling.max_num_seqs
    if ceiling.decode_requests is not None:
        return ceiling.decode_requests
    if ceiling.sm100:
        return seqs
    best = 0
    for k in set(ks):
        q = 1 + k
        size = largest_capture_size(ceiling.size // q * q)
        if size >= 1:
            best = max(best, min(-(-size // q), seqs))
    return best


def graph_bounds(ceiling: CaptureCeiling, k: int, requests: int) -> tuple[int, int]:
    """For a tier at K: the largest batch size whose steps run a FULL graph, and the largest
    that runs any graph (FULL or PIECEWISE); past the second a step runs none. Token-ceiling
    rule: both ``C // (1 + K)``. Decode-requests rule (``requests``: R,
    :func:`request_ceiling`): FULL up to ``min(R, T // (1 + K))`` with T the token bound
    (:attr:`CaptureCeiling.decode_tokens`; on SM100 at most ``sm100_decode_token_budget``),
    any graph up to the larger of that and ``C0 // (1 + K)``.

    >>> c = CaptureCeiling(512, True, "t", 256, True, "t")
    >>> graph_bounds(c, 3, 0)
    (128, 128)
    """
    tokens = ceiling.size // (1 + k)
    if not ceiling.by_requests:
        return tokens, tokens
    full = requests
    bound = ceiling.decode_tokens
    if ceiling.sm100 and ceiling.vllm is not None:
        budget = releases.number("vllm", "sm100_decode_token_budget", ceiling.vllm.release)
        bound = budget if bound is None else min(bound, budget)
    if bound is not None:
        full = min(full, bound // (1 + k))
    return full, max(full, tokens)


#: vLLM clamps a K above ``num_speculative_tokens`` to it, silently (``k_clamped_to_global``,
#: every release with Dynamic SD).
_K_CLAMPED = releases.holds("vllm", "k_clamped_to_global", releases.newest("vllm"))


def dense_runs(schedule: Schedule, upto: int, global_k: int | None = None) -> list[Range]:
    """vLLM's dense lookup D over ``1..upto`` as constant-K runs: a batch size in a gap takes
    the previous range's K, one past the last range the last K (to ``upto``), each K clamped
    to ``global_k`` when given (``k_clamped_to_global``); ranges starting past ``upto`` are
    never reached. Equal neighbours merge. An empty schedule or ``upto < 1`` gives no run.

    >>> dense_runs(Schedule(((1, 4, 3), (9, 16, 1))), 32)
    [(1, 8, 3), (9, 32, 1)]
    >>> dense_runs(Schedule(((1, 4, 7), (5, 8, 2))), 6, global_k=5)
    [(1, 4, 5), (5, 6, 2)]
    """
    ordered = sorted(r for r in schedule.ranges if r[0] <= upto)
    if not ordered or upto < 1:
        return []
    anchors = [lo for lo, _, _ in ordered]
    if not _K_CLAMPED:
        global_k = None
    ks = [k if global_k is None else min(k, global_k) for _, _, k in ordered]
    return merge_picks(anchors, ks, upto)


@dataclass(frozen=True)
class GraphlessRange:
    """Batch sizes ``lo..hi`` that run K drafts past the capture ceiling: no CUDA graph (the
    same shape names a stretch that runs PIECEWISE graphs, or FULL ones past C0, on 0.34)."""

    lo: int
    hi: int
    k: int

    @property
    def tokens(self) -> tuple[int, int]:
        """Tokens per decode step at ``lo`` and at ``hi``."""
        return tokens_per_step(self.lo, self.k), tokens_per_step(self.hi, self.k)

    def head(self) -> str:
        """``batch sizes LO-HI run K=k at A-B tokens per decode step``, as every finding
        starts."""
        low, high = self.tokens
        return (
            f"batch sizes {_span(self.lo, self.hi)} run K={self.k} at {_span(low, high)} tokens"
            " per decode step"
        )

    def to_json(self) -> dict[str, int]:
        low, high = self.tokens
        return {"lo": self.lo, "hi": self.hi, "k": self.k, "tokens_lo": low, "tokens_hi": high}


def _safe_k_limit(batch_size: int, ceiling: int) -> int:
    """The largest K that keeps ``batch_size`` requests inside the ceiling (0 if none does)."""
    return max(0, ceiling // batch_size - 1)


def schedule_requests(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None = None
) -> int:
    """vLLM 0.34's request ceiling R for ``schedule`` (:func:`~lib.deploy.ceiling.request_ceiling`
    over the Ks of its dense lookup up to the server's max_num_seqs: ranges past it are never
    tiers); 0 on the token-ceiling rule, which has none."""
    if not ceiling.by_requests:
        return 0
    last = max((hi for _, hi, _ in schedule.ranges), default=1)
    upto = ceiling.engine_seqs or max(ceiling.max_num_seqs, last)
    return request_ceiling(ceiling, {k for _, _, k in dense_runs(schedule, upto, global_k)})


def smallest_k(schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None) -> int:
    """The smallest K of the schedule's tiers (its dense lookup up to the server's
    max_num_seqs): on vLLM 0.34 it sets R."""
    last = max((hi for _, hi, _ in schedule.ranges), default=1)
    upto = ceiling.engine_seqs or max(ceiling.max_num_seqs, last)
    return min((k for _, _, k in dense_runs(schedule, upto, global_k)), default=0)


def _stretches(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None, full: bool
) -> list[GraphlessRange]:
    """Per constant-K run up to max_num_seqs, the batch sizes past its graph bound
    (:func:`~lib.deploy.ceiling.graph_bounds`): the FULL bound with ``full``, else the bound of
    any graph."""
    requests = schedule_requests(schedule, ceiling, global_k)
    found = []
    for lo, hi, k in dense_runs(schedule, ceiling.max_num_seqs, global_k):
        full_upto, graph_upto = graph_bounds(ceiling, k, requests)
        first = (full_upto if full else graph_upto) + 1
        if first <= hi:
            found.append(GraphlessRange(max(lo, first), hi, k))
    return found


def graphless_ranges(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None = None
) -> list[GraphlessRange]:
    """Every batch range whose decode steps run no CUDA graph, for b in ``1..max_num_seqs``.
    Token-ceiling rule: ``b * (1 + D(b)) > C``, i.e. within a constant-K run the batch sizes
    above ``C // (1 + K)`` (for K=0, more than C requests). Decode-requests rule (vLLM 0.34):
    past both the FULL bound and ``C0 // (1 + K)`` (:func:`~lib.deploy.ceiling.graph_bounds`).

    >>> ceiling = CaptureCeiling(512, True, "test", 128, True, "test")
    >>> [r.to_json() for r in graphless_ranges(Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3))),
    ...                                        ceiling)]
    [{'lo': 86, 'hi': 127, 'k': 5, 'tokens_lo': 516, 'tokens_hi': 762}]
    """
    return _stretches(schedule, ceiling, global_k, full=False)


def piecewise_ranges(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None = None
) -> list[GraphlessRange]:
    """vLLM 0.34: the batch ranges that run a PIECEWISE graph, not a FULL one (past the FULL
    bound, within C0); none on the token-ceiling rule."""
    if not ceiling.by_requests:
        return []
    graphless = {(g.lo, g.hi, g.k) for g in graphless_ranges(schedule, ceiling, global_k)}
    found = []
    for stretch in _stretches(schedule, ceiling, global_k, full=True):
        inside = [g for g in graphless if g[2] == stretch.k and stretch.lo <= g[0] <= stretch.hi]
        end = inside[0][0] - 1 if inside else stretch.hi
        if stretch.lo <= end:
            found.append(GraphlessRange(stretch.lo, end, stretch.k))
    return found


def full_past_ceiling(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None = None
) -> list[GraphlessRange]:
    """vLLM 0.34: the batch ranges whose steps verify more than C0 tokens and still run a FULL
    graph (within R and the token bound): what the token-ceiling rule would have called
    graphless. None on the token-ceiling rule."""
    if not ceiling.by_requests:
        return []
    requests = schedule_requests(schedule, ceiling, global_k)
    found = []
    for lo, hi, k in dense_runs(schedule, ceiling.max_num_seqs, global_k):
        full_upto, _ = graph_bounds(ceiling, k, requests)
        first = ceiling.size // (1 + k) + 1
        if max(lo, first) <= min(hi, full_upto):
            found.append(GraphlessRange(max(lo, first), min(hi, full_upto), k))
    return found


def _token_capped(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None, upto: int
) -> Schedule:
    """``K'(b) = min(D(b), max(0, floor(C / b) - 1))`` over ``1..upto``, re-merged."""
    anchors: list[int] = []
    ks: list[int] = []
    for lo, hi, k in dense_runs(schedule, upto, global_k):
        b = lo
        while b <= hi:
            limit = _safe_k_limit(b, ceiling.size)
            if limit == 0:
                # The limit only falls with b: K=0 from here to the run's end (past C even
                # K=0 cannot be made safe).
                value, end = 0, hi
            elif limit >= k:
                value, end = k, min(hi, ceiling.size // (1 + k))
            else:
                value, end = limit, min(hi, ceiling.size // (1 + limit))
            anchors.append(b)
            ks.append(value)
            b = end + 1
    return Schedule(tuple(merge_picks(anchors, ks, upto)))


def _restored(
    schedule: Schedule,
    capped: Schedule,
    ceiling: CaptureCeiling,
    global_k: int | None,
    upto: int,
) -> Schedule:
    """vLLM 0.34: the token cap re-checked. Capping adds low-K tiers, which raise the request
    ceiling R for every tier, so a batch size capped below its tuned K may run the tuned K in
    a FULL graph after all: the tuned K is given back there. Kept only if R stays what the
    capped schedule gives (giving a K back may remove the tier that raised R), else the
    capped schedule."""
    requests = schedule_requests(capped, ceiling, global_k)
    anchors: list[int] = []
    ks: list[int] = []
    before = dense_runs(schedule, upto, global_k)
    for lo, hi, k in dense_runs(capped, upto, global_k):
        for o_lo, o_hi, o_k in before:
            start, end = max(lo, o_lo), min(hi, o_hi)
            if start > end:
                continue
            if o_k > k:
                full_upto, _ = graph_bounds(ceiling, o_k, requests)
                kept = min(end, full_upto)
                if kept >= start:
                    anchors.append(start)
                    ks.append(o_k)
                    start = kept + 1
            if start <= end:
                anchors.append(start)
                ks.append(k)
    restored = Schedule(tuple(merge_picks(anchors, ks, upto)))
    if schedule_requests(restored, ceiling, global_k) != requests:
        return capped
    return restored


def capped_schedule(
    schedule: Schedule, ceiling: CaptureCeiling, global_k: int | None = None
) -> Schedule:
    """The repair of the graphless batch sizes with K > 0 (a K=0 step past C cannot be
    repaired: :meth:`CeilingCheck.findings` names it a platform limit). Token-ceiling rule:
    ``K'(b) = min(D(b), max(0, floor(C / b) - 1))`` over ``1..max_num_seqs`` (or the
    schedule's last batch size, when larger), re-merged. Decode-requests rule (vLLM 0.34): the
    same cap with C0, then the tuned K given back wherever it runs a FULL graph under the
    capped schedule's R (:func:`_restored`). A schedule with nothing to repair comes back as
    it was (the same ranges, not re-derived), so a safe seed answer is byte-identical.

    The published GB200 case (C = 512, max_num_seqs 128):

    >>> ceiling = CaptureCeiling(512, True, "test", 128, True, "test")
    >>> capped_schedule(Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3))), ceiling).json_text()
    '[[1, 1, 3], [2, 85, 5], [86, 102, 4], [103, 128, 3]]'
    """
    if not any(g.k > 0 for g in graphless_ranges(schedule, ceiling, global_k)):
        return schedule
    last = max((hi for _, hi, _ in schedule.ranges), default=0)
    # The whole schedule is repaired (ranges past a known max_num_seqs are harmless, never
    # run); what is reported capped stops at max_num_seqs (:func:`capped_ranges`).
    upto = max(ceiling.max_num_seqs, last)
    capped = _token_capped(schedule, ceiling, global_k, upto)
    if not ceiling.by_requests:
        return capped
    return _restored(schedule, capped, ceiling, global_k, upto)


def _span(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"
