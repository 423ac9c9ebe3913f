"""Wall time of whole processes, as a user meets them: ``tune-spec-k DIR`` against the
pure-Python reference run as a process on the same files, and ``tune-spec-k --help`` against a
bare interpreter. Ratios against baselines run in the same bench, interleaved.

    uv run python bench/bench_cli.py [SWEEP_DIR] [--repeats 5] [--runs 20000]
    uv run python bench/bench_cli.py --quick [SWEEP_DIR]   # the two targets only, < 1 minute
    uv run python bench/bench_cli.py --cold [SWEEP_DIR]    # with and without bytecode caches
    uv run python bench/bench_cli.py SWEEP_DIR --max-objective-relative-mad 1   # a context sweep

Without SWEEP_DIR a sweep of ``--runs`` runs is generated into a temporary folder by
``bench/make_large_sweep.py`` (and removed afterwards); with it, that sweep is reused as is.

Every command is a fresh ``subprocess.run`` of ``sys.executable`` from the repository root,
output discarded. After one untimed warm-up round (which also checks that the CLI and the
reference write the same schedule), each of ``--repeats`` rounds runs every command once,
in reverse order every other round, so a slow spell of the machine hits all of them alike.
Medians of the wall time; the CPU time of the children (user + system) is shown beside it
as a ratio too, steadier on a busy machine.

Rows (ratio = lib median / baseline median):

- cli: ``tune-spec-k DIR --output-json TMP`` vs ``python bench/reference_cli.py DIR TMP2``.
  Target <= 1.0.
- help: ``tune-spec-k --help`` vs ``python -c "import json"``. Target < 3.0.
- informational, against the reference process: ``import polars, numpy`` alone (the floor
  of any command that needs them); that plus ``load_experiment(DIR, metrics=[...])`` with the
  metrics the CLI needs by default; ``import polars`` (not numpy: ``lib.schedule`` and
  ``lib.sweeps`` do not need it) plus that load plus ``lib.schedule.tune``: about what a CLI
  that imports only what the seed's policy needs would take.

``--quick`` runs only the commands of the two targets (cli, reference, help, import json),
``--repeats`` 5 unless given: under a minute with the sweep generated, about 15 s on a reused
one. The closing note of a change to the CLI's path reports it.

``--cold`` runs instead ``tune-spec-k DIR`` in three bytecode states, every process under
``PYTHONDONTWRITEBYTECODE=1`` (so none writes a cache): as installed (the caches this
environment has: after ``uv sync``, lib's and every package's), without lib's caches (what the
editable install left before ``hatch_build.py``), and without lib's nor the packages' (a sync
without ``compile-bytecode``); and, where ``uv`` is on PATH, ``uv run tune-spec-k DIR`` (what
the README shows) against the script itself: uv's check of the environment, with
``compile-bytecode`` a pass over every installed file, before each run. No targets: it says
what a first run costs where nothing wrote the caches. The states are made in the child by
``_WITHOUT_BYTECODE``; every state must write the same result file.

``--max-objective-relative-mad X`` gives both the CLI and the reference that noise threshold:
the seed pools a context sweep's prompt lengths into one cell each (``make_large_sweep.py
--context-points``), whose spread no default threshold passes, so its reference needs it to
write a schedule at all.

Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench")]

from make_large_sweep import DEFAULT_RUNS, bench_sweep  # noqa: E402

#: What the CLI needs from the records with its default flags: the objective, then what the
#: health gate reads (an --acceptance-var would add its field).
CLI_METRICS = ("output_throughput", "failed", "completed", "num_prompts")

_IMPORTS = "import numpy, polars"
_LOAD = """
import sys
import numpy, polars
from lib.sweeps import load_experiment
load_experiment(sys.argv[1], metrics=sys.argv[2:])
"""
_LOAD_AND_TUNE = """
import json, sys
import polars
from lib.settings import Settings
from lib.schedule import tune
from lib.sweeps import load_experiment
settings = Settings(**json.loads(sys.argv[2]))
result = tune(load_experiment(sys.argv[1], metrics=sys.argv[3:]), settings)
assert result.ok, [problem.describe() for problem in result.errors]
"""
#: ``python -c _WITHOUT_BYTECODE ROOTS ARGS...`` is ``python -m lib.cli ARGS`` reading no
#: bytecode for any source under ROOTS (joined by os.pathsep; empty: all caches are read): the
#: import system's own path for a module without a cache (it compiles the source, and writes
#: nothing there), for those files only; the standard library's caches stay in use.
_WITHOUT_BYTECODE = """
import importlib._bootstrap_external as bootstrap, os, runpy, sys
hidden = tuple(root for root in sys.argv[1].split(os.pathsep) if root)
cached = bootstrap.cache_from_source
def cache_from_source(path, debug_override=None, *, optimization=None):
    if path.startswith(hidden):
        raise NotImplementedError  # SourceLoader.get_code: no bytecode path, compile the source
    return cached(path, debug_override, optimization=optimization)
bootstrap.cache_from_source = cache_from_source
sys.argv[:2] = ["tune-spec-k"]
runpy.run_module("lib.cli", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class Row:
    what: str
    lib: str
    baseline: str
    target: float | None
    strict: bool = False  # the ratio must stay below the target, not reach it


def tune_spec_k() -> list[str]:
    """The command users run: the ``tune-spec-k`` script of this environment (``uv sync``
    installs it beside the interpreter), else ``python -m lib.cli``."""
    script = Path(sys.executable).parent / "tune-spec-k"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "lib.cli"]


def commands(sweep_dir: Path, scratch: Path, noise: float | None) -> dict[str, list[str]]:
    python = sys.executable
    metrics = [str(sweep_dir), *CLI_METRICS]
    noise_flag = [] if noise is None else ["--max-objective-relative-mad", repr(noise)]
    return {
        "cli": [
            *tune_spec_k(),
            str(sweep_dir),
            "--output-json",
            str(scratch / "a.json"),
            *noise_flag,
        ],
        "reference": [
            python,
            str(ROOT / "bench" / "reference_cli.py"),
            str(sweep_dir),
            str(scratch / "b.json"),
            *([] if noise is None else [repr(noise)]),
        ],
        "help": [*tune_spec_k(), "--help"],
        "import json": [python, "-c", "import json"],
        "imports": [python, "-c", _IMPORTS],
        "load": [python, "-c", _LOAD, *metrics],
        "load+tune": [
            python,
            "-c",
            _LOAD_AND_TUNE,
            str(sweep_dir),
            json.dumps({} if noise is None else {"max_objective_relative_mad": noise}),
            *CLI_METRICS,
        ],
    }


def cold_commands(sweep_dir: Path, scratch: Path, noise: float | None) -> dict[str, list[str]]:
    """``--cold``: the CLI in each bytecode state (each writes its own result file), and
    ``uv run`` where uv is on PATH."""
    noise_flag = [] if noise is None else ["--max-objective-relative-mad", repr(noise)]
    lib = str(ROOT / "lib") + os.sep
    packages = sorted({sysconfig.get_paths()[key] + os.sep for key in ("purelib", "platlib")})

    def without_bytecode(name: str, *roots: str) -> list[str]:
        output = scratch / f"{name}.json"
        arguments = [str(sweep_dir), "--output-json", str(output), *noise_flag]
        return [sys.executable, "-c", _WITHOUT_BYTECODE, os.pathsep.join(roots), *arguments]

    named = {
        "as installed": without_bytecode("installed"),
        "no lib bytecode": without_bytecode("no-lib", lib),
        "no bytecode": without_bytecode("none", lib, *packages),
    }
    uv = shutil.which("uv")
    if uv is not None:
        output = scratch / "a.json"
        named["cli"] = [*tune_spec_k(), str(sweep_dir), "--output-json", str(output), *noise_flag]
        named["uv run"] = [uv, "run", "tune-spec-k", str(sweep_dir), "--output-json", str(output)]
        named["uv run"] += noise_flag
    return named


ROWS = (
    Row("cli: tune-spec-k DIR vs reference_cli.py", "cli", "reference", 1.0),
    Row("help: tune-spec-k --help vs import json", "help", "import json", 3.0, strict=True),
    Row("  import polars, numpy vs reference", "imports", "reference", None),
    Row("  + load_experiment(metrics) vs reference", "load", "reference", None),
    Row("  polars, load(metrics), tune vs reference", "load+tune", "reference", None),
)
COLD_ROWS = (
    Row("bytecode: none for lib vs as installed", "no lib bytecode", "as installed", None),
    Row("  none for lib nor packages vs as installed", "no bytecode", "as installed", None),
    Row("uv run tune-spec-k DIR vs tune-spec-k DIR", "uv run", "cli", None),
)


def run_once(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one process; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(
            f"{command[:4]} failed with status {done.returncode}:\n"
            + done.stderr.decode(errors="replace")
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def check_same_schedule(scratch: Path) -> list[list[int]]:
    written = json.loads((scratch / "a.json").read_text(encoding="utf-8"))
    lib = written["num_speculative_tokens_per_batch_size"]  # the seed's key
    reference = json.loads((scratch / "b.json").read_text(encoding="utf-8"))["schedule"]
    assert lib == reference, f"the CLI and the reference disagree: {lib} vs {reference}"
    return list(lib)


def check_same_results(scratch: Path) -> None:
    """Every bytecode state of ``--cold`` wrote the same result file."""
    written = {path.name: path.read_bytes() for path in sorted(scratch.glob("*.json"))}
    assert len(set(written.values())) == 1, f"the states wrote different results: {list(written)}"


#: The commands of the rows with a target (``--quick``).
QUICK = ("cli", "reference", "help", "import json")


def machine_state() -> str:
    """The two facts that move every figure here: the load average, and whether Polars',
    NumPy's and lib's bytecode caches exist (without them, as where PYTHONDONTWRITEBYTECODE=1
    is set, every process compiles their sources again; ``uv sync`` writes them: ``--cold``)."""
    cached = {}
    for name in ("polars", "numpy"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        cached[name] = (
            origin is not None and Path(importlib.util.cache_from_source(origin)).exists()
        )
    caches = ", ".join(
        f"{name} {'cached' if hit else 'NOT cached'}" for name, hit in cached.items()
    )
    # lib's own modules: the CLI imports some 40 of them (~12,000 lines), compiled again by
    # every process where they have no cache (hatch_build.py writes them at `uv sync`).
    sources = sorted((ROOT / "lib").rglob("*.py"))
    compiled = sum(Path(importlib.util.cache_from_source(str(path))).exists() for path in sources)
    caches += f", lib {compiled}/{len(sources)} modules cached"
    load = (
        " ".join(Path("/proc/loadavg").read_text().split()[:3])
        if Path("/proc/loadavg").exists()
        else "?"
    )
    return f"load average {load}; bytecode caches: {caches}"


def run_bench(
    sweep_dir: Path,
    repeats: int,
    quick: bool = False,
    noise: float | None = None,
    cold: bool = False,
) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="tune-spec-k-bench-cli-"))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1") if cold else None
    try:
        if cold:
            named = cold_commands(sweep_dir, scratch, noise)
            rows = [row for row in COLD_ROWS if row.lib in named]
        else:
            named = commands(sweep_dir, scratch, noise)
            rows = [row for row in ROWS if not quick or row.lib in QUICK]
            if quick:
                named = {name: named[name] for name in QUICK}
        for command in named.values():  # warm-up: bytecode caches (unless --cold), page cache
            run_once(command, env)
        if cold:
            check_same_results(scratch)
            print(f"{sweep_dir}: every bytecode state writes the same result")
        else:
            schedule = check_same_schedule(scratch)
            print(f"{sweep_dir}: the CLI and the reference both write {schedule}")
        print(machine_state())
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in named}
        order = list(named)
        for repeat in range(repeats):
            for name in order if repeat % 2 == 0 else order[::-1]:
                samples[name].append(run_once(named[name], env))
    finally:
        shutil.rmtree(scratch)

    def median(name: str, index: int) -> float:
        return statistics.median(sample[index] for sample in samples[name])

    print(f"\nmedian of {repeats} rounds; ratio = lib / baseline, lower is better\n")
    header = (
        f"{'what':44} {'lib ms':>8} {'base ms':>8} {'ratio':>6} {'target':>7}  verdict"
        f"  {'cpu ratio':>9}"
    )
    print(header)
    print("-" * len(header))
    missed = 0
    for row in rows:
        ratio = median(row.lib, 0) / median(row.baseline, 0)
        cpu_ratio = median(row.lib, 1) / median(row.baseline, 1)
        if row.target is None:
            verdict, shown = "-", "-"
        else:
            met = ratio < row.target if row.strict else ratio <= row.target
            verdict = "PASS" if met else "FAIL"
            shown = f"{'<' if row.strict else '<='} {row.target:g}"
        missed += verdict == "FAIL"
        print(
            f"{row.what:44} {median(row.lib, 0) * 1e3:8.0f} {median(row.baseline, 0) * 1e3:8.0f}"
            f" {ratio:6.3f} {shown:>7}  {verdict:7}  {cpu_ratio:9.3f}"
        )
    print(f"after: {machine_state()}")
    return 1 if missed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("sweep_dir", nargs="?", type=Path, help="reuse this sweep")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="only the two targets' commands (under a minute)"
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="the CLI with and without lib's and the packages' bytecode caches, and uv run",
    )
    parser.add_argument(
        "--max-objective-relative-mad",
        type=float,
        default=None,
        help="the noise threshold of both the CLI and the reference (a context sweep: 1)",
    )
    args = parser.parse_args()
    with bench_sweep(args.sweep_dir, args.runs) as sweep_dir:
        return run_bench(
            sweep_dir, args.repeats, args.quick, args.max_objective_relative_mad, args.cold
        )


if __name__ == "__main__":
    sys.exit(main())
