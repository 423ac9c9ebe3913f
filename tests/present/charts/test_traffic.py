"""The traffic mix under the headline (lib/present/charts/traffic.py): one bar per batch size of
the mix with its share and what backs it, the three answers in the title, no chart unweighed."""

from __future__ import annotations

import pytest
from chart_specs import spec_values
from paths import SAMPLE_SWEEPS

from lib.app import context as app_context
from lib.deploy.traffic import traffic_in
from lib.present.charts.traffic import MIX_STATUSES, traffic_chart
from lib.settings import DeploySettings, Options, Settings
from lib.sweeps import load_experiment
from lib.traffic import mix_of

MEASURED, INTERPOLATED, ABOVE = MIX_STATUSES


def test_the_bars_are_the_mix_and_the_title_the_answers() -> None:
    # sonnet-like's anchors are 1, 64, 128, 256: 1 and 64 measured, 8 between, 300 above.
    mix = mix_of({1: 2.0, 8: 1.0, 64: 1.0, 300: 1.0}, "t.csv", "csv-weights", 4)
    shown = app_context.analyse_sweep(
        load_experiment(SAMPLE_SWEEPS / "sonnet-like"),
        Settings(),
        Options(),
        None,
        None,
        DeploySettings(),
        mix,
    )
    chart = traffic_chart(shown.analysis.result)
    assert chart is not None
    spec = chart.to_dict()
    rows = {row["batch_size"]: (row["share_percent"], row["status"]) for row in spec_values(spec)}
    assert rows == {
        1: (pytest.approx(40.0), MEASURED),
        8: (pytest.approx(20.0), INTERPOLATED),
        64: (pytest.approx(20.0), MEASURED),
        300: (pytest.approx(20.0), ABOVE),
    }
    assert spec["title"]["text"] == "The mix of batch sizes: your traffic"
    subtitle = " ".join(spec["title"]["subtitle"])
    # The answers the CLI's traffic line gives: at 1 (half of the weighed mix) K=7 makes
    # 315 tok/s against K=0's 208, at 64 K=0 3555 against K=7's less: static K=0 is the best.
    value = traffic_in(shown.analysis.result)
    assert value is not None and value.k0 is not None and value.best_static is not None
    assert value.best_static.k == 0
    assert f"{value.k0.gain_text()} over K=0, no speculation (also the best static K)" in subtitle
    assert all(answer in value.line() for answer in value.answers())
    assert "[90% interval]" in subtitle


def test_without_a_weighed_mix_there_is_no_chart() -> None:
    from lib.analysis import analyse

    result = analyse(load_experiment(SAMPLE_SWEEPS / "sonnet-like"), Settings()).result
    assert traffic_chart(result) is None
