"""Generate the SYNTHETIC sample sweeps in this folder.

Every number written here comes from the performance and noise models below, not from a GPU.
The files use the real `vllm bench sweep serve` layout so that the tuner, its tests and the
notebook have input that looks like the real thing. See README.md next to this file for the models,
their parameters and the schedules each experiment is expected to give.

Regenerate (byte-identical output on every run):

    uv run python data/sample_sweeps/generate.py

`--out-dir DIR` writes somewhere else (the tests regenerate into a temporary folder and compare),
`--only NAME` (repeatable) writes only the named experiments.

Standard library only, so it runs anywhere.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent

# The seed's sweep design: a fixed global maximum K, the effective K set by a one-range schedule.
K_VALUES: tuple[int, ...] = (0, 1, 3, 7)
K_MAX = 7
MAX_NUM_SEQS = 256
CONCURRENCIES: tuple[int, ...] = (1, 64, 128, 256)
NUM_PROMPTS: dict[int, int] = {1: 32, 64: 512, 128: 1024, 256: 2048}
NUM_RUNS = 3
OUTPUT_LEN = 128

# Gaps between runs in the fake timeline behind the `date` fields (seconds).
SERVER_START_S = 150
GAP_BETWEEN_RUNS_S = 12


@dataclass(frozen=True)
class StepModel:
    """Time of one engine step (ms) for a batch of `batch` running requests at K draft tokens,
    each request holding `context` tokens of context (prompt plus tokens generated so far).

    step(B, K, ctx) = fixed + per_seq * B
                      + [K > 0] * (spec_fixed + spec_per_seq * B)
                      + K * (draft_fixed + draft_per_seq * B)
                      + [K > 0 and bucket_lo < B * (K + 1) <= bucket_hi] * bucket_penalty
                      + [B * (K + 1) > cudagraph_max_tokens] * eager_penalty
                      + B * ctx * (kv + K * draft_kv)

    The last term is attention over the context: the target reads each request's KV cache once
    per step, shared by all K + 1 verified positions (`kv`), and every draft position adds its
    own attention over the context (`draft_kv`). Both are 0 in the short-context models.
    """

    fixed_ms: float
    per_seq_ms: float
    prefill_ms_per_token: float
    spec_fixed_ms: float
    spec_per_seq_ms: float
    draft_fixed_ms: float
    draft_per_seq_ms: float
    bucket_lo: int = 0
    bucket_hi: int = 0
    bucket_penalty_ms: float = 0.0
    cudagraph_max_tokens: int = 1 << 30
    eager_penalty_ms: float = 0.0
    kv_ms_per_context_token: float = 0.0
    draft_kv_ms_per_context_token: float = 0.0

    def step_ms(self, batch: int, k: int, context: int = 0) -> float:
        tokens = batch * (k + 1)
        t = self.fixed_ms + self.per_seq_ms * batch
        if k > 0:
            t += self.spec_fixed_ms + self.spec_per_seq_ms * batch
            t += k * (self.draft_fixed_ms + self.draft_per_seq_ms * batch)
            if self.bucket_lo < tokens <= self.bucket_hi:
                t += self.bucket_penalty_ms
        if tokens > self.cudagraph_max_tokens:
            t += self.eager_penalty_ms
        if self.kv_ms_per_context_token or self.draft_kv_ms_per_context_token:
            per_token = self.kv_ms_per_context_token + k * self.draft_kv_ms_per_context_token
            t += batch * context * per_token
        return t


def logistic_in_context(short: float, long: float, mid: float, steepness: float, c: int) -> float:
    """short at small context c, long at large c, halfway at c = mid; rounded (libm pow)."""
    return r6(short + (long - short) / (1.0 + (mid / c) ** steepness))


@dataclass(frozen=True)
class ContextAcceptance:
    """Acceptance that depends on the decode-time context c (tokens). The draft at position i
    (1-based) is accepted, given the previous ones were, with probability alpha(c) * r(c)^(i-1):

    alpha(c) = logistic_in_context(alpha_short, alpha_long, alpha_mid, alpha_steepness, c)
    r(c)     = logistic_in_context(decay_short, decay_long, decay_mid, decay_steepness, c)

    alpha is the first draft's acceptance; r < 1 makes deeper drafts fall off faster.
    """

    alpha_short: float
    alpha_long: float
    alpha_mid: float
    alpha_steepness: float
    decay_short: float
    decay_long: float
    decay_mid: float
    decay_steepness: float

    def alpha(self, context: int) -> float:
        return logistic_in_context(
            self.alpha_short, self.alpha_long, self.alpha_mid, self.alpha_steepness, context
        )

    def decay(self, context: int) -> float:
        return logistic_in_context(
            self.decay_short, self.decay_long, self.decay_mid, self.decay_steepness, context
        )


@dataclass(frozen=True)
class Disturbance:
    """Extra multipliers on output throughput for the runs of one (serve, bench) combo."""

    serve: str
    bench: str
    run_multipliers: tuple[float, float, float]


@dataclass(frozen=True)
class Experiment:
    name: str
    seed: int
    start: str  # first run's date, "%Y%m%d-%H%M%S"
    model_id: str
    spec_method: str
    draft_model: str
    input_len: int  # prompt length; unused when input_lens sweeps it
    input_len_varies: bool  # natural prompts: per-combo totals differ slightly from N * input_len
    # Per-position conditional acceptance probability, or one that depends on the context.
    alpha: float | ContextAcceptance
    steps: StepModel
    throughput_cv: float  # sigma of the per-run lognormal multiplier on output throughput
    acceptance_cv: float  # sigma of the per-run lognormal multiplier on alpha
    goodput: tuple[str, ...] = ()  # bench `--goodput` SLOs, e.g. ("tpot:50",)
    disturbances: tuple[Disturbance, ...] = ()
    k_values: tuple[int, ...] = K_VALUES
    k_max: int = K_MAX  # the global num_speculative_tokens every server starts with
    concurrencies: tuple[int, ...] = CONCURRENCIES
    num_prompts: Mapping[int, int] = field(default_factory=lambda: dict(NUM_PROMPTS))
    # Prompt lengths swept as the bench parameter `random_input_len` (random dataset, every
    # prompt exactly that long); empty: one prompt length, `input_len`.
    input_lens: tuple[int, ...] = ()
    summary_csv: bool = False  # write the sweep's top-level summary.csv
    # Laid out as `tune-spec-k plan --design lean` writes it (see LEAN_* below and
    # generate_lean); the other experiments are the seed's design, every cell NUM_RUNS times.
    lean: bool = False


@dataclass(frozen=True)
class BenchCombo:
    """One entry of bench_params.json: its name (the combo folder's BENCH part) and params."""

    name: str
    concurrency: int
    input_len: int
    params: Mapping[str, Any]


# Llama-3.1-8B-Instruct + EAGLE-3 on one H100 (80 GB), fitted to the seed's published numbers.
LLAMA_8B_H100 = StepModel(
    fixed_ms=4.647,
    per_seq_ms=0.1698,
    prefill_ms_per_token=0.00963,
    spec_fixed_ms=1.498,
    spec_per_seq_ms=0.2630,
    draft_fixed_ms=0.030,
    draft_per_seq_ms=0.01544,
)

# Qwen3-30B-A3B (MoE) + Qwen3-0.6B draft model on one H100, hand-tuned to be non-monotone: a poorly
# tuned verification-kernel config for 192 < B*(K+1) <= 384 tokens, and CUDA graphs captured only
# up to 512 tokens per step (eager execution above).
QWEN3_MOE_H100 = StepModel(
    fixed_ms=6.5,
    per_seq_ms=0.09,
    prefill_ms_per_token=0.012,
    spec_fixed_ms=0.7,
    spec_per_seq_ms=0.05,
    draft_fixed_ms=0.6,
    draft_per_seq_ms=0.03,
    bucket_lo=192,
    bucket_hi=384,
    bucket_penalty_ms=16.0,
    cudagraph_max_tokens=512,
    eager_penalty_ms=9.0,
)

# Gemma-4-31B-it (FP8, `--quantization fp8` in the serve command) + its MTP assistant on one
# H100 NVL, calibrated to the shape of the published context results (vLLM PR #48944): attention
# over the context makes the target step grow with context while the verification of K + 1
# positions shares one read of the KV cache, so speculation pays again at batch 256 from ~2k
# tokens. Prefill is deliberately cheap (see README.md, "The context model").
GEMMA4_31B_H100_NVL = StepModel(
    fixed_ms=14.5,
    per_seq_ms=0.25,
    prefill_ms_per_token=0.002,
    spec_fixed_ms=0.85,
    spec_per_seq_ms=0.31,
    draft_fixed_ms=0.61,
    draft_per_seq_ms=0.011,
    kv_ms_per_context_token=6.6e-5,
    draft_kv_ms_per_context_token=2.3e-5,
)

# Drafts are accepted more often with more context (about 20 % of K=3 drafts at 512 prompt
# tokens, about 45 % from 2k), and at very long context deeper drafts stop falling off.
GEMMA4_MTP_ACCEPTANCE = ContextAcceptance(
    alpha_short=0.45,
    alpha_long=0.75,
    alpha_mid=880.0,
    alpha_steepness=6.0,
    decay_short=0.70,
    decay_long=0.99,
    decay_mid=11000.0,
    decay_steepness=3.2,
)

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_8B_EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"

# The lean sample: what `tune-spec-k plan --design lean --ks 0,1,3,5,7 --max-batch-size 256`
# writes (lib/loop/plan/lean.py). Every (anchor, K) once, with bench seed 0; the noise probe,
# K=0 and the largest K at the smallest, middle and largest anchor, LEAN_PROBE_RUNS times
# (seeds 0-2) on the K's one server. The probe K share a sweep whose results are the
# experiment folder itself; the other K a sweep of their own, an experiment inside it.
LEAN_ANCHORS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LEAN_KS: tuple[int, ...] = (0, 1, 3, 5, 7)
LEAN_PROBE_KS: tuple[int, ...] = (0, 7)
LEAN_PROBE_ANCHORS: tuple[int, ...] = (1, 16, 256)
LEAN_PROBE_RUNS = 3
LEAN_GRID_EXPERIMENT = "grid"

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        name="random-control",
        seed=1001,
        start="20250915-091500",
        model_id=LLAMA_8B,
        spec_method="eagle3",
        draft_model=LLAMA_8B_EAGLE3,
        input_len=128,
        input_len_varies=False,
        alpha=0.03,
        steps=LLAMA_8B_H100,
        throughput_cv=0.01,
        acceptance_cv=0.02,
        goodput=("tpot:50",),
    ),
    Experiment(
        name="sonnet-like",
        seed=2002,
        start="20250915-140000",
        model_id=LLAMA_8B,
        spec_method="eagle3",
        draft_model=LLAMA_8B_EAGLE3,
        input_len=550,
        input_len_varies=True,
        alpha=0.554,
        steps=LLAMA_8B_H100,
        throughput_cv=0.01,
        acceptance_cv=0.01,
    ),
    Experiment(
        name="moe-non-monotone",
        seed=3003,
        start="20250916-100000",
        model_id="Qwen/Qwen3-30B-A3B",
        spec_method="draft_model",
        draft_model="Qwen/Qwen3-0.6B",
        input_len=256,
        input_len_varies=True,
        alpha=0.66,
        steps=QWEN3_MOE_H100,
        throughput_cv=0.01,
        acceptance_cv=0.01,
    ),
    Experiment(
        name="noisy",
        seed=4004,
        start="20250917-080000",
        model_id=LLAMA_8B,
        spec_method="eagle3",
        draft_model=LLAMA_8B_EAGLE3,
        input_len=550,
        input_len_varies=True,
        alpha=0.554,
        steps=LLAMA_8B_H100,
        throughput_cv=0.025,
        acceptance_cv=0.01,
        disturbances=(
            # Interference in runs 1 and 2: visible to MAD (both gaps around the median are large).
            Disturbance(serve="k7", bench="c1", run_multipliers=(1.0, 0.66, 0.83)),
            # One run 20 % low: invisible to MAD at n = 3 (the other two runs agree).
            Disturbance(serve="k0", bench="c128", run_multipliers=(1.0, 1.0, 0.80)),
        ),
    ),
    Experiment(
        name="long-context",
        seed=5005,
        start="20250918-090000",
        model_id="google/gemma-4-31B-it",
        spec_method="mtp",
        draft_model="google/gemma-4-31B-it-assistant",
        input_len=0,
        input_len_varies=False,
        alpha=GEMMA4_MTP_ACCEPTANCE,
        steps=GEMMA4_31B_H100_NVL,
        throughput_cv=0.01,
        acceptance_cv=0.01,
        k_values=(0, 1, 3, 5),
        k_max=5,
        concurrencies=(1, 8, 64, 256),
        num_prompts={1: 16, 8: 64, 64: 256, 256: 1024},
        input_lens=(512, 2048, 8192, 32768),
        summary_csv=True,
    ),
)

# The lean sample: sonnet-like's model (its step times, acceptance and prompts) over the lean
# plan's 9 anchors x 5 K, with its own seed, timeline and a little more run noise.
EXPERIMENTS += (
    replace(
        next(exp for exp in EXPERIMENTS if exp.name == "sonnet-like"),
        name="lean",
        seed=6006,
        start="20250919-090000",
        throughput_cv=0.015,
        k_values=LEAN_KS,
        concurrencies=LEAN_ANCHORS,
        # The plan's default: max(32, 8 x concurrency).
        num_prompts={c: max(32, 8 * c) for c in LEAN_ANCHORS},
        lean=True,
    ),
)


def reach_probability(i: int, alpha: float, decay: float = 1.0) -> float:
    """Probability that draft position i (1-based) is accepted, all before it accepted too:
    prod_{j=1..i} alpha * decay^(j-1) = alpha^i * decay^(i(i-1)/2) (alpha^i when decay is 1)."""
    return alpha**i * decay ** (i * (i - 1) // 2)


def expected_tokens_per_step(k: int, alpha: float, decay: float = 1.0) -> float:
    """Tokens each request gains per step: 1 + sum of the reach probabilities of positions
    1..K (1 + alpha + ... + alpha^K when decay is 1)."""
    return sum(reach_probability(i, alpha, decay) for i in range(k + 1))


def decode_context(exp: Experiment, input_len: int) -> int:
    """Mean context of a decode step: the prompt plus half the output (0 without a context
    model, whose step time ignores context)."""
    return input_len + OUTPUT_LEN // 2 if isinstance(exp.alpha, ContextAcceptance) else 0


def acceptance(exp: Experiment, input_len: int) -> tuple[float, float]:
    """(alpha, decay) of the model at this prompt length."""
    if isinstance(exp.alpha, ContextAcceptance):
        context = decode_context(exp, input_len)
        return exp.alpha.alpha(context), exp.alpha.decay(context)
    return exp.alpha, 1.0


def model_output_throughput(
    exp: Experiment, batch: int, k: int, alpha: float, input_len: int, decay: float = 1.0
) -> float:
    """Output tok/s of a saturated run: each request pays OUTPUT_LEN / E decode steps of
    step(B, K, context) / B and its own prefill of input_len tokens."""
    step = exp.steps.step_ms(batch, k, decode_context(exp, input_len))
    per_token_ms = step / (batch * expected_tokens_per_step(k, alpha, decay))
    per_request_ms = OUTPUT_LEN * per_token_ms + input_len * exp.steps.prefill_ms_per_token
    return 1000.0 * OUTPUT_LEN / per_request_ms


def serve_name(k: int) -> str:
    return f"k{k}"


def bench_combos(exp: Experiment) -> list[BenchCombo]:
    """The bench combos in sweep order. One prompt length: named `c<C>`. Swept prompt lengths:
    named as vLLM names a combo by its swept keys, `max_concurrency=C-random_input_len=L`."""
    combos = []
    for c in exp.concurrencies:
        n = exp.num_prompts[c]
        if not exp.input_lens:
            params: dict[str, Any] = {"max_concurrency": c, "num_prompts": n}
            if exp.goodput:
                params["goodput"] = list(exp.goodput)
            combos.append(BenchCombo(f"c{c}", c, exp.input_len, params))
            continue
        for length in exp.input_lens:
            params = {"max_concurrency": c, "random_input_len": length, "num_prompts": n}
            name = f"max_concurrency={c}-random_input_len={length}"
            combos.append(BenchCombo(name, c, length, params))
    return combos


def speculative_config(exp: Experiment, k: int) -> dict[str, Any]:
    return {
        "method": exp.spec_method,
        "model": exp.draft_model,
        "num_speculative_tokens": exp.k_max,
        "num_speculative_tokens_per_batch_size": [[1, MAX_NUM_SEQS, k]],
    }


def serve_params(exp: Experiment) -> dict[str, dict[str, Any]]:
    return {serve_name(k): {"speculative_config": speculative_config(exp, k)} for k in exp.k_values}


def bench_params(exp: Experiment) -> dict[str, dict[str, Any]]:
    return {combo.name: dict(combo.params) for combo in bench_combos(exp)}


def tpot_slo_ms(exp: Experiment) -> float | None:
    for slo in exp.goodput:
        metric, _, value = slo.partition(":")
        if metric == "tpot":
            return float(value)
    return None


def total_input_tokens(
    exp: Experiment, concurrency: int, input_len: int, bench_seed: int | None = None
) -> int:
    n = exp.num_prompts[concurrency]
    if not exp.input_len_varies:
        return n * input_len
    # The same prompts in every run and for every K (fixed dataset seed): a fixed offset per combo.
    # A seeded bench combo samples its own prompts: an offset per (combo, seed), the same for
    # every K.
    key = exp.seed * 1000 + concurrency
    if bench_seed is not None:
        key = key * 10 + bench_seed
    offset_rng = random.Random(key)
    return n * input_len + offset_rng.randint(-n // 4, n // 4)


def latency_shape(
    metric: str, concurrency: int, k: int, alpha: float
) -> tuple[float, float, float]:
    """(median, std, p99) as multiples of the mean for one latency metric. Under speculation the
    per-request TPOT spreads with the acceptance (std 3 % + 6 % * alpha of the mean)."""
    single = concurrency == 1
    if metric == "ttft":
        return (0.97, 0.08, 1.35) if single else (0.62, 0.90, 4.0)
    if metric == "tpot":
        if k == 0:
            return (1.0, 0.02, 1.06) if single else (1.0, 0.05, 1.18)
        spread = 0.03 + 0.06 * alpha
        return (0.99, spread, 1.0 + 3.0 * spread)
    if metric == "itl":
        if k == 0:
            return (0.99, 0.10, 1.3) if single else (0.93, 0.50, 3.0)
        return (0.95, 0.35, 2.2) if single else (0.93, 0.55, 3.2)
    if metric == "e2el":
        return (0.99, 0.04, 1.12) if single else (1.0, 0.07, 1.22)
    raise ValueError(metric)


def r6(x: float) -> float:
    """Round a value computed with transcendental functions (platform libm) to 6 decimals, so
    the files do not depend on the last bit of exp/log."""
    return round(x, 6)


def spec_decode_fields(
    num_requests: int, k: int, alpha: float, decay: float = 1.0
) -> dict[str, Any]:
    """Server-wide counters over one run: one draft per request per decode step."""
    e = expected_tokens_per_step(k, alpha, decay)
    num_drafts = round(num_requests * (OUTPUT_LEN - 1) / e)
    per_position = [round(num_drafts * reach_probability(i + 1, alpha, decay)) for i in range(k)]
    accepted = sum(per_position)
    draft_tokens = num_drafts * k
    return {
        "spec_decode_acceptance_rate": 100.0 * accepted / draft_tokens,
        "spec_decode_acceptance_length": 1.0 + accepted / num_drafts,
        "spec_decode_num_drafts": num_drafts,
        "spec_decode_draft_tokens": draft_tokens,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_per_position_acceptance_rates": [n / num_drafts for n in per_position],
    }


def make_record(
    exp: Experiment,
    rng: random.Random,
    k: int,
    combo: BenchCombo,
    run_number: int,
    date: datetime,
) -> dict[str, Any]:
    concurrency = combo.concurrency
    n = exp.num_prompts[concurrency]
    in_tokens = total_input_tokens(exp, concurrency, combo.input_len, combo.params.get("seed"))
    out_tokens = n * OUTPUT_LEN

    # Draw every random number up front, in a fixed order.
    z_alpha = rng.gauss(0.0, 1.0)
    z_tps = rng.gauss(0.0, 1.0)
    z_ttft = rng.gauss(0.0, 1.0)
    z_peak = rng.gauss(0.0, 1.0)
    z_shape = [rng.gauss(0.0, 1.0) for _ in range(12)]

    mean_alpha, decay = acceptance(exp, combo.input_len)
    alpha = min(mean_alpha * math.exp(exp.acceptance_cv * z_alpha), 0.98) if k > 0 else 0.0
    if isinstance(exp.alpha, ContextAcceptance):
        # Rounded like every other libm result (the older experiments predate this rule for
        # alpha and keep their unrounded value, so their files stay byte-identical).
        alpha = r6(alpha)
    spec = spec_decode_fields(n, k, alpha, decay) if k > 0 else {}
    acceptance_length = spec["spec_decode_acceptance_length"] if k > 0 else 1.0

    disturbance = 1.0
    for d in exp.disturbances:
        if d.serve == serve_name(k) and d.bench == combo.name:
            disturbance = d.run_multipliers[run_number]
    multiplier = math.exp(exp.throughput_cv * z_tps) * disturbance
    tps = model_output_throughput(exp, concurrency, k, alpha, combo.input_len, decay) * multiplier

    duration = r6(out_tokens / tps)
    request_throughput = n / duration
    # Little's law; the last wave drains, so the mean number in flight is a little below c.
    in_flight = concurrency * (1.0 - (concurrency - 1) / (2.0 * n))
    mean_e2el = r6(1000.0 * in_flight / request_throughput)
    step = exp.steps.step_ms(concurrency, k, decode_context(exp, combo.input_len))
    ttft_model = combo.input_len * exp.steps.prefill_ms_per_token + step * (
        1.0 + 0.5 * math.log2(concurrency)
    )
    mean_ttft = r6(ttft_model / multiplier * math.exp(0.03 * z_ttft))
    mean_tpot = (mean_e2el - mean_ttft) / (OUTPUT_LEN - 1)
    means = {
        "ttft": mean_ttft,
        "tpot": mean_tpot,
        "itl": mean_tpot * acceptance_length,
        "e2el": mean_e2el,
    }

    latency: dict[str, float] = {}
    tpot_std = 0.0
    for i, (metric, mean) in enumerate(means.items()):
        med, std, p99 = latency_shape(metric, concurrency, k, mean_alpha)
        jitter = [math.exp(0.01 * z) for z in z_shape[3 * i : 3 * i + 3]]
        median_v = r6(mean * med * jitter[0])
        std_v = r6(mean * std * jitter[1])
        p99_v = r6(mean * p99 * jitter[2])
        if metric == "tpot":
            tpot_std = std_v
        latency[f"mean_{metric}_ms"] = mean
        latency[f"median_{metric}_ms"] = median_v
        latency[f"std_{metric}_ms"] = std_v
        latency[f"p99_{metric}_ms"] = p99_v

    goodput: float | None = None
    slo = tpot_slo_ms(exp)
    if slo is not None:
        # Per-request TPOT ~ Normal(mean, std); a request is good when its TPOT <= the SLO.
        good_fraction = 0.5 * math.erfc((mean_tpot - slo) / (tpot_std * math.sqrt(2.0)))
        goodput = round(n * good_fraction) / duration

    peak_factor = 1.06 if concurrency == 1 else 1.22
    record: dict[str, Any] = {
        "date": date.strftime("%Y%m%d-%H%M%S"),
        "backend": "vllm",
        "label": None,
        "model_id": exp.model_id,
        "tokenizer_id": exp.model_id,
        "num_prompts": n,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "duration": duration,
        "completed": n,
        "failed": 0,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": request_throughput,
        "request_goodput": goodput,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "max_output_tokens_per_s": float(
            round(out_tokens / duration * peak_factor * math.exp(0.02 * abs(z_peak)))
        ),
        "max_concurrent_requests": concurrency,
    }
    record.update(latency)
    record.update(spec)
    # Keys the sweep adds: run number, serve params, bench params (the combo name last from bench).
    record["run_number"] = run_number
    record["speculative_config"] = speculative_config(exp, k)
    record["_benchmark_name"] = combo.name
    # The bench params (max_concurrency and num_prompts are already there with the same values).
    record.update(combo.params)
    return record


def dump(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def csv_cell(value: Any, numeric: bool, whole: bool) -> str:
    """One cell as pandas writes it: empty for a missing value or None, an integer column as
    integers, any other numeric column as floats (repr), anything else as str()."""
    if value is None:
        return ""
    if numeric:
        return str(value) if whole else repr(float(value))
    return str(value)


def write_summary_csv(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """The sweep's top-level summary.csv: vLLM writes `pd.DataFrame.from_records(all_data)
    .to_csv(path)`, one row per run in sweep order, every key of any record a column (in
    first-seen order), an unnamed index column first."""
    columns = list(dict.fromkeys(key for record in records for key in record))
    kinds = {}
    for column in columns:
        values = [record.get(column) for record in records]
        present = [v for v in values if v is not None]
        numbers = all(type(v) in (int, float) for v in present) and bool(present)
        whole = numbers and len(present) == len(values) and all(type(v) is int for v in present)
        kinds[column] = (numbers, whole)
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["", *columns])
        for index, record in enumerate(records):
            cells = [csv_cell(record.get(column), *kinds[column]) for column in columns]
            writer.writerow([str(index), *cells])


def lean_bench_combos(exp: Experiment, runs_at: Mapping[int, int]) -> list[BenchCombo]:
    """A lean sweep's bench combos as the plan names them, ``c<C>-seed<S>``: each anchor with
    seeds 0 .. runs_at[anchor] - 1 (anchor order, then seed order)."""
    combos = []
    for c in exp.concurrencies:
        for seed in range(runs_at[c]):
            params = {"max_concurrency": c, "num_prompts": exp.num_prompts[c], "seed": seed}
            combos.append(BenchCombo(f"c{c}-seed{seed}", c, exp.input_len, params))
    return combos


def generate_lean(exp: Experiment, out_dir: Path) -> None:
    """The lean sample: the probe K's sweep into the experiment folder, the other K's into
    ``grid/`` inside it, each with the params files the plan's run.sh copies there, every
    seeded bench combo run once (``--num-runs 1``: run=0.json)."""
    root = out_dir / exp.name
    probe_runs = {c: LEAN_PROBE_RUNS if c in LEAN_PROBE_ANCHORS else 1 for c in exp.concurrencies}
    sweeps = [
        (root, LEAN_PROBE_KS, lean_bench_combos(exp, probe_runs)),
        (
            root / LEAN_GRID_EXPERIMENT,
            tuple(k for k in exp.k_values if k not in LEAN_PROBE_KS),
            lean_bench_combos(exp, dict.fromkeys(exp.concurrencies, 1)),
        ),
    ]
    rng = random.Random(exp.seed)
    clock = datetime.strptime(exp.start, "%Y%m%d-%H%M%S")
    for folder, ks, combos in sweeps:
        folder.mkdir(parents=True, exist_ok=True)
        dump(
            folder / "serve_params.json",
            {serve_name(k): {"speculative_config": speculative_config(exp, k)} for k in ks},
        )
        dump(folder / "bench_params.json", {combo.name: dict(combo.params) for combo in combos})
        for k in ks:
            clock += timedelta(seconds=SERVER_START_S)
            for combo in combos:
                combo_folder = folder / f"SERVE--{serve_name(k)}-BENCH--{combo.name}"
                combo_folder.mkdir(exist_ok=True)
                record = make_record(exp, rng, k, combo, 0, clock)
                clock += timedelta(seconds=math.ceil(record["duration"]) + GAP_BETWEEN_RUNS_S)
                dump(combo_folder / "run=0.json", record)
                dump(combo_folder / "summary.json", [record])


def generate(exp: Experiment, out_dir: Path) -> None:
    if exp.lean:
        generate_lean(exp, out_dir)
        return
    root = out_dir / exp.name
    root.mkdir(parents=True, exist_ok=True)
    dump(root / "serve_params.json", serve_params(exp))
    dump(root / "bench_params.json", bench_params(exp))
    rng = random.Random(exp.seed)
    clock = datetime.strptime(exp.start, "%Y%m%d-%H%M%S")
    every_run = []
    for k in exp.k_values:
        clock += timedelta(seconds=SERVER_START_S)
        for combo in bench_combos(exp):
            folder = root / f"SERVE--{serve_name(k)}-BENCH--{combo.name}"
            folder.mkdir(exist_ok=True)
            runs = []
            for run_number in range(NUM_RUNS):
                record = make_record(exp, rng, k, combo, run_number, clock)
                clock += timedelta(seconds=math.ceil(record["duration"]) + GAP_BETWEEN_RUNS_S)
                dump(folder / f"run={run_number}.json", record)
                runs.append(record)
            dump(folder / "summary.json", runs)
            every_run += runs
    if exp.summary_csv:
        write_summary_csv(root / "summary.csv", every_run)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the synthetic sample sweeps.")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR, help="default: this folder")
    parser.add_argument(
        "--only", action="append", choices=[exp.name for exp in EXPERIMENTS], metavar="NAME"
    )
    args = parser.parse_args(argv)
    for exp in EXPERIMENTS:
        if args.only is None or exp.name in args.only:
            generate(exp, args.out_dir)
            print(f"wrote {args.out_dir / exp.name}")


if __name__ == "__main__":
    main()
