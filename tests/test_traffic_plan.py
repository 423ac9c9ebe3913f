"""Measure where the traffic is (lib/traffic_plan.py): the plan's rows ordered by the share of a
given mix each decides, and said; the sweep's own mix changes nothing."""

from __future__ import annotations

import pytest
from paths import SAMPLE_SWEEPS

from lib.analysis import analyse
from lib.deploy.traffic import with_traffic
from lib.deploy.tuning import deploy_analysis
from lib.settings import DeploySettings, Settings
from lib.sweeps import load_experiment
from lib.traffic import mix_of
from lib.traffic_plan import by_traffic

#: real-cpu-tiny-ngram's anchors are 1, 2, 4, 8, all unresolved: a rerun group at each, new
#: anchors at 3 (between 2 and 4) and 6 (between 4 and 8).
SETTINGS = Settings(max_objective_relative_mad=0.2)


def _deployed():  # type: ignore[no-untyped-def]
    analysis = analyse(load_experiment(SAMPLE_SWEEPS / "real-cpu-tiny-ngram"), SETTINGS)
    return deploy_analysis(analysis, DeploySettings())[0]


def test_the_stretch_with_most_traffic_comes_first() -> None:
    deployed = _deployed()
    assert deployed.plan is not None
    found = deployed.plan.reruns["batch_size"].unique(maintain_order=True).to_list()
    assert found == [1, 2, 4, 8]
    # 60 % of the traffic at 4..7 (anchor 4 decides it), 30 % at 8, 10 % at 1.
    mix = mix_of({1: 0.1, 5: 0.3, 6: 0.3, 8: 0.3}, "t.csv", "csv-weights", 4)
    assert mix is not None
    plan = by_traffic(deployed.plan, mix, [1, 2, 4, 8])
    assert plan.reruns["batch_size"].unique(maintain_order=True).to_list() == [4, 8, 1, 2]
    shares = dict(plan.reruns.select("batch_size", "traffic_share").unique().iter_rows())
    assert shares == {4: pytest.approx(0.6), 8: pytest.approx(0.3), 1: pytest.approx(0.1), 2: 0.0}
    # New anchors: 6 lies between 4 and 8 (5 and 6: 60 %), 3 between 2 and 4 (none).
    assert plan.new_anchors["batch_size"].to_list()[:1] == [6]
    assert plan.ordered_by is not None and "batch 4: 60.0%" in plan.ordered_by
    assert plan.to_json()["ordered_by"] == plan.ordered_by


def test_only_a_given_mix_reorders_the_plan() -> None:
    deployed = _deployed()
    assert deployed.plan is not None
    own = with_traffic(deployed, None).plan
    assert own is not None and own.to_json() == deployed.plan.to_json()
    mix = mix_of({5: 1.0}, "t.csv", "csv-weights", 1)
    given = with_traffic(deployed, mix).plan
    assert given is not None and given.ordered_by is not None
