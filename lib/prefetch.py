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
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Prefetch", "cores", "worth_forking"]

T = TypeVar("T")
#: Modules whose import the child overlaps, and which must not be loaded when it forks.
HEAVY_MODULES = ("polars", "numpy")


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
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            status = 1
            try:
                payload = pickle.dumps(function(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(payload)
                status = 0
            finally:
                # Never return into the parent's code, run its exit handlers or print a
                # traceback: the parent reads again when the child fails.
                os._exit(status)
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
        with os.fdopen(read_end, "rb") as pipe:
            payload = pipe.read()
        _, status = os.waitpid(pid, 0)
        if status == 0 and payload:
            try:
                value: T = pickle.loads(payload)
                return value
            except Exception:  # a damaged payload: read again here
                pass
        return self._function()
