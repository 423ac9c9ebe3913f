"""Stopping ``tune-spec-k`` with a signal at a random point, and what must hold after (issue 38):
no process of its left, its caller's pipes closed with it, no traceback, the exit status of
the signal, and every output either the old file or the new one, never a mix, with no hidden
temporary left beside it (but where SIGKILL cut a write short: nothing can clean up after it).

The command runs as the ``tune-spec-k`` script does (:func:`lib.cli.main.run`), in a session of
its own, so that every process it forks is found after by its session id (Linux: ``/proc``).
The delay counts from the start of the probe's code: a signal during the interpreter's own
start (before any code of the command's runs) ends in Python's own error, out of its reach.
A probe slows the step to interrupt (the read of each file, or the write of each file) so that a
small sweep takes long enough, and forces the reading children where the machine has one core.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from paths import REPO

#: Patches run before the CLI: children forced, a split read from any size, each JSON file read
#: (SLOW_READ) or each file written (SLOW_WRITE) slowed by a few tens of milliseconds.
_PROBE = """
import functools, sys, time
open({started!r}, "w").close()
sys.path.insert(0, {repo!r})
from lib import files, prefetch, sweep_files
prefetch.worth_forking = lambda: "polars" not in sys.modules and "numpy" not in sys.modules
prefetch.cores = lambda: 3
sweep_files.read_sweep_files = functools.partial(sweep_files.read_sweep_files, split_from_bytes=0)
def slowed(function, seconds):
    def slow(*arguments):
        time.sleep(seconds)
        return function(*arguments)
    return slow
sweep_files.parse_json = slowed(sweep_files.parse_json, {read_seconds})
files._fill = slowed(files._fill, {write_seconds})
from lib.cli.main import run
sys.argv[0] = "tune-spec-k"
run()
"""

#: The exit status each signal must give: 130 for every stop signal (the developers' guide:
#: SIGINT and SIGTERM alike); a SIGKILL is the kernel's, -9.
EXPECTED_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 130, signal.SIGKILL: -signal.SIGKILL}


@dataclass(frozen=True)
class Stopped:
    """What a run stopped by a signal left: its exit status, its stderr, the processes of its
    session still alive half a second after it ended, and how long its stdout and stderr
    stayed open after it ended (held by a process that outlived it)."""

    status: int
    stderr: str
    left: list[int]
    pipes_open_seconds: float


def _session(session: int) -> list[int]:
    """The live (not zombie) processes of ``session``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def stop_at(
    argv: Sequence[str],
    number: int,
    delay: float,
    *,
    cwd: Path,
    read_seconds: float = 0.0,
    write_seconds: float = 0.0,
) -> Stopped:
    """Run ``tune-spec-k ARGV``, send it signal ``number`` after ``delay`` seconds, and see
    what it left; every process of its session is killed at the end whatever happened."""
    started = cwd / ".probe-started"
    started.unlink(missing_ok=True)
    probe = _PROBE.format(
        repo=str(REPO),
        started=str(started),
        read_seconds=read_seconds,
        write_seconds=write_seconds,
    )
    process = subprocess.Popen(
        [sys.executable, "-c", probe, *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    drained: dict[str, bytes | float] = {}

    def drain() -> None:
        drained["out"], drained["err"] = process.communicate()
        drained["closed"] = time.monotonic()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        for _ in range(400):
            if started.exists():
                break
            time.sleep(0.025)
        started.unlink(missing_ok=True)
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, number)
        status = process.wait(timeout=10)
        ended = time.monotonic()
        left = _session(process.pid)
        for _ in range(10):  # SIGKILL's children die a moment after their parent
            if not left:
                break
            time.sleep(0.05)
            left = _session(process.pid)
        # The pipes close only when every process holding them is gone: a reader left
        # running keeps them open until its read ends.
        reader.join(timeout=10)
        closed = drained.get("closed", float("inf"))
        assert isinstance(closed, float)
        stderr = drained.get("err", b"")
        assert isinstance(stderr, bytes)
        return Stopped(status, stderr.decode(errors="replace"), left, closed - ended)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        reader.join(timeout=5)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder``, by relative path, with its bytes."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def temporaries(folder: Path) -> list[str]:
    """The hidden temporaries of tune-spec-k's writes in ``folder`` (lib/files.py names)."""
    return sorted(path.name for path in folder.glob(".tune-spec-k-*"))
