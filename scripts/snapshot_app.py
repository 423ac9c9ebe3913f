"""Record what the app shows, to check a refactoring: the HTML of every cell's output.

Runs ``notebooks/tune_spec_k.py`` headless (as ``python notebooks/tune_spec_k.py`` does) on
every bundled experiment, with the default controls and with the confident rule and the
interpolated schedule, and saves each cell's output as HTML (element ids, which marimo makes
anew on every run, replaced by a counter) plus the two downloads. Compare two snapshots with
``diff -r``::

    uv run python scripts/snapshot_app.py /tmp/app-before
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import marimo as mo

REPO = Path(__file__).resolve().parents[1]
# The tests' notebook runner: it gives marimo every name a replaced control's cell defines.
sys.path.insert(0, str(REPO / "tests"))
from notebook_runner import run_with_controls  # noqa: E402

NOTEBOOK = REPO / "notebooks" / "tune_spec_k.py"
SAMPLES = REPO / "data" / "sample_sweeps"
_IDS = re.compile(r"(object-id|random-id|data-id|id)=(['\"])[^'\"]*\2")


def _normalised(text: str) -> str:
    seen: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        name, quote = match.group(1), match.group(2)
        number = seen.setdefault(match.group(0), str(len(seen)))
        return f"{name}={quote}{number}{quote}"

    # The checkout's folder, so that two checkouts of the same code give the same snapshot.
    text = _IDS.sub(replace, text).replace(str(REPO), "REPO")
    return re.sub(r"&quot;[0-9a-f-]{36}&quot;", "&quot;UUID&quot;", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    arguments = parser.parse_args()
    shutil.rmtree(arguments.out, ignore_errors=True)
    spec = importlib.util.spec_from_file_location("tune_spec_k_notebook", NOTEBOOK)
    assert spec is not None and spec.loader is not None
    notebook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(notebook)
    variants: dict[str, dict[str, Any]] = {
        "default": {},
        "confident-interpolated": {
            "policy_picker": mo.ui.radio({"a": "seed", "b": "confident"}, value="b"),
            "interpolated_checkbox": mo.ui.checkbox(value=True),
        },
    }
    for experiment in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
        for name, controls in variants.items():
            sys.argv = [str(NOTEBOOK)]
            picker = mo.ui.dropdown({experiment.name: experiment}, value=experiment.name)
            outputs, defs = run_with_controls(notebook, {"experiment_picker": picker, **controls})
            folder = arguments.out / experiment.name / name
            folder.mkdir(parents=True)
            # Numbered among the cells that show something: a cell without output (a control's
            # definition, a computation) may be added or removed without renaming the rest.
            shown_outputs = [output for output in outputs if output is not None]
            for index, output in enumerate(shown_outputs):
                text = getattr(output, "text", None)
                shown = text if isinstance(text, str) else repr(output)
                (folder / f"cell-{index:03d}.html").write_text(_normalised(shown))
            data = defs.get("schedule_file")
            if data is not None:
                (folder / "schedule_file").write_bytes(data)
            for engine_file in defs.get("engine_files") or ():
                if engine_file.text is not None:
                    (folder / engine_file.filename).write_text(engine_file.text)
    print(f"saved in {arguments.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
