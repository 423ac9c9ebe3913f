"""How a command stops on a signal: promptly, quietly, leaving no process and no half-written
file behind (issue 38).

Rules, each one function:

- :data:`STOP_SIGNALS` (SIGINT, SIGTERM, SIGHUP) stop a command. While :func:`raised` is in
  force (the CLI's whole run), each raises :class:`Stopped` in the main thread, wherever it
  is, so every ``finally`` on the way out runs: children are killed and reaped
  (:func:`lib.prefetch.stop_children`), temporaries removed. The command then exits
  :func:`exit_status` (130, whichever stop signal: the project's contract for a stopped
  command), with one line on stderr naming the signal and no traceback. A signal ignored when
  the command started (``nohup``, a background job's SIGINT) stays ignored; a second one while
  stopping is ignored too (the cleanup finishes).
- A section that must not be cut (writing files: each old or new, never mixed) runs inside
  :func:`deferred`: a stop signal met there waits until it ends. The deferral is by a flag the
  handler reads, not by blocking the signal: a process-directed signal may be delivered to any
  thread (Polars' workers), and Python runs the handler in the main thread all the same.
- A forked child (:mod:`lib.prefetch`) takes each stop signal's default action (dies at once,
  quietly; its parent stops on its own signal) and, on Linux, dies with its parent
  (:func:`die_with_parent`), SIGKILL included, so that no reader outlives the command and
  holds its caller's pipes open.

Standard library only: a forked reader imports it (no Polars, no NumPy).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = [
    "EXIT_STOPPED",
    "STOP_SIGNALS",
    "Stopped",
    "deferred",
    "die_with_parent",
    "exit_status",
    "raised",
    "reset_in_child",
]

#: The signals that stop a command (SIGHUP where the system has it: not on Windows).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
#: Linux's prctl option: the signal this process gets when its parent exits.
_PR_SET_PDEATHSIG = 1


class Stopped(BaseException):
    """A stop signal arrived (:data:`STOP_SIGNALS`): raised where the main thread was, a
    BaseException as KeyboardInterrupt is, so ``except Exception`` does not swallow it."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


class _State:
    """The handler's state: how deep in :func:`deferred` the main thread is, the signal that
    waits for its end, and whether the command is already stopping."""

    depth = 0
    pending: int | None = None
    stopping = False


#: The exit status of a command a stop signal ended, whichever: 130 (128 + SIGINT), as the
#: developers' guide has it for SIGINT and SIGTERM alike, so that a caller tells "stopped" from
#: "bad input" (2) by one number; the line on stderr names the signal.
EXIT_STOPPED = 130


def exit_status(number: int) -> int:
    """The exit status of a command stopped by signal ``number``: :data:`EXIT_STOPPED` for
    every stop signal (SIGINT, SIGTERM, SIGHUP), not 128 + its number.

    >>> exit_status(signal.SIGINT), exit_status(signal.SIGTERM), exit_status(signal.SIGHUP)
    (130, 130, 130)
    """
    return EXIT_STOPPED


def _handle(number: int, frame: FrameType | None) -> None:
    """The stop signals' handler: :class:`Stopped`, unless inside :func:`deferred` (it waits)
    or already stopping (ignored)."""
    if _State.stopping:
        return
    if _State.depth:
        _State.pending = number
        return
    _State.stopping = True
    raise Stopped(number)


@contextlib.contextmanager
def raised() -> Iterator[None]:
    """Within: each stop signal raises :class:`Stopped` (see the module's rules); the previous
    handlers are restored after. A signal ignored on entry stays ignored. Outside the main
    thread (where no handler can be set) nothing changes."""
    previous: dict[int, Any] = {}
    _State.depth, _State.pending, _State.stopping = 0, None, False
    try:
        for number in STOP_SIGNALS:
            handler = signal.getsignal(number)
            if handler is signal.SIG_IGN:
                continue
            signal.signal(number, _handle)
            previous[number] = signal.SIG_DFL if handler is None else handler
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
        _State.depth, _State.pending, _State.stopping = 0, None, False


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within: a stop signal waits; on leaving, the first one that arrived raises
    :class:`Stopped` (after the section's own exception, if it raised one: the command stops
    either way). Sections nest; only the outermost end raises. Without :func:`raised` in
    force this changes nothing."""
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        number = _State.pending
        if not _State.depth and number is not None and not _State.stopping:
            _State.pending = None
            _State.stopping = True
            raise Stopped(number)


def reset_in_child() -> None:
    """In a forked child: each stop signal back to its default action (the child dies at once,
    quietly), unless it was ignored (it stays ignored), and no deferral or stop inherited from
    the parent."""
    for number in STOP_SIGNALS:
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
    _State.depth, _State.pending, _State.stopping = 0, None, False


def die_with_parent(parent: int) -> None:
    """In a forked child: on Linux, have the kernel send SIGKILL to this process when its parent
    ``parent`` exits, however it exits (``prctl(PR_SET_PDEATHSIG)``); and exit now where the
    parent is already gone (it died before the request: the child was adopted). Elsewhere
    only the parent's handlers stop its children (not on SIGKILL)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
