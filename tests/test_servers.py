"""lib/servers.py: a serve combo's configuration and replica marker, in Python and in Polars."""

from __future__ import annotations

import polars as pl
import pytest

from lib.servers import (
    SERVE_COMBO,
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
    folder = pl.DataFrame({"combo": [f"exp/SERVE--{name}-BENCH--c1"]})
    assert folder.select(configuration_expression(var)).item() == configuration


def test_a_planned_name_reads_back() -> None:
    name = replica_combo_name("k3", "seed", 2)
    assert (configuration_of(name), replica_of(name)) == ("k3", "2")


def test_each_run_gets_its_own_folders_name() -> None:
    """Computed once per distinct folder, given back per run: the same as the regex on every
    run, in the frame's order, with repeated, unsorted and null folders and none at all."""
    combos = [
        "b/SERVE--k3-seed=1-BENCH--c2",
        None,
        "a/SERVE--k0-BENCH--c1",
        "odd/folder",
        "b/SERVE--k3-seed=1-BENCH--c2",
        "a/SERVE--k1-seed=0-BENCH--c1",
        None,
        "SERVE--k0-BENCH--c9",
    ]
    for runs in (combos, list(reversed(combos)), [None, None], []):
        frame = pl.DataFrame({"combo": runs}, schema={"combo": pl.Utf8})
        per_run = pl.col("combo").str.extract(SERVE_COMBO, 1)
        expected = frame.select(
            per_run.alias("serve"), per_run.str.replace_all("-?seed=[^-]*", "").alias("config")
        )
        got = frame.select(
            serve_combo_expression().alias("serve"), configuration_expression().alias("config")
        )
        assert got.rows() == expected.rows()


def test_serve_combo_of_a_folder() -> None:
    combos = pl.DataFrame(
        {"combo": ["exp/SERVE--k3-seed=1-BENCH--c4-seed0", "SERVE--k0-BENCH--c1", "odd/folder"]}
    )
    assert combos.select(serve_combo_expression())["combo"].to_list() == [
        "k3-seed=1",
        "k0",
        None,
    ]
