"""lib/loop/plan/design.py: the design's checks, each naming its flag, its anchors and its
layering from the defaults, a stored design and the flags."""

from __future__ import annotations

from typing import Any

import pytest
from vllm_sweep import llama_design

from lib.loop.plan.design import SweepDesign, default_anchors, design_from


def test_default_anchors_are_powers_of_two_up_to_the_maximum() -> None:
    assert default_anchors(48) == (1, 2, 4, 8, 16, 32, 48)
    assert default_anchors(1) == (1,)
    design = SweepDesign(model="m", method="ngram", max_batch_size=48).with_default_anchors()
    assert design.anchors == default_anchors(48)


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"ks": (1, 3)}, "--ks", "K=0 among them (the baseline)"),
        ({"ks": (0,)}, "--ks", "at least one K >= 1"),
        ({"ks": (0, 1, 1)}, "--ks", "no repeated K"),
        ({"anchors": (2, 8)}, "--anchors", "the first anchor to be 1"),
        ({"max_batch_size": 16}, "--max-batch-size", "the largest anchor, 8"),
        ({"global_k": 2}, "--global-k", ">= the largest K, 3"),
        ({"goodput": ("tpot50",)}, "--goodput", "METRIC:MILLISECONDS"),
        ({"dataset": "sharegpt"}, "--dataset", "--dataset-path with it"),
        ({"num_runs": 0}, "--num-runs", ">= 1"),
        ({"speculative_options": {"method": "x"}}, "--spec-option", "the plan sets them itself"),
        ({"serve_args": "'open"}, "--serve-args", "arguments a shell can split"),
        ({"model": None}, "--model", "a value (or an earlier plan's sweep_plan.json)"),
        # The shared range of prompt lengths (lib.settings.PROMPT_TOKENS_RANGE), both ends.
        ({"context_lengths": (512, 0)}, "--context-lengths", "(0 is below 1 token)"),
        (
            {"context_lengths": (512, 2**30 + 1)},
            "--context-lengths",
            "prompt lengths from 1 to 1073741824 (1073741825 is above",
        ),
        ({"context_lengths": (512, 512)}, "--context-lengths", "no repeated length"),
        (
            {"context_lengths": (512,), "dataset": "sonnet", "dataset_path": "s.txt"},
            "--context-lengths",
            "the random dataset",
        ),
        ({"context_lengths": (512,), "input_len": 64}, "--input-len", "none with"),
        (
            {"context_lengths": (512, 4096), "serve_args": "--max-model-len 2048"},
            "--serve-args",
            ">= 4224",  # 4096 + the default 128 output tokens
        ),
        ({"max_num_seqs": 4}, "--max-num-seqs", ">= the deployment maximum, 8"),
        ({"max_cudagraph_capture_size": 0}, "--max-cudagraph-capture-size", ">= 1"),
        # Issue 38: a stored design (--design) is no flag; the limit of every count holds.
        ({"max_num_seqs": 2**31}, "--max-num-seqs", "a whole number up to 2147483647"),
        (
            {"max_cudagraph_capture_size": 10**300},
            "--max-cudagraph-capture-size",
            "a whole number up to 2147483647",
        ),
        (
            {"max_cudagraph_capture_size": 64, "serve_args": "--max_cudagraph_capture_size=32"},
            "--serve-args",
            "no --max-cudagraph-capture-size in it: --max-cudagraph-capture-size 64 sets it",
        ),
        (
            {"max_num_seqs": 8, "serve_args": "--seed 0 --max-num-seqs 16"},
            "--serve-args",
            "no --max-num-seqs in it",
        ),
    ],
)
def test_a_bad_design_names_its_flag(changes: dict[str, Any], field: str, expected: str) -> None:
    values: dict[str, Any] = {"model": "m", "method": "ngram", "ks": (0, 1, 3), "anchors": (1, 8)}
    problems = SweepDesign(**{**values, **changes}).invalid()
    assert [p.field for p in problems] == [field]
    assert expected in str(problems[0].expected)


@pytest.mark.parametrize(
    ("serve_args", "given"),
    [
        ("--max-model-len 8192", 8192),
        ("--max-model-len=0008192", 8192),
        ("--max-model-len \u00b2", None),
        ("--max-model-len \u0668\u0661\u0669\u0662", None),
        ("--max-model-len 8k", None),
        ("--max-model-len 99999999999", None),
    ],
)
def test_max_model_len_in_serve_args_is_read_in_ascii_digits(
    serve_args: str, given: int | None
) -> None:
    """Issue 38, kind 16: ``plan --serve-args '--max-model-len ²'`` was a traceback (isdigit
    yes, int no), "٨١٩٢" was read as 8192. Only ASCII digits are a length read here; anything
    else is left to vLLM (the plan then sets the length the prompts need before it)."""
    values: dict[str, Any] = {"model": "m", "method": "ngram", "ks": (0, 1), "anchors": (1, 8)}
    design = SweepDesign(**values, context_lengths=(512,), serve_args=serve_args)
    assert design.max_model_len_given == given
    assert design.invalid() == []


def test_engine_settings_at_their_limits_are_planned() -> None:
    """The other side of the rules above: max_num_seqs equal to the deployment maximum and a
    capture ceiling of 1 are fine, and without the flags --max-num-seqs in --serve-args is
    left alone (the serve command's own is the deployment maximum)."""
    values: dict[str, Any] = {"model": "m", "method": "ngram", "ks": (0, 1), "anchors": (1, 8)}
    for changes in (
        {"max_num_seqs": 8, "max_cudagraph_capture_size": 1},
        {"max_num_seqs": 2**31 - 1, "max_cudagraph_capture_size": 2**31 - 1},
        {"serve_args": "--max-cudagraph-capture-size 32"},
    ):
        assert SweepDesign(**{**values, **changes}).invalid() == []


def test_design_from_layers_the_defaults_the_stored_design_and_the_flags() -> None:
    stored = llama_design().to_json()
    design, problems = design_from(stored, {"ks": (0, 2)}, "sweep_plan.json")
    assert problems == [] and design is not None
    assert design.ks == (0, 2)  # the flag
    assert design.anchors == (1, 64, 128, 256)  # the stored design
    assert design.num_runs == SweepDesign().num_runs  # the default
    assert design.to_json() == {**stored, "ks": [0, 2]}
    design, problems = design_from({"modle": "typo"}, {}, "sweep_plan.json")
    assert design is None
    assert (problems[0].rule, problems[0].value) == ("invalid-design", "['modle']")


def test_a_seed_in_the_bench_arguments_is_refused_and_one_for_the_server_is_not() -> None:
    """The plan owns the bench seed (a seed there would be replaced in every run); vllm serve's
    own --seed (its sampling) is the user's."""
    (problem,) = llama_design(bench_args="--seed=3").invalid()
    assert problem.field == "--bench-args" and "no --seed in it" in str(problem.expected)
    assert llama_design(serve_args="--seed 0", bench_args="--served-model-name x").invalid() == []


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"server_replicas": 0}, "--server-replicas", "a whole number >= 1"),
        ({"server_replicas": 1.5}, "--server-replicas", "a whole number >= 1"),
        ({"server_replicas": True}, "--server-replicas", "a whole number >= 1"),
        ({"first_replica": -1}, "--first-replica", "a whole number >= 0"),
        ({"server_replicas": 2, "serve_args": "--seed 0"}, "--serve-args", "no --seed in it"),
        ({"first_replica": 3, "serve_args": "--seed=1"}, "--serve-args", "no --seed in it"),
        (
            {"server_replicas": 2, "serve_args": "--load-format dummy"},
            "--server-replicas",
            "the seed draws the dummy weights",
        ),
    ],
)
def test_bad_replica_settings_name_their_flag(
    changes: dict[str, Any], field: str, expected: str
) -> None:
    (problem,) = llama_design(**changes).invalid()
    assert problem.field == field and expected in str(problem.expected)


def test_one_replica_leaves_the_server_seed_and_the_load_format_to_the_user() -> None:
    """The other side: without replicas a --seed and dummy weights in --serve-args are fine."""
    for serve_args in ("--seed 0", "--load-format dummy"):
        assert llama_design(serve_args=serve_args).invalid() == []
    assert llama_design(server_replicas=2, serve_args="--load-format auto").invalid() == []


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"first_ks": (0, 2, 5)}, "--design", "lean with --first-ks"),
        ({"layout": "lean", "first_ks": (0, 4, 5)}, "--first-ks", "K among --ks"),
        ({"layout": "lean", "first_ks": (0, 2)}, "--first-ks", "K=0 and K=5 among them"),
        ({"layout": "lean", "first_ks": (2, 5)}, "--first-ks", "K=0 and K=5 among them"),
    ],
)
def test_first_ks_are_refused_outside_a_lean_design_or_the_k_range(
    changes: dict[str, Any], field: str, expected: str
) -> None:
    values: dict[str, Any] = {"model": "m", "method": "ngram", "ks": (0, 1, 2, 3, 5)}
    (problem,) = SweepDesign(**values, anchors=(1, 8), **changes).invalid()
    assert problem.field == field and expected in (problem.expected or "")


def test_first_ks_holding_both_ends_are_planned() -> None:
    values: dict[str, Any] = {"model": "m", "method": "ngram", "ks": (0, 1, 2, 3, 5)}
    for first in ((0, 5), (0, 2, 5), (0, 1, 2, 3, 5)):
        assert SweepDesign(**values, anchors=(1, 8), layout="lean", first_ks=first).invalid() == []
