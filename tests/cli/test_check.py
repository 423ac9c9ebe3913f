"""lib/cli/check.py: `tune-spec-k check` prints a verdict per anchor and exits 0 (no loss),
1 (a loss; with --strict an inconclusive anchor too) or 2 (bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import VALIDATION_SWEEP
from sweep_builder import (
    CONTEXT_ARMS,
    GOOD_VALIDATION,
    SCHEDULE,
    spread,
    write_context_validation,
    write_validation,
)

from lib.cli.common import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_OK
from lib.cli.main import main
from lib.deploy.grid import UNBOUNDED_CONTEXT

GOOD = GOOD_VALIDATION

#: Independent runs (no server offsets): the model these expectations were derived with.
INDEPENDENT = ["--server-cv", "0"]


def test_no_loss_exits_0_with_a_line_per_anchor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    assert main(["check", *INDEPENDENT, str(root)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"schedule under test: {json.dumps(SCHEDULE)}"
    # Then the capture check of the schedule under test, by the newest release's rule (said
    # assumed): the K=0 tier sets R = min(1024, 512) = 512 (C0 = 512 by default), so every
    # batch size up to 256 runs a FULL graph (63 * 8 = 504 <= 512 too).
    assert lines[1].startswith("capture ceiling: vLLM 0.34.0 (assumed: the newest release")
    assert lines[1].endswith("every batch size up to 256 runs a FULL CUDA graph")
    assert lines[2].startswith("batch_size=1: OK; dynamic K=7 median=318.00; vs best static")
    assert any(line.startswith("batch_size=64: OK") for line in lines)


def test_the_capture_rule_is_applied_to_the_schedule_under_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    out = tmp_path / "report.json"
    flags = ["--max-cudagraph-capture-size", "256", "--output-json", str(out)]
    flags += ["--vllm-version", "0.33.0"]
    assert main(["check", *INDEPENDENT, str(root), *flags]) == EXIT_OK
    captured = capsys.readouterr()
    # K=7 from 1 to 63: 32 * 8 = 256 fits, 33 * 8 = 264 does not; the schedule is what ran,
    # so it is named, not capped; the dynamic arm at 64 ran K=0 (64 tokens): not past C.
    assert "warning [graphless-range] batch sizes 33-63 run K=7" in captured.err
    block = json.loads(out.read_text())["deployment"]
    assert block["capture_ceiling"]["known"] is True
    assert block["tuned_schedule"] == SCHEDULE
    assert [(r["lo"], r["hi"]) for r in block["graphless_ranges"]] == [(33, 63)]
    # vLLM 0.34: the K=0 tier sets R = min(1024, 256) = 256, so 33-63 at K=7 (264-504
    # tokens, past C0=256) run FULL graphs: nothing is graphless.
    flags[-1] = "0.34.0"
    assert main(["check", *INDEPENDENT, str(root), *flags]) == EXIT_OK
    assert "graphless-range" not in capsys.readouterr().err
    block = json.loads(out.read_text())["deployment"]
    assert block["graphless_ranges"] == [] and block["capture_ceiling"]["capture_rule"] == (
        "decode-requests"
    )
    assert block["full_past_ceiling"] == [
        {"lo": 33, "hi": 63, "k": 7, "tokens_lo": 264, "tokens_hi": 504}
    ]


def test_a_loss_exits_1_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = {**GOOD, (64, "dynamic"): spread(3524.0 * 0.85)}
    assert (
        main(["check", *INDEPENDENT, str(write_validation(tmp_path / "v", values))]) == EXIT_FINDING
    )
    out = capsys.readouterr().out
    assert "batch_size=64: LOSS" in out
    assert "LOSS at batch size(s) [64]" in out
    assert "#49548" in out


def test_strict_makes_an_inconclusive_anchor_exit_1(tmp_path: Path) -> None:
    values = {
        **GOOD,
        (64, "dynamic"): spread(3524 * 0.98, 0.08),
        (64, "no-spec"): spread(3524.0, 0.08),
    }
    root = write_validation(tmp_path / "v", values)
    assert main(["check", *INDEPENDENT, str(root)]) == EXIT_OK
    assert main(["check", *INDEPENDENT, str(root), "--strict"]) == EXIT_FINDING


def test_schedule_flag_reads_any_schedule_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps({"num_speculative_tokens_per_batch_size": SCHEDULE}))
    assert main(["check", *INDEPENDENT, str(root), "--schedule", str(schedule)]) == EXIT_OK
    capsys.readouterr()
    other = tmp_path / "other.json"
    other.write_text(json.dumps([[1, 31, 7], [32, 256, 0]]))
    assert main(["check", *INDEPENDENT, str(root), "--schedule", str(other)]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "no run served the schedule under test" in error
    assert "[[1, 31, 7], [32, 256, 0]]" in error


@pytest.mark.parametrize(
    ("populate", "flags", "message"),
    [
        (False, [], "the experiment folder does not exist"),
        (True, ["--confidence", "1.5"], "--confidence 1.5"),
        (True, ["--server-cv", "1"], "--server-cv 1.0: expected a relative standard deviation"),
        (True, ["--replica-var", "a=b"], "--replica-var 'a=b': expected a serve parameter's"),
        (True, ["--schedule", "absent.json"], "cannot read the file"),
    ],
)
def test_bad_input_exits_2_with_the_problem(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    populate: bool,
    flags: list[str],
    message: str,
) -> None:
    root = tmp_path / "v"
    if populate:
        write_validation(root, GOOD)
    assert main(["check", *INDEPENDENT, str(root), *flags]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_output_json_is_written_and_deterministic(tmp_path: Path) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["check", *INDEPENDENT, str(root), "--output-json", str(first)]) == EXIT_OK
    assert main(["check", *INDEPENDENT, str(root), "--output-json", str(second)]) == EXIT_OK
    assert first.read_bytes() == second.read_bytes()
    assert [row["verdict"] for row in json.loads(first.read_text())["anchors"]] == ["ok", "ok"]


def test_warnings_go_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = {**GOOD, (64, "no-spec"): [3524.0, 3530.0]}
    assert main(["check", *INDEPENDENT, str(write_validation(tmp_path / "v", values))]) == EXIT_OK
    assert "no speculation: only 2 usable run(s), so it is left out" in capsys.readouterr().err


def test_the_real_cpu_validation_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    schedule = VALIDATION_SWEEP / "tuned_schedule.json"
    arguments = [
        "check",
        *INDEPENDENT,
        str(VALIDATION_SWEEP),
        "--min-runs",
        "2",
        "--schedule",
        str(schedule),
    ]
    # data/validation_sweeps/real-cpu-tiny-ngram/README.md: no loss, exit 0, four anchors.
    assert main(arguments) == EXIT_OK
    assert capsys.readouterr().out.count("batch_size=") == 4


def test_an_invalid_engine_setting_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_validation(tmp_path / "v", GOOD)
    assert main(["check", *INDEPENDENT, str(root), "--max-num-seqs", "0"]) == EXIT_BAD_INPUT
    assert "--max-num-seqs 0: expected >= 1" in capsys.readouterr().err
    # SGLang's tensor parallelism is nothing check reads: refused, not ignored.
    code = main(["check", *INDEPENDENT, str(root), "--tensor-parallel-size", "2"])
    assert code == EXIT_BAD_INPUT
    assert "--tensor-parallel-size 2: check judges vLLM servers" in capsys.readouterr().err


# --------------------------------------------------------------------------- context


def _long_prompts_validation(root: Path, long_loses: bool) -> Path:
    """GOOD_VALIDATION at 512 prompt tokens; at 8192 the same, except, with ``long_loses``,
    static K=7 at batch 64 far ahead of the schedule's K=0 there (4400 against 3520, 25 %):
    speculation pays again at long context, where a batch schedule tuned at 512 turns it off."""
    write_validation(root, GOOD_VALIDATION, prompt_tokens=512)
    long = dict(GOOD_VALIDATION)
    if long_loses:
        long[(64, "static-k7")] = spread(4400.0)
    return write_validation(root, long, prompt_tokens=8192)


@pytest.mark.parametrize("long_loses", [True, False])
def test_a_validation_sweep_that_varied_the_prompt_length_is_judged_per_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], long_loses: bool
) -> None:
    """Each prompt length's runs alone, never pooled: a loss at 8192 tokens is a loss (exit 1),
    named with its length, while 512 tokens stays ok; without it, exit 0."""
    root = _long_prompts_validation(tmp_path / "v", long_loses)
    out = tmp_path / "check.json"
    status = main(["check", *INDEPENDENT, str(root), "--output-json", str(out)])
    assert status == (1 if long_loses else 0)
    lines = capsys.readouterr().out.splitlines()
    short = lines.index("at 512 prompt tokens (random_input_len):")
    long = lines.index("at 8192 prompt tokens (random_input_len):")
    assert short < long
    assert lines[short + 1].startswith("  batch_size=1: OK") and lines[long + 1].startswith(
        "  batch_size=1: OK"
    )
    at_64 = next(line for line in lines[long:] if line.startswith("  batch_size=64: "))
    assert at_64.startswith("  batch_size=64: LOSS" if long_loses else "  batch_size=64: OK")
    assert any(line.startswith("LOSS at batch size(s) [64 at 8192 tokens]") for line in lines) is (
        long_loses
    )
    written = json.loads(out.read_text())
    assert written["anchors"] == [] and written["context_field"] == "random_input_len"
    assert [c["prompt_tokens"] for c in written["contexts"]] == [512, 8192]
    verdicts = {
        (c["prompt_tokens"], a["anchor"]): a["verdict"]
        for c in written["contexts"]
        for a in c["anchors"]
    }
    assert verdicts[(512, 64)] == "ok"
    assert verdicts[(8192, 64)] == ("loss" if long_loses else "ok")


TOP = UNBOUNDED_CONTEXT
#: The K of each (anchor, prompt) right for CONTEXT_ARMS: 3, except 0 at (64, 8192 tokens).
RIGHT = {(1, 512): 3, (1, 8192): 3, (64, 512): 3, (64, 8192): 0}
#: PR #48944 and PR #54801 configs: the first runs RIGHT; the second's smaller-K rule also
#: turns batch 1 off at 8192 tokens, where K=3 pays (250 against 180: a loss).
RFC = {
    "num_speculative_tokens": 3,
    "speculative_token_schedule": [
        [1, 63, 1, 2180, 3],
        [1, 63, 2181, TOP, 3],
        [64, 256, 1, 2180, 3],
        [64, 256, 2181, TOP, 0],
    ],
    "ctx_agg": "mean",
}
PR = {
    "num_speculative_tokens": 3,
    "num_speculative_tokens_per_batch_size": [[1, 256, 3]],
    "num_speculative_tokens_per_seq_len": [[1, 2180, 3], [2181, TOP, 0]],
}


@pytest.mark.parametrize(
    ("format", "config", "ks", "status", "loss"),
    [
        ("vllm-rfc-48944", RFC, RIGHT, EXIT_OK, None),
        ("vllm-pr-54801", PR, {**RIGHT, (1, 8192): 0}, EXIT_FINDING, "1 at 8192 tokens"),
    ],
)
def test_an_exported_context_schedule_is_checked_per_prompt_length(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    format: str,
    config: dict[str, object],
    ks: dict[tuple[int, int], int],
    status: int,
    loss: str | None,
) -> None:
    """The file `tune-spec-k export --format F -o FILE` writes (its speculative_config) is the
    schedule under test; each prompt length's block names its decode-time context and every
    line the K the config runs there."""
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, config, ks)
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"format": format, "speculative_config": config}))
    out = tmp_path / "check.json"
    arguments = [str(root), "--schedule", str(exported), "--output-json", str(out)]
    assert main(["check", *INDEPENDENT, *arguments]) == status
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f'schedule under test: {{"format": "{format}", ')
    short = lines.index("at 512 prompt tokens (random_input_len), decode-time context 576:")
    long = lines.index("at 8192 prompt tokens (random_input_len), decode-time context 8256:")
    printed = {
        (int(line.split("=")[1].split(":")[0]), 512 if n < long else 8192): int(
            line.split("dynamic K=")[1].split()[0]
        )
        for n, line in enumerate(lines)
        if n > short and line.startswith("  batch_size=")
    }
    assert printed == ks
    closing = [line for line in lines if line.startswith("LOSS at batch size(s)")]
    assert len(closing) == (0 if loss is None else 1)
    assert all(line.startswith(f"LOSS at batch size(s) [{loss}]") for line in closing)
    written = json.loads(out.read_text())
    assert written["schedule"]["format"] == format
    assert [c["context_tokens"] for c in written["contexts"]] == [576, 8256]


def test_without_schedule_the_served_context_schedule_is_under_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, RFC, RIGHT)
    assert main(["check", *INDEPENDENT, str(root)]) == EXIT_OK
    assert capsys.readouterr().out.startswith(
        'schedule under test: {"format": "vllm-rfc-48944", "speculative_token_schedule": '
    )


@pytest.mark.parametrize(
    ("data", "field", "text"),
    [
        (
            {"format": "vllm-rfc-48944", "speculative_config": {"speculative_token_schedule": []}},
            "speculative_config.speculative_token_schedule",
            "the schedule must be a non-empty list",
        ),
        (
            {"format": "vllm-rfc-48944", "speculative_config": {"num_speculative_tokens": 3}},
            "speculative_config.speculative_token_schedule",
            "the file says format vllm-rfc-48944 but holds no speculative_token_schedule",
        ),
        (
            {"num_speculative_tokens": 3, "num_speculative_tokens_per_seq_len": [[1, 9, 3]]},
            "num_speculative_tokens_per_batch_size",
            "PR #54801 pairs the length table with a batch table",
        ),
        (
            {"format": "vllm-pr-54801", "speculative_config": RFC},
            "speculative_config.speculative_token_schedule",
            "the file says format vllm-pr-54801 but holds a vllm-rfc-48944 table",
        ),
        (
            {"speculative_config": {**PR, "num_speculative_tokens_per_seq_len": [[0, 9, 3]]}},
            "speculative_config.num_speculative_tokens_per_seq_len",
            "length bounds must be >= 1",
        ),
    ],
)
def test_a_malformed_context_schedule_file_exits_2_naming_the_file_and_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    data: dict[str, object],
    field: str,
    text: str,
) -> None:
    root = write_context_validation(tmp_path / "v", CONTEXT_ARMS, RFC, RIGHT)
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(data))
    assert main(["check", *INDEPENDENT, str(root), "--schedule", str(schedule)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert "cannot read the schedule" in captured.err
    assert str(schedule) in captured.err and field in captured.err and text in captured.err
    assert "expected" in captured.err


def test_a_schedule_clamped_by_its_server_is_checked_as_it_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dynamic server ran [[1, 63, 7], [64, 256, 0]] under num_speculative_tokens=3: vLLM
    ran K=3 at 1-63, so the check judges K=3, says it clamped, and its capture line assumes
    vLLM's default C for K=3."""
    dynamic = {
        "method": "eagle3",
        "model": "drafter",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": SCHEDULE,
    }
    root = write_validation(tmp_path / "v", GOOD, dynamic=dynamic)
    assert main(["check", *INDEPENDENT, str(root)]) == EXIT_OK
    captured = capsys.readouterr()
    assert "warning [clamped-schedule] the dynamic server ran with num_speculative_tokens=3" in (
        captured.err
    )
    assert "num_speculative_tokens=3 on a GPU" in captured.out
    assert "batch_size=1: OK; dynamic K=3" in captured.out
    # At 64 it runs K=0, and K=3 (not 7) at the smaller batch sizes of ramp-up and drain.
    assert "K in [0, 3] below it" in captured.out and "[0, 7]" not in captured.out
