"""data/sample_sweeps/real-cpu-context: a real CPU context sweep. What its README says the tuner
makes of it, checked (expected values derived from the run files here, not from the tuner)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from paths import SAMPLE_SWEEPS

from lib.cli.main import main

SAMPLE = SAMPLE_SWEEPS / "real-cpu-context"
LOOSE = ["--max-objective-relative-mad", "0.3"]


def _medians() -> dict[tuple[int, int, int], float]:
    """(concurrency, prompt tokens, K) -> median output_throughput, read from the run files."""
    runs: dict[tuple[int, int, int], list[float]] = {}
    for path in SAMPLE.glob("SERVE--*/run=*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        k = int(path.parent.name.split("SERVE--k")[1].split("-")[0])
        key = (record["max_concurrency"], record["random_input_len"], k)
        runs.setdefault(key, []).append(record["output_throughput"])
    assert {len(values) for values in runs.values()} == {3}
    return {key: statistics.median(values) for key, values in runs.items()}


def test_the_seed_s_gate_rejects_it_naming_every_noisy_cell(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([str(SAMPLE), "--output-json", str(tmp_path / "r.json")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  error")]
    assert sum("[noisy-objective]" in line for line in errors) == 7
    assert sum("at 64 tokens" in line for line in errors if "noisy" in line) == 5
    assert any("[undecided-anchor] at 64 tokens" in line for line in errors)


def test_loosened_it_tunes_the_readme_s_grid(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    result = tmp_path / "r.json"
    assert main([str(SAMPLE), "--output-json", str(result), *LOOSE]) == 0
    capsys.readouterr()
    data = json.loads(result.read_text(encoding="utf-8"))
    assert [p["prompt_tokens"] for p in data["context_axis"]["points"]] == [64, 1024, 3072]
    assert [p["context_tokens"] for p in data["context_axis"]["points"]] == [128, 1088, 3136]
    shown = {
        (c["batch_size"], c["prompt_tokens"]): (c["selected_k"], c["status"])
        for c in data["context_grid"]
    }
    assert shown == {
        (1, 64): (3, "resolved"),
        (1, 1024): (3, "resolved"),
        (1, 3072): (1, "unresolved"),
        (4, 64): (3, "unresolved"),
        (4, 1024): (3, "resolved"),
        (4, 3072): (3, "resolved"),
    }
    # At (1, 3072) K=1 leads K=3 on medians: the batch-only schedule (K=3) loses 1 - K3 / K1.
    medians = _medians()
    assert medians[(1, 3072, 1)] > medians[(1, 3072, 3)]
    loss = 100 * (1 - medians[(1, 3072, 3)] / medians[(1, 3072, 1)])
    assert main(["export", str(result), "--format", "vllm-context"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0])["num_speculative_tokens_per_batch_size"] == [[1, 4, 3]]
    assert f"largest loss {loss:.1f}% (batch 1, prompt 3072 tokens)" in lines[1]
    assert main(["export", str(result), "--format", "vllm-rfc-48944"]) == 0
    assert "no cell loses" in capsys.readouterr().out.splitlines()[1]
