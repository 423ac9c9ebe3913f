"""Property-based tests of bad input (issue 9): Hypothesis writes sweeps in the real layout of
`vllm bench sweep serve` (random anchors, K sets and run counts; missing and wrong-typed fields;
failure files; copied folders; odd folder names) and the CLI must, for every one:

- exit 0 with a schedule that passes vLLM's validation, or exit 2 with at least one error that
  names a file; never raise (a traceback), never take longer than the deadline;
- print and write the same bytes when run again on the same input.

The examples are derandomised (the same ones every run, so CI is reproducible) and the
committed corpus in tests/bad_inputs/ holds the cases worth naming one by one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.schedule import validate_schedule

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
                failure = {"error": "RuntimeError: Server process died"}
                files[f"{folder}/run={runs}.failure.json"] = json.dumps(failure).encode()
            if draw(st.integers(0, 14)) == 0:
                files[f"{folder}/summary.json"] = draw(st.sampled_from([b"[{", b"\xff", b""]))
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


def _write(root: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _run(experiment: Path, output: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Any, ...]:
    code = main([str(experiment), "--output-json", str(output)])
    captured = capsys.readouterr()
    written = output.read_bytes() if output.exists() else None
    if output.exists():
        output.unlink()
    return code, captured.out, captured.err, written


#: An error line of stderr that names a file: "  error [rule] ... in FILE[, FILE...]".
_ERROR_WITH_FILE = re.compile(r"^  error \[[a-z0-9-]+\] .* in \S")


@settings(
    max_examples=150,
    deadline=timedelta(seconds=20),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(files=sweeps())
def test_every_sweep_gets_a_schedule_or_a_named_problem(
    files: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        experiment = Path(scratch) / "experiment"
        experiment.mkdir()
        _write(experiment, files)
        output = Path(scratch) / "schedule.json"
        first = _run(experiment, output, capsys)
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
        assert _run(experiment, output, capsys) == first
        shutil.rmtree(experiment)
