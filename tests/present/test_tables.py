"""lib/present/tables.py: the app's display tables say what the analysis found, row for row."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from sweep_builder import grid, write_grid

from lib.app import support as app_support
from lib.loop.diff import DiffReport
from lib.present import tables, text
from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import load_experiment


def test_health_tables_explain_exclusions_and_rejections(tmp_path: Path) -> None:
    # Batch size 4, K=3: one of four runs failed (excluded); the other three disagree (noise).
    runs = grid([1, 4], {0: [100.0, 100.0, 100.0], 3: [150.0, 150.0, 150.0]})
    runs[(4, 3)] = [100.0, 200.0, 300.0, 150.0]
    write_grid(tmp_path, runs)
    failed = tmp_path / "SERVE--k3-BENCH--c4" / "summary.json"
    failed.write_text(failed.read_text().replace('"failed": 0', '"failed": 2', 1))
    result = tune(load_experiment(tmp_path), Settings())
    counts = app_support.health_counts(result)
    assert (counts.runs_loaded, counts.runs_excluded, counts.cells_rejected) == (13, 1, 1)
    excluded = tables.excluded_runs_table(result).to_dicts()
    assert [(row["runs"], row["batch sizes"], row["K"]) for row in excluded] == [(1, "4", "3")]
    assert "failed" in excluded[0]["reason"]
    rejected = tables.rejected_cells_table(result).to_dicts()
    assert [(row["batch size"], row["K"], row["runs"]) for row in rejected] == [(4, 3, 3)]
    assert "relative MAD" in rejected[0]["reason"]
    k_sets = tables.k_sets_table(result)
    assert k_sets.to_dicts() == [
        {"batch size": 1, "K measured": "0, 3", "K kept": "0, 3", "K chosen": 3},
        {"batch size": 4, "K measured": "0, 3", "K kept": "0", "K chosen": 0},
    ]
    html = text.problem_list_html(result.errors)
    assert html.count("<li>") == len(result.errors) >= 2
    assert "failed-requests" in html and "noisy-objective" in html


def test_decision_table_and_texts(tmp_path: Path) -> None:
    # K=3 beats K=0 by 50 % at batch size 1; K=0 wins at 4, K=3 scoring 120 / 200 = -40 %.
    runs = {
        (1, 0): [100.0] * 3,
        (1, 3): [150.0] * 3,
        (4, 0): [200.0] * 3,
        (4, 3): [120.0] * 3,
    }
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    table = tables.decision_table(result)
    assert table.select("batch size", "chosen K", "vs K=0 %", "tied K").rows() == [
        (1, 3, 50.0, "3"),
        (4, 0, 0.0, "0"),
    ]
    assert table["conservative K=3"].to_list() == [150.0, 120.0]
    assert app_support.schedule_text(result) == "[[1, 3, 3], [4, 4, 0]]"
    argument = text.speculative_config_line(result)
    assert argument.startswith("--speculative-config '{") and argument.endswith("}'")
    assert '"num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 4, 0]]' in argument
    assert "configured num_speculative_tokens = 7" in app_support.global_k_text(result)
    assert "on the speculative engine" in app_support.baseline_text(result)
    assert "--speculative-config '{" in argument


def test_rejected_cells_are_null_in_the_decision_table(tmp_path: Path) -> None:
    runs = {(1, 0): [100.0] * 3, (1, 3): [100.0, 200.0, 300.0]}
    result = tune(load_experiment(write_grid(tmp_path, runs)), Settings())
    table = tables.decision_table(result)
    assert table.select("conservative K=0", "conservative K=3").rows() == [(100.0, None)]
    assert table.schema["conservative K=3"] == pl.Float64


def test_comparison_table_has_every_batch_size_and_the_verdict(sample_diff: DiffReport) -> None:
    report = sample_diff
    table = tables.comparison_table(report)
    assert table["batch size"].to_list() == [1, 64, 128, 256]
    assert table["K (A)"].to_list() == [7, 0, 0, 0]
    assert table["K (B)"].to_list() == [0, 0, 0, 0]
    assert table["verdict"].to_list()[0] == "material"


def test_a_tables_probabilities_read_as_the_clis_lines(tmp_path: Path) -> None:
    from sweep_builder import WORKED_EXAMPLE

    from lib.analysis import analyse
    from lib.numbers import probability_text

    analysis = analyse(load_experiment(write_grid(tmp_path, WORKED_EXAMPLE)), Settings())
    assert analysis.report is not None
    table = tables.confidence_table(analysis.result, analysis.report)
    p_columns = [column for column in table.columns if column.startswith("P K=")]
    exact = analysis.report.cells.select("anchor", "k", "p_eps_good").rows()
    assert p_columns and exact
    for anchor, k, p in exact:
        shown = table.filter(pl.col("batch size") == anchor)[f"P K={k}"].item()
        # The table's number is the CLI's text, as a number: 2 decimals, rounded down.
        assert (shown is None and p is None) or f"{shown:.2f}" == probability_text(p)
