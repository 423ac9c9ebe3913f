"""The pure-Python reference policy run the way a user runs a tool: as a process on a folder.

    python bench/reference_cli.py SWEEP_DIR OUT_JSON [MAX_OBJECTIVE_RELATIVE_MAD]

Imports the reference (``tests/reference_policy.py``: the standard library only), reads every
file with ``json`` and applies the seed's policy with its default settings (but the noise
threshold, if given: ``--max-objective-relative-mad``), writes the result
(schedule, configured global K, per-anchor decisions) as JSON to OUT_JSON and prints the
schedule. Exit status 0 written, 2 when the reference rejects the sweep (its problems go to
stderr). ``bench/bench_cli.py`` times this process against ``tune-spec-k``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from reference_policy import ReferenceRejected, reference_tune


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: reference_cli.py SWEEP_DIR OUT_JSON [MAX_OBJECTIVE_RELATIVE_MAD]")
        return 2
    sweep_dir, output = argv[:2]
    flags = {"max_objective_relative_mad": float(argv[2])} if len(argv) == 3 else {}
    try:
        result = reference_tune(sweep_dir, **flags)
    except ReferenceRejected as rejected:
        print(f"reference: no schedule: {len(rejected.problems)} problem(s)", file=sys.stderr)
        for problem in rejected.problems:
            print("  " + problem, file=sys.stderr)
        return 2
    Path(output).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result["schedule"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
