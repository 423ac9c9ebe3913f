"""lib/servers.py: a serve combo's configuration and replica marker, in Python and in Polars."""

from __future__ import annotations

import polars as pl
import pytest

from lib.servers import (
    configuration_expression,
    configuration_of,
    replica_combo_name,
    replica_of,
    serve_combo_expression,
)

CASES = [
    # (serve combo name, marker, configuration, replica)
    ("k3-seed=1", "seed", "k3", "1"),
    ("seed=2-max_num_seqs=8", "seed", "max_num_seqs=8", "2"),
    ("a-seed=1-b", "seed", "a-b", "1"),
    ("seed=3", "seed", "", "3"),
    ("k3", "seed", "k3", None),
    # A longer key that starts like the marker is not the marker, on either side of it.
    ("k3-seedling=1", "seed", "k3-seedling=1", None),
    ("k3-myseed=1", "seed", "k3-myseed=1", None),
    # Another marker, with a regex character in its name.
    ("k3-rep.id=4", "rep.id", "k3", "4"),
    ("k3-repxid=4", "rep.id", "k3-repxid=4", None),
]


@pytest.mark.parametrize(("name", "var", "configuration", "replica"), CASES)
def test_configuration_and_replica(
    name: str, var: str, configuration: str, replica: str | None
) -> None:
    assert configuration_of(name, var) == configuration
    assert replica_of(name, var) == replica
    # The Polars expression (Rust's regex) strips the same part.
    polars = pl.select(configuration_expression(pl.lit(name), var)).item()
    assert polars == configuration


def test_a_planned_name_reads_back() -> None:
    name = replica_combo_name("k3", "seed", 2)
    assert (configuration_of(name), replica_of(name)) == ("k3", "2")


def test_serve_combo_of_a_folder() -> None:
    combos = pl.DataFrame(
        {"combo": ["exp/SERVE--k3-seed=1-BENCH--c4-seed0", "SERVE--k0-BENCH--c1", "odd/folder"]}
    )
    assert combos.select(serve_combo_expression())["combo"].to_list() == [
        "k3-seed=1",
        "k0",
        None,
    ]
