"""The headline's K track (lib/present/charts/k_track.py): the deployed schedule at every batch
size, and what backs it.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from chart_specs import mark_layers, spec_values
from paths import SAMPLE_SWEEPS

from lib.app import context as app_context
from lib.present.charts.headline import headline_chart
from lib.schedule import TuningResult
from lib.settings import DeploySettings, Options, Settings
from lib.sweeps import load_experiment

#: sonnet-like's measured anchors (every K of 0, 1, 3, 7 kept at each, data/sample_sweeps).
SONNET_ANCHORS = (1, 64, 128, 256)


def _deployed(deploy: DeploySettings, options: Options) -> tuple[TuningResult, dict[str, Any]]:
    shown = app_context.analyse_sweep(
        load_experiment(SAMPLE_SWEEPS / "sonnet-like"), Settings(), options, None, None, deploy
    )
    result = shown.analysis.result
    return result, headline_chart(result, shown.analysis.report).to_dict()


def _track_at(rows: list[dict[str, Any]], batch_size: int) -> tuple[int, str]:
    """The K and status the K track draws at ``batch_size`` (exactly one stretch holds it)."""
    (row,) = [r for r in rows if r["layer"] == "deployed" and r["lo"] <= batch_size <= r["hi"]]
    return row["k"], row["status"]


@pytest.mark.parametrize(
    ("deploy", "options", "expected"),
    [
        # README's quick start: the step schedule switches at the upper anchor 64.
        (DeploySettings(), Options(), [[1, 63, 7], [64, 256, 0]]),
        # README's switch points: the curves cross at 21.0, so the interpolated one at 21.
        (DeploySettings(), Options(interpolated_schedule=True), [[1, 20, 7], [21, 256, 0]]),
        # README's Deployment: on vLLM 0.33 (the token rule b * (1 + K) <= C), C=256 caps
        # K'(b) = min(7, floor(256 / b) - 1) from 33 to 63.
        (
            DeploySettings(max_cudagraph_capture_size=256, vllm_version="0.33.0"),
            Options(),
            [[1, 32, 7], [33, 36, 6], [37, 42, 5], [43, 51, 4], [52, 63, 3], [64, 256, 0]],
        ),
    ],
    ids=["step", "interpolated", "capped"],
)
def test_headline_k_track_draws_the_deployed_schedule(
    deploy: DeploySettings, options: Options, expected: list[list[int]]
) -> None:
    result, spec = _deployed(deploy, options)
    assert result.schedule is not None and result.schedule.to_json() == expected
    rows = [row for row in spec_values(spec) if row["layer"] == "deployed"]
    # Stretches of equal K merged give back the schedule's ranges; each is drawn from its
    # first batch size to the next one's (no gap, no overlap), the last to its own end.
    merged: list[list[int]] = []
    for row in rows:
        if merged and merged[-1][2] == row["k"] and merged[-1][1] + 1 == row["lo"]:
            merged[-1][1] = row["hi"]
        else:
            merged.append([row["lo"], row["hi"], row["k"]])
    assert merged == expected
    assert [row["batch_size"] for row in rows] == [row["lo"] for row in rows]
    assert [row["batch_size_end"] for row in rows] == [
        *(row["lo"] for row in rows[1:]),
        rows[-1]["hi"],
    ]
    # A vertical jump at each range start where K changes, from the K before to the one after.
    jumps = [
        (r["batch_size"], r["k"], r["k_to"]) for r in spec_values(spec) if r["layer"] == "jump"
    ]
    assert jumps == [
        (lo, before[2], k) for before, (lo, _, k) in itertools.pairwise(expected) if before[2] != k
    ]


@pytest.mark.parametrize(("capture", "interpolated"), [(None, False), (None, True), (256, False)])
def test_headline_k_track_marks_what_was_measured_at_every_batch_size(
    capture: int | None, interpolated: bool
) -> None:
    # vLLM 0.33's token rule, the one the cap below states.
    result, spec = _deployed(
        DeploySettings(max_cudagraph_capture_size=capture, vllm_version="0.33.0"),
        Options(interpolated_schedule=interpolated),
    )
    assert result.schedule is not None
    tuned = _deployed(DeploySettings(), Options(interpolated_schedule=interpolated))[0].schedule
    assert tuned is not None
    rows = spec_values(spec)
    # Every batch size, both sides of each boundary: capped where the cap K'(b) = min(D(b),
    # floor(C / b) - 1) is below the tuned K; measured at an anchor (every K was kept there);
    # not measured everywhere else.
    for batch in range(1, 257):
        cap = tuned.k_at(batch) if capture is None else min(tuned.k_at(batch), capture // batch - 1)
        if cap < tuned.k_at(batch):
            status = "capped, not measured"
        elif batch in SONNET_ANCHORS:
            status = "measured"
        else:
            status = "not measured"
        assert _track_at(rows, batch) == (result.schedule.k_at(batch), status), batch
    legend = {
        status
        for layer in mark_layers(spec)
        for status in layer["encoding"].get("strokeDash", {}).get("scale", {}).get("domain", [])
    }
    assert "capped, not measured" in legend if capture else "capped, not measured" not in legend
    assert "not measured" in str(spec["title"]["subtitle"])


def test_headline_k_track_is_absent_while_the_result_has_errors(result: TuningResult) -> None:
    # RUNS' noise-gate error: no schedule is written, so none is drawn.
    assert not result.ok
    layers = {row["layer"] for row in spec_values(headline_chart(result, None).to_dict())}
    assert not layers & {"deployed", "jump"}
