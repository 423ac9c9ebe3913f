"""lib/loop/diff.py: two tunings side by side, K and objective changes, and when they are
material."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from paths import SAMPLE_SWEEPS
from sweep_builder import CONTEXT_GRID, grid, spread, write_context_grid, write_grid

from lib.cli.main import main
from lib.loop.diff import DiffReport, DiffSettings, Side, compare, read_side
from lib.present.text import diff_lines
from lib.schedule import Schedule
from lib.settings import Options, Settings

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


def side(path: str | Path, settings: DiffSettings | None = None) -> Side:
    found, problems = read_side(path, settings or DiffSettings())
    assert found is not None, problems
    return found


def report(a: str | Path, b: str | Path, settings: DiffSettings | None = None) -> DiffReport:
    settings = settings or DiffSettings()
    result, problems = compare(side(a, settings), side(b, settings), settings)
    assert result is not None, problems
    return result


def test_a_sweep_against_itself_is_the_same() -> None:
    same = report(SONNET, SONNET)
    assert same.same_schedule and not same.material
    assert same.a.schedule == Schedule(((1, 63, 7), (64, 256, 0)))


def test_a_different_workload_is_materially_different() -> None:
    # sonnet-like picks K=7 at batch 1, random-control K=0 (data/sample_sweeps/README.md): in
    # random-control K=7 loses 28 % at batch 1, far beyond 2 %.
    different = report(SONNET, RANDOM)
    assert different.material
    first = different.rows.to_dicts()[0]
    assert first["k_changed"]
    assert first["loss_of_k_a_in_b_percent"] > 20
    # Calibrated: with noise no P is exactly 0, but this one rounds to a few in 10,000.
    assert first["p_eps_good_of_k_a_in_b"] < 0.001


def test_a_result_json_compares_like_its_folder(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    assert main([SONNET, "--output-json", str(result)]) == 0
    from_json = side(result)
    from_folder = side(SONNET)
    assert from_json.schedule == from_folder.schedule
    assert from_json.cells.keys() == from_folder.cells.keys()
    for key, cell in from_folder.cells.items():
        assert from_json.cells[key].median == pytest.approx(cell.median)
        assert from_json.cells[key].num_runs == cell.num_runs
        assert from_json.cells[key].p_eps_good == pytest.approx(cell.p_eps_good)


def test_objective_change_beyond_the_threshold_and_the_noise_is_material(tmp_path: Path) -> None:
    a = sweep(tmp_path / "a")
    b = sweep(tmp_path / "b", scale=1.03)
    # Same schedule; B is 3 % faster everywhere, beyond the +-0.5 % noise: material only when
    # the threshold is below 3 %.
    default = report(a, b)
    assert default.same_schedule and not default.material
    assert default.rows["objective_change_percent"].to_list() == pytest.approx([3.0, 3.0])
    assert report(a, b, DiffSettings(max_objective_change=0.02)).material


def test_objective_change_within_the_noise_is_not_material(tmp_path: Path) -> None:
    a = write_grid(tmp_path / "a", grid([1], {0: [100.0, 80.0, 120.0], 3: [60.0, 50.0, 70.0]}))
    b = write_grid(tmp_path / "b", grid([1], {0: [110.0, 88.0, 132.0], 3: [60.0, 50.0, 70.0]}))
    settings = DiffSettings(tuning=Settings(max_objective_relative_mad=1.0))
    row = report(a, b, settings).rows.to_dicts()[0]
    # +10 % at K=0, but each cell's relative MAD is 20 %: the interval spans 0.
    assert row["objective_change_percent"] == pytest.approx(10.0)
    assert row["change_low_percent"] < 0 < row["change_high_percent"]
    assert not row["material"]


def test_a_k_change_between_near_ties_is_not_material(tmp_path: Path) -> None:
    # At 64, K=3 at 995 vs K=0 at 1000 in A (K=0 picked); in B K=3 at 1015 (K=3 picked: more
    # than the 1 % tie tolerance above K=0). Either way the other K loses under 2 %.
    a = sweep(tmp_path / "a", k3_at_64=995.0)
    b = sweep(tmp_path / "b", k3_at_64=1015.0)
    row = report(a, b).rows.to_dicts()[1]
    assert (row["k_a"], row["k_b"]) == (0, 3)
    assert row["loss_of_k_b_in_a_percent"] == pytest.approx((1 - 995 / 1000) * 100)
    assert row["loss_of_k_a_in_b_percent"] == pytest.approx((1 - 1000 / 1015) * 100)
    assert not row["material"]
    assert report(a, b, DiffSettings(max_k_loss=0.001)).material


def test_anchors_in_only_one_sweep_use_the_other_schedule(tmp_path: Path) -> None:
    a = sweep(tmp_path / "a")
    values = {(1, 0): runs(100.0), (1, 3): runs(150.0), (1, 1): runs(120.0)}
    values |= {(16, 0): runs(500.0), (16, 1): runs(450.0), (16, 3): runs(400.0)}
    values |= {(64, 0): runs(1000.0), (64, 1): runs(800.0), (64, 3): runs(900.0)}
    b = write_grid(tmp_path / "b", values)
    rows = {row["batch_size"]: row for row in report(a, b).rows.to_dicts()}
    # A's schedule [[1, 63, 3], [64, 64, 0]] runs K=3 at 16; B measured K=3 at 16 as 20 %
    # below its best (K=0): a material change.
    assert rows[16]["anchor_in_a"] is False
    assert (rows[16]["k_a"], rows[16]["k_b"]) == (3, 0)
    assert rows[16]["loss_of_k_a_in_b_percent"] == pytest.approx(20.0)
    assert rows[16]["material"]
    assert any("measured only in B" in reason for reason in rows[16]["reasons"])


def test_json_text_is_deterministic() -> None:
    first, second = report(SONNET, RANDOM), report(SONNET, RANDOM)
    assert first.to_json_text() == second.to_json_text()
    data = json.loads(first.to_json_text())
    assert data["materially_different"] is True
    assert data["a"]["schedule"] == [[1, 63, 7], [64, 256, 0]]
    assert data["b"]["schedule"] == [[1, 256, 0]]
    # Both samples were swept with num_speculative_tokens 7 (data/sample_sweeps/README.md).
    assert data["a"]["num_speculative_tokens"] == data["b"]["num_speculative_tokens"] == 7


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("make", "rules", "message"),
    [
        (lambda tmp: tmp / "absent", ["missing-input"], "no such folder or file"),
        (lambda tmp: _write(tmp / "x.json", "{broken"), ["invalid-json"], "not valid JSON"),
        (
            lambda tmp: _write(tmp / "x.json", json.dumps({"a": 1})),
            ["not-a-result"],
            "not a tuning result",
        ),
        (
            lambda tmp: _write(
                tmp / "x.json",
                json.dumps(
                    {"num_speculative_tokens_per_batch_size": [[2, 8, 1]], "batch_decisions": []}
                ),
            ),
            ["not-a-result"],
            "not a valid schedule",
        ),
        (
            lambda tmp: SAMPLE_SWEEPS / "noisy",
            ["untunable-experiment", "noisy-objective"],
            "cannot be tuned with these settings",
        ),
    ],
)
def test_a_side_that_cannot_be_read_is_a_problem(
    tmp_path: Path, make: object, rules: list[str], message: str
) -> None:
    found, problems = read_side(make(tmp_path), DiffSettings())  # type: ignore[operator]
    assert found is None
    assert [p.rule for p in problems] == rules
    assert message in problems[0].message


def test_within_a_root_nothing_outside_it_is_read(tmp_path: Path) -> None:
    """The dashboard compares only inside its root: a side that leads outside it, or a link
    below a side that does, is not read; without ``within`` (the CLI) both are."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    sweep(outside / "elsewhere")
    (outside / "secret.txt").write_text('"SECRET outside the root"')  # shown when read
    (root / "linked").parent.mkdir()
    (root / "linked").symlink_to(outside / "elsewhere")
    summary = next(sweep(root / "mixed").iterdir()) / "summary.json"
    summary.unlink()
    summary.symlink_to(outside / "secret.txt")
    for path in (root / "linked", outside / "elsewhere"):
        found, problems = read_side(path, DiffSettings(), within=root)
        assert found is None
        assert [p.rule for p in problems] == ["outside-root"], problems
        assert read_side(path, DiffSettings())[0] is not None
    found, problems = read_side(root / "mixed", DiffSettings(), within=root)
    assert found is None
    assert "outside-root" in [p.rule for p in problems]
    assert not any("SECRET" in p.describe() for p in problems)
    _, unconfined = read_side(root / "mixed", DiffSettings())
    assert any("SECRET" in p.describe() for p in unconfined)


def test_different_objectives_cannot_be_compared(tmp_path: Path) -> None:
    result = tmp_path / "tpot.json"
    flags = ["--objective-var", "median_tpot_ms", "--objective-direction", "minimize"]
    assert main([SONNET, "--output-json", str(result), *flags]) == 0
    compared, problems = compare(side(SONNET), side(result), DiffSettings())
    assert compared is None
    assert [p.rule for p in problems] == ["different-objectives"]


def test_invalid_thresholds_name_their_flags() -> None:
    settings = DiffSettings(max_k_loss=-1.0, max_objective_change=float("inf"))
    assert settings.invalid() == [
        "--max-k-loss -1.0: expected a number >= 0",
        "--max-objective-change inf: expected a number >= 0",
    ]


# --------------------------------------------------------------------------- context grids


def _context_b(**cells: list[float]) -> dict[tuple[int, int, int], list[float]]:
    """CONTEXT_GRID with the (anchor, K, prompt) cells given as ``a64_k0_p8192=[...]``."""
    changed = dict(CONTEXT_GRID)
    for name, values in cells.items():
        anchor, k, prompt = (int(part[1:]) for part in name.split("_"))
        changed[(anchor, k, prompt)] = values
    return changed


def _rows(result: DiffReport) -> dict[tuple[int, int | None, int | None], dict[str, object]]:
    assert result.context_rows is not None
    return {
        (row["batch_size"], row["prompt_tokens_a"], row["prompt_tokens_b"]): row
        for row in result.context_rows.to_dicts()
    }


def test_a_changed_grid_pick_is_compared_cell_by_cell(tmp_path: Path) -> None:
    # A: CONTEXT_GRID picks K=3 at batch 64, 8192 tokens (2600 > 2000). B: K=0 measured at
    # 2700 there, so B picks K=0. Both grids pick K=0 at 64 / 512, so the batch-only answers
    # (the shortest context's, see CONTEXT_GRID) are the same: only the grid tells them apart.
    a = write_context_grid(tmp_path / "a", CONTEXT_GRID)
    b = write_context_grid(tmp_path / "b", _context_b(a64_k0_p8192=spread(2700.0)))
    result = report(a, b)
    assert not result.rows["material"].any()
    row = _rows(result)[(64, 8192, 8192)]
    assert (row["k_a"], row["k_b"], row["judged_in"]) == (3, 0, "A")
    # B's K=0 in A's cell: 1 - 2000 / 2600.
    assert row["loss_percent"] == pytest.approx((1 - 2000 / 2600) * 100)
    assert row["material"] and result.material
    same = _rows(result)[(1, 8192, 8192)]
    assert (same["k_a"], same["k_b"], same["material"]) == (3, 3, False)
    assert len(_rows(result)) == 4  # 2 anchors x 2 prompt lengths


@pytest.mark.parametrize(("max_k_loss", "material"), [(0.23, True), (0.24, False)])
def test_a_grid_change_is_material_only_beyond_the_threshold(
    tmp_path: Path, max_k_loss: float, material: bool
) -> None:
    # The loss is 1 - 2000 / 2600 = 23.08 %: beyond 23 %, within 24 %.
    a = write_context_grid(tmp_path / "a", CONTEXT_GRID)
    b = write_context_grid(tmp_path / "b", _context_b(a64_k0_p8192=spread(2700.0)))
    result = report(a, b, DiffSettings(max_k_loss=max_k_loss))
    assert _rows(result)[(64, 8192, 8192)]["material"] is material
    assert result.material is material


def _result_json(folder: Path, path: Path, reject: tuple[int, int, int] | None = None) -> Path:
    """The folder's result JSON; ``reject`` = (anchor, prompt, K) marks that grid candidate
    rejected, as the noise gate would."""
    assert main([str(folder), "--output-json", str(path)]) == 0
    data = json.loads(path.read_text())
    if reject is not None:
        anchor, prompt, k = reject
        for cell in data["context_grid"]:
            if (cell["batch_size"], cell["prompt_tokens"]) == (anchor, prompt):
                for candidate in cell["candidates"]:
                    if candidate["k"] == k:
                        candidate["verdict"], candidate["reason"] = "rejected", "noisy"
    path.write_text(json.dumps(data))
    return path


def test_a_grid_change_is_judged_in_b_where_a_did_not_keep_b_s_pick(tmp_path: Path) -> None:
    a_dir = write_context_grid(tmp_path / "a", CONTEXT_GRID)
    b_dir = write_context_grid(tmp_path / "b", _context_b(a64_k0_p8192=spread(2700.0)))
    a = _result_json(a_dir, tmp_path / "a.json", reject=(64, 8192, 0))
    b = _result_json(b_dir, tmp_path / "b.json")
    row = _rows(report(a, b))[(64, 8192, 8192)]
    # A has no K=0 there: A's K=3 in B's cell, 1 - 2600 / 2700 against B's K=0.
    assert row["judged_in"] == "B"
    assert row["loss_percent"] == pytest.approx((1 - 2600 / 2700) * 100)
    assert row["material"]
    b_rejects = _result_json(b_dir, tmp_path / "b2.json", reject=(64, 8192, 3))
    row = _rows(report(a, b_rejects))[(64, 8192, 8192)]
    assert row["judged_in"] is None and row["loss_percent"] is None
    assert row["material"], "a change neither grid can judge is material"


def test_cells_without_a_counterpart_are_listed_not_compared(tmp_path: Path) -> None:
    a = write_context_grid(tmp_path / "a", CONTEXT_GRID)
    longer = dict(CONTEXT_GRID)
    longer |= {(1, 0, 32768): spread(60.0), (1, 3, 32768): spread(120.0)}
    longer |= {(64, 0, 32768): spread(1000.0), (64, 3, 32768): spread(1500.0)}
    b = write_context_grid(tmp_path / "b", longer)
    result = report(a, b)
    rows = _rows(result)
    alone = [key for key in rows if key[1] is None]
    assert alone == [(1, None, 32768), (64, None, 32768)]
    assert all(not rows[key]["material"] for key in alone)
    assert not result.material
    text = "\n".join(diff_lines(result))
    assert "no counterpart in A: B's cells at prompt 32768 tokens, batch sizes 1, 64" in text


def test_prompt_lengths_within_the_tolerance_are_counterparts(tmp_path: Path) -> None:
    a = write_context_grid(tmp_path / "a", CONTEXT_GRID)
    # 540 is within 10 % of 512; 9100 is not within 10 % of 8192 (819.2 tokens).
    moved = {
        (anchor, k, {512: 540, 8192: 9100}[p]): v for (anchor, k, p), v in CONTEXT_GRID.items()
    }
    b = write_context_grid(tmp_path / "b", moved)
    rows = _rows(report(a, b))
    assert (1, 512, 540) in rows and (1, 8192, None) in rows and (1, None, 9100) in rows


def test_a_grid_against_a_batch_only_result_lists_every_cell(tmp_path: Path) -> None:
    a = sweep(tmp_path / "batch-only")
    b = write_context_grid(tmp_path / "grid", CONTEXT_GRID)
    result = report(a, b)
    assert result.a.grid is None and result.b.grid is not None
    rows = _rows(result)
    assert len(rows) == 4 and all(key[1] is None for key in rows)
    assert not result.context_material
    text = diff_lines(result)
    assert any("A batch-only; B prompt lengths 512, 8192" in line for line in text)


def test_a_batch_only_comparison_writes_no_context_cells() -> None:
    result = report(SONNET, RANDOM)
    assert result.context_rows is None
    assert "context_cells" not in json.loads(result.to_json_text())
    assert not any("context grid" in line for line in diff_lines(result))


def test_a_grid_that_cannot_be_read_is_refused_not_ignored(tmp_path: Path) -> None:
    path = _result_json(write_context_grid(tmp_path / "a", CONTEXT_GRID), tmp_path / "a.json")
    data = json.loads(path.read_text())
    data["context_grid"][0]["selected_k"] = "three"
    path.write_text(json.dumps(data))
    found, problems = read_side(path, DiffSettings())
    assert found is None
    assert problems and all(str(path) in p.files for p in problems)


def _with_mad(tmp_path: Path, name: str, scale: float, mad: float) -> Path:
    """The result JSON of :func:`sweep` at ``scale``, every candidate's relative MAD set to
    ``mad`` (as a user might edit it; JSON writes infinity and NaN as Python reads them)."""
    result = tmp_path / f"{name}.json"
    assert main([str(sweep(tmp_path / name, scale)), "--output-json", str(result)]) == 0
    data = json.loads(result.read_text())
    for decision in data["batch_decisions"]:
        for candidate in decision["candidates"]:
            candidate["objective_relative_mad"] = mad
    result.write_text(json.dumps(data))
    return result


@pytest.mark.parametrize(
    ("mad", "interval", "material"),
    [
        # No spread: the interval is the point (+10 %), beyond 5 %: material.
        (0.0, (10.0, 10.0), True),
        # A spread of 1e200 (its square overflows a float): an unbounded interval, in the noise.
        (1e200, (-100.0, math.inf), False),
        # Not a spread at all: no interval, and the change is judged by the threshold alone.
        (math.inf, (None, None), True),
        (math.nan, (None, None), True),
        (-0.01, (None, None), True),
    ],
)
def test_the_interval_at_the_boundaries_of_the_spread(
    tmp_path: Path, mad: float, interval: tuple[float | None, float | None], material: bool
) -> None:
    """B 10 % faster everywhere: the interval of the change and its verdict per spread."""
    a, b = _with_mad(tmp_path, "a", 1.0, mad), _with_mad(tmp_path, "b", 1.1, mad)
    row = report(a, b).rows.to_dicts()[0]
    assert row["objective_change_percent"] == pytest.approx(10.0)
    assert (row["change_low_percent"], row["change_high_percent"]) == pytest.approx(interval)
    assert row["material"] is material
    assert any("no interval" in reason for reason in row["reasons"]) is (interval[0] is None)
    json.loads(report(a, b).to_json_text())  # infinity becomes null, never an error


@pytest.mark.parametrize(
    ("confidence", "bounded", "material"), [(0.5, True, True), (1.0, False, False)]
)
def test_a_confidence_of_1_is_an_unbounded_interval(
    tmp_path: Path, confidence: float, bounded: bool, material: bool
) -> None:
    """+3 % in +-0.5 % noise: at confidence 0.5 a narrow interval excluding 0; at 1 (which
    every command accepts) the interval is unbounded, so no change is beyond the noise."""
    a, b = sweep(tmp_path / "a"), sweep(tmp_path / "b", scale=1.03)
    settings = DiffSettings(max_objective_change=0.02, options=Options(confidence=confidence))
    row = report(a, b, settings).rows.to_dicts()[0]
    assert (row["change_high_percent"] < 5) is bounded
    assert row["change_low_percent"] > 0 if bounded else row["change_low_percent"] == -100.0
    assert row["material"] is material
