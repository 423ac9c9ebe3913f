"""What ``tune-spec-k DIR`` costs, counted instead of timed, so that a noisy machine cannot hide
a regression (issue 24): the modules each of its two processes imports, and the record-level
work of the load. Each limit is what the path needs today, with the reason beside it; a change
that moves the cost fails here, and ``bench/bench_cli.py --quick`` then says what it costs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from paths import REPO, SAMPLE_SWEEPS

from lib import sweep_files
from lib.settings import ENGINE_FIELDS, ContextSettings, Settings

# Runs `tune-spec-k ARGV` as the script does, with the reading child forced (a one-core machine
# would read in the parent, after Polars is loaded) and its modules written to a file.
_PROBE = """
import json, os, sys
from lib.cli import prefetch, tune
from lib.cli.main import main

prefetch.worth_forking = lambda: True
read = tune._read

def reading_and_reporting(args):
    files = read(args)
    with open(os.environ["PROBE_CHILD"], "w") as out:
        json.dump({"pid": os.getpid(), "modules": sorted(sys.modules)}, out)
    return files

tune._read = reading_and_reporting
try:
    status = main(sys.argv[1:])
except SystemExit as stop:
    status = stop.code
with open(os.environ["PROBE_PARENT"], "w") as out:
    json.dump({"pid": os.getpid(), "status": status, "modules": sorted(sys.modules)}, out)
"""

#: Besides the standard library and lib itself, what the reading child may import: orjson
#: parses the files. Not Polars or NumPy: the child exists to read while the parent imports
#: them (lib/cli/prefetch.py); importing them itself cost ~630 ms of CPU a run (issue 24).
CHILD_PACKAGES = {"orjson"}
#: What the parent may import: Polars (the tuning's frames), NumPy (the confidence draws and
#: switch points), orjson (the result's JSON), typing_extensions (Polars imports it). Not
#: Altair or vl_convert (charts: ~0.85 s), marimo (the app), SciPy (only `plan` and the
#: calibration fit need it), pandas or pyarrow (no Polars conversion on this path).
PARENT_PACKAGES = {"polars", "numpy", "orjson", "typing_extensions"}


def _packages(modules: list[str]) -> set[str]:
    """The third-party top-level packages among ``modules``: not the standard library, not lib,
    not the compiled helpers packages load under private names (``_polars_runtime_32``,
    ``cython_runtime``)."""
    tops = {name.split(".")[0] for name in modules}
    return {
        top
        for top in tops - set(sys.stdlib_module_names) - {"lib", "__main__"}
        if not top.startswith("_") and top != "cython_runtime"
    }


def _run_probe(tmp_path: Path, *argv: str, extra: str = "") -> tuple[dict[str, Any], ...]:
    child, parent = tmp_path / "child.json", tmp_path / "parent.json"
    environment = {**os.environ, "PROBE_CHILD": str(child), "PROBE_PARENT": str(parent)}
    done = subprocess.run(
        [sys.executable, "-c", extra + _PROBE, *argv],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert parent.is_file(), done.stderr
    assert child.is_file(), "the files were not read in a child process"
    return json.loads(child.read_text()), json.loads(parent.read_text())


@pytest.mark.parametrize("sample", ["sonnet-like", "long-context"])
def test_the_reading_child_imports_no_polars_no_numpy(tmp_path: Path, sample: str) -> None:
    child, parent = _run_probe(
        tmp_path, str(SAMPLE_SWEEPS / sample), "--output-json", str(tmp_path / "out.json")
    )
    assert parent["status"] == 0
    assert child["pid"] != parent["pid"]
    assert _packages(child["modules"]) <= CHILD_PACKAGES, _packages(child["modules"])


@pytest.mark.parametrize("sample", ["sonnet-like", "long-context"])
def test_the_parent_imports_only_what_tuning_needs(tmp_path: Path, sample: str) -> None:
    _, parent = _run_probe(
        tmp_path, str(SAMPLE_SWEEPS / sample), "--output-json", str(tmp_path / "out.json")
    )
    assert parent["status"] == 0
    assert _packages(parent["modules"]) <= PARENT_PACKAGES, _packages(parent["modules"])
    # The 8-point quadrature is written out (lib/switch_points.py): 20-40 ms of import.
    assert "numpy.polynomial" not in parent["modules"]


@pytest.mark.parametrize(
    ("where", "package"), [("child", "numpy"), ("child", "polars"), ("parent", "altair")]
)
def test_a_heavy_import_on_either_side_is_caught(tmp_path: Path, where: str, package: str) -> None:
    """The checks above can fail: a probe whose reading (or whose whole run) imports one of
    the packages the limits leave out breaks them."""
    imported = f"import {package}\n"
    extra = (
        f"import lib.sweep_files\n_read = lib.sweep_files.read_sweep_files\n"
        f"def _heavy(*a, **k):\n    {imported.strip()}\n    return _read(*a, **k)\n"
        "lib.sweep_files.read_sweep_files = _heavy\n"
        if where == "child"
        else imported
    )
    child, parent = _run_probe(
        tmp_path,
        str(SAMPLE_SWEEPS / "sonnet-like"),
        "--output-json",
        str(tmp_path / "out.json"),
        extra=extra,
    )
    allowed = CHILD_PACKAGES if where == "child" else PARENT_PACKAGES
    found = _packages((child if where == "child" else parent)["modules"])
    assert package in found and not found <= allowed


# ------------------------------------------------------------------ record-level work of the load


def _write_bench_sweep(root: Path, runs: int, runs_per_cell: int) -> int:
    """bench/make_large_sweep.py's sweep (vLLM's record layout, 44 fields), smaller."""
    spec = importlib.util.spec_from_file_location(
        "make_large_sweep", REPO / "bench" / "make_large_sweep.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written: int = module.write_sweep(root, runs, runs_per_cell)
    return written


def _count_calls(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, counts: Counter[str]
) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    def counted(*arguments: Any, **keywords: Any) -> Any:
        counts[name] += 1
        return original(*arguments, **keywords)

    monkeypatch.setattr(owner, name, counted)


#: The CLI's read with its default flags (lib/cli/tune.py's _read).
CLI_METRICS = (
    *Settings().metrics_read(),
    *ContextSettings().fields_read(),
    *(name for names in ENGINE_FIELDS.values() for name in names),
)


def _load_counts(monkeypatch: pytest.MonkeyPatch, root: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for owner, name in [
        (sweep_files, "_flatten"),
        (sweep_files, "_fingerprint"),
        (sweep_files, "_run_key"),
        (sweep_files, "_records_again"),
        (sweep_files, "parse_json"),
        (sweep_files._Reader, "_anchor"),
        (sweep_files._Reader, "_content"),
    ]:
        _count_calls(monkeypatch, owner, name, counts)
    files = sweep_files.read_sweep_files(
        root,
        batch_size_var="max_concurrency",
        k_var="speculative_config.num_speculative_tokens_per_batch_size",
        metrics=CLI_METRICS,
    )
    counts["rows"] = len(files.derived["source"])
    return counts


def test_the_load_does_per_record_only_what_it_must(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a sweep of vLLM-shaped records (8 K x 10 anchors x 10 runs, one summary.json a
    combo, its run=N.json backups beside it), per record the load does two cheap things and
    nothing else record-sized:

    - ``_run_key`` once (the repeated-run check's first key) and ``_fingerprint`` once (the few
      fields the anchor and K lookups read, compared with the previous record's);
    - no ``_flatten`` (every field of the record: the full load, ~6 us a record), no
      ``_content`` (the whole record as JSON: only for a record whose run key matches an
      earlier one's, and here no two runs match), no file read again;
    - the lookups (``_anchor``) once a file, not once a record; one parse a file.
    """
    runs = _write_bench_sweep(tmp_path / "sweep", 800, 10)
    combos = 80  # 800 runs // (8 K x 10 runs a cell) = 10 anchors, x 8 K
    counts = _load_counts(monkeypatch, tmp_path / "sweep")
    assert counts["rows"] == runs == 800
    assert counts["_run_key"] == runs
    assert counts["_fingerprint"] == runs
    assert counts["_flatten"] == 0
    assert counts["_content"] == 0
    assert counts["_records_again"] == 0
    assert counts["_anchor"] == combos
    assert counts["parse_json"] == combos


def test_the_record_counts_move_with_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts above can fail: a copied combo folder makes the check write out the contents
    of the copy's runs and of the originals' (one file read again), and a dotted metric sends
    every record through ``_flatten`` (the full load)."""
    import shutil

    _write_bench_sweep(tmp_path / "sweep", 800, 10)
    original = tmp_path / "sweep" / "SERVE--k0-BENCH--c1"
    shutil.copytree(original, tmp_path / "sweep" / "SERVE--k0-BENCH--c1-copy")
    counts = _load_counts(monkeypatch, tmp_path / "sweep")
    assert counts["_content"] == 2 * 10
    assert counts["_records_again"] == 1
    counts.clear()
    sweep_files.read_sweep_files(
        original,
        batch_size_var="max_concurrency",
        k_var="speculative_config.num_speculative_tokens_per_batch_size",
        metrics=("speculative_config.method",),
    )
    assert counts["_flatten"] == 10
