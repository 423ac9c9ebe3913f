"""lib/signals.py: a stop signal raises Stopped where the main thread is, waits through a
deferred section, stays ignored where it was ignored, and a child dies with its parent."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import REPO

from lib import signals
from lib.signals import Stopped, deferred, exit_status, raised


def _send(number: int) -> None:
    os.kill(os.getpid(), number)
    time.sleep(0.01)  # the handler runs at the next instruction of the main thread


@pytest.mark.parametrize("number", signals.STOP_SIGNALS)
def test_a_stop_signal_raises_stopped_with_its_number(number: int) -> None:
    before = signal.getsignal(number)
    with raised(), pytest.raises(Stopped) as stop:
        _send(number)
        for _ in range(100):
            time.sleep(0.01)
    assert stop.value.number == number
    assert exit_status(stop.value.number) == 130
    assert signal.getsignal(number) is before  # restored


def test_a_signal_waits_for_the_end_of_a_deferred_section() -> None:
    done = []
    with raised(), pytest.raises(Stopped) as stop:
        with deferred():
            _send(signal.SIGTERM)
            with deferred():  # nested: only the outermost end raises
                time.sleep(0.02)
            done.append("inner")
            time.sleep(0.02)
            done.append("whole")
        done.append("never")
    assert done == ["inner", "whole"]
    assert stop.value.number == signal.SIGTERM


def test_a_second_signal_while_stopping_is_ignored() -> None:
    with raised():
        with pytest.raises(Stopped):
            _send(signal.SIGINT)
            time.sleep(1)
        _send(signal.SIGINT)  # the cleanup goes on
        _send(signal.SIGTERM)


def test_without_raised_deferred_changes_nothing() -> None:
    with deferred():
        pass


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with raised():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            _send(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


_ORPHAN = """
import os, signal, sys, time
sys.path.insert(0, {repo!r})
from lib import signals
parent = os.getpid()
pid = os.fork()
if pid == 0:
    signals.reset_in_child()
    signals.die_with_parent(parent)
    time.sleep(30)
    os._exit(0)
print(pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_parent_even_by_sigkill() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ORPHAN.format(repo=str(REPO))],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL
    child = int(done.stdout)
    for _ in range(100):
        if not _alive(child):
            break
        time.sleep(0.02)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a killed orphan is a zombie until whoever adopted it (PID 1,
    or a subreaper: slow in some containers) reaps it, and ``kill(pid, 0)`` still finds a
    zombie, so the state in /proc decides."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_child_takes_the_default_action_unless_ignored() -> None:
    code = (
        f"import os, signal, sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from lib import signals\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, lambda *a: None)\n"
        "signals.reset_in_child()\n"
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN,"
        " signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"]
