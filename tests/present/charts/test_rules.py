"""The seed's rule against the confident rule (lib/present/charts/rules.py)."""

from __future__ import annotations

from pathlib import Path

from chart_specs import analysis_of, layer_with_mark, spec_values

from lib.policy import apply_policy
from lib.present.charts.rules import RULES, rules_chart
from lib.schedule import Schedule


def test_rules_chart_draws_both_rules_and_marks_where_they_differ(tmp_path: Path) -> None:
    # Batch size 1: K=3's runs 140/160/180 have median 160 and MAD 20, so the seed's score is
    # 160 - 1.4826 x 20 = 130.3, below K=1's 150: the seed picks K=1. K=3's geometric mean (159)
    # is 6 % above K=1's, more than the tolerance: the confident rule leans to K=3. Batch size
    # 64: K=0 wins by far under both rules.
    runs = {
        (1, 0): [100.0] * 3,
        (1, 1): [150.0] * 3,
        (1, 3): [140.0, 160.0, 180.0],
        (64, 0): [200.0] * 3,
        (64, 1): [100.0] * 3,
        (64, 3): [90.0] * 3,
    }
    analysis = analysis_of(tmp_path, runs)
    assert analysis.report is not None
    seed = analysis.seed_result
    confident = apply_policy(seed, analysis.report, "confident")
    assert seed.schedule == Schedule(((1, 63, 1), (64, 64, 0)))
    assert confident.schedule == Schedule(((1, 63, 3), (64, 64, 0)))
    spec = rules_chart(seed, confident).to_dict()
    rows = spec_values(spec)
    steps = {
        rule: [
            (row["batch_size"], row["k"])
            for row in rows
            if row["layer"] == "step" and row["line"] == rule
        ]
        for rule in RULES
    }
    assert steps == {"seed": [(1, 1), (64, 0), (64, 0)], "confident": [(1, 3), (64, 0), (64, 0)]}
    picks = {
        (row["line"], row["batch_size"]): (row["k"], row["differs"])
        for row in rows
        if row["layer"] == "pick"
    }
    assert picks == {
        ("seed", 1): (1, True),
        ("confident", 1): (3, True),
        ("seed", 64): (0, False),
        ("confident", 64): (0, False),
    }
    assert "1 of 2 anchor(s) pick a different K" in str(spec["title"])
    band = layer_with_mark(spec, "rule")
    assert "differs" in str(band["transform"])
