"""The export's settings, each flag declared once (:mod:`lib.flags`); the formats say which of
them they read (:attr:`lib.deploy.engine_format.EngineFormat.flags`), and a flag given to a format
that does not read it is an error, never ignored. ``--format``'s choices are the registry's
(:func:`lib.deploy.registry.format_names`), given to the parser by the command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from lib.flags import flag

__all__ = ["CtxAgg", "ExportSettings"]

CtxAgg = Literal["median", "mean", "max"]


@dataclass(frozen=True)
class ExportSettings:
    """What to export: the engine's format, the global K, and each format's own options."""

    format: str = field(
        default="trtllm",
        metadata=flag(
            "--format",
            "the engine format (each is described in docs/formats.md): trtllm: TensorRT-LLM's"
            " max_draft_len and draft_len_schedule; vllm: vLLM's num_speculative_tokens and"
            " num_speculative_tokens_per_batch_size; sglang: SGLang's"
            " --speculative-adaptive-config file. From a result with a context grid:"
            " vllm-context: today's vLLM, one batch schedule for the --context-mix, plus one"
            " per measured context; vllm-rfc-48944: the grid as [bs_lo, bs_hi, ctx_lo, ctx_hi,"
            " K] entries (vLLM PR #48944); vllm-pr-54801: a batch table and a"
            " num_speculative_tokens_per_seq_len table (vLLM PR #54801, assumed combined by the"
            " smaller K). Each says what it loses against the measured 2-D optimum",
        ),
    )
    global_k: int | None = field(
        default=None,
        metadata=flag(
            "--global-k",
            "num_speculative_tokens / max_draft_len / --speculative-num-steps (default: the"
            " file's, else the largest K; TensorRT-LLM: the first range's K)",
        ),
    )
    context_mix: str | None = field(
        default=None,
        metadata=flag(
            "--context-mix",
            "context formats: the traffic's prompt lengths and weights, e.g. 512:0.7,8192:0.3;"
            " each length is matched to a measured context point within the context axis's"
            " tolerance, weights > 0 are normalised to sum 1. vllm-context's schedule is the"
            " K per batch size with the best mix-weighted conservative score (ties within the"
            " result's relative tolerance to the smallest K);"
            " vllm-pr-54801's tables are chosen on it; every format's mix-weighted mean loss"
            " uses it (default: the shortest measured context, weight 1)",
            metavar="PROMPT:WEIGHT,...",
            echo="changed",
        ),
    )
    ctx_agg: CtxAgg = field(
        default="mean",
        metadata=flag(
            "--ctx-agg",
            "vllm-rfc-48944: how the engine turns a batch's per-request context lengths into"
            " one number (the ctx_agg field)",
            echo="changed",
        ),
    )
    legacy_field_name: bool = field(
        default=False,
        metadata=flag(
            "--legacy-field-name",
            "vllm-rfc-48944: write the entries under num_speculative_tokens_per_batch_size"
            " (PR #48944's deprecated alias) instead of speculative_token_schedule",
        ),
    )
    cap_draft_len: bool = field(
        default=False,
        metadata=flag(
            "--cap-draft-len",
            "trtllm: TensorRT-LLM requires every K <= max_draft_len, the K at the smallest"
            " key; cap a later, larger K to it (a warning names each range and its measured"
            " loss) instead of refusing the export",
        ),
    )
