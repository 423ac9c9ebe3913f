"""What the P(eps-good) rest on, over a sweep (lib/noise_summary.py): the sentences and the
pooling of a context grid's points, derived by hand."""

from __future__ import annotations

import math

import pytest

from lib.noise_summary import RunNoise, ServerNoise, combined_servers, relative_sd


def test_run_noise_statement_says_borrowed_and_assumed_and_nothing_when_measured() -> None:
    assert RunNoise(0.02, measured_at=(1, 8)).statement() is None
    borrowed = RunNoise(0.02, (1, 16), (4,), (), (1, 16), 4, 8)
    assert borrowed.statement() == (
        "single-run batch sizes 4: run noise borrowed from batch sizes 1, 16 (4 cells, 8"
        " degrees of freedom) through a noise model over batch size"
    )
    assumed = RunNoise(0.03, assumed_at=(1, 2))
    assert assumed.statement() == (
        "no replicate runs: P(eps-good) assumes runs vary by 3.0% (--run-cv; measure it with"
        " the noise probe of `tune-spec-k plan --design lean`)"
    )


def test_server_statement_is_none_where_no_p_is_known() -> None:
    # Neither measured nor assumed anywhere: no anchor states a P, so nothing is assumed.
    assert ServerNoise(0.01).statement() is None
    assert ServerNoise(0.01, assumed_at=(1,)).statement() == (
        "no server replicas: P(eps-good) assumes servers vary by at most 1.0% (--server-cv;"
        " measure it with tune-spec-k plan --server-replicas)"
    )


def test_combined_servers_pool_the_measured_sd_by_degrees_of_freedom() -> None:
    # sqrt((2 * 0.01^2 + 6 * 0.03^2) / 8) = sqrt(0.0056 / 8) = 0.026458
    a = ServerNoise(0.01, (1,), (), 0.01, 2)
    b = ServerNoise(0.01, (8,), (), 0.03, 6)
    combined = combined_servers([(512, a), (2048, b)], 0.01)
    assert combined.measured_sd == pytest.approx(math.sqrt(0.0056 / 8))
    assert combined.measured_df == 8 and combined.measured_at == (1, 8)
    assert [p.prompt_tokens for p in combined.points] == [512, 2048]
    # Nothing measured at either point: no pooled sd (not 0).
    none = combined_servers([(512, ServerNoise(0.01, (), (1,)))], 0.01)
    assert none.measured_sd is None and none.runs is None


def test_relative_sd_inverts_the_log_variance() -> None:
    # A log-normal of relative sd cv has var(log) = log(1 + cv^2); back: sqrt(expm1(var)).
    cv = 0.05
    assert relative_sd(math.sqrt(math.log1p(cv**2))) == pytest.approx(cv)
    assert relative_sd(0.0) == 0.0
