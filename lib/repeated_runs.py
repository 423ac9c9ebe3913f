"""Telling a run read twice from a run of its own, so that each run counts once: a copied
combo folder (``cp -r``), a summary.json copied beside its original or a record listed twice
is a repeat, found by its content or by its run number within its cell
(:class:`RepeatedRuns`). Used by :mod:`lib.rows`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lib.bulky_lists import may_hold_bulky_lists, without_lists
from lib.problems import ProblemLog, Severity
from lib.records import fingerprint

__all__ = ["RUN_KEY_FIELDS", "RecordFile", "RepeatedRuns", "run_content", "run_key"]


#: Measurements that differ from run to run: their values give :func:`run_key`, the cheap
#: first key by which :meth:`RepeatedRuns.repeated` finds the runs a record may repeat.
RUN_KEY_FIELDS = ("duration", "date", "output_throughput", "mean_ttft_ms", "total_output_tokens")
_SCALARS = frozenset({float, int, str, bool, type(None)})


def run_key(record: dict[str, Any], finite: bool) -> int:
    """A hash of a few of the record's values: equal for records of equal content (it is
    coarser: different records may share it). ``finite``: the record was parsed by orjson,
    which reads no NaN or infinity.

    What the content leaves out or writes alike keys alike: a value that is not a scalar
    (a list may be a bulky one, which the content drops: it keys like an absent field) and
    a NaN or infinity (orjson writes them as null) key as None.

    >>> one, other = {"duration": 1.5, "date": "x"}, {"date": "x", "duration": 1.5}
    >>> run_key(one, True) == run_key(other, False)
    True
    >>> run_key({"duration": [0.1] * 64}, True) == run_key({}, True)
    True
    >>> run_key({"duration": float("nan")}, False) == run_key({"duration": None}, False)
    True
    """
    values = tuple(map(record.get, RUN_KEY_FIELDS))
    if not _SCALARS.issuperset(map(type, values)) or not finite:
        values = tuple(
            None
            if type(value) not in _SCALARS or (type(value) is float and not math.isfinite(value))
            else value
            for value in values
        )
    return hash(values)


def run_content(record: dict[str, Any], protected: Callable[[str], bool]) -> bytes:
    """What tells two runs apart: the record's JSON text (:func:`lib.records.fingerprint`)
    without the per-request lists a large file's reading replaces (all but the top-level
    fields ``protected`` names), so that a record reads the same from any file
    (:mod:`lib.bulky_lists`): a summary.json's record and its run=N.json alike.

    >>> run_content({"a": 1}, bool) == run_content({"a": 1}, bool) != run_content({"a": 2}, bool)
    True
    """
    content = fingerprint(record)
    if content is None or may_hold_bulky_lists(content):
        record = without_lists(record, protected)
        content = fingerprint(record) or json.dumps(record, default=str).encode()
    return content


@dataclass(frozen=True)
class RecordFile:
    """A file records were read from, and how to read them again: the content of a run is
    worked out only when a later record shares its :func:`run_key`, and by then its file's
    records have been freed (keeping every record would hold the whole sweep in memory)."""

    source: str
    read_again: Callable[[], list[Any]]


class RepeatedRuns:
    """The runs read so far, by what identifies them; a repeat is logged as a warning."""

    def __init__(self, log: ProblemLog, protected: Callable[[str], bool]) -> None:
        self.log = log
        # The top-level fields whose lists the content keeps (lib.bulky_lists).
        self.protected = protected
        # What identifies each run read so far (see repeated): per run key, the first run
        # with it (its file and place), None once its content is in _contents; each content
        # worked out, with the file it was first read from.
        self._first_by_key: dict[int, tuple[RecordFile, int] | None] = {}
        self._contents: dict[bytes, str] = {}
        self._run_numbers: dict[tuple[str, int | None, int | None, int], str] = {}

    def run_keys(self) -> frozenset[int]:
        """The :func:`run_key` of every run met so far (a copy's too)."""
        return frozenset(self._first_by_key)

    def repeated(
        self,
        record: dict[str, Any],
        file: RecordFile,
        position: int,
        records: list[Any],
        finite: bool,
        run: tuple[str, int | None, int | None, int],
    ) -> bool:
        """Whether the run was read already (a warning says where), so it counts once.

        A copied combo folder (``cp -r``), a summary.json copied beside its original, or a
        record listed twice would otherwise count its runs twice, and a cell of 2 runs would
        pass ``--min-runs 3``. The same run is a record with the same content (the same
        fields and values in the same order, as a copy has: :meth:`_content`), or the same run
        number again in one combo folder at the same batch size and K (``run``: combo folder,
        batch size, K, run number). Runs of other cells are other runs whatever their numbers:
        a folder holding several cells (one summary.json of a whole sweep, as the seed's own
        test writes it) numbers each cell's runs from 0.

        The content is written out only for records that share their :func:`run_key` with
        an earlier one (a copy does; different runs almost never): then the earlier record's
        content is worked out too, from ``records`` (the file being read, ``position`` is the
        record's place in it) or by reading its file again (:meth:`_resolve`)."""
        key = run_key(record, finite)
        earlier = None
        if key not in self._first_by_key:
            self._first_by_key[key] = (file, position)
        else:
            first = self._first_by_key[key]
            if first is not None:
                self._resolve(first[0], records if first[0] is file else None)
            content = self._content(record)
            earlier = self._contents.get(content)
            if earlier is None:
                self._contents[content] = file.source
        if earlier is not None:
            how = f"a record already read from {earlier} (a copy?)"
        else:
            earlier = self._run_numbers.get(run)
            if earlier is None:
                self._run_numbers[run] = file.source
                return False
            how = f"run {run[3]} of the folder again, already read from {earlier}"
        self.log.add(
            "repeated-run",
            f"{how}: counted once, from there",
            file.source,
            severity=Severity.WARNING,
        )
        return True

    def _content(self, record: dict[str, Any]) -> bytes:
        """The record's :func:`run_content`."""
        return run_content(record, self.protected)

    def _resolve(self, file: RecordFile, records: list[Any] | None) -> None:
        """Work out the content of every run of ``file`` that is still first with its key
        (``records``: the file's records, if still at hand; else it is read again), so that
        each file is read again at most once."""
        if records is None:
            records = file.read_again()
        first_by_key = self._first_by_key
        for position, record in enumerate(records):
            if not isinstance(record, dict):
                continue
            # Not finite=True even where orjson read the file: the key is the same either way
            # for what orjson reads, and this file may have been read by Python's json.
            key = run_key(record, finite=False)
            first = first_by_key.get(key)
            if first is not None and first[0] is file and first[1] == position:
                first_by_key[key] = None
                self._contents.setdefault(self._content(record), file.source)
