"""Reading a sweep while the command imports Polars and NumPy.

``tune-spec-k DIR`` spends most of its time on two things that do not depend on each other:
importing Polars and NumPy (a few hundred milliseconds, before any work can start) and reading
the sweep's JSON (pure Python, :mod:`lib.sweep_files`). On a machine with a second core the
reading runs in a forked child process while this one imports; the child sends back what it
read, pickled, through a pipe. A large sweep's reading forks again, one reader per core, each
reading whole folders (:func:`lib.sweep_files.read_sweep_files`).

Where that cannot help or cannot be trusted the function simply runs here when its result is
asked for, so the result is the same either way: no ``os.fork`` (Windows), one core, Polars
already imported (nothing left to overlap; and a process whose Polars has started threads must
not fork), or a child that fails in any way (its exception is not printed: the function runs
again here and fails the usual way).

No child outlives its parent (:mod:`lib.signals`): a child dies with it on Linux however it
ends, SIGKILL included; a parent stopped by a signal kills and reaps every child it forked
(:func:`stop_children`, and :meth:`Prefetch.result` or :meth:`Prefetch.cancel` cut short); and
a parent waiting for a child's value wakes every tenth of a second, so that a stop signal
delivered to another of its threads (Polars' workers) is handled at once, not when the child
is done.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

from lib import signals

__all__ = ["Prefetch", "cores", "stop_children", "worth_forking"]

T = TypeVar("T")
#: Modules whose import the child overlaps, and which must not be loaded when it forks.
HEAVY_MODULES = ("polars", "numpy")
#: How long a parent waiting for its child's value sleeps before it looks at its signals again.
_WAKE_SECONDS = 0.1
#: The children forked here and not yet reaped (pid -> None, in the order forked).
_RUNNING: dict[int, None] = {}


def stop_children() -> None:
    """Kill and reap every child this process forked and has not reaped (a command stopped by
    a signal: none may outlive it). Their grandchildren die with them (on Linux)."""
    for pid in list(_RUNNING):
        _kill(pid)


def _kill(pid: int) -> None:
    """SIGKILL the child ``pid`` and reap it; forget it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    _RUNNING.pop(pid, None)


def cores() -> int:
    """The cores this process may run on (at least 1)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return count or 1


def worth_forking() -> bool:
    """Whether a child process could read while this one imports: ``os.fork`` exists, there
    is a second core to run it on, and the heavy modules are still to be imported."""
    if not hasattr(os, "fork") or any(name in sys.modules for name in HEAVY_MODULES):
        return False
    return cores() > 1


class Prefetch(Generic[T]):
    """``function()``'s value, computed in a forked child if :func:`worth_forking`, else here
    on :meth:`result`.

    >>> Prefetch.start(lambda: sum(range(10))).result()
    45
    """

    def __init__(self, function: Callable[[], T], child: tuple[int, int] | None) -> None:
        self._function = function
        self._child = child

    @classmethod
    def start(cls, function: Callable[[], T]) -> Prefetch[T]:
        """Start ``function`` in a child process when that pays; return at once."""
        if not worth_forking():
            return cls(function, None)
        read_end, write_end = os.pipe()
        # Buffered output would otherwise be written twice, by the child too (a stream closed
        # before the start is None: nothing to flush).
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        parent = os.getpid()
        # The stop signals wait while forking: the child sets their default action before it
        # can meet one (the parent's handler would run the parent's cleanup in the child).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals.STOP_SIGNALS)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(read_end)
            os.close(write_end)
            return cls(function, None)
        if pid == 0:
            status = 1
            try:
                _RUNNING.clear()  # the parent's other children are not this one's to stop
                signals.reset_in_child()
                signals.die_with_parent(parent)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                os.close(read_end)
                payload = pickle.dumps(function(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(payload)
                status = 0
            finally:
                # Never return into the parent's code, run its exit handlers or print a
                # traceback: the parent reads again when the child fails.
                os._exit(status)
        _RUNNING[pid] = None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(write_end)
        return cls(function, (pid, read_end))

    @property
    def forked(self) -> bool:
        """Whether ``function`` runs in a child (until :meth:`result` is called): time this
        process spends waiting there, unless it finds other work."""
        return self._child is not None

    def result(self) -> T:
        """The value: the child's when it delivered one, else ``function()`` run here. Call
        it once."""
        if self._child is None:
            return self._function()
        pid, read_end = self._child
        self._child = None
        try:
            payload = _read_all(read_end)
            _, status = os.waitpid(pid, 0)
        except BaseException:
            _kill(pid)  # stopped while waiting: the child must not outlive this process
            raise
        _RUNNING.pop(pid, None)
        if status == 0 and payload:
            try:
                value: T = pickle.loads(payload)
                return value
            except Exception:  # a damaged payload: read again here
                pass
        return self._function()

    def cancel(self) -> None:
        """Kill and reap the child, if it still runs and its value was not asked for (a caller
        stopped on its way): nothing is left of it. The value is not asked for after."""
        if self._child is not None:
            pid, read_end = self._child
            self._child = None
            _kill(pid)
            os.close(read_end)


def _read_all(descriptor: int) -> bytes:
    """Everything written to the pipe until its end closes; the descriptor closed. Never
    blocked longer than :data:`_WAKE_SECONDS`: Python handles a signal only in the main thread,
    and one delivered to another thread would not wake a blocking read."""
    chunks: list[bytes] = []
    try:
        os.set_blocking(descriptor, False)
        while True:
            try:
                chunk = os.read(descriptor, 1 << 20)
            except BlockingIOError:
                select.select([descriptor], [], [], _WAKE_SECONDS)
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(descriptor)
