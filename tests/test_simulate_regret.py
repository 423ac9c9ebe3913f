"""bench/simulate_regret.py's server-offset families (issue 23): how offsets are shared, the
serve combo names of replicas, and the rule that decides which rows are checked."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from bench_scripts import load_bench_script

from lib.schedule import tune
from lib.servers import configuration_of, replica_of, serve_combo_expression
from lib.settings import DEFAULT_SERVER_CV, Settings

simulator = load_bench_script("simulate_regret")
EIGHT_K = tuple(range(8))


def _offsets(
    structure: str, sd: float = 0.02, replicas: int = 3
) -> dict[tuple[int, int, int], float]:
    servers = simulator.Servers(structure, sd, replicas)
    return simulator.server_offsets(servers, EIGHT_K, np.random.default_rng(7))


def test_a_per_k_server_offset_is_shared_by_every_anchor_and_differs_between_servers() -> None:
    offsets = _offsets("per-K-server")
    by_server: dict[tuple[int, int], set[float]] = {}
    for (_, k, replica), offset in offsets.items():
        by_server.setdefault((k, replica), set()).add(offset)
    assert len(offsets) == len(simulator.ANCHORS) * 8 * 3
    assert all(len(values) == 1 for values in by_server.values())  # one offset per server
    assert len({values.pop() for values in by_server.values()}) == 8 * 3  # 24 servers, 24 draws


def test_per_cell_servers_each_have_their_own_offset_with_the_given_sd() -> None:
    offsets = _offsets("per-cell-server")
    assert len(set(offsets.values())) == len(simulator.ANCHORS) * 8 * 3  # 120 draws, distinct
    # The log-SD of 120 draws is within about 13 % of the truth at 95 %; 25 % leaves room.
    assert np.std(np.log(list(offsets.values())), ddof=1) == pytest.approx(0.02, rel=0.25)


def test_an_unknown_structure_is_refused() -> None:
    with pytest.raises(ValueError, match="per-anchor"):
        _offsets("per-anchor")


@pytest.mark.parametrize("structure", ["per-K-server", "per-cell-server"])
@pytest.mark.parametrize("replicas", [1, 3])
def test_measured_runs_are_truth_times_their_servers_offset_on_combos_lib_servers_reads(
    structure: str, replicas: int
) -> None:
    """Without run noise (CV 0) a run is the truth times its server's offset; the offsets are
    redrawn here from the same seed (measure draws them first). Replicas are serve combos
    ``k<K>-seed=<r>`` that lib.servers reads as one configuration, ``k<K>``; without replicas
    the name has no marker. The policy takes them as one cell each (no pooled-servers)."""
    model = simulator.draw_model(np.random.default_rng(1))
    servers = simulator.Servers(structure, 0.03, replicas)
    sweep = simulator.measure(
        model, 0.0, 3, "none", np.random.default_rng(5), k_values=EIGHT_K, servers=servers
    )
    offsets = simulator.server_offsets(servers, EIGHT_K, np.random.default_rng(5))
    runs = sweep.runs.with_columns(serve_combo_expression().alias("serve"))
    assert runs.height == len(simulator.ANCHORS) * 8 * replicas * 3
    for row in runs.iter_rows(named=True):
        replica = replica_of(row["serve"])
        assert configuration_of(row["serve"]) == f"k{row['k']}"
        assert row["combo"].endswith(f"-BENCH--c{row['anchor']}")
        assert replica in ({None} if replicas == 1 else {"0", "1", "2"})
        number = 0 if replica is None else int(replica)
        expected = (
            model.throughput(row["anchor"], row["k"]) * offsets[row["anchor"], row["k"], number]
        )
        assert row["output_throughput"] == pytest.approx(expected, rel=1e-12)
    assert sorted(runs["serve"].unique()) == sorted(
        f"k{k}" if replicas == 1 else f"k{k}-seed={r}" for k in EIGHT_K for r in range(replicas)
    )
    result = tune(sweep, Settings(max_objective_relative_mad=simulator.GATE_OFF))
    assert result.ok, [p.describe() for p in result.errors]


def test_without_servers_a_sweep_has_todays_names_and_no_offsets() -> None:
    model = simulator.draw_model(np.random.default_rng(1))
    sweep = simulator.measure(model, 0.0, 3, "none", np.random.default_rng(5))
    assert set(sweep.runs["combo"]) == {
        f"SERVE--k{k}-BENCH--c{a}" for k in simulator.K_VALUES for a in simulator.ANCHORS
    }
    truth = [model.throughput(a, k) for a, k in sweep.runs.select("anchor", "k").iter_rows()]
    assert sweep.runs["output_throughput"].to_list() == pytest.approx(truth, rel=1e-12)


def test_the_assumption_holds_with_replicas_or_a_server_cv_at_least_the_truth() -> None:
    holds = simulator.assumption_holds
    assert holds(1, 0.02, 0.02)  # equal: the model states the offsets exactly
    assert not holds(1, float(np.nextafter(0.02, 0.0)), 0.02)  # the least bit smaller
    assert holds(1, 0.03, 0.02)
    assert not holds(1, 0.0, 0.01)
    assert holds(3, 0.0, 0.03)  # replicas: measured, whatever server_cv says
    assert holds(1, 0.0, 0.0)


def test_the_server_cvs_assumed_without_replicas_are_none_the_default_and_the_truth() -> None:
    def family(sd: float, replicas: int) -> Any:
        return simulator.ServerFamily(
            simulator.Servers("per-K-server", sd, replicas), EIGHT_K, 0.01, 3
        )

    assert DEFAULT_SERVER_CV == 0.01  # the rows below are written for this default
    assert family(0.01, 1).assumed_server_cvs() == (0.0, 0.01)  # the truth is the default
    assert family(0.03, 1).assumed_server_cvs() == (0.0, 0.01, 0.03)
    assert family(0.03, 3).assumed_server_cvs() == (DEFAULT_SERVER_CV,)


def test_a_share_at_the_bound_is_within_and_the_least_bit_above_is_starred() -> None:
    assert simulator.within_bound(10 / 100, 0.9)  # 1 - 0.9 is 0.09999999999999998 unrounded
    assert not simulator.within_bound(0.1001, 0.9)
    assert simulator.within_bound(0.0, 0.95)
    assert not simulator.within_bound(0.0501, 0.95)


def test_a_cell_misses_only_when_its_whole_interval_is_above_the_bound() -> None:
    assert not simulator.shown_over_bound(0.1, 0.9)  # the lower end at the bound: not above
    assert simulator.shown_over_bound(0.1001, 0.9)
    assert not simulator.shown_over_bound(0.0, 0.95)  # no resolved anchor: interval (0, 1)
    # 1 wrong of 4 at 0.95 is 25 %, but its interval reaches down past 5 %: no miss.
    low, _ = simulator.wilson(1, 4)
    assert low < 0.05 and not simulator.shown_over_bound(low, 0.95)


def _results(bad: tuple[int, float, float], wrong: int) -> list[dict[str, object]]:
    """Every family and assumed server_cv: 10 resolved, none wrong, at each level; except
    ``bad`` (family index, server_cv, level): ``wrong`` of its 10 wrong."""
    rows = []
    for index, family in enumerate(simulator.SERVER_FAMILIES):
        for server_cv in family.assumed_server_cvs():
            row: dict[str, object] = {"family": index, "server_cv": server_cv}
            for level in simulator.CONFIDENCE_LEVELS:
                row |= {
                    f"resolved_{level}": 10,
                    f"wrong_resolved_{level}": wrong if (index, server_cv, level) == bad else 0,
                    f"clear_unresolved_{level}": 0,
                }
            rows.append(row)
    return rows


def test_only_rows_where_the_assumption_holds_can_miss_and_every_row_is_printed() -> None:
    """5 wrong of 10 at 0.9: 50 %, Wilson interval [23.7, 76.3] %, wholly above 10 %."""
    families = simulator.SERVER_FAMILIES
    index = next(
        i for i, f in enumerate(families) if f.servers.replicas == 1 and f.servers.offset_sd == 0.02
    )
    family = families[index]
    failing = simulator.summarise_families(_results((index, 0.0, 0.9), 5))
    assert simulator.missed_family_targets(failing) == []  # server_cv 0 < 0.02: no target
    rows = simulator.family_markdown(failing).splitlines()[2:]
    assert len(rows) == sum(len(f.assumed_server_cvs()) for f in families) == failing.height
    labelled = [line for line in rows if "| 50.0%*! [" in line]
    assert len(labelled) == 1 and "| 0% | does not hold |" in labelled[0]
    held = simulator.summarise_families(_results((index, 0.02, 0.9), 5))
    assert simulator.missed_family_targets(held) == [
        f"{family.servers.structure} offsets of 0.02, {len(family.k_values)} K, run CV"
        f" {family.noise_cv:g}, 1 x {family.runs_per_server} runs, server_cv 0.02:"
        " wrong among resolved at 0.9 above 10% (its whole 95 % interval)"
    ]
    # 2 of 10 (20 %, interval [5.7, 51.0] %): over the bound, starred, not shown over: no miss.
    unsure = simulator.summarise_families(_results((index, 0.02, 0.9), 2))
    assert simulator.missed_family_targets(unsure) == []
    assert sum("| 20.0%* [" in line for line in simulator.family_markdown(unsure).splitlines()) == 1


def test_the_pooled_table_sums_the_rows_of_each_k_set_and_label() -> None:
    families = simulator.SERVER_FAMILIES
    index = next(i for i, f in enumerate(families) if f.servers.replicas == 3)
    family = families[index]
    table = simulator.summarise_families(_results((index, simulator.DEFAULT_SERVER_CV, 0.8), 3))
    lines = simulator.pooled_markdown(table).splitlines()[2:]
    assert len(lines) == 2 * len(simulator.FAMILY_K_SETS)
    held = table.filter((pl.col("k_count") == len(family.k_values)) & pl.col("holds"))
    # 10 resolved per row; the bad row's 3 wrong at 0.8 are the only ones.
    expected = (
        f"| {len(family.k_values)} | holds | {held.height} | {300 / (10 * held.height):.1f}% ["
    )
    assert [line for line in lines if line.startswith(expected)] != []


def test_a_family_trial_assesses_its_sweep_at_every_assumed_server_cv_and_level() -> None:
    families = simulator.SERVER_FAMILIES
    index = next(
        i
        for i, f in enumerate(families)
        if f.servers.replicas == 1 and f.servers.offset_sd == 0.03 and len(f.k_values) == 8
    )
    rows = simulator.run_family_trial((index, 0, 200))
    assert [row["server_cv"] for row in rows] == [0.0, DEFAULT_SERVER_CV, 0.03]
    for row in rows:
        assert row["family"] == index
        for level in simulator.CONFIDENCE_LEVELS:
            assert 0 <= row[f"wrong_resolved_{level}"] <= row[f"resolved_{level}"] <= 5
