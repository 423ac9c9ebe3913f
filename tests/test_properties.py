"""Property-based tests of bad input (issue 9): Hypothesis writes sweeps in the real layout of
`vllm bench sweep serve` (random anchors, K sets and run counts; missing and wrong-typed fields;
failure files; copied folders; odd folder names; server replicas of a cell, under either
policy and any --server-cv) and the CLI must, for every one:

- exit 0 with a schedule that passes vLLM's validation, or exit 2 with at least one error that
  names a file; never raise (a traceback), never take longer than the deadline;
- print and write the same bytes when run again on the same input.

The examples are derandomised (the same ones every run, so CI is reproducible) and the
committed corpus in tests/bad_inputs/ holds the cases worth naming one by one.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from grid_builder import CONTEXT_FORMATS
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sweep_builder import fields_shown, read_sweep

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.deploy.formats.vllm_context import vllm_context_violations
from lib.deploy.formats.vllm_pr_54801 import pr_54801_violations
from lib.deploy.formats.vllm_rfc_48944 import RFC_48944_KEY, rfc_48944_violations
from lib.schedule import validate_schedule
from lib.settings import Settings

#: What every property here runs under: the same examples every run (CI is reproducible), no
#: example database, 20 s an example at most, and pytest's function-scoped fixtures allowed.
REPRODUCIBLE = settings(
    deadline=timedelta(seconds=20),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: Values a field may be damaged into: wrong types, out of range, too large for any column.
DAMAGED = st.sampled_from(
    [None, "5", "n/a", True, [1], {"a": 1}, -1, 0, 2**31, 2**63, 2**64 - 1, 1e300, -0.0, 3.5]
)
#: Fields of a record the analysis reads, and others it carries.
FIELDS = (
    "max_concurrency",
    "output_throughput",
    "failed",
    "completed",
    "num_prompts",
    "run_number",
    "speculative_config",
)
#: Folder-name pieces a params file can give a combo: quotes, braces, spaces, a newline.
NAME_PIECES = st.sampled_from(["", " copy", '{"k": 1}', "\nerror [x] forged", ".bak", "é"])

NUM_PROMPTS = 8


@st.composite
def sweeps(draw: st.DrawFn) -> dict[str, bytes]:
    """relative path -> file content of one sweep."""
    anchors = sorted(
        draw(st.sets(st.sampled_from([1, 2, 4, 16, 64, 2**31 - 1]), min_size=1, max_size=3))
    )
    ks = sorted(draw(st.sets(st.integers(0, 7), min_size=1, max_size=3)))
    global_k = draw(st.sampled_from([max(ks), max(ks) + 1, 7]))
    files: dict[str, bytes] = {}
    for anchor in anchors:
        for k in ks:
            folder = f"SERVE--k{k}-BENCH--c{anchor}" + draw(NAME_PIECES)
            runs = draw(st.integers(1, 4))
            base = draw(st.floats(1.0, 1000.0))
            records: list[Any] = []
            for run in range(runs):
                record: dict[str, Any] = {
                    "max_concurrency": anchor,
                    "num_prompts": NUM_PROMPTS,
                    "completed": NUM_PROMPTS,
                    "failed": 0,
                    "output_throughput": base * draw(st.floats(0.9, 1.1)),
                    "run_number": run,
                    "speculative_config": {
                        "method": "ngram",
                        "num_speculative_tokens": global_k,
                        "num_speculative_tokens_per_batch_size": [[1, max(anchors), k]],
                    },
                }
                if draw(st.integers(0, 9)) == 0:
                    record[draw(st.sampled_from(FIELDS))] = draw(DAMAGED)
                if draw(st.integers(0, 14)) == 0:
                    del record[draw(st.sampled_from(FIELDS))]
                records.append(record)
            if draw(st.integers(0, 9)) == 0:
                records.append(draw(st.sampled_from(["crashed", 42, None, []])))
            for run, record in enumerate(records):
                files[f"{folder}/run={run}.json"] = json.dumps(record).encode()
            if draw(st.booleans()):
                files[f"{folder}/summary.json"] = json.dumps(records, indent=4).encode()
                if draw(st.integers(0, 9)) == 0:
                    # Issue 38: run again with one more run, stopped before the summary was
                    # rewritten: a run file the (valid) summary lacks, written after it.
                    extra = {**records[0], "run_number": len(records)}
                    extra["output_throughput"] = base * draw(st.floats(0.9, 1.1))
                    files[f"{folder}/run={len(records)}.json"] = json.dumps(extra).encode()
            if draw(st.integers(0, 9)) == 0:
                failure = {"error": "RuntimeError: Server process died"}
                files[f"{folder}/run={runs}.failure.json"] = json.dumps(failure).encode()
            if draw(st.integers(0, 14)) == 0:
                files[f"{folder}/summary.json"] = draw(st.sampled_from([b"[{", b"\xff", b""]))
            if draw(st.integers(0, 3)) == 0:
                # A server replica of the cell (issue 23): the same runs on a second server
                # start, offset by up to 5 % (a replica names its marker; the first is seed=0).
                offset = draw(st.floats(0.95, 1.05))
                replica = folder.replace(f"SERVE--k{k}-", f"SERVE--k{k}-seed=1-", 1)
                for relative, content in list(files.items()):
                    if relative.startswith(folder + "/"):
                        files[relative.replace(folder, replica, 1)] = _offset(content, offset)
            if draw(st.integers(0, 14)) == 0:
                # `cp -r` of the whole combo.
                for relative, content in list(files.items()):
                    if relative.startswith(folder + "/"):
                        files[relative.replace(folder, folder + ".copy", 1)] = content
    if draw(st.integers(0, 9)) == 0:
        # A folder whose name is not UTF-8 (bytes a file system allows).
        odd = os.fsdecode(b"SERVE--k0-BENCH--c1\xff")
        for relative, content in list(files.items()):
            if relative.startswith("SERVE--k0-BENCH--c1/"):
                files[odd + relative.removeprefix("SERVE--k0-BENCH--c1")] = content
    return files


def _offset(content: bytes, factor: float) -> bytes:
    """A record file's content with every numeric ``output_throughput`` times ``factor``
    (anything else, unreadable bytes included, as it was)."""
    try:
        data = json.loads(content)
    except ValueError:
        return content

    def shifted(record: Any) -> Any:
        if isinstance(record, dict) and isinstance(record.get("output_throughput"), float):
            return {**record, "output_throughput": record["output_throughput"] * factor}
        return record

    data = [shifted(r) for r in data] if isinstance(data, list) else shifted(data)
    return json.dumps(data).encode()


def _write(root: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _run(
    experiment: Path, output: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[Any, ...]:
    code = main([str(experiment), "--output-json", str(output), *flags])
    captured = capsys.readouterr()
    written = output.read_bytes() if output.exists() else None
    if output.exists():
        output.unlink()
    return code, captured.out, captured.err, written


#: An error line of stderr that names a file: "  error [rule] ... in FILE[, FILE...]".
_ERROR_WITH_FILE = re.compile(r"^  error \[[a-z0-9-]+\] .* in \S")


@settings(REPRODUCIBLE, max_examples=150)
@given(
    files=sweeps(),
    server_cv=st.sampled_from(["0", "0.01", "0.05", "0.999"]),
    policy=st.sampled_from(["seed", "confident"]),
)
def test_every_sweep_gets_a_schedule_or_a_named_problem(
    files: dict[str, bytes], server_cv: str, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        experiment = Path(scratch) / "experiment"
        experiment.mkdir()
        _write(experiment, files)
        output = Path(scratch) / "schedule.json"
        flags = ("--server-cv", server_cv, "--policy", policy)
        first = _run(experiment, output, capsys, *flags)
        code, _, err, written = first
        assert code in (EXIT_OK, EXIT_BAD_INPUT), err
        event(f"exit {code}")
        if code == EXIT_OK:
            assert written is not None
            result = json.loads(written)
            assert validate_schedule(result["num_speculative_tokens_per_batch_size"]) == []
        else:
            assert written is None
            assert any(_ERROR_WITH_FILE.match(line) for line in err.splitlines()), err
        # Every line stays a line: no name or value can start a forged one.
        assert not any(line.startswith("error [x]") for line in err.splitlines())
        assert _run(experiment, output, capsys, *flags) == first
        shutil.rmtree(experiment)


@settings(REPRODUCIBLE, max_examples=100)
@given(
    files=sweeps(),
    processes=st.sampled_from([2, 3, 5]),
    metrics=st.sampled_from([None, Settings().metrics_read()]),
)
def test_a_split_read_of_every_sweep_is_one_readers(
    files: dict[str, bytes], processes: int, metrics: tuple[str, ...] | None
) -> None:
    # Issue 24: a large sweep is read in pieces of whole folders; whatever the sweep holds
    # (damaged files, copies, failures, replicas), the pieces joined are one reader's read.
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "experiment"
        root.mkdir()
        _write(root, files)
        split = read_sweep(root, metrics, processes=processes, split_from_bytes=0)
        assert fields_shown(split) == fields_shown(read_sweep(root, metrics))


# --------------------------------------------------------------------------- the context axis

#: Prompt lengths a record may hold (issue 22): ordinary, close to each other (a chain at 10 %),
#: text, NaN, infinities, zero, negatives, beyond the shared range, fractions.
PROMPT_VALUES = st.sampled_from(
    [512, 540, 600, 4096, 8192, 8192.5, "512", "8192", math.nan, math.inf, -math.inf, 0, -512,
     3e9, 2**30, 2**30 + 1, 1e308, None]
)  # fmt: skip
#: --context-mix texts: the measured lengths and others, odd weights and digits.
MIX_TERMS = st.sampled_from(
    ["512:1", "8192:1", "4096:0.3", "512:1e308", "8192:1e308", "512:1", "8192:2", "4096:1",
     "512:0", "512²:1", "0:1", "512:nan", "x:1", "600:2", "1073741825:1"]
)  # fmt: skip
CONTEXT_FIELDS = st.sampled_from(["random_input_len", "my_len"])


@st.composite
def context_sweeps(draw: st.DrawFn) -> tuple[dict[str, bytes], list[str], str | None]:
    """A context sweep (anchors 1 and 4, K 0 and 3, three runs per cell) at a few prompt
    lengths, with up to two runs' prompt lengths damaged (none in half the examples, so that
    about half reach the exports), the tuner's context flags and a --context-mix."""
    field = draw(CONTEXT_FIELDS)
    prompts = sorted(draw(st.sets(st.sampled_from([512, 600, 4096, 8192]), min_size=1, max_size=3)))
    runs_in_sweep = len(prompts) * 2 * 2 * 3
    damaged = {
        draw(st.integers(0, runs_in_sweep - 1)): draw(PROMPT_VALUES)
        for _ in range(draw(st.sampled_from([0, 0, 1, 2])))
    }
    files: dict[str, bytes] = {}
    index = 0
    for prompt in prompts:
        for anchor in (1, 4):
            for k in (0, 3):
                folder = f"SERVE--k{k}-BENCH--c{anchor}-p{prompt}"
                records = []
                for run in range(3):
                    value: Any = damaged.get(index, prompt)
                    index += 1
                    records.append(
                        {
                            "max_concurrency": anchor,
                            "num_prompts": NUM_PROMPTS,
                            "completed": NUM_PROMPTS,
                            "failed": 0,
                            "output_throughput": (100.0 + 50 * k * (anchor == 1) + prompt / 100)
                            * (1 + 0.002 * run),
                            "run_number": run,
                            field: value,
                            "speculative_config": {
                                "method": "ngram",
                                "num_speculative_tokens": 3,
                                "num_speculative_tokens_per_batch_size": [[1, 4, k]],
                            },
                        }
                    )
                for run, record in enumerate(records):
                    # allow_nan: JSON NaN / Infinity as vLLM's json.dumps writes them.
                    files[f"{folder}/run={run}.json"] = json.dumps(record).encode()
    flags = ["--context-tolerance", str(draw(st.sampled_from([0.0, 0.05, 0.1, 0.5])))]
    flags += ["--context-var", draw(st.sampled_from(["auto", field, field, field, "anchor"]))]
    mix = None
    if draw(st.booleans()):
        mix = ",".join(draw(st.lists(MIX_TERMS, min_size=1, max_size=3)))
    return files, flags, mix


#: A line of stderr naming a flag or a file: "  error [rule] ... (field '--flag' ...)" or "in FILE".
_NAMES_FLAG_OR_FILE = re.compile(r"^  error \[[a-z0-9-]+\] .*(field '--|--[a-z-]+ | in \S)")


def _context_run(
    experiment: Path, flags: list[str], mix: str | None, capsys: pytest.CaptureFixture[str]
) -> list[tuple[Any, ...]]:
    """The tuner's exit, output and file, then each context export's (exit, stdout, stderr)."""
    output = experiment.parent / "result.json"
    code = main([str(experiment), "--output-json", str(output), *flags])
    captured = capsys.readouterr()
    runs: list[tuple[Any, ...]] = [(code, captured.out, captured.err)]
    if code != EXIT_OK:
        assert not output.exists()
        return runs
    runs[0] += (output.read_bytes(),)
    for format in CONTEXT_FORMATS:
        command = ["export", str(output), "--format", format]
        export_code = main(command + ([] if mix is None else ["--context-mix", mix]))
        exported = capsys.readouterr()
        runs.append((format, export_code, exported.out, exported.err))
    output.unlink()
    return runs


def _config_violations(format: str, config: dict[str, Any]) -> list[str]:
    if format == "vllm-context":
        return vllm_context_violations(config)
    if format == "vllm-rfc-48944":
        return rfc_48944_violations(config[RFC_48944_KEY])
    return pr_54801_violations(config)


@settings(REPRODUCIBLE, max_examples=60)
@given(drawn=context_sweeps())
def test_every_context_sweep_gets_valid_exports_or_a_named_problem(
    drawn: tuple[dict[str, bytes], list[str], str | None], capsys: pytest.CaptureFixture[str]
) -> None:
    files, flags, mix = drawn
    with tempfile.TemporaryDirectory() as scratch:
        experiment = Path(scratch) / "experiment"
        experiment.mkdir()
        _write(experiment, files)
        first = _context_run(experiment, flags, mix, capsys)
        code, _, err = first[0][:3]
        assert code in (EXIT_OK, EXIT_BAD_INPUT), err
        event(f"tune exit {code}")
        if code == EXIT_BAD_INPUT:
            assert any(_NAMES_FLAG_OR_FILE.match(line) for line in err.splitlines()), err
        for format, export_code, out, export_err in first[1:]:
            assert export_code in (EXIT_OK, EXIT_BAD_INPUT), export_err
            event(f"{format} exit {export_code}")
            if export_code == EXIT_OK:
                config = json.loads(out.splitlines()[0])
                assert _config_violations(format, config) == []
            else:
                assert any(_NAMES_FLAG_OR_FILE.match(line) for line in export_err.splitlines()), (
                    export_err
                )
        assert _context_run(experiment, flags, mix, capsys) == first


#: Text a whole number is read from: anything, and texts of digits of every script, signs,
#: spaces and separators (``str.isdigit()`` takes superscripts, which ``int()`` refuses, and
#: other scripts' digits, which ``int()`` reads).
WHOLE_NUMBER_TEXTS = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="0123456789 +-_.\u00b2\u00b3\u0663\u06f3\u0966\uff10\U0001d7d1", max_size=12),
    st.integers(min_value=0, max_value=2**32).map(str),
)


@settings(REPRODUCIBLE, max_examples=300)
@given(text=WHOLE_NUMBER_TEXTS)
def test_every_reader_of_a_whole_number_in_text_reads_it_by_the_one_parser(text: str) -> None:
    """Issue 38, kind 16: an SGLang slot key, a TensorRT-LLM schedule key, a result's
    confidence keys, ``plan --serve-args``' --max-model-len and a flag's value, each read by
    :func:`lib.keys.whole_number_text`: never a traceback, and the number exactly when the
    text is ASCII digits up to 2^31 - 1."""
    import argparse
    import shlex

    from lib.deploy.registry import decisions_from_json
    from lib.deploy.result_file import result_file_of
    from lib.flags import whole_number_argument
    from lib.keys import whole_number_text
    from lib.loop.plan.design import _max_model_len

    number = whole_number_text(text)
    # TensorRT-LLM: the key is the range's upper bound, from 1.
    decisions, problems = decisions_from_json({"draft_len_schedule": {text: 3}}, "t.json")
    assert (decisions is not None) == (number is not None and number >= 1), problems
    if decisions is not None:
        assert decisions.schedule.ranges == ((1, number, 3),)
    # SGLang: the key is the slot's lower bound; one slot is a schedule when it starts at 1.
    decisions, problems = decisions_from_json({text: {"candidate_steps": [3]}}, "t.json")
    assert (decisions is not None) == (number == 1), problems
    # A result's confidence, keyed by K.
    result, problems = result_file_of(
        {
            "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
            "batch_decisions": [
                {
                    "batch_size": 1,
                    "candidates": [{"batch_size": 1, "k": 3, "num_runs": 3}],
                    "confidence": {"p_eps_good": {text: 0.5}, "runs_needed": {text: 2}},
                }
            ],
        },
        "t.json",
    )
    assert result is not None, problems
    confidence = result.anchors[0].confidence
    assert confidence is not None
    expected = {} if number is None else {number: 0.5}
    assert (confidence.p_eps_good, confidence.runs_needed) == (
        expected,
        {k: 2 for k in expected},
    )
    # plan --serve-args: --max-model-len's value.
    assert _max_model_len("--max-model-len " + shlex.quote(text)) == number
    # A flag: ASCII digits after an optional minus, else argparse's error.
    magnitude = text.removeprefix("-")
    try:
        value = whole_number_argument(text)
    except argparse.ArgumentTypeError:
        assert whole_number_text(magnitude) is None
    else:
        assert value == (-1 if text.startswith("-") else 1) * (whole_number_text(magnitude) or 0)
        assert whole_number_text(magnitude) is not None
