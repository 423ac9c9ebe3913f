"""lib/numbers.py: one way to write each kind of number."""

from __future__ import annotations

import pytest

from lib.numbers import percent_text, probability_text, signed_percent_text


@pytest.mark.parametrize(
    ("p", "shown"),
    [
        # Rounded down, never up: a P just below a threshold never reads as the threshold.
        (0.8999, "0.89"),
        (0.9, "0.90"),
        (0.7664, "0.76"),
        (0.9996, "0.99"),
        (1.0, "1.00"),
        # Binary noise: 0.29 is 0.28999999999999998 as a float and still reads 0.29.
        (0.29, "0.29"),
        (0.0, "0.00"),
        (None, "unknown"),
    ],
)
def test_a_probability_is_rounded_down_to_two_decimals(p: float | None, shown: str) -> None:
    assert probability_text(p) == shown


def test_percents_have_one_form_each() -> None:
    assert percent_text(16.77) == "16.8%"
    assert signed_percent_text(0.0) == "+0.00%"
    assert signed_percent_text(-0.004) == "-0.00%"
    assert signed_percent_text(None) == "n/a"


def test_an_objective_reads_as_the_seed_prints_its_medians_and_the_tables_round_it() -> None:
    # The seed prints medians with "%.2f"; the app's decision table rounds them to the same
    # decimals, so the CLI's "median=93.06" is the table's 93.06.
    import polars as pl

    from lib.numbers import OBJECTIVE_DECIMALS, objective_text

    for value in (93.0649, 0.005, 1911.135, 605.0):
        assert objective_text(value) == "%.2f" % value  # noqa: UP031 (the seed's own format)
        rounded = pl.Series([value]).round(OBJECTIVE_DECIMALS)[0]
        assert float(objective_text(value)) == pytest.approx(rounded, abs=0.01)
