"""Where the text labels beside a line go on a log batch-size axis: one row of labels per
layer, a label on a further row wherever it would overlap the one before (:func:`label_rows`)."""

from __future__ import annotations

import math

import polars as pl

#: wider plot too, since positions on a log axis scale with the width.
_NARROWEST_PLOT_PX = 300
#: The width of one character of an 11 px label, generously, and the space between labels.
_LABEL_CHAR_PX = 6.5
_LABEL_GAP_PX = 4
#: The height of one row of labels.
LABEL_ROW_PX = 13


def label_layers(frame: pl.DataFrame, prefix: str) -> set[str]:
    """The names of the text layers ``frame``'s labels need: one per row of labels they take
    (``"<prefix>:<row>"``; a mark's ``dy`` cannot follow the data, and Vega-Lite drops a
    ``yOffset`` on a continuous y, so each row is a layer)."""
    return {f"{prefix}:{row}" for row in frame["label_row"].unique()}


def label_rows_in(layers: frozenset[str], prefix: str) -> list[int]:
    """The label rows ``layers`` names for ``prefix`` (:func:`label_layers`)."""
    return sorted(int(name.split(":")[1]) for name in layers if name.startswith(prefix + ":"))


def batch_size_extent(values: pl.Series) -> tuple[int, int]:
    """The smallest and largest of positive batch sizes (1, 1 when there are none)."""
    positive = values.filter(values > 0)
    if positive.is_empty():
        return 1, 1
    return int(positive.min()), int(positive.max())  # type: ignore[arg-type]


def label_rows(batch_sizes: list[int], texts: list[str], extent: tuple[int, int]) -> list[int]:
    """For labels written left-aligned from ``batch_sizes`` on a log axis spanning ``extent``,
    the row each goes on (0 = the first) so that no two labels on a row overlap on the
    narrowest plot (300 px; further apart on a wider one). Greedy from the left: a label takes
    the first row whose last label ends before it starts. The axis is taken to run between
    the powers of two around ``extent``, as Vega-Lite's "nice" log scale does.

    >>> label_rows([1, 2, 64], ["K=3 -> K=1", "K=1 -> K=0", "x"], (1, 256))
    [0, 1, 0]
    """
    low = 2 ** math.floor(math.log2(max(extent[0], 1)))
    span = max(math.log2(max(extent[1], 1) / low), 1.0)
    ends: list[float] = []
    rows = [0] * len(batch_sizes)
    for index in sorted(range(len(batch_sizes)), key=lambda i: batch_sizes[i]):
        start = math.log2(max(batch_sizes[index], 1) / low) / span * _NARROWEST_PLOT_PX
        row = next((row for row, end in enumerate(ends) if end <= start), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = start + len(texts[index]) * _LABEL_CHAR_PX + _LABEL_GAP_PX
        rows[index] = row
    return rows
