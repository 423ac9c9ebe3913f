"""lib/prefetch.py: a value computed in a forked child arrives as computed here, and any
failure of the child falls back to computing it here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO, SAMPLE_SWEEPS

from lib.cli.main import main
from lib.prefetch import Prefetch, worth_forking


def _fresh(code: str) -> str:
    """What ``code`` prints in a fresh interpreter (no Polars loaded: the child path)."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stderr == ""
    return done.stdout.strip()


CHILD = """
import os, json
from lib.prefetch import Prefetch, worth_forking
parent = os.getpid()
def where():
    {body}
got = Prefetch.start(where).result()
print(json.dumps([worth_forking(), got == parent, got]))
"""


def test_the_value_is_computed_in_a_child_when_polars_is_still_to_load() -> None:
    forking, here, _ = json.loads(_fresh(CHILD.format(body="return os.getpid()")))
    assert forking is True
    assert here is False  # computed by another process


@pytest.mark.parametrize(
    "body",
    [
        # The child fails: the value is computed again here.
        "if os.getpid() != parent: raise RuntimeError('child only')\n    return os.getpid()",
        # The child's value cannot be pickled.
        "return os.getpid() if os.getpid() == parent else (lambda: None)",
        # The child dies without a word.
        "if os.getpid() != parent: os._exit(3)\n    return os.getpid()",
    ],
)
def test_a_failing_child_falls_back_to_computing_here(body: str) -> None:
    _, here, _ = json.loads(_fresh(CHILD.format(body=body)))
    assert here is True


def test_with_polars_loaded_nothing_is_forked() -> None:
    import polars  # noqa: F401  (the test process has it anyway)

    assert not worth_forking()
    assert Prefetch.start(lambda: 42).result() == 42


def test_the_cli_writes_the_same_file_through_the_child(tmp_path: Path) -> None:
    folder = SAMPLE_SWEEPS / "real-cpu-tiny-ngram"
    flags = [
        "--max-objective-relative-mad",
        "0.2",
        "--acceptance-var",
        "spec_decode_acceptance_length",
    ]
    here, there = tmp_path / "here.json", tmp_path / "there.json"
    assert main([str(folder), *flags, "--output-json", str(here)]) == 0
    done = subprocess.run(
        [sys.executable, "-m", "lib.cli", str(folder), *flags, "--output-json", str(there)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert there.read_bytes() == here.read_bytes()
    assert done.stdout.splitlines()[-1] == f"Wrote {there}"


STOPPING = """
import json, os, signal, sys, time
from lib import prefetch, signals
from lib.prefetch import Prefetch, stop_children
prefetch.worth_forking = lambda: True
def slow():
    time.sleep(30)
    return os.getpid()
first, second, third = (Prefetch.start(slow) for _ in range(3))
pids = list(prefetch._RUNNING)
first.cancel()  # a value no longer wanted
stop_children()  # a command stopped: every child still running
# Stopped while waiting for the value: the child is killed and reaped on the way out.
fourth = Prefetch.start(slow)
pids += list(prefetch._RUNNING)
signal.setitimer(signal.ITIMER_REAL, 0.3)
signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(signals.Stopped(14)))
started = time.monotonic()
try:
    fourth.result()
except signals.Stopped:
    pass
alive = []
for pid in pids:
    try:
        os.kill(pid, 0)
        alive.append(pid)
    except ProcessLookupError:
        pass
print(json.dumps([len(pids), alive, list(prefetch._RUNNING), time.monotonic() - started < 5]))
"""


def test_no_child_is_left_running_when_its_value_is_not_wanted() -> None:
    count, alive, running, prompt = json.loads(_fresh(STOPPING))
    assert count == 4
    assert alive == []  # killed and reaped, every one
    assert running == []
    assert prompt  # the wait for a value is cut short at once
