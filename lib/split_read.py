"""A large sweep read in several processes at once (issue 24: at 500,000 runs reading was 77 %
of the CLI's CPU, on one core): its files cut into pieces of whole combo folders
(:func:`split`), each read in a forked child (:mod:`lib.prefetch`), the parts joined as one
reader would have read them (:func:`read_split`). Used by :mod:`lib.sweep_files`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Set
from pathlib import Path
from typing import Any

from lib.prefetch import Prefetch
from lib.problems import ProblemLog

__all__ = ["SPLIT_FROM_BYTES", "Part", "read_split", "split"]

#: The files' size from which a read in several processes pays. One
#: reader takes about 160 MB/s (``make_large_sweep.py --runs 500000 --runs-per-cell 625``: 1.1
#: GB of summary.json in 6.8 s) while the CLI's parent imports Polars and NumPy (~0.6 s):
#: below ~100 MB the read ends within the import anyway, and a split would only add forks and
#: pickling (about 0.6 s a process to send 500,000 runs).
SPLIT_FROM_BYTES = 128 * 1024 * 1024


@dataclasses.dataclass(frozen=True, eq=False)
class Part:
    """What reading some of a sweep's files gave: its rows (numbered from 0), its problems
    (:attr:`lib.problems.ProblemLog.entries`) and the run keys it met
    (:func:`lib.repeated_runs.run_key`), by which :func:`read_split` sees whether another part
    may hold a copy of one of its runs. Plain data, so a forked child can send it."""

    problems: dict[tuple[Any, ...], dict[str, None]]
    input_files: list[str]
    failures: list[tuple[int, str]]
    speculative_configs: dict[bytes, dict[str, Any]]
    compilation_configs: dict[bytes, dict[str, Any]]
    derived: dict[str, list[Any]]
    numbers: list[dict[str, float | None]]
    others: list[dict[str, Any]]
    columns: dict[str, list[Any]]
    first_seen: dict[str, tuple[int, int]]
    texts: dict[str, dict[int, Any]]
    run_keys: Set[int]


def _file_bytes(entry: tuple[Path, str, str, str], run_file_bytes: list[int]) -> int:
    """A file's size for :func:`split`; a run=N.json counts as large as the first one met
    (``run_file_bytes`` keeps it), so that a sweep of thousands of them costs one stat, not
    one each. 0 for what is not read or cannot be."""
    folder, name, kind, _ = entry
    if kind in ("backup", "newer", "warmup", "failure"):
        return 0
    if kind == "run" and run_file_bytes:
        return run_file_bytes[0]
    try:
        size = os.stat(folder / name).st_size
    except OSError:
        return 0
    if kind == "run":
        run_file_bytes.append(size)
    return size


def split(
    files: list[tuple[Path, str, str, str]], processes: int, from_bytes: int
) -> list[list[tuple[Path, str, str, str]]]:
    """``files`` cut into at most ``processes`` runs of whole folders of about equal bytes,
    or left whole (one piece) when they hold fewer than ``from_bytes``.

    Whole folders, because a folder's runs depend on each other: its run=N.json files are read
    only if its summary.json is not, a failure takes the anchor and K of its folder's runs,
    and a run number repeated within a folder is the same run. A folder is never cut, so a
    sweep whose bytes sit in one folder is one piece. Pieces keep the files' order.

    >>> here = Path("a")
    >>> split([(here, "summary.json", "summary", "")], 4, 0)  # one folder: one piece
    [[(PosixPath('a'), 'summary.json', 'summary', '')]]
    >>> split([], 4, 0)
    [[]]
    """
    folders: list[list[tuple[Path, str, str, str]]] = []
    sizes: list[int] = []
    run_file_bytes: list[int] = []
    for entry in files:
        if not folders or folders[-1][0][0] is not entry[0]:
            folders.append([])
            sizes.append(0)
        folders[-1].append(entry)
        sizes[-1] += _file_bytes(entry, run_file_bytes)
    total = sum(sizes)
    if processes < 2 or len(folders) < 2 or total < from_bytes:
        return [files]
    pieces: list[list[tuple[Path, str, str, str]]] = [[]]
    done = 0
    for folder, size in zip(folders, sizes, strict=True):
        # A new piece once this one holds its share of the bytes (the last takes the rest).
        share = total * len(pieces) / processes
        if pieces[-1] and done >= share and len(pieces) < processes:
            pieces.append([])
        pieces[-1].extend(folder)
        done += size
    return pieces


def read_split(
    read: Callable[[list[tuple[Path, str, str, str]]], Part],
    pieces: list[list[tuple[Path, str, str, str]]],
) -> Part | None:
    """Each piece read at once, all but the first in forked children (:mod:`lib.prefetch`),
    the parts joined as one; or None where a piece has a run key another piece also met: a
    run of one may repeat a run of another (a copied folder), which only one reader over both
    can tell (the caller reads the whole sweep so). None for one piece too: there is nothing
    to split. Stopped or failed on the way, it kills and reaps the children still reading."""
    if len(pieces) < 2:
        return None
    children: list[Prefetch[Part]] = []
    try:
        for piece in pieces[1:]:
            children.append(Prefetch.start(functools.partial(read, piece)))
        parts = [read(pieces[0])] + [child.result() for child in children]
    except BaseException:
        # Stopped (a signal) or failed while the others read: none of them outlives the read.
        for child in children:
            child.cancel()
        raise
    met: set[int] = set()
    for part in parts:
        if not met.isdisjoint(part.run_keys):
            return None
        met |= part.run_keys
    return _joined(parts, met)


def _joined(parts: list[Part], run_keys: Set[int]) -> Part:
    """The parts read, in order, as one part (the first, grown): rows numbered on from the
    previous part's, each problem and config where it was first met."""
    first = parts[0]
    derived, columns, first_seen, texts = (
        first.derived,
        first.columns,
        first.first_seen,
        first.texts,
    )
    log = ProblemLog()
    log.extend(first.problems)
    for part in parts[1:]:
        offset = len(derived["source"])
        log.extend(part.problems)
        first.input_files.extend(part.input_files)
        first.failures.extend((row + offset, combo) for row, combo in part.failures)
        for mine, theirs in (
            (first.speculative_configs, part.speculative_configs),
            (first.compilation_configs, part.compilation_configs),
        ):
            for key, config in theirs.items():
                mine.setdefault(key, config)
        for name, values in part.derived.items():
            derived[name] += values
        first.numbers.extend(part.numbers)
        first.others.extend(part.others)
        for name, values in part.columns.items():
            columns[name] += values
        for name, (row, place) in part.first_seen.items():
            first_seen.setdefault(name, (row + offset, place))
        for name, by_row in part.texts.items():
            texts.setdefault(name, {}).update({row + offset: text for row, text in by_row.items()})
    return dataclasses.replace(first, problems=log.entries, run_keys=run_keys)
