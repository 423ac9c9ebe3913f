"""The effective batch by Little's law (lib/effective_batch.py): below 0.9x the anchor flags,
at it does not; spread beyond 0.2 flags, at it does not; missing fields are said once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from seed_outputs import SEED_CANDIDATE_KEYS
from sweep_builder import record, write_combo, write_grid

from lib.analysis import analyse
from lib.deploy.result_file import result_text
from lib.effective_batch import (
    BELOW_ANCHOR_FRACTION,
    MAX_SPREAD,
    effective_batch,
    effective_batch_problems,
)
from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import load_experiment

CELLS = {(1, 0): [100.0, 101.0, 99.0], (1, 3): [150.0, 151.0, 149.0]}
CELLS |= {(8, 0): [700.0, 701.0, 699.0], (8, 3): [800.0, 801.0, 799.0]}


def _rules(root: Path) -> list[tuple[str, int | None, int | None]]:
    result = tune(load_experiment(root), Settings())
    return [
        (p.rule, p.anchor, p.k) for p in effective_batch_problems(effective_batch(result), result)
    ]


@pytest.mark.parametrize(
    ("in_flight", "flagged"),
    [(8 * BELOW_ANCHOR_FRACTION, False), (8 * BELOW_ANCHOR_FRACTION - 0.01, True), (8.0, False)],
)
def test_below_the_anchor_flags_at_it_does_not(
    tmp_path: Path, in_flight: float, flagged: bool
) -> None:
    # 4 req/s x e2el: in_flight requests at every cell of batch 8, exactly 1 at batch 1.
    root = write_grid(
        tmp_path,
        {c: v for c, v in CELLS.items() if c[0] == 1},
        request_throughput=2.0,
        mean_e2el_ms=500.0,
    )
    write_grid(
        root,
        {c: v for c, v in CELLS.items() if c[0] == 8},
        request_throughput=4.0,
        mean_e2el_ms=in_flight * 1000 / 4.0,
    )
    expected = [("effective-batch-below-anchor", 8, 0), ("effective-batch-below-anchor", 8, 3)]
    assert _rules(root) == (expected if flagged else [])


def _spread_sweep(root: Path, low: float) -> Path:
    """Batch 1 runs of in-flight ``low``, 1.0, 1.0: spread (1 - low) / 1."""
    for k in (0, 3):
        runs = [
            record(
                1,
                k,
                run_number=n,
                output_throughput=100.0 + k,
                request_throughput=1.0,
                mean_e2el_ms=1000.0 * value,
            )
            for n, value in enumerate((low, 1.0, 1.0))
        ]
        write_combo(root / f"SERVE--k{k}-BENCH--c1", runs)
    return root


def test_spread_beyond_the_limit_flags_at_it_does_not(tmp_path: Path) -> None:
    # Spread (max - min) / median = 1 - low; low = 0.8 is exactly MAX_SPREAD (within float
    # rounding the product 1.0 x 800 / 1000 is exact), 0.79 beyond it.
    assert pytest.approx(0.2) == MAX_SPREAD
    at = _rules(_spread_sweep(tmp_path / "at", 0.8))
    beyond = _rules(_spread_sweep(tmp_path / "beyond", 0.79))
    assert at == []
    assert beyond == [("effective-batch-spread", 1, 0), ("effective-batch-spread", 1, 3)]


def test_missing_fields_are_said_once(tmp_path: Path) -> None:
    # Every record null in both fields: as if the bench never wrote them.
    root = write_grid(tmp_path, CELLS, request_throughput=None, mean_e2el_ms=None)
    analysis = analyse(load_experiment(root), Settings())
    notes = [p for p in analysis.result.problems if p.rule.startswith("effective-batch")]
    assert [p.rule for p in notes] == ["effective-batch-unknown"]
    assert "request_throughput and mean_e2el_ms" in notes[0].message
    candidate = json.loads(result_text(analysis.result))["batch_decisions"][0]["candidates"][0]
    assert list(candidate)[-1] == "effective_batch_size"
    assert candidate["effective_batch_size"] is None


def test_the_json_candidate_ends_with_the_cell(tmp_path: Path) -> None:
    root = write_grid(tmp_path, CELLS, request_throughput=2.0, mean_e2el_ms=500.0)
    written = json.loads(result_text(analyse(load_experiment(root), Settings()).result))
    candidate = written["batch_decisions"][0]["candidates"][0]
    # 2 req/s x 0.5 s = 1 request in flight, the same in every run.
    assert candidate["effective_batch_size"] == {"median": 1.0, "spread": 0.0, "runs": 3}
    keys = list(candidate)
    assert tuple(keys[: keys.index("effective_batch_size")]) == SEED_CANDIDATE_KEYS
