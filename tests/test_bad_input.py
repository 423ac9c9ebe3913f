"""Broken sweeps: the CLI exits 2 with every problem named (rule, file, field, value), never a
traceback and never an output file; the library reports the same problems without raising.

The corpus is ``tests/bad_inputs/<case>/`` (written by ``tests/bad_inputs/build.py``, committed):
a healthy 2-anchor x 2-K x 3-run sweep broken in one or a few places. Each case is copied into
``tmp_path`` before it is run, so a regression that writes a schedule cannot touch the repo.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import BAD_INPUTS, REPO

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.context_axis import find_context_axis
from lib.problems import Problem, Severity
from lib.schedule import tune
from lib.settings import GLOBAL_K_VAR, RESULT_FILE, ContextSettings, Settings
from lib.sweeps import load_experiment

CORPUS = BAD_INPUTS
#: A file "path" standing for the experiment folder itself, as given on the command line.
ROOT = "<experiment folder>"

CopyCase = Callable[[str], Path]


def combo(anchor: int, k: int) -> str:
    return f"SERVE--k{k}-BENCH--c{anchor}"


@dataclass(frozen=True)
class Expected:
    """One problem the tool must report: its rule, a file it names (relative to the experiment
    folder), the field and a piece of the offending value as shown to the user."""

    rule: str
    file: str | None
    field: str | None = None
    value: str | None = None
    message: str | None = None
    anchor: int | None = None
    k: int | None = None


@dataclass(frozen=True)
class Case:
    folder: str
    expected: tuple[Expected, ...]
    objective: str = "output_throughput"
    #: Rules that would only be noise here, a consequence of the real problem misread.
    absent: tuple[str, ...] = ()
    #: A sweep that varied the prompt length: its problems come from the context axis.
    context: bool = False

    @property
    def arguments(self) -> list[str]:
        return ["--objective-var", self.objective]


def _prompt(anchor: int, k: int, value: str, rule: str = "invalid-prompt-length") -> Expected:
    """A prompt length refused at 8192 tokens in the bad-prompt-lengths case."""
    return Expected(rule, f"{combo(anchor, k)}-p8192/summary.json", "random_input_len", value)


CASES = [
    Case(
        "bad-prompt-lengths",
        # Issue 22: each was a traceback (NaN: StopIteration; inf: OverflowError), a silent
        # answer (-512, 0, 3e9 tuned with exit 0) or a silently dropped axis (text).
        (
            _prompt(4, 3, "nan", "invalid-prompt-length"),
            _prompt(4, 3, "inf"),
            _prompt(4, 0, "-512"),
            _prompt(4, 0, "0"),
            _prompt(1, 0, "3e+09"),
            _prompt(1, 3, "'8k'", "non-numeric-prompt-length"),
        ),
        absent=("no-prompt-length", "mixed-prompt-lengths"),
        context=True,
    ),
    Case(
        "truncated-json",
        (
            Expected(
                "invalid-json", f"{combo(4, 3)}/run=2.json", message="a truncated or hand-edited"
            ),
            # The interrupted combo keeps its two whole runs: too few to rank.
            Expected("too-few-runs", f"{combo(4, 3)}/run=0.json", "num_runs", "2", anchor=4, k=3),
        ),
    ),
    Case(
        "record-not-object",
        (
            Expected(
                "record-not-object",
                f"{combo(1, 0)}/summary.json",
                value="'server crashed'",
                message="record 2",
            ),
        ),
    ),
    Case(
        "missing-anchor",
        (Expected("missing-anchor", f"{combo(1, 3)}/summary.json", "max_concurrency"),),
    ),
    Case(
        "nan-objective",
        (
            Expected(
                "non-finite-objective", f"{combo(4, 3)}/summary.json", "output_throughput", "nan"
            ),
        ),
    ),
    Case(
        "negative-objective",
        (
            Expected(
                "out-of-range-objective",
                f"{combo(1, 3)}/summary.json",
                "output_throughput",
                "-150.0",
            ),
        ),
    ),
    Case(
        "string-objective",
        (
            Expected(
                "non-numeric-objective",
                f"{combo(4, 0)}/summary.json",
                "output_throughput",
                "'n/a'",
            ),
        ),
    ),
    Case(
        "failed-requests",
        (
            Expected(
                "failed-requests",
                f"{combo(1, 3)}/summary.json",
                "failed",
                "failed=3",
                anchor=1,
                k=3,
            ),
        ),
    ),
    Case(
        "incomplete-run",
        (
            Expected(
                "incomplete-run",
                f"{combo(4, 3)}/summary.json",
                "completed",
                "failed=0 completed=12 num_prompts=16",
                anchor=4,
                k=3,
            ),
        ),
    ),
    Case(
        "failure-file",
        (Expected("failed-run", f"{combo(4, 0)}/run=2.failure.json", anchor=4, k=0),),
    ),
    Case(
        "mixed-global-k",
        (
            Expected(
                "mixed-global-k",
                f"{combo(4, 3)}/summary.json",
                GLOBAL_K_VAR,
                "3, 5",
                message="--allow-mixed-global-k",
            ),
        ),
    ),
    Case(
        "k-above-global",
        (
            Expected(
                "k-above-global", f"{combo(1, 3)}/summary.json", GLOBAL_K_VAR, "2", anchor=1, k=3
            ),
            Expected(
                "k-above-global", f"{combo(4, 3)}/summary.json", GLOBAL_K_VAR, "2", anchor=4, k=3
            ),
        ),
        # The K=3 cells lost every run: too few runs, not runs that disagree.
        absent=("noisy-objective",),
    ),
    Case(
        "anchors-not-from-1",
        (Expected("anchors-not-from-1", f"{combo(2, 0)}/summary.json", "anchor", "2"),),
    ),
    Case(
        "unequal-k-sets",
        (
            Expected(
                "unequal-k-sets",
                f"{combo(4, 0)}/summary.json",
                "k",
                "0",
                message="lacks K 3",
                anchor=4,
            ),
        ),
    ),
    Case(
        "too-few-runs",
        (
            Expected(
                "too-few-runs",
                f"{combo(4, 0)}/summary.json",
                "num_runs",
                "2",
                message="only 2 usable run(s)",
                anchor=4,
                k=0,
            ),
        ),
    ),
    Case(
        "empty-folder",
        (Expected("empty-experiment", ROOT, message="summary.json"),),
        absent=("missing-objective",),
    ),
    Case(
        "summary-not-list",
        (Expected("summary-not-list", f"{combo(1, 0)}/summary.json", value='{"backend": "vllm"'),),
    ),
    Case(
        "odd-folder-names",
        (
            Expected(
                "out-of-range-objective",
                'SERVE--{"speculative_config": {"k": 3}}-BENCH--c4/summary.json',
                "output_throughput",
                "-300.0",
            ),
        ),
    ),
    Case(
        "null-goodput",
        (
            Expected(
                "missing-objective",
                f"{combo(1, 0)}/summary.json",
                "request_goodput",
                "null",
                message="--goodput",
            ),
        ),
        objective="request_goodput",
        absent=("noisy-objective",),
    ),
    Case(
        "invalid-utf8",
        (Expected("unreadable-file", f"{combo(1, 3)}/summary.json", message="UTF-8"),),
    ),
    Case(
        "three-problems",
        (
            Expected(
                "non-finite-objective", f"{combo(1, 3)}/summary.json", "output_throughput", "nan"
            ),
            Expected(
                "failed-requests",
                f"{combo(4, 0)}/summary.json",
                "failed",
                "failed=2",
                anchor=4,
                k=0,
            ),
            Expected("invalid-anchor", f"{combo(4, 3)}/summary.json", "max_concurrency", "'four'"),
        ),
    ),
    Case(
        "huge-numbers",
        (
            Expected(
                "invalid-anchor", f"{combo(1, 3)}/summary.json", "max_concurrency", str(2**63)
            ),
            Expected(
                "invalid-k",
                f"{combo(4, 3)}/summary.json",
                "speculative_config.num_speculative_tokens_per_batch_size",
                str([[1, 4, 2**63 - 1]]),
            ),
            Expected(
                "invalid-global-k", f"{combo(1, 0)}/summary.json", GLOBAL_K_VAR, str(2**64 - 1)
            ),
            Expected(
                "invalid-file-name",
                f"{combo(4, 0)}/run=99999999999999999999.failure.json",
                value="99999999999999999999",
            ),
        ),
    ),
    Case(
        "bad-health-fields",
        tuple(
            Expected("invalid-health-field", f"{folder}/summary.json[{run}]", name, shown)
            for folder, run, name, shown in (
                (combo(1, 0), 0, "failed", "'5'"),
                (combo(1, 0), 1, "failed", "true"),
                (combo(1, 3), 0, "failed", "[1]"),
                (combo(1, 3), 1, "failed", "-1"),
                (combo(4, 0), 0, "completed", "'90'"),
                (combo(4, 3), 2, "completed", "null"),
            )
        ),
    ),
    Case(
        "pooled-servers",
        tuple(
            Expected(
                "pooled-servers",
                f"{combo(anchor, 0)}/summary.json",
                "speculative_config.num_speculative_tokens_per_batch_size",
                "SERVE--k0, SERVE--k3",
                message="a ranking of their mixture would hold for neither server",
                anchor=anchor,
                k=0,
            )
            for anchor in (1, 4)
        ),
    ),
    Case(
        # The replicas k3-seed=0 and k3-seed=1 are one configuration; the third server set
        # max_num_seqs too: another configuration, named beside the first of the replicas.
        "replicas-of-two-configurations",
        tuple(
            Expected(
                "pooled-servers",
                f"SERVE--k3-seed=0-BENCH--c{anchor}/summary.json",
                "speculative_config.num_speculative_tokens_per_batch_size",
                "SERVE--k3-max_num_seqs=8-seed=0, SERVE--k3-seed=0",
                message="a ranking of their mixture would hold for neither server",
                anchor=anchor,
                k=3,
            )
            for anchor in (1, 4)
        ),
    ),
    Case(
        "stale-summary",
        # Issue 38: a valid summary.json that lacks a run its folder's run file holds (a sweep
        # stopped between the two writes) was the data alone: the failed run 3 went unseen.
        (
            Expected(
                "failed-requests",
                f"{combo(4, 3)}/run=3.json",
                "failed",
                "failed=4",
                anchor=4,
                k=3,
            ),
        ),
    ),
    Case(
        "huge-engine-settings",
        # Issue 38: engine settings had no limit; every count has 2^31 - 1.
        (
            Expected(
                "invalid-engine-setting",
                f"{combo(4, 3)}/summary.json",
                "max_cudagraph_capture_size",
                "1e+300",
            ),
            Expected(
                "invalid-engine-setting", f"{combo(4, 0)}/summary.json", "max_num_seqs", str(2**31)
            ),
        ),
    ),
    Case(
        "copied-combo-folder",
        (
            Expected(
                "too-few-runs",
                f"{combo(4, 3)}/summary.json",
                "num_runs",
                "2",
                message="only 2 usable run(s)",
                anchor=4,
                k=3,
            ),
        ),
    ),
]
BY_NAME = {case.folder: case for case in CASES}


#: Broken ``--traffic`` files (tests/bad_inputs/traffic/, hand-written: each a line or two),
#: each refused on the healthy sweep with the file, its line or JSON field and the value.
TRAFFIC = CORPUS / "traffic"
TRAFFIC_CASES = [
    ("negative-weight.csv", "invalid-traffic", "line 3: weight", "'-0.1'"),
    ("fractional-batch.csv", "invalid-traffic", "line 3: batch_size", "'2.5'"),
    ("repeated-timestamp.csv", "invalid-traffic", "line 4: timestamp", "'1764921600.5'"),
    ("unknown-header.csv", "invalid-traffic", "line 1: header", "'time,running'"),
    ("only-idle.csv", "invalid-traffic", None, None),
    (
        "wrong-gauge.json",
        "invalid-traffic",
        "data.result[0].metric.__name__",
        "'vllm:num_requests_waiting'",
    ),
    ("nan-sample.json", "invalid-traffic", "data.result[0].values[2][1]", "'NaN'"),
    # A query that sums the ranks (sum(vllm:num_requests_running)) has no __name__.
    ("summed-ranks.json", "invalid-traffic", "data.result[0].metric.__name__", None),
    ("truncated.json", "invalid-json", None, None),
]


def test_every_corpus_folder_has_a_case() -> None:
    folders = {path.name for path in CORPUS.iterdir() if path.is_dir()} - {TRAFFIC.name}
    assert folders == set(BY_NAME)
    assert {path.name for path in TRAFFIC.iterdir()} == {case[0] for case in TRAFFIC_CASES}


@pytest.mark.parametrize(("name", "rule", "field", "value"), TRAFFIC_CASES)
def test_a_broken_traffic_file_is_refused_and_named(
    name: str,
    rule: str,
    field: str | None,
    value: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    experiment = tmp_path / "experiment"
    shutil.copytree(CORPUS / "null-goodput", experiment)
    before = _listing(experiment)
    path = str(TRAFFIC / name)
    assert main([str(experiment), "--traffic", path]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.out == ""
    assert "nothing written" in captured.err
    assert _listing(experiment) == before
    pieces = [f"error [{rule}]", path]
    pieces += [f"field {field!r}"] if field else []
    pieces += [f"value {value}"] if value else []
    lines = [line for line in captured.err.splitlines() if all(p in line for p in pieces)]
    assert lines, f"no stderr line has all of {pieces}:\n{captured.err}"


@pytest.fixture
def copy_case(tmp_path: Path) -> CopyCase:
    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(CORPUS / name, target, symlinks=True)
        return target

    return copy


def _listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def _shown_file(expected: Expected, experiment: Path) -> str | None:
    return str(experiment) if expected.file == ROOT else expected.file


def _matches(problem: Problem, expected: Expected, experiment: Path) -> bool:
    file = _shown_file(expected, experiment)
    return (
        problem.severity is Severity.ERROR
        and problem.rule == expected.rule
        # A problem inside a summary.json names the record too: "…/summary.json[1]".
        and (file is None or any(f == file or f.startswith(file + "[") for f in problem.files))
        and problem.field == expected.field
        and (expected.value is None or expected.value in (problem.value or ""))
        and (expected.message is None or expected.message in problem.message)
        and (expected.anchor is None or problem.anchor == expected.anchor)
        and (expected.k is None or problem.k == expected.k)
    )


def _assert_reported(stderr: str, expected: Expected, experiment: Path) -> None:
    """One stderr line carries the rule, the file, the field and the value together."""
    file = _shown_file(expected, experiment)
    pieces = [f"error [{expected.rule}]"]
    pieces += [file] if file else []
    pieces += [f"field {expected.field!r}"] if expected.field else []
    pieces += [f"value {expected.value}"] if expected.value else []
    pieces += [expected.message] if expected.message else []
    pieces += [f"batch size {expected.anchor}"] if expected.anchor is not None else []
    pieces += [f"K={expected.k}"] if expected.k is not None else []
    lines = [line for line in stderr.splitlines() if all(piece in line for piece in pieces)]
    assert lines, f"no stderr line has all of {pieces}:\n{stderr}"


def _assert_refused(stdout: str, stderr: str, experiment: Path, before: list[str]) -> None:
    assert "Traceback" not in stderr
    assert stdout == ""
    assert "no schedule written" in stderr
    assert not (experiment / RESULT_FILE).exists()
    assert _listing(experiment) == before


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.folder)
def test_cli_refuses_and_names_every_problem(
    case: Case, copy_case: CopyCase, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = copy_case(case.folder)
    before = _listing(experiment)
    assert main([str(experiment), *case.arguments]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    _assert_refused(captured.out, captured.err, experiment, before)
    for expected in case.expected:
        _assert_reported(captured.err, expected, experiment)
    listed = [line for line in captured.err.splitlines() if line.startswith("  error [")]
    assert f"no schedule written: {len(listed)} problem(s)" in captured.err
    for rule in case.absent:
        assert f"[{rule}]" not in captured.err


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.folder)
def test_library_reports_the_problems_without_raising(case: Case) -> None:
    experiment = CORPUS / case.folder
    sweep = load_experiment(experiment)
    if case.context:
        _, found = find_context_axis(sweep, ContextSettings())
        problems = tuple(found)
    else:
        result = tune(sweep, Settings(objective=case.objective))
        assert not result.ok
        problems = result.problems
    assert any(problem.severity is Severity.ERROR for problem in problems)
    for expected in case.expected:
        assert any(_matches(problem, expected, experiment) for problem in problems), (
            f"{expected} not among:\n" + "\n".join(p.describe() for p in problems)
        )
    assert not {problem.rule for problem in problems} & set(case.absent)


def test_the_unbroken_sweep_is_healthy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Control: the sweep every case breaks is tunable, so each case fails for its own break.
    (null-goodput is the unbroken sweep; only its --objective-var is wrong.)"""
    output = tmp_path / "schedule.json"
    experiment = CORPUS / "null-goodput"
    assert main([str(experiment), "--output-json", str(output)]) == EXIT_OK
    captured = capsys.readouterr()
    # The corpus's records carry no mean_e2el_ms: one note says so (lib/effective_batch.py).
    assert [line.split("]")[0] for line in captured.err.splitlines()] == [
        "note [effective-batch-unknown"
    ]
    # Anchor 1: K=3 median 150 beats K=0 median 100; anchor 4: K=0 median 400 beats K=3 300
    # (each cell's MAD is 1-4 tok/s, far too small to change the order).
    assert captured.out.splitlines()[0] == "[[1, 3, 3], [4, 4, 0]]"


def test_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = tmp_path / "no such sweep"
    assert main([str(experiment)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    _assert_reported(
        captured.err, Expected("missing-folder", ROOT, message="does not exist"), experiment
    )
    assert "Traceback" not in captured.err
    assert captured.out == ""
    assert not experiment.exists()
    result = tune(load_experiment(experiment), Settings())
    assert any(problem.rule == "missing-folder" for problem in result.problems)


def test_a_file_instead_of_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = tmp_path / "summary.json"
    experiment.write_text("[]", encoding="utf-8")
    assert main([str(experiment)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    _assert_reported(
        captured.err, Expected("not-a-folder", ROOT, message="not a folder"), experiment
    )
    assert "Traceback" not in captured.err
    assert captured.out == ""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["summary.json"]


def _with_dangling_summary(copy_case: CopyCase) -> tuple[Path, str]:
    """The unbroken sweep with one summary.json replaced by a link to nothing: root can read
    a chmod 000 file, so a dangling link is the portable way to make a file unreadable."""
    experiment = copy_case("null-goodput")
    relative = f"{combo(1, 3)}/summary.json"
    (experiment / relative).unlink()
    (experiment / relative).symlink_to(experiment / "gone.json")
    return experiment, relative


UNREADABLE_MESSAGE = "cannot read the file"


def test_unreadable_file(copy_case: CopyCase, capsys: pytest.CaptureFixture[str]) -> None:
    experiment, relative = _with_dangling_summary(copy_case)
    before = _listing(experiment)
    assert main([str(experiment)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    _assert_refused(captured.out, captured.err, experiment, before)
    expected = Expected("unreadable-file", relative, message=UNREADABLE_MESSAGE)
    _assert_reported(captured.err, expected, experiment)
    result = tune(load_experiment(experiment), Settings())
    assert any(_matches(problem, expected, experiment) for problem in result.problems)


# --------------------------------------------------------------------------- real processes


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "tune-spec-k"
    if not script.exists():
        pytest.skip(f"the tune-spec-k console script is not installed beside {sys.executable}")
    return [str(script)]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("launcher", "case_name"),
    [("module", "three-problems"), ("console-script", "odd-folder-names")],
)
def test_real_process_prints_no_traceback(
    launcher: str, case_name: str, copy_case: CopyCase
) -> None:
    case = BY_NAME[case_name]
    experiment = copy_case(case.folder)
    before = _listing(experiment)
    command = [sys.executable, "-m", "lib.cli"] if launcher == "module" else _console_script()
    completed = _run([*command, str(experiment), *case.arguments])
    assert completed.returncode == EXIT_BAD_INPUT, completed.stderr
    _assert_refused(completed.stdout, completed.stderr, experiment, before)
    for expected in case.expected:
        _assert_reported(completed.stderr, expected, experiment)


def test_real_process_with_an_unreadable_file(copy_case: CopyCase) -> None:
    experiment, relative = _with_dangling_summary(copy_case)
    completed = _run([sys.executable, "-m", "lib.cli", str(experiment)])
    assert completed.returncode == EXIT_BAD_INPUT
    assert "Traceback" not in completed.stderr
    _assert_reported(
        completed.stderr,
        Expected("unreadable-file", relative, message=UNREADABLE_MESSAGE),
        experiment,
    )
    assert not (experiment / RESULT_FILE).exists()


def test_a_stale_summary_is_named_with_its_run_files(
    copy_case: CopyCase, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run files read instead of a stale summary.json are said to be, with the folder."""
    experiment = copy_case("stale-summary")
    assert main([str(experiment)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("warning [stale-summary]")]
    assert lines, err
    assert "(run=3.json is not in summary.json)" in lines[0]
    assert lines[0].endswith(f"read instead in {combo(4, 3)}")
