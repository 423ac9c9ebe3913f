"""Lean sweeps (issue 40): one run per (anchor, K), with and without a noise probe, checked
for calibration and decisiveness on simulated sweeps with a known truth.

    uv run python bench/simulate_regret.py --families lean [--lean-trials 200]
        [--lean-seed 42_2026] [--workers 2]

The truth model, anchors (1, 4, 16, 64, 256) and scoring are bench/simulate_regret.py's (a
pick is wrong when its true throughput is more than 1 % below the best K's). The families:

- **K**: 0-4 and 0-7 (close calls).
- **Run noise** that changes x4 from batch 1 to 256, log-linear in log batch size, growing or
  shrinking, from 0.5 to 2 % or from 1 to 4 % (lognormal).
- **Server offsets**: one per K, shared by every anchor (the seed's design, one server per
  K), SD 1 or 2 %; the model is told the truth (``--server-cv`` = the offset SD), so only
  the run-noise assumption is varied.
- **Design**: one run per cell; or one run per cell plus a noise probe: at the smallest, the
  middle and the largest anchor (1, 16, 256), the two K with the best first run get two more
  runs (3 each): 12 more runs, 4 degrees of freedom at each probed anchor.
- **The model's setting**: with probes the noise is measured at the probed anchors and
  borrowed by the others (``--run-cv`` unused); without, ``--run-cv`` at the default (2 %) and
  at the true noise's largest value (the truth may be the default).

**The assumption** holds where the sweep has probes, or ``--run-cv`` is at least the true run
noise at every anchor (and, here always, ``--server-cv`` at least the offsets). A row where it
holds misses when a cell's 95 % Wilson interval lies wholly above its bound
(:func:`simulate_regret.shown_over_bound`); rows where it does not hold are printed and
labelled, with no target.

**Decisiveness** (issue 40, item 5): the share of the clear anchors (the best K more than
twice the tolerance ahead of the runner-up) that resolve at 0.9, and of the anchors whose best
K leads by more than 10 %.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from simulate_regret import (
    ANCHORS,
    CONFIDENCE_LEVELS,
    FAMILY_K_SETS,
    GATE_OFF,
    TOLERANCE,
    Model,
    clear_winner,
    draw_model,
    missed_cells,
    resolution_counts,
    resolved_and_wrong_cells,
    sweep_of,
    wilson,
    wrong_among_resolved,
)

from lib.confidence import ConfidenceSettings, assess
from lib.schedule import tune
from lib.settings import DEFAULT_CONFIDENCE, DEFAULT_RUN_CV, Settings
from lib.sweeps import Sweep

#: The noise changes this many times from the first anchor to the last.
NOISE_RANGE = 4.0
#: The quietest anchor's run noise.
LOW_CVS = (0.005, 0.01)
#: Per-K server offsets (SD, log scale).
LEAN_OFFSET_SDS = (0.01, 0.02)
#: The anchors of the noise probe, and how many runs its cells get.
PROBE_ANCHORS = (1, 16, 256)
PROBE_RUNS = 3
PROBE_KS = 2
#: A lead this large (best over runner-up) must resolve from one run per cell.
BIG_GAP = 0.10
#: Seed of the lean families' published sweeps (the check): 40_2026 found the lapse needed
#: (lib.calibration.LEAN_LAPSE), 41_2026 chose its size, this one checks it.
LEAN_SEED = 42_2026
LEAN_TRIALS = 200


@dataclass(frozen=True)
class LeanFamily:
    """One lean family: its K, run noise profile, server offsets and design."""

    k_values: tuple[int, ...]
    low_cv: float
    growing: bool
    offset_sd: float
    probes: bool

    @property
    def high_cv(self) -> float:
        return self.low_cv * NOISE_RANGE

    def noise_at(self, anchor: int) -> float:
        """The true run noise at ``anchor``: log-linear in log batch size, x4 over the
        anchors, growing or shrinking."""
        share = math.log(anchor) / math.log(ANCHORS[-1])
        return self.low_cv * NOISE_RANGE ** (share if self.growing else 1.0 - share)

    def assumed_run_cvs(self) -> tuple[float, ...]:
        """The ``--run-cv`` values the model runs with: with probes one (unused, the noise is
        measured); without, the default and the largest true noise, each once."""
        if self.probes:
            return (DEFAULT_RUN_CV,)
        return tuple(sorted({DEFAULT_RUN_CV, round(self.high_cv, 9)}))

    def holds(self, run_cv: float) -> bool:
        """The model's assumption about run noise holds (probes, or ``run_cv`` at least the
        truth everywhere); its ``--server-cv`` is the truth here."""
        return self.probes or run_cv >= round(self.high_cv, 9)


def lean_families() -> tuple[LeanFamily, ...]:
    return tuple(
        LeanFamily(k_values, low, growing, offset, probes)
        for k_values in FAMILY_K_SETS
        for low in LOW_CVS
        for growing in (True, False)
        for offset in LEAN_OFFSET_SDS
        for probes in (False, True)
    )


LEAN_FAMILIES = lean_families()


def lean_sweep(model: Model, family: LeanFamily, rng: np.random.Generator) -> Sweep:
    """One run per (anchor, K) on one server per K (its offset shared by every anchor), and
    with probes, two more runs of the two K with the best first run at each probe anchor."""
    offsets = dict(
        zip(
            family.k_values,
            np.exp(family.offset_sd * rng.standard_normal(len(family.k_values))),
            strict=True,
        )
    )
    rows: dict[str, list[Any]] = {
        name: [] for name in ("source", "position", "combo", "run_number", "anchor", "k", "value")
    }
    for anchor in ANCHORS:
        cv = family.noise_at(anchor)
        first = {
            k: model.throughput(anchor, k) * offsets[k] * math.exp(cv * rng.standard_normal())
            for k in family.k_values
        }
        probed: set[int] = set()
        if family.probes and anchor in PROBE_ANCHORS:
            probed = set(sorted(first, key=lambda k: -first[k])[:PROBE_KS])
        for k in family.k_values:
            values = [first[k]]
            if k in probed:
                noise = np.exp(cv * rng.standard_normal(PROBE_RUNS - 1))
                values += list(model.throughput(anchor, k) * offsets[k] * noise)
            combo = f"SERVE--k{k}-BENCH--c{anchor}"
            for number, value in enumerate(values):
                rows["source"].append(f"{combo}/summary.json")
                rows["position"].append(number)
                rows["combo"].append(combo)
                rows["run_number"].append(number)
                rows["anchor"].append(anchor)
                rows["k"].append(k)
                rows["value"].append(float(value))
    return sweep_of(rows, family.k_values)


def lead(model: Model, anchor: int, k_values: tuple[int, ...]) -> float:
    """How far the best K leads the runner-up, as a ratio minus 1."""
    best, runner_up = sorted((model.throughput(anchor, k) for k in k_values), reverse=True)[:2]
    return float(best / runner_up - 1.0)


def run_lean_trial(task: tuple[int, int, int, int]) -> list[dict[str, Any]]:
    """One sweep of a lean family, assessed at every assumed ``--run-cv`` and level."""
    index, trial, draws, seed = task
    family = LEAN_FAMILIES[index]
    rng = np.random.default_rng([seed, index, trial])
    model = draw_model(rng)
    result = tune(
        lean_sweep(model, family, rng), Settings(min_runs=1, max_objective_relative_mad=GATE_OFF)
    )
    assert result.ok, [p.describe() for p in result.errors]
    big = {a for a in ANCHORS if lead(model, a, family.k_values) > BIG_GAP}
    rows = []
    for run_cv in family.assumed_run_cvs():
        row: dict[str, Any] = {
            "family": index,
            "run_cv": run_cv,
            "clear": sum(clear_winner(model, a, family.k_values) for a in ANCHORS),
            "big": len(big),
        }
        for level in CONFIDENCE_LEVELS:
            settings = ConfidenceSettings(
                confidence=level, draws=draws, server_cv=family.offset_sd, run_cv=run_cv
            )
            anchors = assess(result, settings).anchors
            row |= resolution_counts(model, anchors, level, family.k_values)
            unresolved = anchors.filter(pl.col("status") != "resolved")["anchor"].to_list()
            row[f"big_unresolved_{level}"] = len(big.intersection(unresolved))
        rows.append(row)
    return rows


def summarise_lean(results: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per family and assumed ``--run-cv``: resolved shares, wrong among resolved
    with its Wilson interval, and the clear and big-gap anchors resolved at 0.9."""
    frame = pl.DataFrame(results)
    rows = []
    for index, family in enumerate(LEAN_FAMILIES):
        for run_cv in family.assumed_run_cvs():
            part = frame.filter((pl.col("family") == index) & (pl.col("run_cv") == run_cv))
            row: dict[str, Any] = {
                "k_count": len(family.k_values),
                "noise": f"{100 * family.low_cv:g}-{100 * family.high_cv:g}%"
                + (" growing" if family.growing else " shrinking"),
                "offset_sd": family.offset_sd,
                "probes": family.probes,
                "run_cv": None if family.probes else run_cv,
                "holds": family.holds(run_cv),
                "trials": part.height,
            }
            for level in CONFIDENCE_LEVELS:
                row |= wrong_among_resolved(part, level)
                row[f"resolved_share_{level}"] = row[f"resolved_{level}"] / (
                    len(ANCHORS) * part.height
                )
            clear, big = int(part["clear"].sum()), int(part["big"].sum())
            level = DEFAULT_CONFIDENCE
            row["clear"] = clear
            row["clear_resolved"] = clear - int(part[f"clear_unresolved_{level}"].sum())
            row["big"] = big
            row["big_resolved"] = big - int(part[f"big_unresolved_{level}"].sum())
            rows.append(row)
    return pl.DataFrame(rows)


def lean_markdown(table: pl.DataFrame) -> str:
    """The lean table of docs/confidence.md (``*`` a share above its bound, ``!`` its whole
    interval above it: a miss where the assumption holds)."""
    shares = " / ".join(f"{level:g}" for level in CONFIDENCE_LEVELS)
    levels = " | ".join(
        f"wrong at {level:g} (bound {1 - level:.0%})" for level in CONFIDENCE_LEVELS
    )
    lines = [
        "| K | run noise | offsets | design | run_cv | assumption | trials"
        f" | resolved at {shares} | {levels} | clear resolved at 0.9 | lead > 10 % resolved |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(CONFIDENCE_LEVELS) + "---|---|",
    ]
    for row in table.to_dicts():
        assumed = "measured" if row["run_cv"] is None else f"{100 * row['run_cv']:g}%"
        resolved, cells = resolved_and_wrong_cells(row)
        design = "1 run + probes" if row["probes"] else "1 run"
        lines.append(
            f"| {row['k_count']} | {row['noise']} | {100 * row['offset_sd']:g}% | {design}"
            f" | {assumed} | {'holds' if row['holds'] else 'does not hold'} | {row['trials']}"
            f" | {resolved} | " + " | ".join(cells) + f" | {_share(row, 'clear')}"
            f" | {_share(row, 'big')} |"
        )
    return "\n".join(lines)


def _share(row: dict[str, Any], name: str) -> str:
    total = row[name]
    return f"{100 * row[f'{name}_resolved'] / total:.0f}% of {total}" if total else "-"


def pooled_lean_markdown(table: pl.DataFrame) -> str:
    """Per design and assumption, pooled over its rows: wrong among resolved at each level,
    and the clear and big-gap anchors resolved at 0.9."""
    levels = " | ".join(f"wrong at {level:g}" for level in CONFIDENCE_LEVELS)
    lines = [
        f"| design | assumption | rows | {levels} | clear resolved at 0.9 | lead > 10 % resolved |",
        "|---|---|---|" + "---|" * len(CONFIDENCE_LEVELS) + "---|---|",
    ]
    for probes in (False, True):
        for holds in (True, False):
            part = table.filter((pl.col("probes") == probes) & (pl.col("holds") == holds))
            if part.is_empty():
                continue
            cells = []
            for level in CONFIDENCE_LEVELS:
                resolved = int(part[f"resolved_{level}"].sum())
                wrong = int(part[f"wrong_count_{level}"].sum())
                low, high = wilson(wrong, resolved)
                share = wrong / resolved if resolved else 0.0
                cells.append(
                    f"{100 * share:.1f}% [{100 * low:.1f}, {100 * high:.1f}] of {resolved}"
                )
            summed = {
                name: int(part[name].sum())
                for name in ("clear", "clear_resolved", "big", "big_resolved")
            }
            design = "1 run + probes" if probes else "1 run"
            lines.append(
                f"| {design} | {'holds' if holds else 'does not hold'} | {part.height} | "
                + " | ".join(cells)
                + f" | {_share(summed, 'clear')} | {_share(summed, 'big')} |"
            )
    return "\n".join(lines)


def missed_lean_targets(table: pl.DataFrame) -> list[str]:
    """Issue 40's target: on every row where the assumption holds, no calibration cell is
    shown over its bound."""
    missed = []
    for row in table.filter(pl.col("holds")).to_dicts():
        assumed = "probes" if row["run_cv"] is None else f"run_cv {row['run_cv']:g}"
        where = (
            f"lean, {row['k_count']} K, run noise {row['noise']}, offsets"
            f" {row['offset_sd']:g}, {assumed}"
        )
        missed += missed_cells(row, where)
    return missed


def lean_part(arguments: argparse.Namespace, pool: Any) -> list[str]:
    """The lean families' tables, printed; their missed targets."""
    tasks = [
        (index, trial, arguments.draws, arguments.lean_seed)
        for index in range(len(LEAN_FAMILIES))
        for trial in range(arguments.lean_trials)
    ]
    started = time.perf_counter()
    results = [row for rows in pool.map(run_lean_trial, tasks, chunksize=10) for row in rows]
    table = summarise_lean(results)
    print(
        f"\nLean sweeps: {len(tasks)} simulated sweeps ({arguments.lean_trials} per family,"
        f" seed {arguments.lean_seed}) in {time.perf_counter() - started:.0f} s. Per row, the"
        " share of anchors resolved at each confidence, among them the share whose pick is"
        " truly more than 1 % below the best K (95 % Wilson interval, count; * over the bound,"
        " ! its whole interval over it: a miss where the assumption holds), and at 0.9 the"
        " clear anchors (best K more than 2 % ahead) and those with a lead over 10 % that"
        " resolved:\n"
    )
    print(lean_markdown(table))
    print("\nPooled per design and assumption:\n")
    print(pooled_lean_markdown(table))
    return missed_lean_targets(table)


__all__ = [
    "LEAN_FAMILIES",
    "LEAN_SEED",
    "LEAN_TRIALS",
    "TOLERANCE",
    "LeanFamily",
    "lean_part",
    "lean_sweep",
    "missed_lean_targets",
    "run_lean_trial",
    "summarise_lean",
]
