"""The seed's own tests, as sweeps: tune-spec-k gives the outcome each of them documents.

The seed (vLLM PR #49163, ``vllm/benchmarks/sweep/tune_speculative_k.py`` at 318528f6) comes
with 24 test functions, 25 cases with a parametrisation
(``tests/benchmarks/sweep/test_tune_speculative_k.py``). Most call its functions on records in
memory; here each becomes the same input written as a sweep in the layout of ``vllm bench sweep
serve`` (a ``SERVE--<serve>-BENCH--<bench>/`` folder per (batch size, K) holding ``run=N.json``
files and a ``summary.json``), tuned by ``tune-spec-k`` in this process. A success must give the
seed's schedule, its JSON (its keys in its order at every level, every value equal to the one
the seed computes, derived here in a comment and by :func:`measured`) and its stdout lines; an
error must exit 2, write nothing, print nothing on stdout and report the rule that stands for
the seed's message:

=====================================================================  ========================
seed's test (its error message)                                        tune-spec-k's rule
=====================================================================  ========================
rejects_unstable_objective ("Unstable objective")                      noisy-objective
can_require_stable_acceptance ("Unstable acceptance")                  unstable-acceptance
requires_positive_k_acceptance ("Expected numeric acceptance_length")  partial-acceptance
selection_rejects_all_zero_maximize ("No positive conservative ...")   no-positive-objective
rejects_negative_acceptance ("non-negative acceptance")                negative-acceptance
rejects_failed_requests ("contains 1 failed request")                  failed-requests
rejects_incomplete_requests ("completed 31 of 32 prompts")             incomplete-run
rejects_k_above_global_maximum ("K=7 exceeds configured global K=3")   k-above-global
requires_fixed_global_maximum ("found [3, 7]")                         mixed-global-k
requires_same_candidates_at_every_batch_size ("expected [1, 3]")       unequal-k-sets
rejects_unmeasured_tail_extrapolation ("largest tuned ... anchor")     max-batch-size
=====================================================================  ========================

(tests/seed_outputs.py's ``SEED_ERRORS`` holds the mapping for every error of the seed.)

Tests of a pure function with no CLI equivalent become the nearest observable outcome: the K a
schedule gives at an anchor is the candidate it lands in; ``build_schedule`` on a schedule that
reaches past the largest anchor (which the seed's CLI refuses) becomes a measured anchor there;
the parser test becomes a run with those flags.

The last test runs the PR's test-plan command on every bundled sample and compares the seed's
lines and JSON with tests/reference_policy.py's.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from paths import SAMPLE_SWEEPS
from reference_policy import ReferenceRejected, reference_tune
from seed_outputs import (
    SEED_DEFAULT_SELECTION,
    Outcome,
    assert_rejected_alike,
    assert_seed_error,
    assert_seed_success,
    reference_document,
    run_tune,
    seed_view,
)
from sweep_builder import combo_name, record, write_combo

K_VAR = "speculative_config.num_speculative_tokens_per_batch_size"
#: The seed's tests name the acceptance field ``acceptance_length``.
ACCEPTANCE = "acceptance_length"
#: A run without the acceptance field at all.
ABSENT = object()


# --------------------------------------------------------------------------- inputs


def seed_run(
    anchor: int, k: int, number: int, throughput: float, acceptance: Any = 2.0, **fields: Any
) -> dict[str, Any]:
    """The seed's ``_record`` as `vllm bench sweep serve` saves it: a healthy run at batch size
    ``anchor`` served with global K 7 and the one-range schedule ``[[1, 256, k]]``, its
    ``output_throughput`` and ``acceptance_length`` (2.0 by default, as the seed's; ``None``
    kept as a null, :data:`ABSENT` leaves the field out)."""
    run = record(anchor, k, run_number=number, output_throughput=throughput, **fields)
    if acceptance is not ABSENT:
        run[ACCEPTANCE] = acceptance
    return run


def write_cells(
    root: Path,
    cells: Mapping[tuple[int, int], Sequence[float]],
    acceptance: Any = 2.0,
    **fields: Any,
) -> Path:
    """One combo folder per (batch size, K), one run per throughput (:func:`seed_run`)."""
    for (anchor, k), values in cells.items():
        runs = [
            seed_run(anchor, k, number, value, acceptance, **fields)
            for number, value in enumerate(values)
        ]
        write_combo(root / combo_name(anchor, k), runs)
    return root


def summaries(cells: Mapping[tuple[int, int], Sequence[float]]) -> list[str]:
    """The seed's ``input_summary_files`` of :func:`write_cells`' sweep (every combo name has
    the same shape, so text order is ``Path`` order here)."""
    return sorted(f"{combo_name(anchor, k)}/summary.json" for anchor, k in cells)


# --------------------------------------------------------------------------- expected values


def measured(
    anchor: int,
    k: int,
    runs: Sequence[float],
    *,
    maximize: bool = True,
    penalty: float = 1.0,
    acceptances: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The seed's candidate for a cell, by its definitions: the median, the MAD (median of
    absolute deviations, unscaled), the relative MAD (MAD / |median|), the conservative
    objective (median moved against the objective by penalty x 1.4826 x MAD, not below 0 when
    maximising), the same median and relative MAD of the acceptances when every run has one."""
    median = statistics.median(runs)
    mad = statistics.median([abs(value - median) for value in runs])
    spread = penalty * 1.4826 * mad
    median_acceptance = None
    acceptance_relative_mad = None
    if acceptances is not None:
        median_acceptance = statistics.median(acceptances)
        deviation = statistics.median([abs(a - median_acceptance) for a in acceptances])
        acceptance_relative_mad = relative(deviation, median_acceptance)
    return {
        "batch_size": anchor,
        "k": k,
        "num_runs": len(runs),
        "median_objective": median,
        "mad_objective": mad,
        "conservative_objective": max(median - spread, 0.0) if maximize else median + spread,
        "objective_relative_mad": relative(mad, median),
        "median_acceptance": median_acceptance,
        "acceptance_relative_mad": acceptance_relative_mad,
    }


def relative(mad: float, median: float) -> float:
    """MAD / |median|; with a zero median 0 when the MAD is 0 too, else infinite."""
    if median != 0:
        return mad / abs(median)
    return 0.0 if mad == 0 else math.inf


def decided(
    anchor: int, selected_k: int, candidates: list[dict[str, Any]], *, maximize: bool = True
) -> dict[str, Any]:
    """The seed's decision at an anchor: the pick's median and conservative objective, how it
    compares with the best and with K=0 in percent (better is positive, ``None`` without K=0
    or when K=0 scores 0)."""
    scores = {c["k"]: c["conservative_objective"] for c in candidates}
    chosen = scores[selected_k]

    def better(other: float) -> float:
        return 100.0 * ((chosen / other if maximize else other / chosen) - 1.0)

    best = max(scores.values()) if maximize else min(scores.values())
    return {
        "batch_size": anchor,
        "selected_k": selected_k,
        "selected_median_objective": next(
            c["median_objective"] for c in candidates if c["k"] == selected_k
        ),
        "selected_conservative_objective": chosen,
        "selected_vs_best_percent": better(best),
        "selected_vs_k0_percent": None if scores.get(0, 0.0) == 0 else better(scores[0]),
        "candidates": candidates,
    }


def seed_document(
    schedule: list[list[int]],
    decisions: list[dict[str, Any]],
    files: list[str],
    *,
    global_k: int | None = 7,
    **selection: Any,
) -> dict[str, Any]:
    """The seed's result document; ``selection`` changes the defaults' entries."""
    return {
        "num_speculative_tokens_per_batch_size": schedule,
        "configured_global_num_speculative_tokens": global_k,
        "max_num_speculative_tokens_observed": max(
            c["k"] for d in decisions for c in d["candidates"]
        ),
        "selection": {**SEED_DEFAULT_SELECTION, **selection},
        "batch_decisions": decisions,
        "input_summary_files": files,
    }


@pytest.fixture
def tune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """``tune(*flags)``: tune-spec-k on the sweep in ``tmp_path / "sweep"``, writing to
    ``tmp_path / "out/new/schedule.json"`` (folders that do not exist yet: the seed makes
    them)."""

    def run(*flags: str) -> Outcome:
        return run_tune(
            capsys, tmp_path / "sweep", tmp_path / "out" / "new" / "schedule.json", *flags
        )

    return run


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return tmp_path / "sweep"


# --------------------------------------------------------------------------- K from a record


def test_extract_k_from_nested_schedule_with_gap_and_tail(sweep: Path, tune: Any) -> None:
    """Seed: ``_extract_k`` on the schedule ``[[1, 4, 7], [9, 16, 3]]`` gives K=7 at batch size
    6 (a gap takes the previous range's K) and K=3 at 32 (past the last range, its K). Same.

    As a sweep: one server runs that schedule at batch sizes 1, 6 and 32 (so its runs are K=7,
    7 and 3), the others a one-range K; its runs (200 tok/s) are told apart from the others'
    (100) by their median, so each lands in the cell of the K the schedule gives.
    """
    gap_and_tail = {"method": "eagle3", "model": "drafter", "num_speculative_tokens": 7}
    gap_and_tail["num_speculative_tokens_per_batch_size"] = [[1, 4, 7], [9, 16, 3]]
    for anchor in (1, 6, 32):
        runs = [seed_run(anchor, 0, n, 200.0, spec=gap_and_tail) for n in range(3)]
        write_combo(sweep / f"SERVE--gap-and-tail-BENCH--c{anchor}", runs)
    # The other K at each batch size: 3 where the schedule gives 7, 7 where it gives 3.
    other = {(1, 3): [100.0] * 3, (6, 3): [100.0] * 3, (32, 7): [100.0] * 3}
    write_cells(sweep, other)

    # Each cell: three equal runs, MAD 0, conservative = median. The schedule's cell wins.
    def cells(anchor: int, schedule_k: int, other_k: int) -> list[dict[str, Any]]:
        found = [
            measured(anchor, schedule_k, [200.0] * 3, acceptances=[2.0] * 3),
            measured(anchor, other_k, [100.0] * 3, acceptances=[2.0] * 3),
        ]
        return sorted(found, key=lambda c: c["k"])

    decisions = [
        decided(1, 7, cells(1, 7, 3)),
        decided(6, 7, cells(6, 7, 3)),
        decided(32, 3, cells(32, 3, 7)),
    ]
    files = [
        *summaries(other),
        *(f"SERVE--gap-and-tail-BENCH--c{anchor}/summary.json" for anchor in (1, 32, 6)),
    ]
    expected = seed_document(
        [[1, 31, 7], [32, 32, 3]],
        decisions,
        sorted(files),
        acceptance_metric=ACCEPTANCE,
        max_batch_size=32,
    )
    assert_seed_success(tune("--acceptance-var", ACCEPTANCE), expected)


# --------------------------------------------------------------------------- statistics


def test_aggregate_measurements_uses_median_and_mad(sweep: Path, tune: Any) -> None:
    """Seed: runs 100, 102, 200 give median 102, MAD 2 (median of 2, 0, 98) and conservative
    102 - 1.4826 x 2 = 99.0348 (relative MAD 2 / 102 = 0.0196, under the 1.0 allowed).
    Same, and as one cell it is the whole schedule ``[[1, 1, 3]]``."""
    cells = {(1, 3): [100.0, 102.0, 200.0]}
    write_cells(sweep, cells)
    candidate = measured(1, 3, cells[(1, 3)], acceptances=[2.0] * 3)
    assert candidate["median_objective"] == 102.0 and candidate["mad_objective"] == 2.0
    assert candidate["conservative_objective"] == pytest.approx(99.0348)
    expected = seed_document(
        [[1, 1, 3]],
        [decided(1, 3, [candidate])],
        summaries(cells),
        acceptance_metric=ACCEPTANCE,
        max_objective_relative_mad=1.0,
        strict_acceptance_stability=True,
        max_batch_size=1,
    )
    outcome = tune(
        "--acceptance-var",
        ACCEPTANCE,
        "--max-objective-relative-mad",
        "1.0",
        "--strict-acceptance-stability",
    )
    assert_seed_success(outcome, expected)


def test_aggregate_measurements_rejects_unstable_objective(sweep: Path, tune: Any) -> None:
    """Seed: runs 50, 100, 150: MAD 50, relative MAD 0.5 > 0.1: "Unstable objective". Same
    (``noisy-objective``); at the threshold itself (relative MAD 0.5 allowed) it tunes."""
    write_cells(sweep, {(1, 3): [50.0, 100.0, 150.0]})
    assert_seed_error(tune(), "noisy-objective")
    assert tune("--max-objective-relative-mad", "0.5").status == 0


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "not-strict"])
def test_aggregate_measurements_can_require_stable_acceptance(
    sweep: Path, tune: Any, strict: bool
) -> None:
    """Seed: acceptances 1, 2, 3 (median 2, MAD 1, relative MAD 0.5 > 0.1) with
    ``--strict-acceptance-stability``: "Unstable acceptance". Same (``unstable-acceptance``).
    Without the flag the seed only warns and tunes; so does tune-spec-k (a warning)."""
    runs = [seed_run(1, 3, n, 100.0, a) for n, a in enumerate([1.0, 2.0, 3.0])]
    write_combo(sweep / combo_name(1, 3), runs)
    flags = ["--acceptance-var", ACCEPTANCE, "--max-objective-relative-mad", "0.1"]
    if strict:
        assert_seed_error(tune(*flags, "--strict-acceptance-stability"), "unstable-acceptance")
        return
    outcome = tune(*flags)
    candidate = measured(1, 3, [100.0] * 3, acceptances=[1.0, 2.0, 3.0])
    assert candidate["acceptance_relative_mad"] == 0.5
    expected = seed_document(
        [[1, 1, 3]],
        [decided(1, 3, [candidate])],
        [f"{combo_name(1, 3)}/summary.json"],
        acceptance_metric=ACCEPTANCE,
        max_batch_size=1,
    )
    assert_seed_success(outcome, expected)
    assert "warning [unstable-acceptance]" in outcome.stderr


def test_aggregate_measurements_accepts_stable_zero_acceptance(sweep: Path, tune: Any) -> None:
    """Seed: K=0 runs whose acceptance is 0.0 give median acceptance 0.0 and relative MAD 0.0
    (a zero median with zero MAD is stable, not a division by zero). Same."""
    cells = {(1, 0): [100.0] * 3}
    write_cells(sweep, cells, acceptance=0.0)
    candidate = measured(1, 0, cells[(1, 0)], acceptances=[0.0] * 3)
    assert candidate["median_acceptance"] == 0.0 and candidate["acceptance_relative_mad"] == 0.0
    expected = seed_document(
        [[1, 1, 0]],
        [decided(1, 0, [candidate])],
        summaries(cells),
        acceptance_metric=ACCEPTANCE,
        strict_acceptance_stability=True,
        max_batch_size=1,
    )
    assert_seed_success(
        tune("--acceptance-var", ACCEPTANCE, "--strict-acceptance-stability"), expected
    )


@pytest.mark.parametrize("missing_value", [None, ABSENT], ids=["None", "absent"])
def test_aggregate_measurements_allows_undefined_k0_acceptance(
    sweep: Path, tune: Any, missing_value: Any
) -> None:
    """Seed: K=0 runs may have no acceptance (a null or no field): the candidate's median
    acceptance and its relative MAD are None. Same."""
    cells = {(1, 0): [100.0] * 3}
    write_cells(sweep, cells, acceptance=missing_value)
    expected = seed_document(
        [[1, 1, 0]],
        [decided(1, 0, [measured(1, 0, cells[(1, 0)])])],
        summaries(cells),
        acceptance_metric=ACCEPTANCE,
        strict_acceptance_stability=True,
        max_batch_size=1,
    )
    assert_seed_success(
        tune("--acceptance-var", ACCEPTANCE, "--strict-acceptance-stability"), expected
    )


def test_aggregate_measurements_requires_positive_k_acceptance(sweep: Path, tune: Any) -> None:
    """Seed: a K=3 run whose acceptance is null: "Expected numeric acceptance_length, got
    None". Same: the cell's other runs have it (``partial-acceptance``)."""
    runs = [seed_run(1, 3, n, 100.0, None if n == 0 else 2.0) for n in range(3)]
    write_combo(sweep / combo_name(1, 3), runs)
    assert_seed_error(
        tune("--acceptance-var", ACCEPTANCE, "--strict-acceptance-stability"),
        "partial-acceptance",
    )


def test_maximize_objective_allows_zero_goodput_candidate(sweep: Path, tune: Any) -> None:
    """Seed: K=0 scoring 0 (no request met the goodput SLO) beside K=3 at 10: K=3 is picked.
    Same, and the percent against K=0 is None (there is nothing to be a percent of)."""
    cells = {(1, 0): [0.0] * 3, (1, 3): [10.0] * 3}
    write_cells(sweep, cells)
    # K=0's median is 0 with MAD 0: its relative MAD is 0 (the seed's rule for a zero median).
    candidates = [measured(1, 0, cells[(1, 0)]), measured(1, 3, cells[(1, 3)])]
    assert candidates[0]["objective_relative_mad"] == 0.0
    decision = decided(1, 3, candidates)
    assert decision["selected_vs_k0_percent"] is None
    expected = seed_document([[1, 1, 3]], [decision], summaries(cells), max_batch_size=1)
    assert_seed_success(tune(), expected)


def test_selection_rejects_all_zero_maximize_objectives(sweep: Path, tune: Any) -> None:
    """Seed: every K scores 0 at batch size 1 while maximising: "No positive conservative
    objective for batch_size=1". Same (``no-positive-objective``)."""
    write_cells(sweep, {(1, 0): [0.0] * 3, (1, 3): [0.0] * 3})
    assert_seed_error(tune(), "no-positive-objective")


def test_aggregate_measurements_rejects_negative_acceptance(sweep: Path, tune: Any) -> None:
    """Seed: acceptance -1.0 with ``--acceptance-var``: "Expected non-negative acceptance".
    Same (``negative-acceptance``); 0.0, the boundary, is accepted (test above)."""
    write_cells(sweep, {(1, 3): [100.0] * 3}, acceptance=-1.0)
    assert_seed_error(
        tune("--acceptance-var", ACCEPTANCE, "--strict-acceptance-stability"),
        "negative-acceptance",
    )


# --------------------------------------------------------------------------- run health


def test_aggregate_measurements_rejects_failed_requests(sweep: Path, tune: Any) -> None:
    """Seed: one run with ``failed: 1``: "Sweep record contains 1 failed request(s)". Same
    (``failed-requests``)."""
    runs = [seed_run(1, 3, n, 100.0, failed=1 if n == 0 else 0) for n in range(3)]
    write_combo(sweep / combo_name(1, 3), runs)
    assert_seed_error(tune(), "failed-requests")


def test_aggregate_measurements_rejects_incomplete_requests(sweep: Path, tune: Any) -> None:
    """Seed: a run that completed 31 of its 32 prompts: "completed 31 of 32 prompts". Same
    (``incomplete-run``); the other runs completed all 32."""
    runs = [
        seed_run(1, 3, n, 100.0, failed=0, completed=31 if n == 0 else 32, num_prompts=32)
        for n in range(3)
    ]
    write_combo(sweep / combo_name(1, 3), runs)
    assert_seed_error(tune(), "incomplete-run")


# --------------------------------------------------------------------------- the global K


def test_aggregate_measurements_rejects_k_above_global_maximum(sweep: Path, tune: Any) -> None:
    """Seed: a schedule K of 7 on a server started with 3: "Scheduled K=7 exceeds configured
    global K=3". Same (``k-above-global``)."""
    runs = [seed_run(1, 7, n, 100.0, global_k=3) for n in range(3)]
    for run in runs:
        run["speculative_config"]["num_speculative_tokens"] = 3
    write_combo(sweep / combo_name(1, 7), runs)
    assert_seed_error(tune(), "k-above-global")


def test_aggregate_measurements_requires_fixed_global_maximum(sweep: Path, tune: Any) -> None:
    """Seed: one run started with global K 3, the others with 7: "All sweep records must use
    the same global num_speculative_tokens; found [3, 7]". Same (``mixed-global-k``, naming
    both values)."""
    runs = [seed_run(1, 3, n, 100.0) for n in range(3)]
    runs[0]["speculative_config"]["num_speculative_tokens"] = 3
    write_combo(sweep / combo_name(1, 3), runs)
    outcome = tune()
    assert_seed_error(outcome, "mixed-global-k")
    assert "3, 7" in outcome.stderr


# --------------------------------------------------------------------------- selection


def test_selection_prefers_smaller_k_within_tolerance(sweep: Path, tune: Any) -> None:
    """Seed: K=0 at 100 and K=7 at 100.5: 100 / 100.5 = 0.995 >= 1 - 0.01, a tie, and the
    smaller K wins. Same: K=0, 0.4975 % below the best, 0 % against itself."""
    cells = {(1, 0): [100.0] * 3, (1, 7): [100.5] * 3}
    write_cells(sweep, cells)
    candidates = [measured(1, k, runs) for (_, k), runs in cells.items()]
    decision = decided(1, 0, candidates)
    assert decision["selected_vs_best_percent"] == pytest.approx(-0.4975, abs=1e-4)
    assert decision["selected_vs_k0_percent"] == 0.0
    expected = seed_document([[1, 1, 0]], [decision], summaries(cells), max_batch_size=1)
    assert_seed_success(tune(), expected)


def test_selection_can_minimize_objective(sweep: Path, tune: Any) -> None:
    """Seed: minimising, K=0 at 10 and K=3 at 8 with no tolerance: K=3. Same, with TPOT (ms)
    as the objective: 10 / 8 - 1 = 25 % better than K=0."""
    cells = {(1, 0): [10.0] * 3, (1, 3): [8.0] * 3}
    for (anchor, k), values in cells.items():
        runs = [
            seed_run(anchor, k, n, 100.0, median_tpot_ms=value) for n, value in enumerate(values)
        ]
        write_combo(sweep / combo_name(anchor, k), runs)
    candidates = [measured(1, k, runs, maximize=False) for (_, k), runs in cells.items()]
    decision = decided(1, 3, candidates, maximize=False)
    assert decision["selected_vs_k0_percent"] == 25.0
    expected = seed_document(
        [[1, 1, 3]],
        [decision],
        summaries(cells),
        objective_metric="median_tpot_ms",
        objective_direction="minimize",
        relative_tolerance=0.0,
        max_batch_size=1,
    )
    outcome = tune(
        "--objective-var",
        "median_tpot_ms",
        "--objective-direction",
        "minimize",
        "--relative-tolerance",
        "0",
    )
    assert_seed_success(outcome, expected)


def test_minimize_objective_penalizes_upward_uncertainty(sweep: Path, tune: Any) -> None:
    """Seed: minimising runs 100, 102, 200: conservative 102 + 1.4826 x 2 = 104.9652 (the
    penalty moves a minimised objective up). Same."""
    cells = {(1, 3): [100.0, 102.0, 200.0]}
    write_cells(sweep, cells)
    candidate = measured(1, 3, cells[(1, 3)], maximize=False)
    assert candidate["conservative_objective"] == pytest.approx(104.9652)
    expected = seed_document(
        [[1, 1, 3]],
        [decided(1, 3, [candidate], maximize=False)],
        summaries(cells),
        objective_direction="minimize",
        max_objective_relative_mad=1.0,
        max_batch_size=1,
    )
    outcome = tune("--objective-direction", "minimize", "--max-objective-relative-mad", "1.0")
    assert_seed_success(outcome, expected)


def test_selection_preserves_nonmonotonic_local_optima(sweep: Path, tune: Any) -> None:
    """Seed: K=1 wins at batch size 1 (100 vs 70), K=3 at 8 (100 vs 80); no monotone
    smoothing. Same: ``[[1, 7, 1], [8, 8, 3]]``."""
    cells = {(1, 1): [100.0] * 3, (1, 3): [70.0] * 3, (8, 1): [80.0] * 3, (8, 3): [100.0] * 3}
    write_cells(sweep, cells)
    decisions = [
        decided(1, 1, [measured(1, 1, cells[(1, 1)]), measured(1, 3, cells[(1, 3)])]),
        decided(8, 3, [measured(8, 1, cells[(8, 1)]), measured(8, 3, cells[(8, 3)])]),
    ]
    expected = seed_document(
        [[1, 7, 1], [8, 8, 3]],
        decisions,
        summaries(cells),
        relative_tolerance=0.0,
        max_batch_size=8,
    )
    assert_seed_success(tune("--relative-tolerance", "0.0"), expected)


def test_selection_requires_same_candidates_at_every_batch_size(sweep: Path, tune: Any) -> None:
    """Seed: K 1 and 3 at batch size 1 but only K=1 at 8: "batch_size=8 has K candidates [1],
    expected [1, 3]". Same (``unequal-k-sets``)."""
    write_cells(sweep, {(1, 1): [100.0] * 3, (1, 3): [110.0] * 3, (8, 1): [120.0] * 3})
    assert_seed_error(tune(), "unequal-k-sets")


# --------------------------------------------------------------------------- the schedule


def test_build_schedule_fills_gaps_tail_and_merges_equal_k(sweep: Path, tune: Any) -> None:
    """Seed: ``build_schedule({1: 7, 8: 7, 32: 3, 64: 0}, 128)`` is ``[[1, 31, 7], [32, 63,
    3], [64, 128, 0]]``: each anchor covers up to the next one, the last up to the maximum,
    neighbours with one K merge. Its CLI refuses a maximum past the largest anchor (below), so
    here batch size 128 is measured, picking K=0 too: the same schedule, from the CLI."""
    picks = {1: 7, 8: 7, 32: 3, 64: 0, 128: 0}
    cells = {
        (anchor, k): [200.0 if k == pick else 100.0] * 3
        for anchor, pick in picks.items()
        for k in (0, 3, 7)
    }
    write_cells(sweep, cells)
    decisions = [
        decided(anchor, pick, [measured(anchor, k, cells[(anchor, k)]) for k in (0, 3, 7)])
        for anchor, pick in picks.items()
    ]
    expected = seed_document(
        [[1, 31, 7], [32, 63, 3], [64, 128, 0]], decisions, summaries(cells), max_batch_size=128
    )
    assert_seed_success(tune("--max-batch-size", "128"), expected)


def test_tune_speculative_k_emits_runtime_schedule(sweep: Path, tune: Any) -> None:
    """Seed: batch sizes 1, 8, 32 x K 0, 3, 7 (three equal runs each, acceptance 2.0, strict):
    K=7 at 1 (120 beats 100 and 90), K=3 at 8 (130; K=7's 125 is 3.8 % below), K=0 at 32 (140;
    K=3's 135 is 3.6 % below); ``[[1, 7, 7], [8, 31, 3], [32, 32, 0]]``, global K 7, the
    largest K observed 7, +33.3 % (120 / 90 - 1) against K=0 at batch size 1. Same, every
    value of the JSON and every seed line."""
    values = {
        1: {0: 90.0, 3: 100.0, 7: 120.0},
        8: {0: 100.0, 3: 130.0, 7: 125.0},
        32: {0: 140.0, 3: 135.0, 7: 100.0},
    }
    cells = {(b, k): [v] * 3 for b, by_k in values.items() for k, v in by_k.items()}
    write_cells(sweep, cells)
    picks = {1: 7, 8: 3, 32: 0}
    decisions = [
        decided(
            b, picks[b], [measured(b, k, cells[(b, k)], acceptances=[2.0] * 3) for k in (0, 3, 7)]
        )
        for b in values
    ]
    assert decisions[0]["selected_vs_k0_percent"] == pytest.approx(100.0 * (120.0 / 90.0 - 1.0))
    assert decisions[1]["selected_vs_best_percent"] == 0.0
    expected = seed_document(
        [[1, 7, 7], [8, 31, 3], [32, 32, 0]],
        decisions,
        summaries(cells),
        acceptance_metric=ACCEPTANCE,
        strict_acceptance_stability=True,
        max_batch_size=32,
    )
    outcome = tune(
        "--acceptance-var",
        ACCEPTANCE,
        "--strict-acceptance-stability",
        "--max-batch-size",
        "32",
    )
    assert_seed_success(outcome, expected)


def test_tuner_rejects_unmeasured_tail_extrapolation(sweep: Path, tune: Any) -> None:
    """Seed: anchors 1 and 8 with ``--max-batch-size 64``: "max_batch_size must be the largest
    tuned batch-size anchor". Same (``max-batch-size``); ``--max-batch-size 8`` tunes."""
    write_cells(sweep, {(b, k): [100.0 + k] * 3 for b in (1, 8) for k in (0, 3)})
    assert_seed_error(tune("--max-batch-size", "64"), "max-batch-size")
    assert tune("--max-batch-size", "8").status == 0


# --------------------------------------------------------------------------- the command


def test_run_main_reads_sweep_summaries_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed: every record in one ``case/summary.json`` (batch sizes 1 and 8 x K 0 and 3), the
    output beside it: ``[[1, 7, 3], [8, 8, 0]]``, ``input_summary_files`` ``["case/summary.json"]``
    and the file equal to the result. Same, from the seed's layout as the test writes it (the
    records hold their ``run_number``, as every record of a sweep does)."""
    values = {1: {0: 90.0, 3: 100.0}, 8: {0: 110.0, 3: 100.0}}
    records = [
        seed_run(b, k, n, v, ABSENT)
        for b, by_k in values.items()
        for k, v in by_k.items()
        for n in range(3)
    ]
    write_combo(tmp_path / "case", records, run_files=False)
    output = tmp_path / "schedule.json"
    decisions = [
        decided(b, pick, [measured(b, k, [values[b][k]] * 3) for k in (0, 3)])
        for b, pick in ((1, 3), (8, 0))
    ]
    expected = seed_document(
        [[1, 7, 3], [8, 8, 0]], decisions, ["case/summary.json"], max_batch_size=8
    )
    outcome = run_tune(capsys, tmp_path, output, "--max-batch-size", "8")
    assert_seed_success(outcome, expected)


def test_cli_can_minimize_tpot(sweep: Path, tune: Any) -> None:
    """Seed: the parser takes ``--objective-var mean_tpot_ms --objective-direction minimize``.
    As a run: both are in ``selection`` and the K with the lower mean TPOT wins (K=3 at 8 ms
    against K=0's 10 ms; throughput would pick K=0)."""
    cells = {(1, 0): [10.0] * 3, (1, 3): [8.0] * 3}
    for (anchor, k), values in cells.items():
        runs = [
            seed_run(anchor, k, n, 200.0 if k == 0 else 100.0, mean_tpot_ms=value)
            for n, value in enumerate(values)
        ]
        write_combo(sweep / combo_name(anchor, k), runs)
    candidates = [measured(1, k, runs, maximize=False) for (_, k), runs in cells.items()]
    expected = seed_document(
        [[1, 1, 3]],
        [decided(1, 3, candidates, maximize=False)],
        summaries(cells),
        objective_metric="mean_tpot_ms",
        objective_direction="minimize",
        max_batch_size=1,
    )
    outcome = tune("--objective-var", "mean_tpot_ms", "--objective-direction", "minimize")
    assert_seed_success(outcome, expected)


# --------------------------------------------------------------------------- deliberate differences
# Where tune-spec-k refuses what the seed accepts, to prevent a wrong answer: each test asserts
# tune-spec-k's behaviour and names the README entry (and the seed's outcome).


def test_records_copied_verbatim_count_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's ``run_main`` test writes three identical records per cell (its ``_record``
    has no ``run_number``) and the seed counts three runs. tune-spec-k counts a record listed
    twice once (README, "Bad input", "What counts": a copied folder or record would pass
    ``--min-runs`` with one run): one run per cell, ``too-few-runs``, and a ``repeated-run``
    warning. A sweep's records always hold their ``run_number`` (test above)."""
    records = [
        {k: v for k, v in seed_run(b, k, 0, 100.0, ABSENT).items() if k != "run_number"}
        for b in (1, 8)
        for k in (0, 3)
        for _ in range(3)
    ]
    write_combo(tmp_path / "case", records, run_files=False)
    outcome = run_tune(capsys, tmp_path, tmp_path / "schedule.json")
    assert_seed_error(outcome, "too-few-runs")
    assert "warning [repeated-run] a record already read from case/summary.json" in outcome.stderr


def test_a_boolean_objective_is_refused(sweep: Path, tune: Any) -> None:
    """The seed reads the objective with ``float()``, so ``true`` is 1.0 tok/s; tune-spec-k
    refuses it (README, "Where tune-spec-k differs from the seed": a boolean is no
    measurement), as it reads ``"110.0"`` as 110.0 like the seed (the differential test)."""
    runs = [seed_run(1, 3, n, 100.0) for n in range(3)]
    runs[0]["output_throughput"] = True
    write_combo(sweep / combo_name(1, 3), runs)
    assert_seed_error(tune(), "non-numeric-objective")


def test_k_above_the_global_is_refused_with_any_k_var(sweep: Path, tune: Any) -> None:
    """With a ``--k-var`` other than the default the seed checks no global K; tune-spec-k
    still refuses a K above the run's ``num_speculative_tokens`` (README, "Where tune-spec-k
    differs from the seed": vLLM clamps K to it, so the run did not measure that K)."""
    for k in (0, 5):
        runs = [seed_run(1, k, n, 100.0 + k, global_k=3, draft_k=k) for n in range(3)]
        write_combo(sweep / combo_name(1, k), runs)
    assert_seed_error(tune("--k-var", "draft_k"), "k-above-global")


def test_runs_of_two_servers_in_one_cell_are_refused(sweep: Path, tune: Any) -> None:
    """The seed pools every run at one (batch size, K); tune-spec-k refuses a cell holding
    the runs of two serve combos (README, "Bad input", "What counts": a ranking of their
    mixture would hold for neither server), naming ``--k-var``."""
    write_cells(sweep, {(1, 3): [100.0] * 3})
    runs = [seed_run(1, 3, n, 101.0) for n in range(3)]
    write_combo(sweep / "SERVE--other-BENCH--c1", runs)
    outcome = tune()
    assert_seed_error(outcome, "pooled-servers")
    assert "--k-var" in outcome.stderr


# --------------------------------------------------------------------------- the PR's test plan


def _samples() -> list[Path]:
    return sorted(path for path in SAMPLE_SWEEPS.iterdir() if path.is_dir())


def largest_anchor(experiment: Path) -> int:
    """The largest ``max_concurrency`` of any record in the experiment's summaries."""
    return max(
        run["max_concurrency"]
        for summary in experiment.rglob("summary.json")
        for run in json.loads(summary.read_text(encoding="utf-8"))
    )


#: Samples that vary the prompt length, with tune-spec-k's exit status on the PR's command:
#: it finds the context axis (``--context-var auto``, not in the seed) and tunes each (batch
#: size, prompt length) where the seed pools the lengths; ``--context-var none`` is the seed's
#: reading, and gives the seed's outcome.
CONTEXT_SAMPLES = {"long-context": 0, "real-cpu-context": 2}


@pytest.mark.parametrize("sample", _samples(), ids=lambda path: path.name)
def test_the_prs_test_plan_command_on_every_sample(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The PR's test plan runs ``tune_speculative_k results/spec-k --max-batch-size 256
    --acceptance-var spec_decode_acceptance_length``. With each sample's largest anchor as the
    maximum, tune-spec-k prints the seed's lines and writes the seed's JSON as
    tests/reference_policy.py computes them, or refuses where the reference refuses, with a
    rule standing for each of the reference's errors.

    Deliberate difference (README, "Context length": ``--context-var``): a sample that varied
    the prompt length is tuned per length by default (``long-context`` tunes where the seed
    refuses the pooled runs, whose spread its noise gate rejects); with ``--context-var none``
    it gets the seed's outcome."""
    acceptance = "spec_decode_acceptance_length"
    largest = largest_anchor(sample)
    flags = ["--max-batch-size", str(largest), "--acceptance-var", acceptance]
    output = tmp_path / "out" / "schedule.json"
    outcome = run_tune(capsys, sample, output, *flags)
    if sample.name in CONTEXT_SAMPLES:
        assert outcome.status == CONTEXT_SAMPLES[sample.name]
        assert "pooled-contexts" in outcome.stderr or outcome.document is not None
        if outcome.document is not None:
            assert "context_grid" in outcome.document
            output.unlink()
        outcome = run_tune(capsys, sample, output, *flags, "--context-var", "none")
    try:
        reference = reference_tune(sample, acceptance_var=acceptance, max_batch_size=largest)
    except ReferenceRejected as rejected:
        assert_rejected_alike(outcome, rejected.kinds)
        return
    expected = reference_document(reference, {"acceptance_var": acceptance})
    assert_seed_success(outcome, expected)


def test_the_samples_cover_both_outcomes() -> None:
    """The samples test above compares successes and refusals both (a sample set that only
    succeeds or only fails would leave one half untested)."""
    outcomes = set()
    for sample in _samples():
        try:
            reference_tune(sample, acceptance_var="spec_decode_acceptance_length")
        except ReferenceRejected:
            outcomes.add("rejected")
        else:
            outcomes.add("tuned")
    assert outcomes == {"rejected", "tuned"}


def test_seed_view_keeps_only_the_seed_keys() -> None:
    """The projection the tests compare through drops additions and nothing else."""
    document = {
        "num_speculative_tokens_per_batch_size": [[1, 1, 0]],
        "configured_global_num_speculative_tokens": None,
        "max_num_speculative_tokens_observed": 0,
        "selection": {**SEED_DEFAULT_SELECTION, "allow_mixed_global_k": False},
        "batch_decisions": [],
        "input_summary_files": [],
        "problems": [],
    }
    view = seed_view(document)
    assert "problems" not in view and "allow_mixed_global_k" not in view["selection"]
    assert view["selection"] == SEED_DEFAULT_SELECTION
