"""lib/deploy/ceiling.py and the capture rule per release, checked against vLLM's own code:
for each release's rule a table of (schedule, K, S, M, GPU class) -> FULL / PIECEWISE / none
per batch size, taken from the runs of vLLM's own resolution and dispatch functions in
../shared/docs/engines-2026-12.md (section 1b, vLLM 0.34.0) and the rule and its worked
numbers in ../shared/docs/engines.md (section 1, vLLM 0.33.0); and the rule against a
brute-force evaluation of the 0.34 source's formula at every batch size."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.deploy.ceiling import (
    DECODE_REQUESTS_FLAG,
    DECODE_TOKENS_FLAG,
    CaptureCeiling,
    capture_sizes,
    default_max_num_seqs,
    largest_capture_size,
    request_ceiling,
    resolve_ceiling,
    resolve_gpu,
    resolve_release,
)
from lib.deploy.constraints import check_ceiling
from lib.deploy.engine import EngineFacts, Fact, Gpu, GpuMemory, TextFact
from lib.deploy.releases import Release
from lib.schedule import Schedule

MOE = [[1, 63, 3], [64, 127, 1], [128, 255, 3], [256, 256, 0]]
SONNET = [[1, 63, 7], [64, 256, 0]]


def _facts(
    version: str,
    seqs: int,
    batched: int | None,
    gpu: str | None,
    capture: int | None = None,
    requests: int | None = None,
) -> tuple[EngineFacts, EngineFacts]:
    """The flags (release, an explicit capture size) and what the sweep states (S, M, the
    GPU, an explicit decode request ceiling) of one harness run."""
    flags = EngineFacts(
        vllm_version=TextFact(version, "t"),
        max_cudagraph_capture_size=Fact(capture, "t") if capture is not None else None,
    )
    sweep = EngineFacts(
        max_num_seqs=Fact(seqs, "t"),
        max_num_batched_tokens=Fact(batched, "t") if batched is not None else None,
        gpu=TextFact(gpu, "t") if gpu is not None else None,
        decode_requests=Fact(requests, "t") if requests is not None else None,
    )
    return flags, sweep


def _kinds(schedule: list[list[int]], k: int, ceiling: CaptureCeiling) -> list[list[object]]:
    """What the tool says each batch size 1..S runs, as [lo, hi, kind] spans."""
    check = check_ceiling(Schedule.parse(schedule)[0], ceiling, {}, global_k=k, repair=False)  # type: ignore[arg-type]
    kind = ["FULL"] * (ceiling.max_num_seqs + 1)
    for stretch in check.piecewise:
        kind[stretch.lo : stretch.hi + 1] = ["PIECEWISE"] * (stretch.hi - stretch.lo + 1)
    for stretch in check.graphless:
        kind[stretch.lo : stretch.hi + 1] = ["none"] * (stretch.hi - stretch.lo + 1)
    spans: list[list[object]] = []
    for b in range(1, ceiling.max_num_seqs + 1):
        if spans and spans[-1][2] == kind[b]:
            spans[-1][1] = b
        else:
            spans.append([b, b, kind[b]])
    return spans


H100 = "GPU 0: NVIDIA H100 80GB HBM3"
B200 = "GPU 0: NVIDIA B200"

#: engines-2026-12.md 1b, "Harness runs" (vLLM 0.34.0's _set_cudagraph_sizes and dispatch):
#: (id, schedule, K, S, M, GPU, explicit capture size, explicit decode requests) -> spans.
HARNESS_034 = [
    ("static K=7", [[1, 256, 7]], 7, 256, 8192, H100, None, None,
     [[1, 64, "FULL"], [65, 256, "none"]]),
    ("sonnet-like", SONNET, 7, 256, 8192, H100, None, None, [[1, 256, "FULL"]]),
    ("moe-non-monotone", MOE, 7, 256, 8192, H100, None, None, [[1, 256, "FULL"]]),
    ("moe, M=2048", MOE, 7, 256, 2048, H100, None, None, [[1, 256, "FULL"]]),
    ("moe, explicit 512", MOE, 7, 256, 8192, H100, 512, None, [[1, 256, "FULL"]]),
    ("the tool's capped moe",
     [[1, 63, 3], [64, 127, 1], [128, 128, 3], [129, 170, 2], [171, 255, 1], [256, 256, 0]],
     7, 256, 8192, H100, 512, None, [[1, 256, "FULL"]]),
    ("K=3 tail to 1024", [[1, 63, 7], [64, 1024, 3]], 7, 1024, 8192, H100, None, None,
     [[1, 128, "FULL"], [129, 1024, "none"]]),
    ("the 0.33 repair of it for C=1024",
     [[1, 63, 7], [64, 256, 3], [257, 341, 2], [342, 512, 1], [513, 1024, 0]],
     7, 1024, 8192, H100, None, None, [[1, 512, "FULL"], [513, 1024, "none"]]),
    ("K=0 tail to 1024", [[1, 63, 7], [64, 127, 3], [128, 1024, 0]], 7, 1024, 8192, H100,
     None, None, [[1, 512, "FULL"], [513, 1024, "none"]]),
    ("#56136", [[1, 8, 6], [9, 32, 4], [33, 128, 3]], 6, 128, 8192, H100, None, None,
     [[1, 128, "FULL"]]),
    ("SM100 static K=7", [[1, 1024, 7]], 7, 1024, 16384, B200, None, None,
     [[1, 1024, "FULL"]]),
    ("SM100 K=3 tail", [[1, 63, 7], [64, 1024, 3]], 7, 1024, 16384, B200, None, None,
     [[1, 1024, "FULL"]]),
    ("explicit max_decode_cudagraph_capture_requests=32", SONNET, 7, 256, 8192, H100, None,
     32, [[1, 32, "FULL"], [33, 256, "PIECEWISE"]]),
    ("#54933: static K=6, S=6, explicit 42", [[1, 6, 6]], 6, 6, 8192, H100, 42, None,
     [[1, 5, "FULL"], [6, 6, "none"]]),
]  # fmt: skip


#: engines.md section 1 (vLLM 0.33.0): b*(1+K) <= C, C = min(2*S*(1+K), P), P 512 off SM100
#: and 1024 on it; the project's --ks 0,1,3,7 with S=256 off SM100: "K=7 is graphless above
#: b=64, K=3 above 128" ("graph": FULL or PIECEWISE, which 0.33 does not key by tier:
#: #56136). #54933: an explicit 42 is truncated to 40, so the 42-token step runs none.
HARNESS_033 = [
    ("static K=7", [[1, 256, 7]], 7, 256, 8192, H100, None, [[1, 64, "FULL"], [65, 256, "none"]]),
    ("static K=3", [[1, 256, 3]], 7, 256, 8192, H100, None, [[1, 128, "FULL"], [129, 256, "none"]]),
    ("moe-non-monotone", MOE, 7, 256, 8192, H100, None,
     [[1, 128, "FULL"], [129, 255, "none"], [256, 256, "FULL"]]),
    ("SM100 static K=7 (P=1024)", [[1, 256, 7]], 7, 256, 8192, B200, None,
     [[1, 128, "FULL"], [129, 256, "none"]]),
    ("#54933 (resolved C=40)", [[1, 6, 6]], 6, 6, 8192, H100, 40,
     [[1, 5, "FULL"], [6, 6, "none"]]),
]  # fmt: skip


#: Both tables: (release, rule, id, schedule, K, S, M, GPU, capture size, decode requests).
HARNESS = [("0.34.0", "decode-requests", *case) for case in HARNESS_034] + [
    ("0.33.0", "token-ceiling", *case[:7], None, case[7]) for case in HARNESS_033
]


@pytest.mark.parametrize(
    (
        "version",
        "rule",
        "schedule",
        "k",
        "seqs",
        "batched",
        "gpu",
        "capture",
        "requests",
        "expected",
    ),
    [(case[0], case[1], *case[3:]) for case in HARNESS],
    ids=[f"{case[0]}: {case[2]}" for case in HARNESS],
)
def test_each_releases_rule_matches_vllms_own_code(
    version: str,
    rule: str,
    schedule: list[list[int]],
    k: int,
    seqs: int,
    batched: int,
    gpu: str,
    capture: int | None,
    requests: int | None,
    expected: list[list[object]],
) -> None:
    flags, sweep = _facts(version, seqs, batched, gpu, capture, requests)
    ceiling = resolve_ceiling(flags, sweep, k, seqs)
    assert ceiling.rule == rule
    assert _kinds(schedule, k, ceiling) == expected


def _brute_force_034(
    schedule: list[list[int]], seqs: int, c0: int, batched: int | None
) -> list[str]:
    """vLLM 0.34's rule at every batch size, written from the source's description
    (engines-2026-12.md 1b, L2662-L2670): the shared request sizes min(cdiv(s, q), S) over
    the default token sizes s <= C0 and the schedule's query lengths q with cdiv(s, q)*q <= C0;
    R their largest; FULL iff b <= R and b*q(b) <= M, else PIECEWISE iff b*q(b) <= C0."""
    dense = {}
    for b in range(1, seqs + 1):
        dense[b] = max((r for r in schedule if r[0] <= b), key=lambda r: r[0])[2]
    queries = {1 + k for k in dense.values()}
    sizes = [s for s in capture_sizes(c0)]
    requests = max(
        (min(-(-s // q), seqs) for s in sizes for q in queries if -(-s // q) * q <= c0),
        default=0,
    )
    kinds = []
    for b in range(1, seqs + 1):
        tokens = b * (1 + dense[b])
        if b <= requests and (batched is None or tokens <= batched):
            kinds.append("FULL")
        elif tokens <= c0:
            kinds.append("PIECEWISE")
        else:
            kinds.append("none")
    return kinds


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.integers(0, 7)),
        min_size=1,
        max_size=5,
        unique_by=lambda t: t[0],
    ),
    st.integers(1, 300),
    st.sampled_from([None, 300, 2048]),
    st.sampled_from([64, 200, 512]),
)
def test_the_0_34_rule_at_every_batch_size_matches_a_brute_force(
    anchors: list[tuple[int, int]], seqs: int, batched: int | None, c0: int
) -> None:
    starts = sorted({1, *(lo for lo, _ in anchors)})
    ks = dict(anchors)
    schedule = [
        [lo, (starts[i + 1] - 1) if i + 1 < len(starts) else max(seqs, lo), ks.get(lo, 3)]
        for i, lo in enumerate(starts)
    ]
    flags = EngineFacts(
        vllm_version=TextFact("0.34.0", "t"),
        max_cudagraph_capture_size=Fact(c0, "t"),
    )
    sweep = EngineFacts(
        max_num_seqs=Fact(seqs, "t"),
        max_num_batched_tokens=Fact(batched, "t") if batched is not None else None,
        gpu=TextFact(H100, "t"),
    )
    ceiling = resolve_ceiling(flags, sweep, 7, seqs)
    effective = largest_capture_size(min(c0, batched) if batched else c0)
    assert ceiling.size == effective
    tool = [str(kind) for lo, hi, kind in _kinds(schedule, 7, ceiling) for _ in range(lo, hi + 1)]  # type: ignore[call-overload]
    assert tool == _brute_force_034(schedule, seqs, effective, batched)


def test_the_request_ceiling_is_set_by_the_smallest_k() -> None:
    # C0=512, S=256: q=1 -> 256 (S binds), q=4 -> 128, q=8 -> 64, q=3 -> 166 (496 is the
    # largest size <= 510, cdiv(496, 3) = 166).
    c = CaptureCeiling(512, True, "t", 256, True, "t", engine_seqs=256)
    assert request_ceiling(c, [3, 0]) == 256
    assert request_ceiling(c, [3]) == 128
    assert request_ceiling(c, [7, 3]) == 128
    assert request_ceiling(c, [2]) == 166
    explicit = CaptureCeiling(512, True, "t", 256, True, "t", engine_seqs=256, decode_requests=32)
    assert request_ceiling(explicit, [0]) == 32


def test_which_release_the_flag_then_the_sweep_then_the_newest() -> None:
    saved = EngineFacts(vllm_version=TextFact("0.33.0", "the saved server config a/si.json"))
    flag = EngineFacts(vllm_version=TextFact("0.34.0", "--vllm-version"))
    assert str(resolve_release(flag, saved).release) == "0.34.0"
    from_sweep = resolve_release(EngineFacts(), saved)
    assert (str(from_sweep.release), from_sweep.known) == ("0.33.0", True)
    assumed = resolve_release(EngineFacts(), EngineFacts())
    assert (str(assumed.release), assumed.known) == ("0.34.0", False)
    assert "assumed: the newest release" in assumed.describe()
    newer = resolve_release(EngineFacts(vllm_version=TextFact("0.35.1", "--vllm-version")), saved)
    assert newer.known and "newer than the newest known release 0.34.0" in newer.source


def test_the_gpu_sets_max_num_seqs_default_by_memory() -> None:
    # engines-2026-12.md finding 3: 1024 on GPUs of 70 GiB or more in 0.33 and 0.34, else 256.
    v034 = Release.parse("0.34.0")
    assert v034 is not None
    assert default_max_num_seqs(v034, Gpu("x", 70, False)) == 1024
    assert default_max_num_seqs(v034, Gpu("x", 69, False)) == 256
    recorded = resolve_gpu(EngineFacts(gpu=TextFact("GPU 0: NVIDIA L40S 48GB", "f")))
    assert (recorded.gpu.memory_gib, recorded.known) == (48, True)
    unstated = resolve_gpu(EngineFacts(gpu=TextFact("GPU 0: NVIDIA L4", "f")))
    assert unstated.gpu.memory_gib is None and "counted as large" in unstated.describe()
    assumed = resolve_gpu(EngineFacts())
    assert not assumed.known and "assumed" in assumed.describe()
    # The assumed GPU's default reaches the C0 the check assumes and the line says so.
    ceiling = resolve_ceiling(
        EngineFacts(vllm_version=TextFact("0.34.0", "t")), EngineFacts(), 0, 300
    )
    assert ceiling.engine_seqs == 1024 and "default 1024" in ceiling.max_num_seqs_source
    small = resolve_ceiling(
        EngineFacts(vllm_version=TextFact("0.34.0", "t")),
        EngineFacts(gpu=TextFact("GPU 0: NVIDIA L4 24GB", "f")),
        0,
        300,
    )
    assert small.engine_seqs == 300 and "default 256" in small.max_num_seqs_source


@pytest.mark.parametrize(
    ("gib", "version", "seqs"),
    [
        # engines-2026-12.md finding 3: >= 70 GiB gives 1024 on 0.33 and 0.34, below 256;
        # engines.md section 1: 256 up to 0.32 whatever the GPU.
        (69.9, "0.34.0", 256),
        (70.0, "0.34.0", 1024),
        (69.9, "0.33.0", 256),
        (70.0, "0.33.0", 1024),
        (80.0, "0.32.0", 256),
    ],
)
def test_gpu_memory_gib_sets_the_max_num_seqs_default_and_says_it_was_given(
    gib: float, version: str, seqs: int
) -> None:
    """--gpu-memory-gib is the GPU vLLM's defaults read (it wins over a recorded GPU's memory,
    keeping its SM100 family); the line says where it came from."""
    flags = EngineFacts(
        vllm_version=TextFact(version, "t"), gpu_memory_gib=GpuMemory(gib, "--gpu-memory-gib")
    )
    ceiling = resolve_ceiling(flags, EngineFacts(), 0, 100)
    assert ceiling.engine_seqs == seqs and f"default {seqs}" in ceiling.max_num_seqs_source
    assert ceiling.gpu is not None and ceiling.gpu.known
    assert f"a GPU of {gib:g} GiB" in ceiling.describe()
    assert "(from --gpu-memory-gib)" in ceiling.describe()
    recorded = EngineFacts(gpu=TextFact("GPU 0: NVIDIA B200", "the saved server config f"))
    on_b200 = resolve_ceiling(flags, recorded, 0, 100)
    assert on_b200.gpu is not None and on_b200.gpu.gpu.sm100
    assert on_b200.gpu.gpu.memory_gib == gib and on_b200.engine_seqs == seqs


def test_the_assumed_gpu_names_the_flag_that_states_it() -> None:
    assumed = resolve_gpu(EngineFacts())
    assert assumed.source == "assumed: no GPU recorded; give --gpu-memory-gib"


def test_a_saved_0_34_server_config_is_read_by_its_decode_fields(tmp_path: Path) -> None:
    """Finding 2: on 0.34 max_cudagraph_capture_size is the widest graph of any kind (1024:
    the drafter's), not the decode ceiling; C0 is the largest token graph (512), and an
    explicit decode request ceiling (32, where the defaults give the K=7 server 64) is kept."""
    from lib.deploy.tuning import sweep_engine_facts
    from lib.server_info import read_server_settings

    def saved(requests: int) -> dict[str, object]:
        return {
            "vllm_config": {
                "compilation_config": {
                    "max_cudagraph_capture_size": 1024,
                    "prefill_cudagraph_capture_token_sizes": [1, 2, 4, 8, 256, 496, 512],
                    "max_decode_cudagraph_capture_requests": requests,
                    "decode_cudagraph_capture_request_sizes": [1, 2, 4, 8, 16, 24, 32],
                    "max_decode_cudagraph_capture_tokens": None,
                },
                "scheduler_config": {"max_num_seqs": 256, "max_num_batched_tokens": 8192},
                "speculative_config": {"method": "eagle3", "num_speculative_tokens": 7},
            },
            "system_env": {"vllm_version": "0.34.0", "nvidia_gpu_models": H100},
        }

    from sweep_builder import write_grid

    root = write_grid(tmp_path / "s", {(1, 0): [1.0, 1.1, 0.9], (1, 7): [2.0, 2.1, 1.9]})
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        (folder / "server_info.json").write_text(json.dumps(saved(32)))
    from lib.sweeps import load_experiment

    sweep = load_experiment(root)
    facts, problems = sweep_engine_facts(sweep, read_server_settings(root))
    assert problems == []
    assert facts.max_cudagraph_capture_size is None  # never the widest graph on 0.34
    assert facts.prefill_ceiling is not None and facts.prefill_ceiling.value == 512
    assert facts.decode_requests is not None and facts.decode_requests.value == 32
    assert facts.vllm_version is not None and facts.vllm_version.value == "0.34.0"
    ceiling = resolve_ceiling(EngineFacts(), facts, 7, 256)
    assert (ceiling.size, ceiling.known, ceiling.rule) == (512, True, "decode-requests")
    assert _kinds(SONNET, 7, ceiling) == [[1, 32, "FULL"], [33, 256, "PIECEWISE"]]
    # The default for that server (K=7: min(256, 512 // 8) = 64) is no explicit setting.
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        (folder / "server_info.json").write_text(json.dumps(saved(64)))
    facts, _ = sweep_engine_facts(load_experiment(root), read_server_settings(root))
    assert facts.decode_requests is None
    ceiling = resolve_ceiling(EngineFacts(), facts, 7, 256)
    assert _kinds(SONNET, 7, ceiling) == [[1, 256, "FULL"]]


def test_decode_flags_beat_a_saved_configs_and_bind_only_on_0_34(tmp_path: Path) -> None:
    """Issue 39 item 3: --max-decode-cudagraph-capture-requests wins over a saved 0.34
    config's explicit max_decode_cudagraph_capture_requests (32 saved, 48 given: FULL to 48,
    PIECEWISE past it: 49-63 at K=7 is 392-504 tokens and 64-256 at K=0 at most 256, both
    <= C0=512), and its source is the flag. --max-decode-cudagraph-capture-tokens 200 binds
    FULL graphs to 200 // (1+K) requests: 25 at K=7, 200 at K=0 (R = min(S, 512 // 1) = 256
    for a schedule whose smallest K is 0). On 0.33 both are ignored (the token rule,
    512 // 8 = 64 at K=7 and 512 at K=0: all FULL) and the capture line says so."""
    saved = EngineFacts(
        vllm_version=TextFact("0.34.0", "the saved server config a/si.json"),
        max_num_seqs=Fact(256, "the saved server config a/si.json"),
        max_num_batched_tokens=Fact(8192, "the saved server config a/si.json"),
        prefill_ceiling=Fact(512, "the saved server config a/si.json"),
        decode_requests=Fact(32, "the saved server config a/si.json"),
    )
    assert _kinds(SONNET, 7, resolve_ceiling(EngineFacts(), saved, 7, 256)) == [
        [1, 32, "FULL"], [33, 256, "PIECEWISE"]
    ]  # fmt: skip
    flags = EngineFacts(decode_requests=Fact(48, DECODE_REQUESTS_FLAG))
    ceiling = resolve_ceiling(flags, saved, 7, 256)
    assert _kinds(SONNET, 7, ceiling) == [[1, 48, "FULL"], [49, 256, "PIECEWISE"]]
    assert ceiling.decode_source.endswith(
        "max_decode_cudagraph_capture_requests from --max-decode-cudagraph-capture-requests"
    )
    tokens = EngineFacts(decode_tokens=Fact(200, DECODE_TOKENS_FLAG))
    unset = dataclasses.replace(saved, decode_requests=None)
    ceiling = resolve_ceiling(tokens, unset, 7, 256)
    assert _kinds(SONNET, 7, ceiling) == [
        [1, 25, "FULL"], [26, 63, "PIECEWISE"], [64, 200, "FULL"], [201, 256, "PIECEWISE"]
    ]  # fmt: skip
    assert "max_decode_cudagraph_capture_tokens=200 from --max-decode" in ceiling.decode_source
    old = dataclasses.replace(
        saved, vllm_version=TextFact("0.33.0", "the saved server config a/si.json")
    )
    both = dataclasses.replace(flags, decode_tokens=tokens.decode_tokens)
    ceiling = resolve_ceiling(both, old, 7, 256)
    assert ceiling.rule == "token-ceiling" and ceiling.decode_requests is None
    assert _kinds(SONNET, 7, ceiling) == [[1, 256, "FULL"]]
    assert ceiling.describe().endswith(
        "; --max-decode-cudagraph-capture-requests and --max-decode-cudagraph-capture-tokens"
        " ignored: vLLM 0.33.0 keys its decode CUDA graphs by tokens per step, not by requests"
    )
    # Without the flags nothing is said (the saved config's decode fields are 0.34's own).
    assert "ignored" not in resolve_ceiling(EngineFacts(), old, 7, 256).describe()


def _known_034(seqs: int) -> CaptureCeiling:
    flags = EngineFacts(
        vllm_version=TextFact("0.34.0", "--vllm-version"),
        max_cudagraph_capture_size=Fact(512, "--max-cudagraph-capture-size"),
    )
    sweep = EngineFacts(max_num_seqs=Fact(seqs, "t"), max_num_batched_tokens=Fact(8192, "t"))
    return resolve_ceiling(flags, sweep, 7, seqs)


def test_a_0_34_repair_is_rechecked_after_capping() -> None:
    """[[1,63,7],[64,1024,3]] at S=1024: R = 512 // 4 = 128, so 129-1024 at K=3 run no graph
    (harness row "K=3 tail to 1024"). The token cap with C0=512 adds K=2, 1 and 0 tiers; the
    K=0 tier raises R to min(1024, 512) = 512 for every tier, so K=3 runs FULL again up to
    512 (4 * 512 = 2048 <= M) and is given back there; 513-1024 stay K=0 and graphless, as on
    a server without speculation (harness row "K=0 tail to 1024"): a platform fact, no
    verdict reason."""
    from lib.deploy.verdict import capture_reasons

    check = check_ceiling(Schedule(((1, 63, 7), (64, 1024, 3))), _known_034(1024), {}, global_k=7)
    assert check.schedule.to_json() == [[1, 63, 7], [64, 512, 3], [513, 1024, 0]]
    assert check.requests == 512
    assert [(c.lo, c.hi, c.capped_k) for c in check.capped] == [(513, 1024, 0)]
    assert [(g.lo, g.hi, g.k) for g in check.graphless] == [(513, 1024, 0)]
    rules = [f.rule for f in check.findings()]
    # 129-512 at K=3 (516-2048 tokens) are past C0 yet FULL: a note says why they keep K=3.
    assert rules == ["graphless-platform", "full-graph-past-ceiling", "capped-range"]
    assert [f.note for f in check.findings()] == [False, True, False]
    assert "stay without CUDA graphs" in check.findings()[2].message
    assert [r.rule for r in capture_reasons(check)] == ["capped-range"]


def test_a_0_34_repair_keeps_the_cap_where_giving_k_back_would_lower_r() -> None:
    """[[1,63,7],[64,200,3]] at S=200: R = 128, 129-200 at K=3 (516-800 tokens) none. The cap
    gives 129-170 K=2 and 171-200 K=1; K=1 is the smallest K, so R = min(200, 256) = 200 and
    K=3 would run FULL there, but giving it back removes the K=1 tier and R falls to 128
    again: the capped schedule stays, every batch size FULL under it."""
    check = check_ceiling(Schedule(((1, 63, 7), (64, 200, 3))), _known_034(200), {}, global_k=7)
    assert check.schedule.to_json() == [[1, 63, 7], [64, 128, 3], [129, 170, 2], [171, 200, 1]]
    assert (check.requests, check.graphless, check.piecewise) == (200, (), ())


def test_the_0_33_repair_is_the_token_rule() -> None:
    """engines-2026-12.md 1b quotes the tool's 0.33 repair of [[1,63,7],[64,1024,3]] for
    C=1024: [[1,63,7],[64,256,3],[257,341,2],[342,512,1],[513,1024,0]] (256 * 4 = 1024,
    341 * 3 = 1023, 512 * 2 = 1024)."""
    flags = EngineFacts(
        vllm_version=TextFact("0.33.0", "--vllm-version"),
        max_cudagraph_capture_size=Fact(1024, "--max-cudagraph-capture-size"),
    )
    ceiling = resolve_ceiling(flags, EngineFacts(max_num_seqs=Fact(1024, "t")), 7, 1024)
    check = check_ceiling(Schedule(((1, 63, 7), (64, 1024, 3))), ceiling, {}, global_k=7)
    assert check.schedule.to_json() == [
        [1, 63, 7],
        [64, 256, 3],
        [257, 341, 2],
        [342, 512, 1],
        [513, 1024, 0],
    ]
    assert check.graphless == ()
