"""Generate a large SYNTHETIC sweep in the real `vllm bench sweep serve` layout, for bench/.

    uv run python bench/make_large_sweep.py OUT_DIR [--runs 20000] [--runs-per-cell 50]
        [--context-points 0]

Shape: K in 0..7 x ANCHORS batch-size anchors x RUNS_PER_CELL runs, where ANCHORS is
``runs // (8 * runs_per_cell)`` (default 20,000 // 400 = 50 anchors, from 1 to 2048, roughly
geometric). Every anchor measures the same K set.

With ``--context-points P`` (P >= 2) each (anchor, K) is measured at P prompt lengths too,
512 x 4^i tokens as the long-context sample (512, 2048, 8192, 32768, ...), its records
carrying ``random_input_len``: ANCHORS is then ``runs // (8 * P * runs_per_cell)``, and a
longer prompt makes a step slower (attention over the context) and drafts less accepted.
Without it the bytes are those of the sweep without the axis.

The seed's sweep design: every serve combo keeps ``num_speculative_tokens = 7`` and sets the
effective K with a one-range schedule ``[[1, MAX_NUM_SEQS, K]]``, K=0 included. Records carry
the ~40 fields of a `vllm bench serve --save-result` record plus the sweep-added keys
(``run_number``, ``speculative_config``, ``max_concurrency``, ``num_prompts``); the
``spec_decode_*`` fields are absent for K=0, as vLLM writes them only when drafts happened.

Each combo folder gets ``run=N.json`` per run and ``summary.json`` (the list of its runs).
Throughput follows a simple step-time model (speculation pays off at small batches and costs
at large ones) with 1 % lognormal noise, so the default seed policy succeeds on it and picks a
schedule with a few ranges. Same arguments, same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

K_VALUES = tuple(range(8))
GLOBAL_K = 7
MAX_BATCH_SIZE = 2048
MAX_NUM_SEQS = MAX_BATCH_SIZE
DEFAULT_RUNS = 20_000
DEFAULT_RUNS_PER_CELL = 50
SEED = 20_250_918
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT_MODEL = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
INPUT_LEN = 256
OUTPUT_LEN = 128
ALPHA = 0.6  # per-position conditional acceptance probability
THROUGHPUT_CV = 0.01
START = datetime(2025, 9, 18, 8, 0, 0)
#: The shortest prompt length of ``--context-points``, as in the long-context sample.
CONTEXT_BASE = 512


def anchors(count: int) -> list[int]:
    """``count`` distinct batch sizes from 1 to at most MAX_BATCH_SIZE, roughly geometric."""
    chosen: list[int] = []
    for index in range(count):
        target = round(MAX_BATCH_SIZE ** (index / max(count - 1, 1)))
        chosen.append(max(target, chosen[-1] + 1 if chosen else 1))
    return chosen


def context_lengths(points: int) -> list[int | None]:
    """The prompt lengths of ``--context-points``: None (no axis, INPUT_LEN) for 0."""
    return [CONTEXT_BASE * 4**index for index in range(points)] if points else [None]


def acceptance(context: int | None) -> float:
    """Per-position acceptance: ALPHA, less by 0.05 per 4x of prompt beyond CONTEXT_BASE."""
    return ALPHA if context is None else ALPHA - 0.05 * math.log(context / CONTEXT_BASE, 4)


def tokens_per_step(k: int, context: int | None = None) -> float:
    """Tokens a request gains per decode step: 1 + alpha + ... + alpha^K."""
    return sum(acceptance(context) ** i for i in range(k + 1))


def step_ms(batch: int, k: int, context: int | None = None) -> float:
    """One engine step: a fixed cost, a per-sequence cost, and a drafting/verification cost
    that grows with K and with the batch, so large batches lose more to speculation; with a
    context, attention over it grows with the tokens verified."""
    verify_tokens = batch * (k + 1)
    attention = 0.0 if context is None else 2e-5 * verify_tokens * context
    return 5.0 + 0.05 * batch + (0.8 + 0.35 * k) * (k > 0) + 0.1 * verify_tokens + attention


def model_throughput(batch: int, k: int, context: int | None = None) -> float:
    per_token_ms = step_ms(batch, k, context) / (batch * tokens_per_step(k, context))
    return 1000.0 / per_token_ms


def speculative_config(k: int) -> dict[str, Any]:
    return {
        "method": "eagle3",
        "model": DRAFT_MODEL,
        "num_speculative_tokens": GLOBAL_K,
        "num_speculative_tokens_per_batch_size": [[1, MAX_NUM_SEQS, k]],
    }


def latencies(prefix: str, mean: float, rng: random.Random) -> dict[str, float]:
    return {
        f"mean_{prefix}_ms": mean,
        f"median_{prefix}_ms": mean * rng.uniform(0.95, 1.0),
        f"std_{prefix}_ms": mean * rng.uniform(0.03, 0.3),
        f"p99_{prefix}_ms": mean * rng.uniform(1.1, 1.6),
    }


def make_record(
    rng: random.Random,
    batch: int,
    k: int,
    run_number: int,
    date: datetime,
    context: int | None = None,
) -> dict[str, Any]:
    num_prompts = max(4 * batch, 32)
    input_len = INPUT_LEN if context is None else context
    output_tokens = num_prompts * OUTPUT_LEN
    input_tokens = num_prompts * input_len
    throughput = model_throughput(batch, k, context) * math.exp(THROUGHPUT_CV * rng.gauss(0.0, 1.0))
    duration = output_tokens / throughput
    mean_tpot = 1000.0 * batch / throughput
    mean_ttft = (input_len * 0.01 + step_ms(batch, k, context)) * (1 + 0.5 * math.log2(batch))
    mean_e2el = mean_ttft + mean_tpot * (OUTPUT_LEN - 1)
    record: dict[str, Any] = {
        "date": date.strftime("%Y%m%d-%H%M%S"),
        "backend": "vllm",
        "label": None,
        "model_id": MODEL,
        "tokenizer_id": MODEL,
        "num_prompts": num_prompts,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": batch,
        "duration": duration,
        "completed": num_prompts,
        "failed": 0,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": num_prompts / duration,
        "request_goodput": None,
        "output_throughput": throughput,
        "total_token_throughput": (input_tokens + output_tokens) / duration,
        "max_output_tokens_per_s": float(round(throughput * rng.uniform(1.05, 1.3))),
        "max_concurrent_requests": batch,
        **latencies("ttft", mean_ttft, rng),
        **latencies("tpot", mean_tpot, rng),
        **latencies("itl", mean_tpot * tokens_per_step(k, context), rng),
        **latencies("e2el", mean_e2el, rng),
    }
    if k > 0:
        alpha = acceptance(context)
        num_drafts = round(num_prompts * (OUTPUT_LEN - 1) / tokens_per_step(k, context))
        per_position = [round(num_drafts * alpha ** (i + 1)) for i in range(k)]
        accepted = sum(per_position)
        record |= {
            "spec_decode_acceptance_rate": 100.0 * accepted / (num_drafts * k),
            "spec_decode_acceptance_length": 1.0 + accepted / num_drafts,
            "spec_decode_num_drafts": num_drafts,
            "spec_decode_draft_tokens": num_drafts * k,
            "spec_decode_accepted_tokens": accepted,
            "spec_decode_per_position_acceptance_rates": [n / num_drafts for n in per_position],
        }
    # What the sweep adds: run_number, the serve params, then the bench params.
    record["run_number"] = run_number
    record["speculative_config"] = speculative_config(k)
    record["max_concurrency"] = batch
    record["num_prompts"] = num_prompts
    if context is not None:
        record["random_input_len"] = context
    return record


def write_sweep(out_dir: Path, runs: int, runs_per_cell: int, context_points: int = 0) -> int:
    """Write the sweep under ``out_dir``; returns the number of runs written."""
    if context_points == 1 or context_points < 0:
        raise SystemExit(f"--context-points {context_points}: 0 (no axis) or at least 2")
    contexts = context_lengths(context_points)
    per_anchor = len(K_VALUES) * len(contexts) * runs_per_cell
    num_anchors = runs // per_anchor
    if num_anchors < 1:
        raise SystemExit(
            f"--runs {runs} is too small: need at least {per_anchor} ({len(K_VALUES)} K x"
            f" {len(contexts)} prompt lengths x --runs-per-cell {runs_per_cell})"
        )
    rng = random.Random(SEED)
    date = START
    written = 0
    for k, batch, context in (
        (k, batch, context)
        for k in K_VALUES
        for batch in anchors(num_anchors)
        for context in contexts
    ):
        name = f"SERVE--k{k}-BENCH--c{batch}" + ("" if context is None else f"-l{context}")
        combo = out_dir / name
        combo.mkdir(parents=True, exist_ok=True)
        records = []
        for run_number in range(runs_per_cell):
            record = make_record(rng, batch, k, run_number, date, context)
            date += timedelta(seconds=round(record["duration"]) + 12)
            (combo / f"run={run_number}.json").write_text(json.dumps(record, indent=4))
            records.append(record)
        (combo / "summary.json").write_text(json.dumps(records, indent=4))
        written += len(records)
    return written


@contextlib.contextmanager
def bench_sweep(sweep_dir: Path | None, runs: int) -> Iterator[Path]:
    """The benches' sweep: ``sweep_dir`` as it is, or (None) a sweep of ``runs`` runs generated
    into a temporary folder, removed afterwards."""
    if sweep_dir is not None:
        yield sweep_dir.resolve()
        return
    scratch = Path(tempfile.mkdtemp(prefix="tune-spec-k-bench-"))
    try:
        start = time.perf_counter()
        write_sweep(scratch / "sweep", runs, DEFAULT_RUNS_PER_CELL)
        print(f"generated {scratch / 'sweep'} in {time.perf_counter() - start:.1f} s")
        yield scratch / "sweep"
    finally:
        shutil.rmtree(scratch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="total runs (about)")
    parser.add_argument("--runs-per-cell", type=int, default=DEFAULT_RUNS_PER_CELL)
    parser.add_argument(
        "--context-points", type=int, default=0, help="prompt lengths per cell (0: no axis)"
    )
    args = parser.parse_args()
    written = write_sweep(args.out_dir, args.runs, args.runs_per_cell, args.context_points)
    print(f"wrote {written} runs to {args.out_dir}")


if __name__ == "__main__":
    main()
