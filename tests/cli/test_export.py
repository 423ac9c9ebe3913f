"""lib/cli/export.py: `tune-spec-k export`, from a tuning result to TensorRT-LLM and back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import SAMPLE_SWEEPS

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main


def test_exports_a_tuning_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "speculative_k_schedule.json"
    sample = SAMPLE_SWEEPS / "sonnet-like"
    assert main([str(sample), "--output-json", str(result)]) == EXIT_OK
    capsys.readouterr()
    out = tmp_path / "trtllm.json"
    assert main(["export", str(result), "--format", "trtllm", "-o", str(out)]) == EXIT_OK
    printed = capsys.readouterr().out.splitlines()
    # sonnet-like tunes to [[1, 63, 7], [64, 256, 0]] (data/sample_sweeps/README.md).
    # Key 1 beside the bounds 63 and 256: validators that require it accept the file.
    expected = {"max_draft_len": 7, "draft_len_schedule": {"1": 7, "63": 7, "256": 0}}
    assert json.loads(printed[0]) == expected
    assert printed[-1] == f"Wrote {out}"
    assert json.loads(out.read_text()) == expected
    assert main(["export", str(out), "--format", "vllm"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out.splitlines()[0]) == {
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 63, 7], [64, 256, 0]],
    }


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ("{not json", [], "not valid JSON"),
        (json.dumps({"other": 1}), [], "no schedule found"),
        (json.dumps([[2, 8, 1]]), [], "starts at 2"),
        (
            json.dumps([[1, 8, 5]]),
            ["--format", "vllm", "--global-k", "3"],
            "below the schedule's largest K 5",
        ),
        (
            json.dumps([[1, 8, 5]]),
            ["--global-k", "3"],
            "TensorRT-LLM requires max_draft_len to equal the K at the smallest key",
        ),
        # Issue 38, kind 13: 0 was taken for "not given" (the file's K was exported), -1 a
        # ZeroDivisionError in vllm's capture check.
        *(
            (
                json.dumps(
                    {
                        "num_speculative_tokens": 5,
                        "num_speculative_tokens_per_batch_size": [[1, 8, 5]],
                    }
                ),
                ["--format", name, "--global-k", given],
                f"--format {name}'s engine starts with a global K of at least 1",
            )
            for name in ("vllm", "sglang")
            for given in ("0", "-1")
        ),
        (
            json.dumps([[1, 8, 5]]),
            ["--global-k", "-1"],
            "--format trtllm's engine starts with a global K of at least 0",
        ),
        # Issue 38, kind 16: "6²" passed str.isdigit() and crashed int().
        (
            json.dumps({"1": {"candidate_steps": [3]}, "6\u00b2": {"candidate_steps": [0]}}),
            [],
            "SGLang slot key '6\u00b2' is not a batch size",
        ),
        (
            json.dumps({"draft_len_schedule": {"1": 3, "6\u00b2": 0}}),
            ["--format", "sglang"],
            "draft_len_schedule key '6\u00b2' is not a batch size",
        ),
        # Issue 38, kind 6: a capped result whose schedule as tuned is damaged (other engines
        # would get vLLM's capped one).
        (
            json.dumps(
                {
                    "num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 16, 1]],
                    "batch_decisions": [],
                    "deployment": {
                        "capture_ceiling": {"size": 32, "known": True},
                        "tuned_schedule": [[1, 16, "3"]],
                        "capped_ranges": [{"lo": 9, "hi": 16, "measured_k": 3, "capped_k": 1}],
                    },
                }
            ),
            ["--format", "trtllm"],
            "not a valid schedule (the schedule as tuned, before the cap)",
        ),
    ],
)
def test_bad_input_exits_2_with_the_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    flags: list[str],
    message: str,
) -> None:
    path = tmp_path / "in.json"
    path.write_text(content)
    assert main(["export", str(path), *flags]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert message in captured.err
    assert str(path) in captured.err or "--global-k" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


#: A vLLM speculative_config of an MTP sweep (list1 of engines-2026-12.md 1c).
MTP_CONFIG = {
    "method": "mtp",
    "model": "deepseek-ai/DeepSeek-V3",
    "num_speculative_tokens": 3,
    "num_speculative_tokens_per_batch_size": [[1, 31, 3], [32, 127, 1], [128, 256, 0]],
}


def test_an_mtp_sweep_exports_to_sglang_as_nextn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39: SGLang 0.5.23 resolves NEXTN to EAGLE before its adaptive check, so MTP exports
    (the padding hint naming --cuda-graph-bs-decode and the decode graph maximum assumed)."""
    source = tmp_path / "mtp.json"
    source.write_text(json.dumps(MTP_CONFIG))
    out = tmp_path / "sglang.json"
    assert main(["export", str(source), "--format", "sglang", "-o", str(out)]) == EXIT_OK
    printed = capsys.readouterr().out.splitlines()
    expected = {
        "strategy": "ema",
        "1": {"candidate_steps": [3]},
        "32": {"candidate_steps": [1]},
        "128": {"candidate_steps": [0]},
    }
    assert json.loads(printed[0]) == expected == json.loads(out.read_text())
    assert printed[1].startswith("--speculative-algorithm NEXTN --speculative-eagle-topk 1")
    assert any(
        "up to 512: the GPU is not recorded, so SGLang 0.5.23's largest default" in line
        for line in printed
    )
    assert any(
        line.startswith("warning: to keep every boundary: --cuda-graph-bs-decode 1 2")
        for line in printed
    )
    h100 = ["--gpu-memory-gib", "79.6", "--tensor-parallel-size", "1"]
    assert main(["export", str(source), "--format", "sglang", *h100]) == EXIT_OK
    assert "up to 256: SGLang 0.5.23's default for a GPU of 79.6 GiB" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("config", "flags", "message"),
    [
        (
            {"model": "google/gemma-4-31B-it-assistant"},
            [],
            "[sglang-draft] SGLang 0.5.23 would not run NEXTN adaptively: the draft"
            " google/gemma-4-31B-it-assistant is a Gemma-4 assistant",
        ),
        (
            {"method": "draft_model", "model": "Qwen/Qwen3-0.6B"},
            [],
            "[sglang-method] SGLang 0.5.23 would run STANDALONE at a static K",
        ),
        ({}, ["--gpu-memory-gib", "0"], "[invalid-setting] --gpu-memory-gib 0: expected"),
        ({}, ["--gpu-memory-gib", "nan"], "--gpu-memory-gib nan: expected a number of GiB > 0"),
        ({}, ["--tensor-parallel-size", "0"], "--tensor-parallel-size 0: expected >= 1"),
        (
            {},
            ["--format", "vllm", "--tensor-parallel-size", "2"],
            "--tensor-parallel-size applies only to --format sglang",
        ),
        (
            {},
            ["--format", "trtllm", "--gpu-memory-gib", "80"],
            "--gpu-memory-gib applies only to --format vllm, sglang, vllm-context",
        ),
    ],
)
def test_what_sglang_would_not_run_adaptively_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    config: dict[str, str],
    flags: list[str],
    message: str,
) -> None:
    source = tmp_path / "mtp.json"
    source.write_text(json.dumps({**MTP_CONFIG, **config}))
    assert main(["export", str(source), "--format", "sglang", *flags]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""
    if config:  # a refusal of the file's method or draft names the file
        assert f"in {source}" in captured.err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "absent.json")]) == EXIT_BAD_INPUT
    assert "cannot read the file" in capsys.readouterr().err


def test_unwritable_output_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "schedule.json"
    source.write_text(json.dumps([[1, 63, 7], [64, 256, 0]]))
    (tmp_path / "no").write_text("")  # a file where a folder would be made
    out = tmp_path / "no" / "such" / "trtllm.json"
    assert main(["export", str(source), "-o", str(out)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert f"[unwritable-file] cannot write the file: Not a directory in {out}" in (captured.err)
    assert captured.out == ""


@pytest.mark.parametrize(
    ("schedule", "shown"),
    [
        # The examples, a K of 10^30 and a bound of 10^12, are past 2^31 - 1. (The JSON
        # parser reads an int past 64 bits as a float: 10^30 is then no integer at all.)
        ([[1, 8, 10**30]], "entry 0 [1, 8, 1e+30] is not a list of 3 integers"),
        ([[1, 10**12, 3]], "[1, 1000000000000, 3]: numbers above 2147483647"),
        ([[1, 8, 2**31]], "[1, 8, 2147483648]: numbers above 2147483647"),
        ({"draft_len_schedule": {"63": 2**31}}, "2147483648 is not a draft length"),
        ({"draft_len_schedule": {str(2**31): 2}}, "'2147483648' is not a batch size"),
    ],
)
def test_numbers_past_the_limit_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schedule: object, shown: str
) -> None:
    path = tmp_path / "in.json"
    path.write_text(json.dumps(schedule))
    assert main(["export", str(path), "-o", str(tmp_path / "out.json")]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert shown in captured.err
    assert (captured.out, sorted(p.name for p in tmp_path.iterdir())) == ("", ["in.json"])


def test_an_explicit_decode_request_ceiling_flows_to_the_vllm_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39 item 3: --max-decode-cudagraph-capture-requests is read by export --format
    vllm as by tune: sonnet-like's [[1, 63, 7], [64, 256, 0]] with R=32 runs 33-63 and 64-256
    PIECEWISE (engines-2026-12.md 1b's harness row), said with the flag as its source; a format
    whose engine has no such setting refuses it, naming the formats that read it."""
    result = tmp_path / "speculative_k_schedule.json"
    sample = SAMPLE_SWEEPS / "sonnet-like"
    assert main([str(sample), "--vllm-version", "0.34.0", "--output-json", str(result)]) == 0
    capsys.readouterr()
    flag = ["--max-decode-cudagraph-capture-requests", "32"]
    out = tmp_path / "vllm.json"
    assert main(["export", str(result), "--format", "vllm", *flag, "-o", str(out)]) == EXIT_OK
    printed = capsys.readouterr()
    err = printed.out + printed.err  # the export's warnings, wherever it prints them
    source = "(explicit: max_decode_cudagraph_capture_requests from --max-decode-cudagraph-"
    assert "batch sizes 33-63 run K=7 at 264-504 tokens per decode step in PIECEWISE" in err
    assert "batch sizes 64-256 run K=0 at 64-256 tokens per decode step in PIECEWISE" in err
    assert err.count(source) == 2
    refused = ["export", str(result), "--format", "sglang", *flag, "-o", str(tmp_path / "s")]
    assert main(refused) == EXIT_BAD_INPUT
    assert (
        "--max-decode-cudagraph-capture-requests applies only to --format vllm, vllm-context"
        in capsys.readouterr().err
    )
