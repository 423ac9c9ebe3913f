"""What ``tune-spec-k DIR`` costs, counted instead of timed, so that a noisy machine cannot hide
a regression (issue 24): the modules each of its two processes imports, and the record-level
work of the load. Each limit is what the path needs today, with the reason beside it; a change
that moves the cost fails here, and ``bench/bench_cli.py --quick`` then says what it costs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
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

from lib import records, repeated_runs, run_params, sweep_files
from lib.cli.main import main
from lib.settings import ENGINE_FIELDS, ContextSettings, Settings

# Runs `tune-spec-k ARGV` as the script does, with the reading child forced (a one-core machine
# would read in the parent, after Polars is loaded) and its modules written to a file.
_PROBE = """
import json, os, sys
from lib import prefetch
from lib.cli import tune
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
#: them (lib/prefetch.py); importing them itself cost ~630 ms of CPU a run (issue 24).
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
        (records, "_flatten"),
        (run_params, "fingerprint"),
        (repeated_runs, "fingerprint"),
        (repeated_runs, "run_key"),
        (sweep_files, "_records_again"),
        (sweep_files, "parse_json"),
        (run_params.ParamsReader, "_anchor"),
        (repeated_runs.RepeatedRuns, "_content"),
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

    - ``run_key`` once (the repeated-run check's first key) and ``fingerprint`` once (the few
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
    assert counts["run_key"] == runs
    assert counts["fingerprint"] == runs
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


# ------------------------------------------------------------------ Polars work of the analysis

#: Polars methods that hand a frame's or a series' values to Python one by one: each call
#: counts the length of its frame or series (an upper bound for a loop that stops early).
_TO_PYTHON = {"__iter__", "to_dicts", "rows", "iter_rows", "to_list", "row", "item", "to_dict"}
_GENERATOR = inspect.CO_GENERATOR


def _polars_use(directory: Path, out: Path) -> Counter[str]:
    """``tune-spec-k DIRECTORY --output-json OUT`` run in this process under a profiler that
    sees every entry into Polars' Python API from lib (``calls``: the frames,
    expressions and collects the analysis builds; a generator counted when it starts, not at
    each value it yields) and, for the methods of :data:`_TO_PYTHON`, the values they hand to
    Python (``values``, and per calling line)."""
    counts: Counter[str] = Counter()
    started: set[Any] = set()

    def profile(frame: Any, event: str, _: Any) -> None:
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("polars"):
            return
        caller = frame.f_back
        # lib's calls (and a test's here); not Polars' imports of its own modules on first use
        caller_module = caller.f_globals.get("__name__", "") if caller is not None else ""
        if not (caller_module.startswith("lib.") or caller_module == __name__):
            return
        code = frame.f_code
        if code.co_flags & _GENERATOR:
            if frame in started:  # a generator resumed for its next value
                return
            started.add(frame)
        counts["calls"] += 1
        if code.co_name in _TO_PYTHON:
            owner = frame.f_locals.get("self")
            size = len(owner) if hasattr(owner, "__len__") else 1  # a group_by: one per group
            counts["values"] += size
            counts[f"{caller_module}:{caller.f_lineno} {code.co_qualname}"] += size

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        sys.setprofile(profile)
        try:
            status = main([str(directory), "--output-json", str(out)])
        finally:
            sys.setprofile(None)
    assert status == 0
    return counts


#: Values a run hands to Python on the CLI's path: the context axis's detection reads each
#: run's prompt length twice (the check of its range, the lengths it groups into points);
#: every other read of Polars data into Python is per cell or anchor.
VALUES_PER_RUN = 2
#: What doubling the runs per cell may change besides: the same anchors and K give the same
#: frames and expressions and per-cell reads, but a few depend on the data (the measurement
#: plan's rows and the flagged runs: a line more or less), as a share of the base's count.
DATA_DEPENDENT = 0.03


#: make_large_sweep.py's sweeps, (runs, runs per cell): 10 anchors x 8 K x 10 runs (the base),
#: the same cells with 20 runs each, and 20 anchors x 8 K x 10 runs.
SHAPES = {"base": (800, 10), "runs x2": (1600, 20), "anchors x2": (1600, 10)}


def _runs(shape: str) -> int:
    return SHAPES[shape][0]


@pytest.fixture(scope="module")
def polars_sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each of :data:`SHAPES` written once."""
    root = tmp_path_factory.mktemp("polars-sweeps")
    for name, (runs, per_cell) in SHAPES.items():
        assert _write_bench_sweep(root / name, runs, per_cell) == runs
    return {name: root / name for name in SHAPES}


@pytest.fixture(scope="module")
def polars_counts(
    polars_sweeps: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Counter[str]]:
    """:func:`_polars_use` of each sweep, profiled once for every test here."""
    out = tmp_path_factory.mktemp("polars-results")
    return {name: _polars_use(path, out / f"{name}.json") for name, path in polars_sweeps.items()}


def test_polars_work_does_not_grow_with_the_runs(polars_counts: dict[str, Counter[str]]) -> None:
    """Twice the runs in every cell: the same Polars calls and VALUES_PER_RUN more values in
    Python per added run, no more (each within DATA_DEPENDENT): the analysis is columnar, and
    what it reads into Python is per cell."""
    base, doubled = polars_counts["base"], polars_counts["runs x2"]
    added = _runs("runs x2") - _runs("base")
    assert abs(doubled["calls"] - base["calls"]) <= DATA_DEPENDENT * base["calls"]
    grown = doubled["values"] - base["values"]
    assert grown <= VALUES_PER_RUN * added + DATA_DEPENDENT * base["values"], _grown(base, doubled)


def test_polars_work_grows_at_most_linearly_with_the_anchors(
    polars_counts: dict[str, Counter[str]],
) -> None:
    """Twice the anchors (twice the cells, the same runs per cell): at most twice the calls,
    and at most twice the values each cell hands to Python (beyond VALUES_PER_RUN a run)."""
    base, doubled = polars_counts["base"], polars_counts["anchors x2"]
    assert doubled["calls"] <= 2 * base["calls"]
    per_cell = base["values"] - VALUES_PER_RUN * _runs("base")
    per_cell_doubled = doubled["values"] - VALUES_PER_RUN * _runs("anchors x2")
    assert per_cell_doubled <= 2 * per_cell, _grown(base, doubled)


def test_the_polars_counts_move_with_the_work(
    polars_sweeps: dict[str, Path],
    polars_counts: dict[str, Counter[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checks above can fail: an analysis that looks at each run's row once (a per-run
    Python loop over the frame) breaks both limits of the runs test."""
    from lib import sweeps

    built = sweeps.sweep_from

    def row_by_row(*arguments: Any, **keywords: Any) -> Any:
        sweep = built(*arguments, **keywords)
        for index in range(sweep.runs.height):
            sweep.runs.row(index)
        return sweep

    base = polars_counts["base"]
    monkeypatch.setattr(sweeps, "sweep_from", row_by_row)
    doubled = _polars_use(polars_sweeps["runs x2"], tmp_path / "doubled.json")
    added = _runs("runs x2") - _runs("base")
    assert doubled["calls"] - base["calls"] > DATA_DEPENDENT * base["calls"]
    grown = doubled["values"] - base["values"]
    assert grown > VALUES_PER_RUN * added + DATA_DEPENDENT * base["values"]


def _grown(base: Counter[str], doubled: Counter[str]) -> str:
    """The calling lines whose values grew, for the failure message."""
    return "\n".join(
        f"{base[site]} -> {doubled[site]} {site}"
        for site in sorted(set(base) | set(doubled))
        if site not in ("calls", "values") and doubled[site] != base[site]
    )
