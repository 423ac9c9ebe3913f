"""lib/settings.py: the settings' defaults are the seed's, and every check names its flag."""

from __future__ import annotations

import math

import pytest

from lib.settings import (
    DEFAULT_K_VAR,
    DEFAULT_REPLICA_VAR,
    DEFAULT_SERVER_CV,
    DERIVED_COLUMNS,
    DeploySettings,
    Fields,
    Options,
    Settings,
)


def test_defaults_are_the_seeds() -> None:
    # vLLM PR #49163's defaults (README, "The CLI").
    assert Settings() == Settings(
        objective="output_throughput",
        direction="maximize",
        acceptance=None,
        min_runs=3,
        uncertainty_penalty=1.0,
        max_objective_relative_mad=0.1,
        max_acceptance_relative_mad=0.1,
        strict_acceptance_stability=False,
        relative_tolerance=0.01,
        max_batch_size=None,
        allow_mixed_global_k=False,
    )
    assert Fields() == Fields("max_concurrency", DEFAULT_K_VAR)
    assert Options() == Options("seed", 0.9, 49163, False, DEFAULT_SERVER_CV)
    assert Fields().replica_var == DEFAULT_REPLICA_VAR == "seed"


def test_default_settings_are_valid() -> None:
    assert Settings().invalid() == []
    assert Settings(direction="minimize", min_runs=1, relative_tolerance=0.0).invalid() == []
    assert Settings(design_ks=(0,)).invalid() == []


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"direction": "up"}, "--objective-direction 'up': expected maximize/minimize"),
        ({"min_runs": 0}, "--min-runs 0: expected >= 1"),
        ({"design_ks": (0, -1)}, "--design-ks 0,-1: expected distinct K >= 0"),
        ({"design_ks": (0, 3, 3)}, "--design-ks 0,3,3: expected distinct K >= 0"),
        ({"uncertainty_penalty": -1.0}, "--uncertainty-penalty -1.0: expected a finite number"),
        ({"max_objective_relative_mad": math.nan}, "--max-objective-relative-mad nan: expected"),
        ({"max_acceptance_relative_mad": math.inf}, "--max-acceptance-relative-mad inf: expected"),
        ({"relative_tolerance": 1.0}, "--relative-tolerance 1.0: expected in [0, 1)"),
        ({"max_batch_size": 0}, "--max-batch-size 0: expected >= 1"),
        ({"objective": "source"}, "--objective-var 'source': a column tune-spec-k derives"),
        ({"objective": "k"}, "--objective-var 'k': a column tune-spec-k derives"),
        ({"acceptance": "anchor"}, "--acceptance-var 'anchor': a column tune-spec-k derives"),
    ],
)
def test_each_invalid_setting_is_named_by_its_flag(changes: dict[str, object], reason: str) -> None:
    (found,) = Settings(**changes).invalid()  # type: ignore[arg-type]
    assert found.startswith(reason)


def test_maximize_follows_the_direction() -> None:
    assert Settings().maximize and not Settings(direction="minimize").maximize


@pytest.mark.parametrize("name", DERIVED_COLUMNS)
def test_no_derived_column_is_a_measurement(name: str) -> None:
    for chosen in (Settings(objective=name), Settings(acceptance=name)):
        (found,) = chosen.invalid()
        assert "not a measurement" in found
        # A record's own field of that name is read under another name, which is fine.
        renamed = f"'record.{name}'"
        assert (renamed in found) == (name != "run_number")
    assert Settings(objective=f"record.{name}").invalid() == []


@pytest.mark.parametrize("name", ["max_cudagraph_capture_size", "max_num_seqs"])
def test_deploy_settings_beyond_every_count_are_invalid(name: str) -> None:
    """Issue 38: settings built in code (the app, the loop) have the flags' limit, 2^31 - 1."""
    assert DeploySettings(**{name: 2**31 - 1}).invalid() == []  # type: ignore[arg-type]
    for beyond in (2**31, 10**300):
        (reason,) = DeploySettings(**{name: beyond}).invalid()  # type: ignore[arg-type]
        assert reason.endswith(f"{beyond}: expected a whole number up to 2147483647")
        assert reason.startswith("--max-")
