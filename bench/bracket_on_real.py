"""The bracket rule (lib/unmeasured.py) replayed on the real sweeps of ../shared/data/real: at
each anchor, as if a bracketed design had measured only `bracket_ks` (the two ends of the K
range and its middle) first, which other K the rule rules out, and what the anchor's pick
loses against the best K measured there once the others (those not ruled out) are measured.

    uv run python bench/bracket_on_real.py [--tolerance 0.01]

The real sweeps measured every K, so the rule's answer can be checked against what the K it
ruled out measured. Prints a line per anchor and the totals: anchors, cells skipped, anchors
where the pick lost anything, the largest loss, and the anchors whose measured K are not
unimodal (a valley beyond the tolerance: the rule then rules nothing out there).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.gates import gate  # noqa: E402
from lib.loop.plan.lean import bracket_ks  # noqa: E402
from lib.settings import GLOBAL_K_VAR, Settings  # noqa: E402
from lib.sweeps import load_experiment  # noqa: E402
from lib.unmeasured import ruling_pair, valley  # noqa: E402

REAL = ROOT.parent / "shared" / "data" / "real"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tolerance", type=float, default=Settings().relative_tolerance)
    args = parser.parse_args(argv)
    # The real sweeps ran static-K servers and one or three runs a cell (their README).
    settings = Settings(min_runs=1, max_objective_relative_mad=10.0)
    anchors = skipped = cells = lossy = valleys = 0
    largest = 0.0
    for experiment in sorted({p.parent.parent for p in REAL.rglob("summary.json")}):
        sweep = load_experiment(experiment, k_var=GLOBAL_K_VAR)
        frame = gate(sweep, settings).cells
        for anchor in sorted(set(frame["anchor"].to_list())):
            rows = frame.filter(frame["anchor"] == anchor).to_dicts()
            values = {r["k"]: r["median"] for r in rows}
            spreads = {r["k"]: abs(r["median"] - r["conservative"]) for r in rows}
            first = set(bracket_ks(sorted(values)))
            seen = {k: values[k] for k in first}
            refuted = valley(seen, args.tolerance, True) is not None
            measured = first | {
                k
                for k in values
                if k not in first
                and (
                    refuted
                    or ruling_pair(k, seen, args.tolerance, True, {m: spreads[m] for m in seen})
                    is None
                )
            }
            loss = 100 * (1 - max(values[k] for k in measured) / max(values.values()))
            anchors += 1
            cells += len(values)
            skipped += len(values) - len(measured)
            lossy += loss > 0
            largest = max(largest, loss)
            valleys += valley(values, args.tolerance, True) is not None
            print(
                f"{experiment.relative_to(REAL)} batch {anchor}: first {sorted(first)},"
                f" measured {sorted(measured)}, the pick loses {loss:.2f} %"
            )
    print(
        f"{anchors} anchors: {skipped} of {cells} cells skipped; the pick lost something at"
        f" {lossy} (largest {largest:.2f} %); the measured K not unimodal at {valleys}"
    )


if __name__ == "__main__":
    main()
