"""A round's sweep, run through its plan's own ``run.sh`` (so ``vllm bench sweep serve`` from
PATH: a stand-in works the same), its output appended to a log, a progress bar over the runs
from the files the sweep writes, and no process left behind when the command is stopped.

The child runs in a session of its own (Ctrl-C at the terminal reaches only ``tune-spec-k``),
so a stop (:class:`lib.signals.Stopped`, Ctrl-C) is passed on by :func:`_stop_group`: SIGINT
first, as Ctrl-C would (vLLM's sweep then stops its server, and says to ``--resume``), SIGTERM
after a grace period, SIGKILL last; every process of the session is gone before the command
exits. Whatever a sweep wrote stays: the next ``tune-spec-k run`` resumes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["SweepOutcome", "count_runs", "run_sweep", "set_aside_broken"]

#: A measured run's file (not a failure's).
_RUN_NAME = re.compile(r"^run=[0-9]+\.json$")
#: Seconds between two looks at the sweep's files (and at whether it ended).
_POLL_SECONDS = 0.2
#: Seconds each signal of :func:`_stop_group` gets before the next.
_GRACE_SECONDS = (10.0, 5.0)


class _Bar(Protocol):
    """What the progress bar is used for (tqdm's)."""

    def update(self, n: int) -> object: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SweepOutcome:
    """How the sweep ended: ``run.sh``'s exit status, the command line, and its log."""

    status: int
    command: str
    log: Path


def count_runs(sweep_dirs: Sequence[Path]) -> int:
    """The measured runs (``run=N.json``, not failures) the sweeps have written so far."""
    return sum(
        1
        for folder in sweep_dirs
        for path in folder.glob("*/run=*.json")
        if not path.name.endswith(".failure.json")
    )


def set_aside_broken(sweep_dirs: Sequence[Path]) -> list[tuple[Path, Path]]:
    """Before a sweep is resumed: each ``run=N.json`` or ``warmup.json`` of a combo without
    its ``summary.json`` that is not a JSON object (a run killed while its benchmark wrote
    it), renamed to ``NAME.broken`` (or
    ``NAME.broken-2``, ...), so that vLLM's ``--resume``, which skips a run whose file exists
    and reads it back, measures it again instead of failing on it; the bytes are kept.
    Returns (old, new) of each file set aside."""
    from lib.files import read_json
    from lib.keys import MISSING

    moved = []
    for folder in sweep_dirs:
        for path in sorted(folder.glob("*/*.json")):
            if not (path.name == "warmup.json" or _RUN_NAME.match(path.name)):
                continue
            if (path.parent / "summary.json").exists():
                continue  # the sweep does not read it again: its summary holds the runs
            data, _ = read_json(path)
            if data is not MISSING and isinstance(data, dict):
                continue
            target = path.with_name(path.name + ".broken")
            number = 2
            while target.exists():
                target = path.with_name(f"{path.name}.broken-{number}")
                number += 1
            path.rename(target)
            moved.append((path, target))
    return moved


def run_sweep(
    script: Path,
    resume: bool,
    log: Path,
    sweep_dirs: Sequence[Path],
    planned_runs: int,
    description: str,
) -> SweepOutcome:
    """Run ``bash SCRIPT [--resume]`` from the current folder (its results are relative to it),
    stdout and stderr appended to ``log``, a progress bar on stderr (a terminal only) counting
    the run files in ``sweep_dirs`` against ``planned_runs``; returns when it ends."""
    words = ["bash", script.as_posix(), *(["--resume"] if resume else [])]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(words)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            words,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    bar = _progress_bar(planned_runs, description)
    try:
        shown = 0
        while True:
            status = process.poll()
            done = min(count_runs(sweep_dirs), planned_runs)
            if bar is not None and done != shown:
                bar.update(done - shown)
                shown = done
            if status is not None:
                return SweepOutcome(status, " ".join(words), log)
            time.sleep(_POLL_SECONDS)
    finally:
        if bar is not None:
            bar.close()
        _stop_group(process)


def _progress_bar(total: int, description: str) -> _Bar | None:
    """A tqdm bar on stderr where stderr is a terminal (a log or a pipe gets the printed lines
    before and after the round instead)."""
    if not (sys.stderr is not None and sys.stderr.isatty()):
        return None
    from tqdm import tqdm  # type: ignore[import-untyped]

    bar: _Bar = tqdm(total=total, desc=description, unit="run", file=sys.stderr, leave=True)
    return bar


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop the sweep's whole session, if anything of it is still running: SIGINT, SIGTERM,
    then SIGKILL, each after the grace before it; then reap the child."""
    for number, grace in (
        (signal.SIGINT, _GRACE_SECONDS[0]),
        (signal.SIGTERM, _GRACE_SECONDS[1]),
        (signal.SIGKILL, 0.0),
    ):
        if not _session_alive(process.pid):
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, number)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _session_alive(process.pid):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.05)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _session_alive(session: int) -> bool:
    """Whether a live process of the session (the process group the child leads) is left:
    on Linux from /proc (a zombie does not count), elsewhere by signalling the group."""
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == session and fields[0] not in ("Z", "X"):
                return True
        return False
    try:
        os.killpg(session, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
