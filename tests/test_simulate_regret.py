"""bench/simulate_regret.py's server-offset families (issue 23): how offsets are shared, the
serve combo names of replicas, and the rule that decides which rows are checked."""

from __future__ import annotations

from typing import Any

import numpy as np
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


def test_within_the_bound_is_the_point_estimate_at_most_one_minus_the_confidence() -> None:
    assert simulator.within_bound(10 / 100, 0.9)  # exactly at the bound
    assert not simulator.within_bound(0.1001, 0.9)
    assert simulator.within_bound(0.0, 0.95)
    assert not simulator.within_bound(0.0501, 0.95)


def _results(bad: tuple[int, float, float]) -> list[dict[str, object]]:
    """Every family and assumed server_cv: 10 resolved, none wrong, at each level; except
    ``bad`` (family index, server_cv, level): 5 of its 10 wrong."""
    rows = []
    for index, family in enumerate(simulator.SERVER_FAMILIES):
        for server_cv in family.assumed_server_cvs():
            row: dict[str, object] = {"family": index, "server_cv": server_cv}
            for level in simulator.CONFIDENCE_LEVELS:
                wrong = 5 if (index, server_cv, level) == bad else 0
                row |= {
                    f"resolved_{level}": 10,
                    f"wrong_resolved_{level}": wrong,
                    f"clear_unresolved_{level}": 0,
                }
            rows.append(row)
    return rows


def test_only_rows_where_the_assumption_holds_can_miss_and_every_row_is_printed() -> None:
    families = simulator.SERVER_FAMILIES
    index = next(
        i for i, f in enumerate(families) if f.servers.replicas == 1 and f.servers.offset_sd == 0.02
    )
    family = families[index]
    failing = simulator.summarise_families(_results((index, 0.0, 0.9)))
    assert simulator.missed_family_targets(failing) == []  # server_cv 0 < 0.02: no target
    rows = simulator.family_markdown(failing).splitlines()[2:]
    assert len(rows) == sum(len(f.assumed_server_cvs()) for f in families) == failing.height
    labelled = [line for line in rows if "| 50.0%* [" in line]
    assert len(labelled) == 1 and "| 0% | does not hold |" in labelled[0]
    held = simulator.summarise_families(_results((index, 0.02, 0.9)))
    missed = simulator.missed_family_targets(held)
    servers = family.servers
    assert missed == [
        f"{servers.structure} offsets of 0.02, {len(family.k_values)} K, run CV"
        f" {family.noise_cv:g}, 1 x {family.runs_per_server} runs, server_cv 0.02:"
        " wrong among resolved at 0.9 above 10%"
    ]
