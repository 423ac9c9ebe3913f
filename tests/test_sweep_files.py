"""lib/sweep_files.py: reading a sweep's files needs neither Polars nor NumPy, what it reads
can cross a process boundary, and the garbage collector is left as the caller had it."""

from __future__ import annotations

import gc
import pickle
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from paths import REPO, SAMPLE_SWEEPS
from sweep_builder import write_grid

from lib.sweep_files import read_sweep_files
from lib.sweeps import load_experiment, sweep_from


def test_reading_loads_neither_polars_nor_numpy() -> None:
    folder = str(SAMPLE_SWEEPS / "sonnet-like")
    probe = (
        "import sys; from lib.sweep_files import read_sweep_files;"
        f" read_sweep_files({folder!r}, batch_size_var='max_concurrency',"
        " k_var='speculative_config.num_speculative_tokens_per_batch_size');"
        " print(sorted(m for m in ('polars', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("metrics", [None, ("output_throughput", "failed")])
def test_what_is_read_survives_pickling(metrics: tuple[str, ...] | None) -> None:
    folder = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"
    files = read_sweep_files(
        folder,
        batch_size_var="max_concurrency",
        k_var="speculative_config.num_speculative_tokens_per_batch_size",
        metrics=metrics,
    )
    travelled = sweep_from(pickle.loads(pickle.dumps(files)))
    here = load_experiment(folder, metrics=metrics)
    assert travelled.runs.equals(here.runs)
    assert (travelled.problems, travelled.input_files) == (here.problems, here.input_files)
    assert travelled.speculative_configs == here.speculative_configs


def test_garbage_collector_is_paused_while_reading_and_restored(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0], (1, 3): [150.0]})
    seen: list[bool] = []

    def progress(paths: Sequence[Path]) -> Iterator[Path]:
        for path in paths:
            seen.append(gc.isenabled())
            yield path

    assert gc.isenabled()
    load_experiment(tmp_path, progress=progress)
    assert seen == [False, False]
    assert gc.isenabled()

    def failing(paths: Sequence[Path]) -> Iterator[Path]:
        raise RuntimeError("the progress bar broke")
        yield from paths

    with pytest.raises(RuntimeError):
        load_experiment(tmp_path, progress=failing)
    assert gc.isenabled()
    gc.disable()
    try:
        load_experiment(tmp_path, metrics=["output_throughput"])
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


def test_metrics_must_be_a_collection_of_names(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0]})
    with pytest.raises(TypeError):
        load_experiment(tmp_path, metrics="output_throughput")
    assert gc.isenabled()
