"""One record's metrics as columns: the fields of a `vllm bench serve` record (nested dicts
flattened to dotted names, texts that read as numbers read as them) into one dict of numbers
and one of texts a row, or, for a few named top-level metrics, one list a name
(:class:`MetricColumns`); and a record's fields as JSON text (:func:`fingerprint`), by which
equal records are known. Used by :mod:`lib.rows`; imports neither Polars nor NumPy (see
:mod:`lib.sweep_files`).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from lib.settings import DERIVED_COLUMNS

__all__ = ["MetricColumns", "fingerprint", "numeric_text"]


#: Top-level record fields clashing with a derived column: renamed, or dropped (None) where the
#: derived column already holds the value.
_TOP_LEVEL_NAMES: dict[str, str | None] = {
    name: None if name == "run_number" else "record." + name for name in DERIVED_COLUMNS
}
_RENAMED = frozenset(name for name, renamed in _TOP_LEVEL_NAMES.items() if renamed is not None)

#: The exact types (a JSON parser makes no others) of a number or null, and of another scalar.
_NUMERIC = frozenset({float, int, type(None)})
_TEXT = frozenset({str, bool})

#: The first character of every text :func:`numeric_text` may read as a number (a cheap test
#: before ``float()``, which most texts of a record, a model name or a backend, fail).
_NUMBER_START = frozenset("0123456789+-. \t\n\r")


def numeric_text(value: str) -> float | None:
    """A JSON string that Python's ``float()`` reads as a finite number (``"110.0"``,
    ``" 1e3"``), as the seed reads its objective and acceptance; else None: other texts, and
    ``"inf"`` or ``"nan"`` (the seed refuses a value that is not finite; as a text it is
    refused by name). A JSON boolean is never a number here (the seed's ``float(True)`` is 1.0,
    a throughput no run measured).

    >>> numeric_text("110.0"), numeric_text(" 1e3 "), numeric_text("inf"), numeric_text("fast")
    (110.0, 1000.0, None, None)
    """
    if value[:1] not in _NUMBER_START:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _flatten(
    record: dict[str, Any],
    numbers: dict[str, float | None],
    others: dict[str, Any],
) -> None:
    """Numeric (and null) fields into ``numbers``, other scalars into ``others``; lists (per
    request latencies, per-position rates, schedules) are not metrics and are skipped. A text
    that reads as a number (:func:`numeric_text`) is that number, in its place in the record.

    Runs on every record, so the common case is three dict comprehensions over exact types (a
    JSON parser makes nothing else; ``bool`` is not ``int`` here); ints stay ints: the Float64
    frame converts them exactly as ``float()`` would (:func:`_frame` handles ints beyond 128
    bits). The rare record with a field named like a derived column takes the slow path."""
    if _RENAMED.isdisjoint(record):
        texts = {k: v for k, v in record.items() if type(v) in _TEXT}
        read = {
            k: number
            for k, v in texts.items()
            # The first character first: most texts (names, dates) are not tried at all.
            if type(v) is str and v[:1] in _NUMBER_START and (number := numeric_text(v)) is not None
        }
        if read:
            numbers.update(
                {k: read.get(k, v) for k, v in record.items() if type(v) in _NUMERIC or k in read}
            )
            texts = {k: v for k, v in texts.items() if k not in read}
        else:
            numbers.update({k: v for k, v in record.items() if type(v) in _NUMERIC})
        numbers.pop("run_number", None)  # the derived column holds it
        others.update(texts)
        for key, value in record.items():
            if type(value) is dict:
                _flatten_nested(value, key + ".", numbers, others)
        return
    for key, value in record.items():
        if key in _TOP_LEVEL_NAMES:
            renamed = _TOP_LEVEL_NAMES[key]
            if renamed is None:
                continue
            key = renamed
        _flatten_nested({key: value}, "", numbers, others)


def _flatten_nested(
    record: dict[str, Any],
    prefix: str,
    numbers: dict[str, float | None],
    others: dict[str, Any],
) -> None:
    """:func:`_flatten` below the top level, where no field clashes with a derived column."""
    for key, value in record.items():
        kind = type(value)
        if kind in _NUMERIC:
            numbers[prefix + key] = value
        elif kind is str and (number := numeric_text(value)) is not None:
            numbers[prefix + key] = number
        elif kind in _TEXT:
            others[prefix + key] = value
        elif kind is dict:
            _flatten_nested(value, prefix + key + ".", numbers, others)


def fingerprint(fields: dict[str, Any]) -> bytes | None:
    """The fields as JSON text, or None if orjson cannot write them (ints beyond 64 bits,
    nesting deeper than 254, lone surrogates).

    For what orjson parsed, equal texts mean equal fields: the same names with values equal
    and of equal JSON types (``1``, ``1.0`` and ``true`` are written differently, as are ``0.0``
    and ``-0.0``; ``==`` would confuse them, a lookup does not). Not for what Python's json
    parsed: orjson writes NaN and null alike."""
    try:
        return orjson.dumps(fields)
    except orjson.JSONEncodeError:
        return None


class MetricColumns:
    """The metrics of the rows read so far.

    With every metric wanted (``kept`` None): one dict of numbers (and one of texts) a row.
    With a tuple of top-level metric names: one list a name, read straight from the records,
    with the (row, place in that row) where a name was first met (the column order of the
    full load) and its texts by row.
    """

    def __init__(self, kept: tuple[str, ...] | None) -> None:
        self.kept = kept
        self.numbers: list[dict[str, float | None]] = []
        self.others: list[dict[str, Any]] = []
        self.columns: dict[str, list[Any]] = {name: [] for name in kept or ()}
        self.first_seen: dict[str, tuple[int, int]] = {}
        self.texts: dict[str, dict[int, Any]] = {}

    def add(self, records: list[dict[str, Any]], first_row: int, direct: bool) -> None:
        """The metrics of records that became rows ``first_row`` onwards; ``direct``: orjson
        parsed them (see :meth:`_keep`)."""
        if self.kept is None:
            for record in records:
                numbers: dict[str, float | None] = {}
                others: dict[str, Any] = {}
                _flatten(record, numbers, others)
                self.numbers.append(numbers)
                self.others.append(others)
        else:
            self._keep(records, first_row, direct)

    def add_empty(self) -> None:
        """A row without metrics (a failed run)."""
        if self.kept is None:
            self.numbers.append({})
            self.others.append({})
        else:
            for column in self.columns.values():
                column.append(None)

    def _keep(self, records: list[dict[str, Any]], first_row: int, direct: bool) -> None:
        """The kept metrics of records that became rows ``first_row`` onwards.

        Direct (one list per name, no dict per record) when orjson parsed them and every kept
        value is a number, null or absent; otherwise each record goes through :func:`_flatten`
        as in the full load. Kept names have no dot and are not derived columns, so only the
        record's field of that very name can give the column (a nested dict or a field named
        like a derived column gives dotted names), and the order of such names within a row
        is the record's field order in both paths."""
        columns = self.columns
        first_seen = self.first_seen
        if direct:
            values: dict[str, list[Any]] = {}
            for name in self.kept or ():
                column = [record.get(name) for record in records]
                if not set(map(type, column)) <= _NUMERIC:
                    break
                values[name] = column
            else:
                for name, column in values.items():
                    columns[name].extend(column)
                    if name not in first_seen:
                        for row, record in enumerate(records):
                            if name in record:
                                first_seen[name] = (first_row + row, list(record).index(name))
                                break
                return
        for row, record in enumerate(records, first_row):
            numbers: dict[str, float | None] = {}
            others: dict[str, Any] = {}
            _flatten(record, numbers, others)
            for name, column in columns.items():
                column.append(numbers.get(name))
                if name not in first_seen and name in numbers:
                    first_seen[name] = (row, list(numbers).index(name))
            for name, value in others.items():
                if name in columns:
                    self.texts.setdefault(name, {})[row] = value
