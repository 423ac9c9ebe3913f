"""lib/loop/check/arms.py: each run of a validation sweep in its arm, the schedule under test
selecting the dynamic one."""

from __future__ import annotations

import json
from pathlib import Path

from paths import VALIDATION_SWEEP
from sweep_builder import (
    CONTEXT_ARMS,
    DYNAMIC,
    GOOD_VALIDATION,
    record,
    write_combo,
    write_context_validation,
    write_validation,
)
from validation_check import (
    INDEPENDENT,
    RFC_GOOD,
    RFC_GOOD_KS,
    RFC_SWAPPED,
    RFC_SWAPPED_KS,
    by_cell,
    check,
    rfc,
)

from lib.deploy.deployed import context_schedule_of
from lib.loop.check.judge import CheckSettings
from lib.schedule import Schedule
from lib.settings import Settings

GOOD = GOOD_VALIDATION


def test_files_with_a_byte_order_mark_are_read_like_the_loader_reads_them(tmp_path: Path) -> None:
    # An editor that saves UTF-8 "with BOM": the loader accepts it, so the arms must too.
    root = write_validation(tmp_path / "v", GOOD)
    for summary in root.rglob("summary.json"):
        summary.write_bytes(b"\xef\xbb\xbf" + summary.read_bytes())
    plain = check(write_validation(tmp_path / "plain", GOOD))
    marked = check(root)
    assert marked.errors == []
    assert marked.verdicts.equals(plain.verdicts)


def test_the_schedule_under_test_selects_the_arm_and_must_match(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    assert check(root, schedule=Schedule(((1, 63, 7), (64, 256, 0)))).errors == []
    report = check(root, schedule=Schedule(((1, 31, 7), (32, 256, 0))))
    (problem,) = report.errors
    assert problem.rule == "no-dynamic-arm"
    assert problem.value == "[[1, 31, 7], [32, 256, 0]]"


def test_two_schedules_without_one_under_test_are_ambiguous(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    other = {**DYNAMIC, "num_speculative_tokens_per_batch_size": [[1, 31, 3], [32, 256, 0]]}
    write_combo(
        root / "SERVE--other-BENCH--c1",
        [record(1, 0, run_number=n, spec=other, output_throughput=300.0) for n in range(3)],
    )
    assert [p.rule for p in check(root).errors] == ["ambiguous-dynamic-arm"]


def test_the_real_cpu_validation_sweep_is_judged() -> None:
    """The real vLLM validation sweep (scripts/real_cpu_sweep/run_validation.sh): the records
    vLLM wrote for a dynamic, a static and a plain server fall into the right arms."""
    schedule_file = VALIDATION_SWEEP / "tuned_schedule.json"
    data = json.loads(schedule_file.read_text())["num_speculative_tokens_per_batch_size"]
    schedule, _ = Schedule.parse(data)
    assert schedule == Schedule(((1, 1, 2), (2, 3, 5), (4, 7, 3), (8, 8, 0)))
    report = check(
        VALIDATION_SWEEP,
        CheckSettings(options=INDEPENDENT, tuning=Settings(min_runs=2)),
        schedule=schedule,
    )
    assert report.errors == []
    assert set(report.arms["arm"]) == {"dynamic", "static K=3", "no speculation"}
    rows = {row["anchor"]: row for row in report.verdicts.to_dicts()}
    # The K the schedule runs at 1, 2, 4, 8: 2, 5, 3, 0.
    assert {a: r["dynamic_k"] for a, r in rows.items()} == {1: 2, 2: 5, 4: 3, 8: 0}
    # Where the schedule runs K=3 (batch 4) the static K=3 server measures its overhead; where
    # it runs K=0 (batch 8), the plain server does.
    assert rows[4]["same_k_arm"] == "static K=3"
    assert rows[8]["same_k_arm"] == "no speculation"
    assert all(r["best_static"] == "static K=3" for r in rows.values())
    assert all(r["k0_arm"] == "no speculation" for r in rows.values())
    # SERVE--dynamic-BENCH--c8/run=1.json has spec_decode_* counters: it drafted while draining.
    assert any("drafted tokens in 1 of 2 run(s)" in reason for reason in rows[8]["reasons"])


def test_the_schedule_under_test_may_be_given_and_selects_among_context_schedules(
    tmp_path: Path,
) -> None:
    """Two context schedules served side by side: without --schedule that is ambiguous; each
    given selects its own arm, and the other is another schedule."""
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, rfc(RFC_GOOD), RFC_GOOD_KS)
    other = rfc(RFC_SWAPPED)
    for prompt in (512, 8192):
        for anchor in (1, 64):
            k = RFC_SWAPPED_KS[(anchor, prompt)]
            values = CONTEXT_ARMS[prompt][(anchor, f"static-k{k}" if k else "no-spec")]
            records = [
                record(
                    anchor,
                    0,
                    run_number=n,
                    spec=other,
                    output_throughput=v,
                    random_input_len=prompt,
                    total_input_tokens=prompt * 100,
                    total_output_tokens=128 * 100,
                )
                for n, v in enumerate(values)
            ]
            write_combo(root / f"SERVE--other-BENCH--c{anchor}-p{prompt}", records)
    assert [p.rule for p in check(root).errors] == ["ambiguous-dynamic-arm"]
    good, _ = context_schedule_of(rfc(RFC_GOOD))
    swapped, _ = context_schedule_of(other)
    assert good is not None and swapped is not None
    report = check(root, schedule=good)
    assert report.errors == [] and report.losses == []
    assert any(
        arm.startswith('other schedule {"format": "vllm-rfc-48944"')
        for arm in report.contexts[0].arms["arm"]
    )
    assert check(root, schedule=swapped).losses == [64]


def test_the_engine_clamps_a_context_schedule_to_num_speculative_tokens(tmp_path: Path) -> None:
    # Served with num_speculative_tokens 2 the tables' K=3 run as K=2 (vLLM clamps them).
    arms = {
        p: {**v, **{(a, "static-k2"): v[(a, "static-k3")] for a in (1, 64)}}
        for p, v in CONTEXT_ARMS.items()
    }
    ks = {key: min(k, 2) for key, k in RFC_GOOD_KS.items()}
    report = check(write_context_validation(tmp_path / "v", arms, rfc(RFC_GOOD, global_k=2), ks))
    assert by_cell(report, "dynamic_k") == ks
