"""Two tunings' schedules (lib/present/charts/comparison.py)."""

from __future__ import annotations

from lib.loop.diff import DiffReport
from lib.present.charts.comparison import comparison_chart


def test_comparison_chart_has_both_schedules_and_their_anchors(sample_diff: DiffReport) -> None:
    report = sample_diff
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
    assert "<svg" in chart.svg().decode()
