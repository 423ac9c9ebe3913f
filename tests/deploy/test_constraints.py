"""lib/deploy/constraints.py: vLLM's CUDA-graph capture rule b*(1+D(b)) <= C, its repair, and
where C comes from. The rule's boundaries are tested on both sides; the repair is checked
against a brute-force evaluation of K'(b) = min(D(b), max(0, C // b - 1)) at every batch size."""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sweep_builder import spread, write_grid

from lib.cli.common import EXIT_OK
from lib.cli.main import main
from lib.deploy.ceiling import (
    CaptureCeiling,
    assumed_capture_size,
    capped_schedule,
    dense_runs,
    graphless_ranges,
    resolve_ceiling,
)
from lib.deploy.constraints import (
    CappedRange,
    capped_ranges,
    cells_past_ceiling,
    check_ceiling,
    data_parallel_warnings,
    deployed_stretches,
    method_warnings,
)
from lib.deploy.engine import EngineFacts, Fact, TextFact
from lib.keys import LARGEST_WHOLE_NUMBER
from lib.schedule import Schedule

PUBLISHED = Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3)))
#: The author's capped form of it (C = 512, max_num_seqs 128), from the issue.
PUBLISHED_CAPPED = [[1, 1, 3], [2, 85, 5], [86, 102, 4], [103, 128, 3]]


def ceiling(size: int, max_num_seqs: int, known: bool = True) -> CaptureCeiling:
    return CaptureCeiling(size, known, "test", max_num_seqs, True, "test")


def dense_k(schedule: Schedule, batch: int, global_k: int | None = None) -> int:
    """vLLM's lookup at one batch size, written independently of dense_runs: the K of the
    last range starting at or below it, clamped."""
    k = max((r for r in schedule.ranges if r[0] <= batch), key=lambda r: r[0])[2]
    return k if global_k is None else min(k, global_k)


# ------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize(
    ("schedule", "size", "unsafe"),
    [
        # 85 * 6 = 510 <= 512 is safe; 86 * 6 = 516 is not.
        (PUBLISHED, 512, [(86, 127, 5)]),
        # Exactly at the ceiling is safe: 128 * 4 = 512.
        (Schedule(((1, 128, 3),)), 512, []),
        # One token past it is not: 128 * 4 = 512 > 511.
        (Schedule(((1, 128, 3),)), 511, [(128, 128, 3)]),
        # K=0 needs a graph too: more than C requests at one token each.
        (Schedule(((1, 128, 0),)), 100, [(101, 128, 0)]),
        (Schedule(((1, 128, 0),)), 128, []),
    ],
)
def test_graphless_ranges_are_those_past_the_ceiling_on_both_sides(
    schedule: Schedule, size: int, unsafe: list[tuple[int, int, int]]
) -> None:
    found = graphless_ranges(schedule, ceiling(size, 128))
    assert [(g.lo, g.hi, g.k) for g in found] == unsafe


def test_the_check_covers_the_tail_up_to_max_num_seqs_and_clamps_to_the_global_k() -> None:
    # The last range ends at 64 but vLLM carries K=3 to max_num_seqs 256: 129..256 run
    # 4 tokens each past 512. Clamped to a global K of 1, no batch size is past it.
    short = Schedule(((1, 64, 3),))
    assert [(g.lo, g.hi) for g in graphless_ranges(short, ceiling(512, 256))] == [(129, 256)]
    assert graphless_ranges(short, ceiling(512, 256), global_k=1) == []
    assert graphless_ranges(short, ceiling(512, 64)) == []


def test_dense_runs_fill_gaps_and_the_tail_and_skip_ranges_past_the_end() -> None:
    gappy = Schedule(((1, 4, 3), (9, 16, 1), (300, 400, 2)))
    assert dense_runs(gappy, 32) == [(1, 8, 3), (9, 32, 1)]
    assert all(
        dense_k(gappy, b) == next(k for lo, hi, k in dense_runs(gappy, 32) if lo <= b <= hi)
        for b in range(1, 33)
    )
    assert dense_runs(gappy, 0) == []


# ------------------------------------------------------------------------- the repair


def test_the_repair_gives_the_published_capped_schedule() -> None:
    assert capped_schedule(PUBLISHED, ceiling(512, 128)).to_json() == PUBLISHED_CAPPED


def test_a_safe_schedule_comes_back_unchanged() -> None:
    safe = Schedule(((1, 63, 7), (64, 256, 0)))  # 63 * 8 = 504 <= 512
    assert capped_schedule(safe, ceiling(512, 256)) is safe


@settings(max_examples=150, deadline=None)
@given(
    ranges=st.lists(
        st.tuples(st.integers(1, 60), st.integers(0, 9)),
        min_size=1,
        max_size=5,
        unique_by=lambda r: r[0],
    ),
    size=st.integers(1, 400),
    max_num_seqs=st.integers(1, 120),
    global_k=st.one_of(st.none(), st.integers(1, 9)),
)
def test_the_repair_is_the_rule_at_every_batch_size(
    ranges: list[tuple[int, int]], size: int, max_num_seqs: int, global_k: int | None
) -> None:
    starts = sorted(r[0] for r in ranges)
    starts[0] = 1
    ks = [k for _, k in sorted(ranges)]
    schedule = Schedule(
        tuple(
            (lo, (starts[i + 1] - 1) if i + 1 < len(starts) else max(lo, 60), k)
            for i, (lo, k) in enumerate(zip(starts, ks, strict=True))
        )
    )
    limit = ceiling(size, max_num_seqs)
    repaired = capped_schedule(schedule, limit, global_k)
    assert repaired.violations() == []
    top = max(max_num_seqs, 60)
    for b in range(1, top + 1):
        want = min(dense_k(schedule, b, global_k), max(0, size // b - 1))
        if not graphless_ranges(schedule, limit, global_k):
            want = dense_k(schedule, b, global_k)
        assert dense_k(repaired, b, global_k) == want, b
        if b <= max_num_seqs and graphless_ranges(schedule, limit, global_k):
            assert b * (1 + dense_k(repaired, b, global_k)) <= size or b > size


def test_the_repair_costs_nothing_like_the_batch_range() -> None:
    schedule = Schedule(((1, LARGEST_WHOLE_NUMBER, 3),))
    limit = ceiling(512, LARGEST_WHOLE_NUMBER)
    started = time.perf_counter()
    repaired = capped_schedule(schedule, limit)
    assert time.perf_counter() - started < 5  # a loop over 2^31 batch sizes would not end
    # 128 * 4 = 512; 170 * 3 = 510; 256 * 2 = 512; then K=0 to the end.
    assert repaired.to_json() == [
        [1, 128, 3],
        [129, 170, 2],
        [171, 256, 1],
        [257, LARGEST_WHOLE_NUMBER, 0],
    ]


def test_capped_ranges_estimate_the_loss_between_the_anchors() -> None:
    limit = ceiling(512, 128)
    medians = {64: {3: 70.0, 4: 80.0, 5: 100.0}, 128: {3: 60.0, 4: 90.0, 5: 110.0}}
    found = capped_ranges(PUBLISHED, capped_schedule(PUBLISHED, limit), limit, medians)
    assert [(r.lo, r.hi, r.measured_k, r.capped_k) for r in found] == [
        (86, 102, 5, 4),
        (103, 127, 5, 3),
    ]

    # Independently: each K's log median is linear in log batch size between 64 and 128.
    def at(k: int, b: int) -> float:
        share = math.log(b / 64) / math.log(2)
        return math.exp((1 - share) * math.log(medians[64][k]) + share * math.log(medians[128][k]))

    for stretch in found:
        expected = max(
            (1 - at(stretch.capped_k, b) / at(5, b)) * 100 for b in (stretch.lo, stretch.hi)
        )
        assert stretch.loss_percent == pytest.approx(expected)
        # 128 * 6 = 768 > 512: K=5 at 128 was measured without graphs, and the basis says so.
        assert stretch.basis.startswith("interpolated between anchors 64 and 128; K=5 at 128")


def test_capped_ranges_say_why_there_is_no_estimate() -> None:
    limit = ceiling(512, 128)
    first = capped_ranges(PUBLISHED, capped_schedule(PUBLISHED, limit), limit, {})[0]
    assert first.loss_percent is None and "no measured anchor" in first.basis
    medians = {64: {5: 100.0}, 128: {5: 90.0, 3: 80.0}}
    first = capped_ranges(PUBLISHED, capped_schedule(PUBLISHED, limit), limit, medians)[0]
    assert (
        first.loss_percent is None and "K=4 or K=5 not measured at both 64 and 128" in first.basis
    )


@pytest.mark.parametrize(
    ("not_interpolable", "estimated"),
    [
        ((), True),
        ({(64, 128, 5)}, False),  # the measured K falls off between the two anchors
        ({(64, 128, 4)}, False),  # the capped K does
        ({(64, 128, 7)}, True),  # another K: no matter
        ({(32, 64, 5)}, True),  # another pair of anchors: no matter
    ],
)
def test_no_loss_is_estimated_across_a_cliff_of_either_k(
    not_interpolable: set[tuple[int, int, int]], estimated: bool
) -> None:
    limit = ceiling(512, 128)
    medians = {64: {3: 70.0, 4: 80.0, 5: 100.0}, 128: {3: 60.0, 4: 90.0, 5: 110.0}}
    capped = capped_schedule(PUBLISHED, limit)
    first = capped_ranges(PUBLISHED, capped, limit, medians, not_interpolable=not_interpolable)[0]
    # The first capped range, 86-102, runs K=4 for the tuned K=5 (the test above).
    assert (first.lo, first.hi, first.measured_k, first.capped_k) == (86, 102, 5, 4)
    assert (first.loss_percent is not None) is estimated
    if not estimated:
        (k,) = {k for _, _, k in not_interpolable}
        assert f"K={k} falls off a cliff between 64 and 128" in first.basis


def test_a_minimised_objective_counts_a_larger_value_as_the_loss() -> None:
    limit = ceiling(512, 128)
    medians = {64: {4: 12.0, 5: 10.0}, 128: {3: 12.0, 4: 12.0, 5: 10.0}}
    first = capped_ranges(
        PUBLISHED, capped_schedule(PUBLISHED, limit), limit, medians, maximize=False
    )[0]
    # TPOT 12 ms instead of 10: 10 / 12 = 0.833, a 16.7 % loss.
    assert first.loss_percent == pytest.approx((1 - 10 / 12) * 100)


# ------------------------------------------------------------------------- assumed or known


def test_check_keeps_the_schedule_when_c_is_assumed_and_caps_it_when_known() -> None:
    assumed = check_ceiling(PUBLISHED, ceiling(512, 128, known=False), {})
    assert assumed.schedule == PUBLISHED
    assert [g.lo for g in assumed.graphless] == [86]
    assert "give --max-cudagraph-capture-size" in assumed.warnings()[0]
    known = check_ceiling(PUBLISHED, ceiling(512, 128), {})
    assert known.schedule.to_json() == PUBLISHED_CAPPED
    assert [line.split(":")[0] for line in known.warnings()] == ["capped, not measured"] * 2


def test_the_ceiling_comes_from_the_flags_then_the_sweep_then_defaults() -> None:
    flag = EngineFacts(max_cudagraph_capture_size=Fact(256, "--max-cudagraph-capture-size"))
    sweep = EngineFacts(
        max_cudagraph_capture_size=Fact(1024, "the records' max_cudagraph_capture_size"),
        max_num_seqs=Fact(128, "the records' max_num_seqs"),
    )
    both = resolve_ceiling(flag, sweep, 5, 128)
    assert (both.size, both.known, both.source) == (256, True, "--max-cudagraph-capture-size")
    assert (both.max_num_seqs, both.max_num_seqs_known) == (128, True)
    from_sweep = resolve_ceiling(EngineFacts(), sweep, 5, 128)
    assert (from_sweep.size, from_sweep.known) == (1024, True)
    assumed = resolve_ceiling(EngineFacts(), EngineFacts(), 7, 256)
    assert (assumed.size, assumed.known, assumed.max_num_seqs_known) == (512, False, False)
    assert assumed.source.startswith("assumed: vLLM 0.34.0's default")


@pytest.mark.parametrize(
    ("max_num_seqs", "k", "batched", "expected"),
    [
        (256, 7, None, 512),  # 2 * 256 * 8 = 4096, capped by the platform's 512
        (4, 3, None, 32),  # 2 * 4 * 4 = 32 is itself a capture size
        (5, 3, None, 40),  # 40 is one (steps of 8)
        (3, 1, None, 8),  # 12 is not a size: the largest below is 8
        (256, 7, 300, 288),  # max_num_batched_tokens 300: the largest size at or below, 288
    ],
)
def test_the_assumed_ceiling_follows_vllms_defaults(
    max_num_seqs: int, k: int, batched: int | None, expected: int
) -> None:
    assert assumed_capture_size(max_num_seqs, k, batched) == expected


def test_cells_measured_past_the_ceiling_are_named() -> None:
    assert cells_past_ceiling([(64, 7), (128, 3), (128, 7)], 512) == [(128, 7)]
    assert cells_past_ceiling([(64, 7)], 511) == [(64, 7)]


@pytest.mark.parametrize(
    ("method", "warned"),
    [("eagle3", False), ("ngram", False), ("dflash", False), ("medusa", True), (None, False)],
)
def test_methods_that_lose_the_schedule_on_model_runner_v1_are_warned(
    method: str | None, warned: bool
) -> None:
    v033 = resolve_ceiling(EngineFacts(vllm_version=TextFact("0.33.0", "t")), EngineFacts(), 3, 256)
    assert bool(method_warnings(method, v033)) is warned
    # 0.34 removed model runner v1 (engines-2026-12.md finding 3): never warned.
    v034 = resolve_ceiling(EngineFacts(vllm_version=TextFact("0.34.0", "t")), EngineFacts(), 3, 256)
    assert method_warnings(method, v034) == []


def test_model_runner_v1s_forced_piecewise_is_noted_on_0_33_not_on_0_34() -> None:
    """engines.md section 1 ("MRv1 forces PIECEWISE", 0.33.0 L1069-L1086) and
    engines-2026-12.md finding 3 (model runner v1 removed in 0.34): the note on 0.33.0 only,
    and not for a ceiling given without a release."""
    schedule = Schedule(((1, 63, 7), (64, 256, 0)))

    def rules(version: str | None) -> list[str]:
        flags = EngineFacts(vllm_version=TextFact(version, "t")) if version else EngineFacts()
        found = check_ceiling(schedule, resolve_ceiling(flags, EngineFacts(), 7, 256), {})
        return [f.rule for f in found.findings() if f.note]

    assert "mrv1-piecewise" in rules("0.33.0")
    assert "mrv1-piecewise" in rules("0.32.0")
    assert "mrv1-piecewise" not in rules("0.34.0")
    assert "mrv1-piecewise" not in rules(None)  # the newest known release, 0.34
    assert "mrv1-piecewise" not in [
        f.rule for f in check_ceiling(schedule, ceiling(512, 256), {}).findings()
    ]


@pytest.mark.parametrize(("size", "warned"), [(1, False), (2, True), (None, False)])
@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_data_parallelism_above_1_disables_the_schedule(
    size: int | None, warned: bool, version: str
) -> None:
    """engines.md section 4 (0.33.0 L1110-L1127) and engines-2026-12.md 1b (0.34.0
    L1031-L1048): DP > 1 disables Dynamic SD on both releases; DP 1 or not known: nothing."""
    flags = EngineFacts(vllm_version=TextFact(version, "t"))
    engine = EngineFacts(data_parallel_size=Fact(size, "saved") if size else None)
    found = data_parallel_warnings(engine, resolve_ceiling(flags, EngineFacts(), 3, 256))
    assert bool(found) is warned
    if warned:
        assert f"vLLM {version} disables the schedule" in found[0]
        assert "data_parallel_size=2, from saved" in found[0]


# ------------------------------------------------------------------------- end to end

ANCHORS = (1, 2, 4, 8, 16, 32, 64, 128)


def gb200_like(root: Path, **fields: object) -> Path:
    """A sweep shaped like the published GB200 grid: K=3 wins at 1 and 128, K=5 between
    (K=5 at 128 measured without graphs: 768 tokens > 512). Engine K 5."""
    cells = {}
    for anchor in ANCHORS:
        if anchor == 1:
            centres = {0: 100.0, 3: 160.0, 4: 150.0, 5: 140.0}
        elif anchor == 128:
            centres = {0: 100.0 * anchor, 3: 150.0 * anchor, 4: 140.0 * anchor, 5: 120.0 * anchor}
        else:
            centres = {0: 100.0 * anchor, 3: 150.0 * anchor, 4: 160.0 * anchor, 5: 170.0 * anchor}
        for k, centre in centres.items():
            cells[(anchor, k)] = spread(centre)
    return write_grid(root, cells, global_k=5, **fields)


def tune(root: Path, out: Path, *flags: str) -> tuple[int, list[str], dict[str, object]]:
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = main([str(root), "--output-json", str(out), *flags])
    data = json.loads(out.read_text()) if out.exists() else {}
    return status, stdout.getvalue().splitlines() + stderr.getvalue().splitlines(), data


def test_tune_caps_the_published_shape_with_the_ceiling_given(tmp_path: Path) -> None:
    root = gb200_like(tmp_path / "sweep")
    status, lines, data = tune(
        root,
        tmp_path / "out.json",
        "--max-cudagraph-capture-size",
        "512",
        "--max-num-seqs",
        "128",
        "--vllm-version",
        "0.33.0",
    )
    assert status == EXIT_OK
    assert lines[0] == json.dumps(PUBLISHED_CAPPED)
    assert data["num_speculative_tokens_per_batch_size"] == PUBLISHED_CAPPED
    assert data["speculative_config"]["num_speculative_tokens_per_batch_size"] == PUBLISHED_CAPPED
    deployment = data["deployment"]
    assert [(r["lo"], r["hi"], r["capped_k"]) for r in deployment["capped_ranges"]] == [
        (86, 102, 4),
        (103, 127, 3),
    ]
    assert all(r["expected_loss_percent"] is not None for r in deployment["capped_ranges"])
    assert sum("capped, not measured" in line for line in lines) >= 2
    assert any("batch 128 K=5 (768 tokens)" in line for line in lines)


def test_tune_keeps_the_seeds_schedule_and_names_the_risky_range_without_it(
    tmp_path: Path,
) -> None:
    root = gb200_like(tmp_path / "sweep")
    status, lines, data = tune(root, tmp_path / "out.json", "--vllm-version", "0.33.0")
    assert status == EXIT_OK
    assert lines[0] == PUBLISHED.json_text()
    risky = [line for line in lines if "graphless-range" in line]
    assert len(risky) == 1 and "batch sizes 86-127 run K=5" in risky[0]
    assert "--max-cudagraph-capture-size" in risky[0]
    assert data["deployment"]["capture_ceiling"]["known"] is False


def test_tune_reads_the_ceiling_from_the_records(tmp_path: Path) -> None:
    root = gb200_like(
        tmp_path / "sweep",
        max_num_seqs=128,
        compilation_config={"max_cudagraph_capture_size": 512},
    )
    status, lines, data = tune(root, tmp_path / "out.json", "--vllm-version", "0.33.0")
    assert status == EXIT_OK
    assert lines[0] == json.dumps(PUBLISHED_CAPPED)
    ceiling_block = data["deployment"]["capture_ceiling"]
    assert ceiling_block["known"] is True
    assert "compilation_config" in ceiling_block["source"]
    assert ceiling_block["max_num_seqs_source"] == "the records' max_num_seqs"


def test_ranges_past_a_known_max_num_seqs_are_named() -> None:
    schedule = Schedule(((1, 64, 3), (65, 256, 1)))
    known = check_ceiling(schedule, ceiling(512, 64), {})
    assert known.unreached == ((65, 256, 1),)
    assert any("never used by vLLM: [65, 256, 1]" in line for line in known.warnings())
    # Up to 65 the second range is reached; an assumed max_num_seqs names nothing.
    assert check_ceiling(schedule, ceiling(512, 65), {}).unreached == ()
    assumed = CaptureCeiling(512, False, "assumed", 64, False, "assumed")
    assert check_ceiling(schedule, assumed, {}).unreached == ()


def test_tune_reads_the_ceiling_from_the_saved_server_configs(tmp_path: Path) -> None:
    root = gb200_like(tmp_path / "sweep")
    # The release is read from the saved config's system_env (no --vllm-version).
    config = {
        "vllm_config": {
            "compilation_config": {"max_cudagraph_capture_size": 512},
            "scheduler_config": {"max_num_seqs": 128, "max_num_batched_tokens": 8192},
        },
        "system_env": {"vllm_version": "0.33.0", "nvidia_gpu_models": "GPU 0: NVIDIA GB200"},
    }
    for folder in sorted(root.iterdir()):
        (folder / "server_info.json").write_text(json.dumps(config))
    status, lines, data = tune(root, tmp_path / "out.json")
    assert status == EXIT_OK
    assert lines[0] == json.dumps(PUBLISHED_CAPPED)
    block = data["deployment"]["capture_ceiling"]
    assert block["known"] is True and block["source"].startswith("the saved server config")
    assert (block["vllm_version"], block["vllm_version_known"]) == ("0.33.0", True)
    assert block["vllm_version_source"].startswith("the saved server config")
    assert (block["gpu"], block["gpu_known"]) == ("NVIDIA GB200", True)
    # The records win where they say something: a compilation_config of 1024 there.
    records = gb200_like(
        tmp_path / "records", compilation_config={"max_cudagraph_capture_size": 1024}
    )
    for folder in sorted(records.iterdir()):
        (folder / "server_info.json").write_text(json.dumps(config))
    status, lines, data = tune(records, tmp_path / "out2.json")
    assert data["deployment"]["capture_ceiling"]["size"] == 1024
    assert lines[0] == PUBLISHED.json_text()  # 127 * 6 = 762 <= 1024: nothing to cap


@pytest.mark.parametrize(("size", "warned"), [(1, False), (2, True)])
def test_tune_reads_data_parallelism_from_the_saved_server_configs(
    tmp_path: Path, size: int, warned: bool
) -> None:
    """A saved server config's parallel_config.data_parallel_size above 1: vLLM runs static K
    (engines.md section 4), so tune warns and the verdict names it (schedule-disabled)."""
    root = gb200_like(tmp_path / "sweep")
    config = {
        "vllm_config": {
            "scheduler_config": {"max_num_seqs": 128},
            "parallel_config": {"data_parallel_size": size},
        },
        "system_env": {"vllm_version": "0.34.0"},
    }
    for folder in sorted(root.iterdir()):
        (folder / "server_info.json").write_text(json.dumps(config))
    status, lines, data = tune(root, tmp_path / "out.json")
    assert status == EXIT_OK
    said = [line for line in lines if "disables the schedule under data parallelism" in line]
    assert bool(said) is warned
    rules = [p["rule"] for p in data["problems"]]  # type: ignore[index, union-attr]
    assert ("schedule-disabled" in rules) is warned


def test_tune_and_export_read_one_gpu_setting(tmp_path: Path) -> None:
    """tune --gpu-memory-gib 40: vLLM 0.34's max_num_seqs default for a 40 GiB GPU, 256
    (below 70 GiB, engines-2026-12.md finding 3), said to be given; the result records it and
    its SGLang export reads the same GPU: SGLang 0.5.23's default decode graph maximum for
    35-60 GiB at TP < 4 is 32 (engines-2026-12.md 1c)."""
    root = gb200_like(tmp_path / "sweep")
    out = tmp_path / "out.json"
    status, lines, data = tune(root, out, "--gpu-memory-gib", "40", "--vllm-version", "0.34.0")
    assert status == EXIT_OK
    (line,) = [line for line in lines if line.startswith("capture ceiling:")]
    assert "on a GPU of 40 GiB" in line and "(from --gpu-memory-gib)" in line
    assert "default 256 on a GPU of 40 GiB" in line
    block = data["deployment"]["capture_ceiling"]  # type: ignore[index]
    assert block["gpu_memory_gib"] == 40.0  # type: ignore[index]
    import contextlib
    import io

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["export", str(out), "--format", "sglang"]) == EXIT_OK
    assert "up to 32: SGLang 0.5.23's default for a GPU of 40 GiB" in stdout.getvalue()


# --------------------------------------------------------------------------- deployed stretches


def _capped(lo: int, hi: int) -> CappedRange:
    return CappedRange(lo, hi, 5, 4, None, "no estimate")


def test_deployed_stretches_hold_vllms_lookup_and_what_backs_it_at_every_batch_size() -> None:
    # A gap (5-8 inherits K=3), an anchor whose K there was not measured (16: K=1 measured
    # there, the lookup runs K=2), K clamped to the global 4, a capped range over an anchor.
    schedule = Schedule(((1, 4, 3), (9, 15, 6), (16, 40, 2)))
    measured = {(1, 3), (9, 6), (16, 1), (32, 2), (40, 2)}
    capped = [_capped(30, 33)]
    stretches = deployed_stretches(schedule, measured, capped, global_k=4)
    for batch in range(1, 41):
        k = schedule.k_at(batch, global_k=4)
        if 30 <= batch <= 33:
            status = "capped, not measured"
        else:
            status = "measured" if (batch, k) in measured else "not measured"
        (found,) = [s for s in stretches if s.lo <= batch <= s.hi]
        assert (found.k, found.status) == (k, status), batch
    # (9, 6) was measured, but the clamped lookup runs K=4 there: not measured.
    assert [s.status for s in stretches if s.lo <= 9 <= s.hi] == ["not measured"]
    # Contiguous from 1 to the last range's end; neighbours differ in K or status, measured
    # anchors alone on their batch size.
    assert stretches[0].lo == 1 and stretches[-1].hi == 40
    assert all(a.hi + 1 == b.lo for a, b in itertools.pairwise(stretches))
    assert all(
        (a.k, a.status) != (b.k, b.status) or a.status == "measured"
        for a, b in itertools.pairwise(stretches)
    )
    assert all(s.lo == s.hi for s in stretches if s.status == "measured")


def test_deployed_stretches_are_per_range_not_per_batch_size() -> None:
    schedule = Schedule(((1, 7, 3), (8, LARGEST_WHOLE_NUMBER, 1)))
    start = time.perf_counter()
    stretches = deployed_stretches(schedule, {(1, 3), (8, 1)}, [_capped(100, 1 << 30)])
    assert time.perf_counter() - start < 0.1
    assert [(s.lo, s.hi, s.k, s.status) for s in stretches] == [
        (1, 1, 3, "measured"),
        (2, 7, 3, "not measured"),
        (8, 8, 1, "measured"),
        (9, 99, 1, "not measured"),
        (100, 1 << 30, 1, "capped, not measured"),
        ((1 << 30) + 1, LARGEST_WHOLE_NUMBER, 1, "not measured"),
    ]
    assert deployed_stretches(Schedule(()), {(1, 3)}) == []


@pytest.mark.parametrize(("known", "ends"), [(True, [64]), (False, [66, 100, 256])])
def test_capped_ranges_stop_at_a_known_max_num_seqs(known: bool, ends: list[int]) -> None:
    # Issue 38, kind 11. [[1, 256, 3]] under C=200: K=3 fits up to 50, K=2 to 66, K=1 to 100,
    # K=0 past. With max_num_seqs 64 known, vLLM runs nothing past 64: the capped range ends
    # there and none starts past it. Unknown (64 assumed), the whole schedule is reported.
    tuned = Schedule(((1, 256, 3),))
    ceiling = CaptureCeiling(200, True, "test", 64, known, "test")
    capped = capped_schedule(tuned, ceiling)
    found = capped_ranges(tuned, capped, ceiling, {})
    assert [c.hi for c in found] == ends
    assert found[0].lo == 51
    # The repaired schedule itself is whole either way (past 64 it is never used).
    assert capped.to_json()[-1] == [101, 256, 0]
