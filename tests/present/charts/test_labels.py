"""Label layout on a log batch-size axis (lib/present/charts/labels.py)."""

from __future__ import annotations

from lib.present.charts.labels import label_rows


def test_overlapping_labels_go_to_separate_rows() -> None:
    # On a 300 px log axis from 1 to 256 (8 doublings, 37.5 px each), a 10-character label
    # (69 px) at 1 reaches past 2 and 2.5 (37.5 and 49.6 px) but not past 8 (112.5 px).
    texts = ["K=3 -> K=1"] * 4
    assert label_rows([1, 2, 8, 3], texts, (1, 256)) == [0, 1, 0, 2]
    # Far apart, they share the first row.
    assert label_rows([1, 16, 256], texts[:3], (1, 256)) == [0, 0, 0]
    assert label_rows([], [], (1, 1)) == []
