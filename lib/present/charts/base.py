"""What every chart of :mod:`lib.present.charts` shares: :class:`Chart` (a Vega-Lite
specification marimo shows as is and vl-convert renders offline), the colours and verdicts,
axis titles, and the helpers that turn a cached template and rows into a chart.

Altair builds each chart's template (marks, encodings, axes, legends) once per axis title and
validates it against the Vega-Lite schema; a slider change then only puts new rows and a new
title into a copy of the template (:func:`build_chart`). Building and serialising Altair
objects on every change would cost several times the policy itself.

Every layer of a chart reads the same rows and keeps its own with a filter on ``layer``
(:func:`in_layer`). A layer whose filter would keep no row is left out of the specification
(:func:`present_layers`): Vega warns about the infinite extent of an empty layer's fields (and
an empty log axis "includes zero").

Colours are mid-tones readable on marimo's light and dark themes; text, axes and backgrounds
are left to the theme (marimo renders charts with Vega's ``dark`` theme in dark mode).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import altair as alt
import polars as pl
import vl_convert

from lib.schedule import TuningResult

#: The colour of neutral marks (runs, ticks, thresholds, baselines): a mid grey, readable on
#: marimo's light and dark backgrounds alike (black would vanish in dark mode, white in light).
NEUTRAL = "#8c8c8c"

#: Cell verdicts, in legend order, with their colour, shape and size.
VERDICTS: dict[str, tuple[str, str, int]] = {
    "chosen": ("#d62728", "diamond", 220),
    "tied": ("#ff7f0e", "triangle-up", 120),
    "kept": ("#4c78a8", "circle", 70),
    "rejected": (NEUTRAL, "cross", 90),
}

#: How marimo and Jupyter recognise a Vega-Lite specification of Altair's schema version.
MIMETYPE = f"application/vnd.vegalite.{alt.SCHEMA_VERSION.split('.')[0]}+json"
_VL_CONVERT_VERSION = "_".join(alt.SCHEMA_VERSION.split(".")[:2])

_UNITS = {
    "output_throughput": "output tokens/s",
    "total_token_throughput": "tokens/s",
    "max_output_tokens_per_s": "output tokens/s",
    "request_throughput": "requests/s",
    "request_goodput": "requests/s",
    "spec_decode_acceptance_length": "tokens per draft",
    "spec_decode_acceptance_rate": "%",
    "duration": "s",
}

#: The plot of one batch size's small chart: with its axes about 310 px wide, so one fits a
#: phone (390 px) and four fit a 1280 px page.
SMALL_WIDTH = 240

#: The plot width of an image of a chart that follows its container on screen.
IMAGE_WIDTH = 640

#: Ticks that stand for a score beside the points (the conservative score, P without the
#: flagged runs): purple, apart from the verdict colours and readable on both themes.
SCORE_TICK = "#9467bd"

#: The name of every chart's placeholder data (each :class:`Chart` puts its own rows there).
_ROWS = "rows"
#: The status of an anchor where no K reaches the confidence (:mod:`lib.confidence`).
UNRESOLVED = "unresolved"


@dataclass(frozen=True, eq=False)
class Chart:
    """A Vega-Lite chart: marimo shows it as is (``_mime_``), :meth:`to_dict` is the
    specification (``alt.LayerChart.from_dict`` / ``alt.ConcatChart.from_dict`` turn it back into
    Altair objects), :meth:`png` and :meth:`svg` render it offline with vl-convert.

    ``rows`` is the data as a JSON array, written by Polars: the rows are never turned into
    Python objects on the way to the browser.
    """

    template: dict[str, Any]
    rows: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.template, "data": {"values": json.loads(self.rows)}}

    def to_json(self) -> str:
        # The template is a non-empty object: its closing brace makes room for the data.
        return (
            json.dumps(self.template, allow_nan=False)[:-1]
            + f', "data": {{"values": {self.rows}}}}}'
        )

    def _mime_(self) -> tuple[str, str]:
        return MIMETYPE, self.to_json()

    def _image_json(self) -> str:
        """The specification for an image: an image has no container, so a chart that follows
        its container's width is drawn :data:`IMAGE_WIDTH` px wide (vl-convert would fall
        back to a narrow default)."""
        if self.template.get("width") != "container":
            return self.to_json()
        return Chart({**self.template, "width": IMAGE_WIDTH}, self.rows).to_json()

    def png(self, scale: float = 2) -> bytes:
        """A PNG at ``scale`` times the screen resolution."""
        return bytes(
            vl_convert.vegalite_to_png(
                self._image_json(), vl_version=_VL_CONVERT_VERSION, scale=scale
            )
        )

    def svg(self) -> bytes:
        return vl_convert.vegalite_to_svg(
            self._image_json(), vl_version=_VL_CONVERT_VERSION
        ).encode()


def axis_title(field: str) -> str:
    """A field name with its unit: ``output_throughput (output tokens/s)``, ``mean_tpot_ms
    (ms)``."""
    unit = _UNITS.get(field) or ("ms" if field.endswith("_ms") else None)
    return f"{field} ({unit})" if unit else field


def batch_size_axis_title(result: TuningResult) -> str:
    return f"batch size ({result.sweep.batch_size_var})"


def _json_rows(*frames: pl.DataFrame | str) -> str:
    """The frames' rows as one JSON array (Polars writes a float that is not finite as null);
    a string is rows already written, without the brackets."""
    parts = [frame if isinstance(frame, str) else frame.write_json()[1:-1] for frame in frames]
    return "[" + ",".join(part for part in parts if part) + "]"


def build_chart(template: dict[str, Any], *frames: pl.DataFrame | str, **properties: Any) -> Chart:
    """``template`` with ``properties`` (a title) set and the rows of ``frames``."""
    return Chart({**template, **properties}, _json_rows(*frames))


def in_layer(name: str) -> Any:
    """The filter that keeps a layer's own rows: every layer reads the same rows."""
    return alt.datum.layer == name


def layered_template(layer: list[Any], **properties: Any) -> dict[str, Any]:
    """The specification of a chart of ``layer`` (and ``properties``: width, height, title) that
    reads the rows each :class:`Chart` puts in, validated against the schema (once per
    template), without the placeholder data."""
    chart = alt.LayerChart(data=alt.NamedData(name=_ROWS), layer=layer, **properties)
    spec: dict[str, Any] = chart.to_dict()
    del spec["data"]
    return spec


def colour_and_dash(field: str, lines: dict[str, tuple[str, list[int]]], title: str) -> Any:
    """Colour and dash of ``field`` by ``lines`` (name: colour, dash), in one legend."""
    names = list(lines)
    colours, dashes = (list(values) for values in zip(*lines.values(), strict=True))
    legend = alt.Legend(title=title, orient="top")
    return {
        "color": alt.Color(f"{field}:N", scale=alt.Scale(domain=names, range=colours)).legend(
            legend
        ),
        "strokeDash": alt.StrokeDash(
            f"{field}:N", scale=alt.Scale(domain=names, range=dashes)
        ).legend(legend),
    }


def log_batch_size(batch_size_title: str) -> Any:
    return alt.X("batch_size:Q", title=batch_size_title + ", log scale").scale(type="log", base=2)


_K_TITLE = "K (draft tokens per step)"
#: K as a number on the y axis (the schedules), and as one category per K on the x axis (the
#: small charts per batch size).
K_AXIS = alt.Y("k:Q", title=_K_TITLE).axis(tickMinStep=1)
K_CATEGORIES = alt.X("k:O", title=_K_TITLE, axis=alt.Axis(labelAngle=0))


@functools.lru_cache(maxsize=4)
def _notice_template() -> dict[str, Any]:
    """A chart that only says why there is nothing to draw (its rows hold the ``notice``): no
    scale, so no empty extent for Vega to warn about."""
    text = alt.Chart().mark_text(align="left", baseline="middle", fontSize=13, color=NEUTRAL)
    layer = [text.encode(x=alt.value(0), y=alt.value(20), text=alt.Text("notice:N"))]
    return layered_template(layer, width="container", height=40)


def notice_chart(title: str, notice: str) -> Chart:
    """A chart titled ``title`` that only says ``notice``."""
    return build_chart(_notice_template(), pl.DataFrame({"notice": [notice]}), title=title)


def image_grid(charts: list[Chart], columns: int = 4) -> Chart:
    """``charts`` in rows of ``columns``, as one chart for a single PNG or SVG: each keeps its
    own data and title. Raises ValueError when ``charts`` is empty (there is nothing to draw)."""
    if not charts:
        raise ValueError("image_grid needs at least one chart")
    parts = [
        {key: value for key, value in chart.to_dict().items() if key not in ("$schema", "config")}
        for chart in charts
    ]
    template = {"$schema": charts[0].template["$schema"], "columns": columns, "concat": parts}
    # Every part carries its own rows; the grid's own data is an empty placeholder.
    return Chart(template, "[]")


def present_layers(frames: list[pl.DataFrame]) -> frozenset[str]:
    """The ``layer`` names that have rows."""
    return frozenset(name for frame in frames if frame.height for name in frame["layer"].unique())
