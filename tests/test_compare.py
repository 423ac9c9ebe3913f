"""`tune-spec-k diff A B`: schedules side by side, K and objective changes, and exit codes a CI
gate can use (lib/compare.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_builder import grid, write_grid

from lib.cli import main
from lib.compare import DiffSettings, compare, comparison_chart, comparison_table, read_side
from lib.schedule import Settings

SAMPLE_SWEEPS = Path(__file__).resolve().parents[1] / "data" / "sample_sweeps"
SONNET = str(SAMPLE_SWEEPS / "sonnet-like")
RANDOM = str(SAMPLE_SWEEPS / "random-control")


def runs(center: float) -> list[float]:
    """Three runs within +-0.5 % of center."""
    return [center * 0.995, center, center * 1.005]


def sweep(root: Path, scale: float = 1.0, k3_at_64: float = 900.0) -> Path:
    """K=0/1/3 at anchors 1 and 64; K=3 wins at 1, K=0 at 64 (unless k3_at_64 says otherwise).
    ``scale`` multiplies every value (a faster or slower machine)."""
    values = {
        (1, 0): runs(100.0 * scale),
        (1, 1): runs(120.0 * scale),
        (1, 3): runs(150.0 * scale),
        (64, 0): runs(1000.0 * scale),
        (64, 1): runs(800.0 * scale),
        (64, 3): runs(k3_at_64 * scale),
    }
    return write_grid(root, values)


def test_a_sweep_against_itself_is_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", SONNET, SONNET]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"A: [[1, 63, 7], [64, 256, 0]]  ({SONNET})"
    assert lines[1] == f"B: [[1, 63, 7], [64, 256, 0]]  ({SONNET})"
    assert out.rstrip().splitlines()[-1].startswith("no material difference")


def test_a_different_workload_is_materially_different(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # sonnet-like picks K=7 at batch 1, random-control K=0 (data/sample_sweeps/README.md): in
    # random-control K=7 loses 28 % at batch 1, far beyond 2 %.
    assert main(["diff", SONNET, RANDOM]) == 1
    out = capsys.readouterr().out
    assert "batch_size=1: K 7 -> 0" in out
    assert "MATERIAL" in out
    report = compare(
        read_side(SONNET, DiffSettings()), read_side(RANDOM, DiffSettings()), DiffSettings()
    )
    first = report.rows.to_dicts()[0]
    assert first["k_changed"]
    assert first["loss_of_k_a_in_b_percent"] > 20
    assert first["p_eps_good_of_k_a_in_b"] == 0.0


def test_a_result_json_compares_like_its_folder(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    assert main([SONNET, "--output-json", str(result)]) == 0
    settings = DiffSettings()
    from_json = read_side(result, settings)
    from_folder = read_side(SONNET, settings)
    assert from_json.schedule == from_folder.schedule
    assert from_json.cells.keys() == from_folder.cells.keys()
    for key, cell in from_folder.cells.items():
        assert from_json.cells[key].median == pytest.approx(cell.median)
        assert from_json.cells[key].num_runs == cell.num_runs
        assert from_json.cells[key].p_eps_good == pytest.approx(cell.p_eps_good)
    assert main(["diff", str(result), SONNET]) == 0


def test_objective_change_threshold_is_a_flag(tmp_path: Path) -> None:
    a = sweep(tmp_path / "a")
    b = sweep(tmp_path / "b", scale=1.03)
    # Same schedule; B is 3 % faster everywhere, beyond the +-0.5 % noise: material only when
    # the threshold is below 3 %.
    assert main(["diff", str(a), str(b)]) == 0
    assert main(["diff", str(a), str(b), "--max-objective-change", "0.02"]) == 1
    report = compare(read_side(a, DiffSettings()), read_side(b, DiffSettings()), DiffSettings())
    assert report.same_schedule
    changes = report.rows["objective_change_percent"].to_list()
    assert changes == pytest.approx([3.0, 3.0])


def test_objective_change_within_the_noise_is_not_material(tmp_path: Path) -> None:
    a = write_grid(tmp_path / "a", grid([1], {0: [100.0, 80.0, 120.0], 3: [60.0, 50.0, 70.0]}))
    b = write_grid(tmp_path / "b", grid([1], {0: [110.0, 88.0, 132.0], 3: [60.0, 50.0, 70.0]}))
    settings = DiffSettings(tuning=Settings(max_objective_relative_mad=1.0))
    report = compare(read_side(a, settings), read_side(b, settings), settings)
    row = report.rows.to_dicts()[0]
    # +10 % at K=0, but each cell's relative MAD is 20 %: the interval spans 0.
    assert row["objective_change_percent"] == pytest.approx(10.0)
    assert row["change_low_percent"] < 0 < row["change_high_percent"]
    assert not row["material"]


def test_a_k_change_between_near_ties_is_not_material(tmp_path: Path) -> None:
    # At 64, K=3 at 995 vs K=0 at 1000 in A (K=0 picked); in B K=3 at 1015 (K=3 picked: more
    # than the 1 % tie tolerance above K=0). Either way the other K loses under 2 %.
    a = sweep(tmp_path / "a", k3_at_64=995.0)
    b = sweep(tmp_path / "b", k3_at_64=1015.0)
    settings = DiffSettings()
    report = compare(read_side(a, settings), read_side(b, settings), settings)
    row = report.rows.to_dicts()[1]
    assert (row["k_a"], row["k_b"]) == (0, 3)
    assert row["loss_of_k_b_in_a_percent"] == pytest.approx((1 - 995 / 1000) * 100)
    assert row["loss_of_k_a_in_b_percent"] == pytest.approx((1 - 1000 / 1015) * 100)
    assert not row["material"]
    assert main(["diff", str(a), str(b)]) == 0
    assert main(["diff", str(a), str(b), "--max-k-loss", "0.001"]) == 1


def test_anchors_in_only_one_sweep_use_the_other_schedule(tmp_path: Path) -> None:
    a = sweep(tmp_path / "a")
    values = {(1, 0): runs(100.0), (1, 3): runs(150.0), (1, 1): runs(120.0)}
    values |= {(16, 0): runs(500.0), (16, 1): runs(450.0), (16, 3): runs(400.0)}
    values |= {(64, 0): runs(1000.0), (64, 1): runs(800.0), (64, 3): runs(900.0)}
    b = write_grid(tmp_path / "b", values)
    settings = DiffSettings()
    report = compare(read_side(a, settings), read_side(b, settings), settings)
    rows = {row["batch_size"]: row for row in report.rows.to_dicts()}
    # A's schedule [[1, 63, 3], [64, 64, 0]] runs K=3 at 16; B measured K=3 at 16 as 20 %
    # below its best (K=0): a material change.
    assert rows[16]["anchor_in_a"] is False
    assert (rows[16]["k_a"], rows[16]["k_b"]) == (3, 0)
    assert rows[16]["loss_of_k_a_in_b_percent"] == pytest.approx(20.0)
    assert rows[16]["material"]
    assert any("measured only in B" in reason for reason in rows[16]["reasons"])


def test_json_output_is_deterministic(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["diff", SONNET, RANDOM, "--output-json", str(first)]) == 1
    assert main(["diff", SONNET, RANDOM, "--output-json", str(second)]) == 1
    assert first.read_bytes() == second.read_bytes()
    data = json.loads(first.read_text())
    assert data["materially_different"] is True
    assert data["a"]["schedule"] == [[1, 63, 7], [64, 256, 0]]
    assert data["b"]["schedule"] == [[1, 256, 0]]
    # Both samples were swept with num_speculative_tokens 7 (data/sample_sweeps/README.md).
    assert data["a"]["num_speculative_tokens"] == data["b"]["num_speculative_tokens"] == 7


@pytest.mark.parametrize(
    ("make_b", "flags", "message"),
    [
        (lambda tmp: str(tmp / "absent"), [], "no such folder or file"),
        (lambda tmp: _write(tmp / "x.json", "{broken"), [], "not a JSON file"),
        (lambda tmp: _write(tmp / "x.json", json.dumps({"a": 1})), [], "not a tuning result"),
        (
            lambda tmp: _write(
                tmp / "x.json",
                json.dumps(
                    {"num_speculative_tokens_per_batch_size": [[2, 8, 1]], "batch_decisions": []}
                ),
            ),
            [],
            "is not a valid schedule",
        ),
        (lambda tmp: str(SAMPLE_SWEEPS / "noisy"), [], "cannot be tuned with these settings"),
        (lambda tmp: SONNET, ["--max-k-loss", "-1"], "--max-k-loss -1.0"),
    ],
)
def test_bad_input_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_b: object,
    flags: list[str],
    message: str,
) -> None:
    b = make_b(tmp_path)  # type: ignore[operator]
    assert main(["diff", SONNET, b, *flags]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert "Traceback" not in error


def test_different_objectives_cannot_be_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "tpot.json"
    flags = ["--objective-var", "median_tpot_ms", "--objective-direction", "minimize"]
    assert main([SONNET, "--output-json", str(result), *flags]) == 0
    capsys.readouterr()
    assert main(["diff", SONNET, str(result)]) == 2
    assert "different objectives" in capsys.readouterr().err


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_the_app_view_has_both_schedules_and_every_batch_size(tmp_path: Path) -> None:
    settings = DiffSettings()
    report = compare(read_side(SONNET, settings), read_side(RANDOM, settings), settings)
    table = comparison_table(report)
    assert table["batch size"].to_list() == [1, 64, 128, 256]
    assert table["K (A)"].to_list() == [7, 0, 0, 0]
    assert table["K (B)"].to_list() == [0, 0, 0, 0]
    assert table["verdict"].to_list()[0] == "material"
    chart = comparison_chart(report)
    rows = chart.to_dict()["data"]["values"]
    steps = {
        side: [
            (r["batch_size"], r["k"]) for r in rows if r["side"] == side and r["layer"] == "step"
        ]
        for side in ("A", "B")
    }
    # A [[1, 63, 7], [64, 256, 0]]: starts of both ranges, then the end of the last.
    assert steps["A"] == [(1, 7), (64, 0), (256, 0)]
    assert steps["B"] == [(1, 0), (256, 0)]
    anchors = [
        (r["batch_size"], r["k"]) for r in rows if r["side"] == "A" and r["layer"] == "anchor"
    ]
    assert anchors == [(1, 7), (64, 0), (128, 0), (256, 0)]
    svg = chart.svg().decode()
    assert "<svg" in svg
