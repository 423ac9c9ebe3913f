"""Reading the files of a `vllm bench sweep serve` experiment folder into plain columns.

Layout read (see ``docs/formats.md``)::

    EXPERIMENT/[any/depth/]SERVE--<serve>-BENCH--<bench>/
        summary.json            JSON list of run records: the data, where present
        run=N.json              one record each: the data where a combo has no summary.json
        run=N.failure.json      a failed run: counted, so a sweep with failures never looks healthy
        warmup.json             a warm-up run: never a sample

:func:`read_sweep_files` walks the folder, parses every file and finds each record's anchor and
K, logging every problem met; it returns :class:`SweepFiles`, plain Python lists and dicts that
:func:`lib.sweeps.load_experiment` turns into the Polars frame. This module imports neither
Polars nor NumPy: the CLI reads a sweep in a second process while the first imports them.
"""

from __future__ import annotations

import functools
import gc
import json
import math
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from lib.bulky_lists import (
    SCAN_FROM_BYTES,
    may_hold_bulky_lists,
    shrink_bulky_lists,
    without_lists,
)
from lib.files import parse_json, read_file
from lib.flags import flag_name
from lib.keys import (
    LARGEST_WHOLE_NUMBER,
    MISSING,
    k_at_batch_size,
    lookup,
    parse_json_string,
    top_level_names,
    whole_number,
)
from lib.prefetch import Prefetch
from lib.problems import Problem, Severity, printable, show_value
from lib.settings import (
    DEFAULT_K_VAR,
    DERIVED_COLUMNS,
    GLOBAL_K_VAR,
    HEALTH_FIELDS,
    Fields,
)

__all__ = [
    "DERIVED_COLUMNS",
    "SPLIT_FROM_BYTES",
    "SUMMARY_FILE",
    "WARMUP_FILE",
    "Progress",
    "SweepFiles",
    "holds_runs",
    "read_sweep_files",
]

SUMMARY_FILE = "summary.json"


#: The files' size from which a read in several processes pays (:func:`read_sweep_files`). One
#: reader takes about 160 MB/s (``make_large_sweep.py --runs 500000 --runs-per-cell 625``: 1.1
#: GB of summary.json in 6.8 s) while the CLI's parent imports Polars and NumPy (~0.6 s):
#: below ~100 MB the read ends within the import anyway, and a split would only add forks and
#: pickling (about 0.6 s a process to send 500,000 runs).
SPLIT_FROM_BYTES = 128 * 1024 * 1024


WARMUP_FILE = "warmup.json"


_RUN_FILE = re.compile(r"^run=(\d+)\.json$")


_FAILURE_FILE = re.compile(r"^run=(\d+)\.failure\.json$")


Progress = Callable[[Sequence[Path]], Iterable[Path]]


#: Top-level record fields clashing with a derived column: renamed, or dropped (None) where the
#: derived column already holds the value.
_TOP_LEVEL_NAMES: dict[str, str | None] = {
    name: None if name == "run_number" else "record." + name for name in DERIVED_COLUMNS
}


class _ProblemLog:
    """Collects problems, folding identical findings from many files into one entry."""

    def __init__(self) -> None:
        self._files: dict[tuple[Any, ...], dict[str, None]] = {}

    def add(
        self,
        rule: str,
        message: str,
        file: str,
        *,
        severity: Severity = Severity.ERROR,
        field: str | None = None,
        value: str | None = None,
        expected: str | None = None,
    ) -> None:
        key = (severity, rule, message, field, value, expected)
        self._files.setdefault(key, {})[file] = None

    @property
    def entries(self) -> dict[tuple[Any, ...], dict[str, None]]:
        """Each finding with the files it was met in, in the order first met."""
        return self._files

    def extend(self, entries: dict[tuple[Any, ...], dict[str, None]]) -> None:
        """Add findings logged elsewhere (another log's :attr:`entries`), as if added here in
        their order: a finding already here keeps its place and gains their files."""
        for key, files in entries.items():
            self._files.setdefault(key, {}).update(files)

    def problems(self) -> list[Problem]:
        return [
            Problem(
                severity=severity,
                rule=rule,
                message=message,
                files=tuple(files),
                field=field,
                value=value,
                expected=expected,
            )
            for (severity, rule, message, field, value, expected), files in self._files.items()
        ]


def _read_json(
    path: Path,
    relative: str,
    log: _ProblemLog,
    record_depth: int | None = None,
    protected: Callable[[str], bool] = bool,
) -> tuple[Any, bool]:
    """(the parsed file, whether orjson parsed it), or (MISSING, False) after logging why it
    could not be read. Only Python's json, the fallback, yields NaN, infinities and ints beyond
    64 bits: the loader takes its exact per-record path for what that parser read. Only a
    regular file is read (:func:`lib.files.read_file`: a FIFO named summary.json would block).

    With ``record_depth`` (where the records' fields sit), a large file's per-request lists are
    shrunk as it is read (:mod:`lib.bulky_lists`), except the fields ``protected`` names. If
    that text does not parse, the file is parsed whole for the error, so the line and column
    named are the file's."""
    shrunk = False
    large: Callable[[Iterator[bytes]], bytes] | None = None
    if record_depth is not None:
        depth = record_depth

        def shrink(chunks: Iterator[bytes]) -> bytes:
            nonlocal shrunk
            text, shrunk = shrink_bulky_lists(chunks, depth, protected)
            return text

        large = shrink
    raw, failure = read_file(path, large=large, large_from=SCAN_FROM_BYTES)
    if raw is None:
        log.add(*(failure or ("unreadable-file", "cannot read the file")), relative)
        return MISSING, False
    data, failure, by_orjson = parse_json(raw)
    if failure is not None and shrunk:
        return _read_json(path, relative, log)
    if failure is not None:
        log.add(*failure, relative)
    return data, by_orjson


_NUMERIC = frozenset({float, int, type(None)})


_TEXT = frozenset({str, bool})


_RENAMED = frozenset(name for name, renamed in _TOP_LEVEL_NAMES.items() if renamed is not None)


_SPECULATIVE_PREFIXES = ("speculative_config.", "speculative-config.")
#: The record fields a serve combo's ``compilation_config`` may be under.
_COMPILATION_NAMES = ("compilation_config", "compilation-config")


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


def _speculative_config(record: dict[str, Any]) -> Any:
    """The record's ``speculative_config`` (parsed if a JSON string), or :data:`MISSING`.

    A params file may set the config's fields as literal dotted keys instead
    (``"speculative_config.num_speculative_tokens": 7``, like vLLM's
    ``--speculative-config.num_speculative_tokens``); those are gathered into one dict, so the
    run still counts as speculative and its global K is still checked.
    """
    config = lookup(record, "speculative_config")
    if config is not MISSING:
        return config
    gathered = {
        key.split(".", 1)[1]: parse_json_string(value)
        for key, value in record.items()
        if key.startswith(_SPECULATIVE_PREFIXES)
    }
    return gathered or MISSING


#: A problem found in a record, without the file: (rule, message, field, value, expected).
_Finding = tuple[str, str, str | None, str | None, str | None]


class _Params(NamedTuple):
    """What a record's serve and bench params give, and the problems met finding it."""

    anchor: int | None
    k: int | None
    speculation: bool
    global_k: int | None
    findings: tuple[_Finding, ...]


def _fingerprint(fields: dict[str, Any]) -> bytes | None:
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


#: Measurements that differ from run to run: their values give :func:`_run_key`, the cheap
#: first key by which :meth:`_Reader._repeated` finds the runs a record may repeat.
_RUN_KEY_FIELDS = ("duration", "date", "output_throughput", "mean_ttft_ms", "total_output_tokens")
_SCALARS = frozenset({float, int, str, bool, type(None)})


def _run_key(record: dict[str, Any], finite: bool) -> int:
    """A hash of a few of the record's values: equal for records of equal content (it is
    coarser: different records may share it). ``finite``: the record was parsed by orjson,
    which reads no NaN or infinity.

    What the content leaves out or writes alike keys alike: a value that is not a scalar
    (a list may be a bulky one, which the content drops: it keys like an absent field) and
    a NaN or infinity (orjson writes them as null) key as None.

    >>> one, other = {"duration": 1.5, "date": "x"}, {"date": "x", "duration": 1.5}
    >>> _run_key(one, True) == _run_key(other, False)
    True
    >>> _run_key({"duration": [0.1] * 64}, True) == _run_key({}, True)
    True
    >>> _run_key({"duration": float("nan")}, False) == _run_key({"duration": None}, False)
    True
    """
    values = tuple(map(record.get, _RUN_KEY_FIELDS))
    if not _SCALARS.issuperset(map(type, values)) or not finite:
        values = tuple(
            None
            if type(value) not in _SCALARS or (type(value) is float and not math.isfinite(value))
            else value
            for value in values
        )
    return hash(values)


@dataclass(frozen=True)
class _RecordFile:
    """A file records were read from, and how to read them again: the content of a run is
    worked out only when a later record shares its :func:`_run_key`, and by then its file's
    records have been freed (keeping every record would hold the whole sweep in memory)."""

    source: str
    read_again: Callable[[], list[Any]]


class _Reader:
    """Turns records into rows, logging what cannot be used.

    The derived columns are kept as one list each. The metrics are kept as one dict of
    numbers (and one of texts) a row when every metric is wanted (``kept`` None); with a
    tuple of top-level metric names, as one list a name, read straight from the records.
    """

    def __init__(
        self, batch_size_var: str, k_var: str, log: _ProblemLog, kept: tuple[str, ...] | None
    ) -> None:
        self.batch_size_var = batch_size_var
        self.k_var = k_var
        self.log = log
        self.derived: dict[str, list[Any]] = {name: [] for name in DERIVED_COLUMNS}
        self.speculative_configs: dict[bytes, dict[str, Any]] = {}
        # Each distinct compilation_config a serve combo set (the capture ceiling's source).
        self.compilation_configs: dict[bytes, dict[str, Any]] = {}
        self.kept = kept
        # kept is None: every metric.
        self.numbers: list[dict[str, float | None]] = []
        self.others: list[dict[str, Any]] = []
        # kept is a tuple: a column per name, the (row, place in that row) where a name was
        # first met (the column order of the full load), and its texts by row.
        self.columns: dict[str, list[Any]] = {name: [] for name in kept or ()}
        self.first_seen: dict[str, tuple[int, int]] = {}
        self.texts: dict[str, dict[int, Any]] = {}
        # The lookups read only these top-level fields (and, without a speculative_config, the
        # dotted speculative_config.* fields): records agreeing on them share their params.
        self._names = tuple(
            dict.fromkeys(
                name
                for key in (batch_size_var, "speculative_config", k_var, GLOBAL_K_VAR)
                for name in top_level_names(key)
            )
        ) + tuple(name for name in _COMPILATION_NAMES if name not in top_level_names(k_var))
        self._config_names = frozenset(top_level_names("speculative_config"))
        self._protected = frozenset((*self._names, *HEALTH_FIELDS, "run_number", *(kept or ())))
        self._previous_fingerprint: bytes | None = None
        self._previous_params = _Params(None, None, False, None, ())
        self._previous_fields: tuple[str, ...] | None = None
        self._previous_dotted: tuple[str, ...] = ()
        # What identifies each run read so far (see _repeated): per run key, the first run
        # with it (its file and place), None once its content is in _contents; each content
        # worked out, with the file it was first read from.
        self._first_by_key: dict[int, tuple[_RecordFile, int] | None] = {}
        self._contents: dict[bytes, str] = {}
        self._run_numbers: dict[tuple[str, int | None, int | None, int], str] = {}

    def run_keys(self) -> frozenset[int]:
        """The :func:`_run_key` of every run met so far (a copy's too)."""
        return frozenset(self._first_by_key)

    def protected(self, name: str) -> bool:
        """Whether a top-level field is read by name (the lookups, the health gate, the kept
        metrics), so that its list, if it is one, must not be replaced (:mod:`lib.bulky_lists`).
        """
        return name in self._protected or name.startswith(_SPECULATIVE_PREFIXES)

    def _anchor(self, record: dict[str, Any], found: list[_Finding]) -> int | None:
        raw = lookup(record, self.batch_size_var)
        if raw is MISSING:
            found.append(
                (
                    "missing-anchor",
                    "the run has no batch-size field, so it cannot be placed at an anchor",
                    self.batch_size_var,
                    None,
                    f"a whole number from 1 to {LARGEST_WHOLE_NUMBER} (choose the field with"
                    f" {flag_name(Fields, 'batch_size_var')})",
                )
            )
            return None
        anchor = whole_number(raw)
        if anchor is None or anchor < 1:
            reason = (
                "null: the run was not concurrency-bound and cannot be an anchor"
                if raw is None
                else "not a usable batch size"
            )
            found.append(
                (
                    "invalid-anchor",
                    f"the batch-size field is {reason}",
                    self.batch_size_var,
                    show_value(raw),
                    f"a whole number from 1 to {LARGEST_WHOLE_NUMBER}",
                )
            )
            return None
        return anchor

    def _k(
        self, record: dict[str, Any], anchor: int | None, found: list[_Finding]
    ) -> tuple[int | None, bool]:
        """(K, speculation) for the record; K=0 for a server without speculative_config."""
        speculative_config = _speculative_config(record)
        speculation = speculative_config is not MISSING and speculative_config is not None
        if isinstance(speculative_config, dict):
            key = orjson.dumps(speculative_config, option=orjson.OPT_SORT_KEYS)
            self.speculative_configs.setdefault(key, speculative_config)
        raw = lookup(record, self.k_var)
        if raw is MISSING or raw is None:
            if not speculation:
                return 0, False
            hint = ""
            if self.k_var == DEFAULT_K_VAR and lookup(record, GLOBAL_K_VAR) is not MISSING:
                hint = (
                    "; this sweep seems to vary K statically: try "
                    f"{flag_name(Fields, 'k_var')} {GLOBAL_K_VAR}"
                )
            found.append(
                (
                    "missing-k",
                    "the run has a speculative_config but no K field" + hint,
                    self.k_var,
                    None,
                    "a whole number or a [[lo, hi, K], ...] schedule (choose with"
                    f" {flag_name(Fields, 'k_var')})",
                )
            )
            return None, speculation
        if anchor is None:
            return None, speculation
        k = k_at_batch_size(raw, anchor)
        if k is None:
            found.append(
                (
                    "invalid-k",
                    f"the K field gives no K at batch size {anchor}",
                    self.k_var,
                    show_value(raw),
                    f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}, or [[lo, hi, K], ...]"
                    " ranges covering the anchor",
                )
            )
        return k, speculation

    def _global_k(self, record: dict[str, Any], found: list[_Finding]) -> int | None:
        raw = lookup(record, GLOBAL_K_VAR)
        if raw is MISSING or raw is None:
            return None
        global_k = whole_number(raw)
        if global_k is None or global_k < 0:
            found.append(
                (
                    "invalid-global-k",
                    "the global speculative-token count is not a whole number",
                    GLOBAL_K_VAR,
                    show_value(raw),
                    f"a whole number from 1 to {LARGEST_WHOLE_NUMBER}",
                )
            )
            return None
        return global_k

    def _params(self, record: dict[str, Any], reuse: bool) -> _Params:
        """Anchor, K, speculation and global K of a record, with the problems met.

        The runs of a summary.json share their serve and bench params, so with ``reuse`` (the
        record was parsed by orjson) the lookups are done again only when the top-level
        fields they read differ from the previous record's (see :func:`_fingerprint`);
        otherwise the previous result is returned, its problems included (the caller logs
        them for this record). A record without a ``speculative_config`` field is compared
        on its dotted ``speculative_config.*`` fields too, which :func:`_speculative_config`
        gathers."""
        fingerprint = None
        if reuse:
            fields = {name: record[name] for name in self._names if name in record}
            if self._config_names.isdisjoint(fields):
                names = tuple(record)
                if names != self._previous_fields:
                    self._previous_fields = names
                    self._previous_dotted = tuple(
                        name for name in names if name.startswith(_SPECULATIVE_PREFIXES)
                    )
                fields.update({name: record[name] for name in self._previous_dotted})
            fingerprint = _fingerprint(fields)
            if fingerprint is not None and fingerprint == self._previous_fingerprint:
                return self._previous_params
        found: list[_Finding] = []
        anchor = self._anchor(record, found)
        k, speculation = self._k(record, anchor, found)
        global_k = self._global_k(record, found) if speculation else None
        self._compilation(record)
        params = _Params(anchor, k, speculation, global_k, tuple(found))
        self._previous_fingerprint = fingerprint
        self._previous_params = params
        return params

    def _compilation(self, record: dict[str, Any]) -> None:
        """Keep the record's ``compilation_config`` (a dict, or JSON text of one), once per
        distinct value: the sweep's statement of the CUDA-graph capture settings."""
        for name in _COMPILATION_NAMES:
            config = parse_json_string(record.get(name))
            if isinstance(config, dict):
                key = orjson.dumps(config, option=orjson.OPT_SORT_KEYS)
                self.compilation_configs.setdefault(key, config)
                return

    def _unhealthy(self, record: dict[str, Any], where: str) -> bool:
        """Whether a health field the record has is not a count (logging each one).

        The health gate trusts ``failed``, ``completed`` and ``num_prompts`` to be what vLLM
        writes: whole numbers >= 0. ``"5"``, ``true``, ``[1]``, ``-1`` or null would pass it
        as healthy (a text or a list is no number to compare), so such a run is not used and
        the problem says why. A record without the field is another matter: older benches do
        not write every one, and the gate skips what is absent."""
        unhealthy = False
        for name in HEALTH_FIELDS:
            value = record.get(name, MISSING)
            if value is MISSING or (type(value) is int and 0 <= value <= LARGEST_WHOLE_NUMBER):
                continue
            if whole_number(value) is not None:
                continue
            unhealthy = True
            self.log.add(
                "invalid-health-field",
                "a health field is not a count, so whether the run was healthy is unknown;"
                " the run is not used",
                where,
                field=name,
                value=show_value(value),
                expected=f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}",
            )
        return unhealthy

    def _repeated(
        self,
        record: dict[str, Any],
        file: _RecordFile,
        position: int,
        records: list[Any],
        finite: bool,
        combo: str,
        number: int,
        params: _Params,
    ) -> bool:
        """Whether the run was read already (a warning says where), so it counts once.

        A copied combo folder (``cp -r``), a summary.json copied beside its original, or a
        record listed twice would otherwise count its runs twice, and a cell of 2 runs would
        pass ``--min-runs 3``. The same run is a record with the same content (the same
        fields and values in the same order, as a copy has: :meth:`_content`), or the same run
        number again in one combo folder at the same batch size and K (``params``). Runs of
        other cells are other runs whatever their numbers: a folder holding several cells (one
        summary.json of a whole sweep, as the seed's own test writes it) numbers each cell's
        runs from 0.

        The content is written out only for records that share their :func:`_run_key` with
        an earlier one (a copy does; different runs almost never): then the earlier record's
        content is worked out too, from ``records`` (the file being read, ``position`` is the
        record's place in it) or by reading its file again (:meth:`_resolve`)."""
        key = _run_key(record, finite)
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
            run = (combo, params.anchor, params.k, number)
            earlier = self._run_numbers.get(run)
            if earlier is None:
                self._run_numbers[run] = file.source
                return False
            how = f"run {number} of the folder again, already read from {earlier}"
        self.log.add(
            "repeated-run",
            f"{how}: counted once, from there",
            file.source,
            severity=Severity.WARNING,
        )
        return True

    def _content(self, record: dict[str, Any]) -> bytes:
        """What tells two runs apart: the record's JSON text (:func:`_fingerprint`) without the
        per-request lists a large file's reading replaces, so that a record reads the same
        from any file (:mod:`lib.bulky_lists`)."""
        content = _fingerprint(record)
        if content is None or may_hold_bulky_lists(content):
            record = without_lists(record, self.protected)
            content = _fingerprint(record) or json.dumps(record, default=str).encode()
        return content

    def _resolve(self, file: _RecordFile, records: list[Any] | None) -> None:
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
            key = _run_key(record, finite=False)
            first = first_by_key.get(key)
            if first is not None and first[0] is file and first[1] == position:
                first_by_key[key] = None
                self._contents.setdefault(self._content(record), file.source)

    def add_records(
        self,
        records: list[Any],
        file: _RecordFile,
        combo: str,
        run_number: int | None,
        parsed_by_orjson: bool,
    ) -> None:
        """The records of one file: a summary.json's list (``run_number`` None: a record
        without its own ``run_number`` gets its position) or ``[record]`` of a run=N.json
        (``run_number`` N). Records that are not objects are reported and give no row."""
        source = file.source
        derived = self.derived
        first_row = len(derived["source"])
        # Problems inside a summary.json name the record, so the user finds the run among many.
        indexed = source.endswith("/" + SUMMARY_FILE)
        rows: list[dict[str, Any]] = []
        positions = derived["position"].append
        numbers = derived["run_number"].append
        speculations = derived["speculation"].append
        anchors = derived["anchor"].append
        ks = derived["k"].append
        global_ks = derived["global_k"].append
        for position, record in enumerate(records):
            if not isinstance(record, dict):
                self.log.add(
                    "record-not-object",
                    f"record {position} is not a JSON object",
                    source,
                    value=show_value(record),
                    expected="an object with the fields of a `vllm bench serve` result",
                )
                continue
            where = f"{source}[{position}]" if indexed else source
            if self._unhealthy(record, where):
                continue
            raw = record.get("run_number")
            number = whole_number(raw)
            if number is None:
                number = position if run_number is None else run_number
                if raw is not None:
                    self.log.add(
                        "invalid-run-number",
                        f"the run number is not a usable number; run {number} is used instead"
                        " (from the file name or the record's place in the file)",
                        where,
                        severity=Severity.WARNING,
                        field="run_number",
                        value=show_value(raw),
                        expected=f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}",
                    )
            params = self._params(record, parsed_by_orjson)
            if self._repeated(
                record, file, position, records, parsed_by_orjson, combo, number, params
            ):
                continue
            if params.findings:
                for rule, message, name, value, expected in params.findings:
                    self.log.add(rule, message, where, field=name, value=value, expected=expected)
            positions(position)
            numbers(number)
            speculations(params.speculation)
            anchors(params.anchor)
            ks(params.k)
            global_ks(params.global_k)
            rows.append(record)
        derived["source"].extend([source] * len(rows))
        derived["combo"].extend([combo] * len(rows))
        derived["failure_file"].extend([False] * len(rows))
        if self.kept is None:
            for record in rows:
                numbers_of: dict[str, float | None] = {}
                others: dict[str, Any] = {}
                _flatten(record, numbers_of, others)
                self.numbers.append(numbers_of)
                self.others.append(others)
        else:
            self._keep(rows, first_row, parsed_by_orjson)

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

    def add_failure(self, record: Any, source: str, combo: str, run_number: int) -> int:
        """A failed run: a row with no metrics; anchor and K come from the file if it has
        them, else from the combo's other runs (filled in by the caller). Returns its row."""
        anchor = k = None
        if isinstance(record, dict):
            raw_anchor = lookup(record, self.batch_size_var)
            anchor = whole_number(raw_anchor) if raw_anchor is not MISSING else None
            raw_k = lookup(record, self.k_var)
            if anchor is not None and raw_k is not MISSING:
                k = k_at_batch_size(raw_k, anchor)
        row = {
            "source": source,
            "position": 0,
            "combo": combo,
            "run_number": run_number,
            "failure_file": True,
            "speculation": None,
            "anchor": anchor,
            "k": k,
            "global_k": None,
        }
        for name, value in row.items():
            self.derived[name].append(value)
        if self.kept is None:
            self.numbers.append({})
            self.others.append({})
        else:
            for column in self.columns.values():
                column.append(None)
        return len(self.derived["source"]) - 1


def _data_files(
    root: Path, log: _ProblemLog, within: Path | None
) -> list[tuple[Path, str, str, str]]:
    """(folder, file name, kind, run number) of every file that holds runs, in a stable order.

    kind is ``summary``; ``run`` for run=N.json where the folder has no summary.json;
    ``backup`` for run=N.json beside a summary.json (read only if that summary is unreadable,
    so a damaged summary loses no data); ``failure``; or ``warmup``. Within a folder the
    summary comes first, so the loader knows whether the backups are needed. Folder and name
    stay apart: most entries are backups never read, not worth a Path each. Folders are
    visited depth first, each one's subfolders in name order.

    Nothing below the root vanishes without a word:

    - a folder that cannot be listed (no permission, gone while walking) is a problem naming it;
    - symlinked folders are followed (a sweep assembled from links is still a sweep), but a
      folder reached twice (a link to a sibling, a link back up the tree) is read once, with
      a warning naming both paths;
    - with ``within`` (the dashboard's root), a link that resolves outside it is refused with
      a problem naming the link: nothing outside is listed or read.
    """
    found: list[tuple[Path, str, str, str]] = []
    visited: dict[tuple[int, int], str] = {}
    fence = within.resolve() if within is not None else None

    def shown(path: Path) -> str:
        return printable(path.relative_to(root).as_posix()) if path != root else "."

    def outside(path: Path) -> bool:
        if fence is None:
            return False
        if Path(os.path.realpath(path)).is_relative_to(fence):
            return False
        log.add(
            "outside-root",
            f"a link that leads outside {printable(str(fence))}; not read",
            shown(path),
        )
        return True

    def unlistable(folder: Path, error: OSError) -> None:
        reason = f"cannot list the folder: {error.strerror or error}"
        log.add("unreadable-folder", reason, shown(folder))

    def first_visit(folder: Path) -> bool:
        try:
            status = folder.stat()
        except OSError as error:
            unlistable(folder, error)
            return False
        identity = (status.st_dev, status.st_ino)
        earlier = visited.get(identity)
        if earlier is None:
            visited[identity] = shown(folder)
            return True
        log.add(
            "folder-seen-twice",
            f"the same folder as {earlier} (a symbolic link); its runs are read once, there",
            shown(folder),
            severity=Severity.WARNING,
        )
        return False

    pending = [root] if first_visit(root) else []
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as error:
            unlistable(here, error)
            continue
        names: list[str] = []
        subfolders: list[Path] = []
        for entry in entries:
            if entry.is_symlink() and outside(here / entry.name):
                continue
            try:
                is_folder = entry.is_dir()
            except OSError:
                is_folder = False
            if is_folder:
                subfolders.append(here / entry.name)
            else:
                names.append(entry.name)
        has_summary = SUMMARY_FILE in names
        if has_summary:
            found.append((here, SUMMARY_FILE, "summary", ""))
        for name in names:
            run = _RUN_FILE.match(name)
            failure = _FAILURE_FILE.match(name)
            if run:
                found.append((here, name, "backup" if has_summary else "run", run.group(1)))
            elif failure:
                found.append((here, name, "failure", failure.group(1)))
            elif name == WARMUP_FILE:
                found.append((here, name, "warmup", ""))
        # Checked in name order, so of two ways to one folder the first in that order reads it.
        new_folders = [folder for folder in subfolders if first_visit(folder)]
        pending.extend(reversed(new_folders))
    return found


def holds_runs(name: str) -> bool:
    """Whether a file of this name holds runs the loader reads: summary.json, run=N.json or
    run=N.failure.json (warmup.json is never a sample).

    >>> holds_runs("summary.json"), holds_runs("run=2.failure.json"), holds_runs("warmup.json")
    (True, True, False)
    """
    return name == SUMMARY_FILE or bool(_RUN_FILE.match(name) or _FAILURE_FILE.match(name))


def _place_failures(derived: dict[str, list[Any]], failures: list[tuple[int, str]]) -> None:
    """A failure file usually holds no parameters: it belongs to its combo's anchor and K,
    those of the combo's first run that is not a failure (one pass over the runs, then a
    lookup per failure: a sweep may hold thousands of both)."""
    if not failures:
        return
    anchors, ks = derived["anchor"], derived["k"]
    first_run: dict[str, int] = {}
    for row, (combo, failed) in enumerate(
        zip(derived["combo"], derived["failure_file"], strict=True)
    ):
        if not failed:
            first_run.setdefault(combo, row)
    for row, combo in failures:
        sibling = first_run.get(combo)
        if sibling is None or (anchors[row] is not None and ks[row] is not None):
            continue
        anchors[row] = anchors[row] or anchors[sibling]
        ks[row] = ks[sibling] if ks[row] is None else ks[row]


@dataclass(frozen=True, eq=False)
class SweepFiles:
    """A sweep's files read into plain Python data, what :class:`lib.sweeps.Sweep` is built from
    (picklable, so another process can read them).

    ``derived`` holds one list per :data:`DERIVED_COLUMNS` name, one value per run. The metrics
    are ``numbers`` and ``others`` (one dict of numeric and of other scalar fields per run)
    when every metric was read (``kept`` None); else ``columns`` (a list per kept name),
    ``first_seen`` (the (run, place) where a name was first met: the full load's column order)
    and ``texts`` (the non-numbers met, by run). ``metrics`` is what the caller asked for.
    """

    root: Path
    batch_size_var: str
    k_var: str
    input_files: tuple[str, ...]
    problems: tuple[Problem, ...]
    speculative_configs: tuple[dict[str, Any], ...]
    derived: dict[str, list[Any]]
    metrics: tuple[str, ...] | None
    kept: tuple[str, ...] | None
    numbers: list[dict[str, float | None]]
    others: list[dict[str, Any]]
    columns: dict[str, list[Any]]
    first_seen: dict[str, tuple[int, int]]
    texts: dict[str, dict[int, Any]]
    compilation_configs: tuple[dict[str, Any], ...] = ()


def _records_again(
    path: Path, relative: str, depth: int | None, protected: Callable[[str], bool], single: bool
) -> list[Any]:
    """The records of a file read before, read again as then (its problems are known)."""
    data, _ = _read_json(path, relative, _ProblemLog(), depth, protected)
    if single:
        return [data]
    return data if isinstance(data, list) else []


def read_sweep_files(
    path: str | os.PathLike[str],
    *,
    batch_size_var: str,
    k_var: str,
    progress: Progress | None = None,
    metrics: Collection[str] | None = None,
    within: str | os.PathLike[str] | None = None,
    processes: int = 1,
    split_from_bytes: int = SPLIT_FROM_BYTES,
) -> SweepFiles:
    """Read every run under an experiment folder (see :func:`lib.sweeps.load_experiment` for
    the arguments); never raises for bad input: every problem is in the result.

    With ``processes`` > 1 and no ``progress``, a sweep of at least ``split_from_bytes`` of
    files is read in up to that many processes at once, whole folders each (forked children,
    where :func:`lib.prefetch.worth_forking`; else one after the other here). The result is
    the same as one reader's: where a piece meets a run key another met too (a copied folder
    may repeat runs across pieces), the sweep is read again by one reader.

    The cyclic garbage collector is paused while reading (and restarted if it was running):
    parsed JSON holds no cycles, and otherwise every few thousand new dicts trigger a
    collection that walks all the records read so far.
    """
    if isinstance(metrics, str):
        raise TypeError("metrics must be a collection of metric names, not a str")
    collecting = gc.isenabled()
    gc.disable()
    try:
        fence = Path(within) if within is not None else None
        return _read(
            Path(path),
            str(path),
            batch_size_var,
            k_var,
            progress,
            metrics,
            fence,
            processes,
            split_from_bytes,
        )
    finally:
        # By now the records are freed: the next collection has nothing of theirs to walk.
        if collecting:
            gc.enable()


def _read(
    root: Path,
    shown_root: str,
    batch_size_var: str,
    k_var: str,
    progress: Progress | None,
    metrics: Collection[str] | None,
    within: Path | None,
    processes: int,
    split_from_bytes: int,
) -> SweepFiles:
    kept: tuple[str, ...] | None = None
    if metrics is not None:
        kept = tuple(dict.fromkeys(name for name in metrics if name not in DERIVED_COLUMNS))
        if any("." in name for name in kept):
            kept = None
    log = _ProblemLog()
    files = _files_to_read(root, shown_root, log, within)
    read = functools.partial(_read_part, root=root, reader=(batch_size_var, k_var, kept))
    parts: list[_Part] | None = None
    if progress is None and processes > 1:
        parts = _read_split(read, _split(files, processes, split_from_bytes))
    if parts is None:
        # The progress wrapper sees the files read unless a summary is damaged (not the
        # backups), and advances as each is read.
        to_read = [folder / name for folder, name, kind, _ in files if kind != "backup"]
        ticks = iter(progress(to_read)) if progress else None
        parts = [read(files, ticks=ticks)]
        if ticks is not None:
            # Run the wrapper to its end: a progress bar closes when its iteration finishes.
            for _ in ticks:
                pass
    return _joined(log, parts, root, batch_size_var, k_var, metrics, kept)


def _files_to_read(
    root: Path, shown_root: str, log: _ProblemLog, within: Path | None
) -> list[tuple[Path, str, str, str]]:
    """The experiment folder's files that hold runs (:func:`_data_files`), logging why there
    are none."""
    # Path("") is the working directory: an empty argument must not analyse it silently.
    readable = bool(shown_root) and root.is_dir()
    fenced_out = within is not None and not Path(os.path.realpath(root)).is_relative_to(
        within.resolve()
    )
    if fenced_out:
        readable = False
        log.add("outside-root", f"the folder leads outside {printable(str(within))}", shown_root)
    elif not shown_root:
        log.add("missing-folder", "the experiment path is empty", "''")
    elif not root.exists():
        log.add("missing-folder", "the experiment folder does not exist", shown_root)
    elif not readable:
        log.add("not-a-folder", "the experiment path is not a folder", shown_root)
    files = _data_files(root, log, within) if readable else []
    if readable and not any(kind != "warmup" for _, _, kind, _ in files):
        log.add(
            "empty-experiment",
            "no summary.json or run=N.json files anywhere below the folder "
            "(is this the output of `vllm bench sweep serve`?)",
            shown_root,
        )
    return files


@dataclass(frozen=True, eq=False)
class _Part:
    """What reading some of a sweep's files gave: its rows (numbered from 0), its problems and
    the run keys it met (:func:`_run_key`), by which :func:`_read_split` sees whether another
    part may hold a copy of one of its runs. Plain data, so a forked child can send it."""

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
    run_keys: frozenset[int]


def _read_part(
    files: Sequence[tuple[Path, str, str, str]],
    *,
    root: Path,
    reader: tuple[str, str, tuple[str, ...] | None],
    ticks: Iterator[Path] | None = None,
) -> _Part:
    """Read ``files`` (whole folders of :func:`_data_files`, in its order) with a new reader."""
    log = _ProblemLog()
    batch_size_var, k_var, kept = reader
    read = _Reader(batch_size_var, k_var, log, kept)
    input_files: list[str] = []
    failures: list[tuple[int, str]] = []
    # The ids of the folders whose summary.json was read: _data_files gives all the entries of
    # a folder the same Path object, and hashing a Path costs more than the rest of a skip.
    summaries_read: set[int] = set()
    for folder, name, kind, run in files:
        if kind == "backup" and id(folder) in summaries_read:
            continue
        if ticks is not None and kind != "backup":
            next(ticks, None)
        file_path = folder / name
        relative = printable(file_path.relative_to(root).as_posix())
        combo = printable(folder.relative_to(root).as_posix())
        if kind == "warmup":
            log.add(
                "warmup-ignored",
                "warm-up run ignored: it is not a sample",
                relative,
                severity=Severity.NOTE,
            )
            continue
        if kind == "backup":
            kind = "run"
            log.add(
                "summary-replaced-by-runs",
                "summary.json could not be used, so the run=N.json files beside it were read",
                relative,
                severity=Severity.WARNING,
            )
        input_files.append(relative)
        number = whole_number(int(run)) if run else None
        if run and number is None:
            log.add(
                "invalid-file-name",
                "the run number in the file name is too large; the file is not read",
                relative,
                value=run,
                expected=f"run=N.json with N from 0 to {LARGEST_WHOLE_NUMBER}",
            )
            continue
        depth = 2 if kind == "summary" else 1 if kind == "run" else None
        data, parsed_by_orjson = _read_json(file_path, relative, log, depth, read.protected)
        if kind == "summary" and isinstance(data, list):
            summaries_read.add(id(folder))
        if kind == "failure":
            failures.append((read.add_failure(data, relative, combo, number or 0), combo))
            continue
        if data is MISSING:
            continue
        again = functools.partial(
            _records_again, file_path, relative, depth, read.protected, kind == "run"
        )
        if kind == "run":
            read.add_records([data], _RecordFile(relative, again), combo, number, parsed_by_orjson)
        elif isinstance(data, list):
            read.add_records(data, _RecordFile(relative, again), combo, None, parsed_by_orjson)
        else:
            log.add(
                "summary-not-list",
                "summary.json is not a JSON list of run records",
                relative,
                value=show_value(data),
                expected="a list of `vllm bench serve` records",
            )
        # Free this file's records now, not when the next file's replace them.
        del data
    return _Part(
        problems=log.entries,
        input_files=input_files,
        failures=failures,
        speculative_configs=read.speculative_configs,
        compilation_configs=read.compilation_configs,
        derived=read.derived,
        numbers=read.numbers,
        others=read.others,
        columns=read.columns,
        first_seen=read.first_seen,
        texts=read.texts,
        run_keys=read.run_keys(),
    )


def _file_bytes(entry: tuple[Path, str, str, str], run_file_bytes: list[int]) -> int:
    """A file's size for :func:`_split`; a run=N.json counts as large as the first one met
    (``run_file_bytes`` keeps it), so that a sweep of thousands of them costs one stat, not
    one each. 0 for what is not read or cannot be."""
    folder, name, kind, _ = entry
    if kind in ("backup", "warmup", "failure"):
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


def _split(
    files: list[tuple[Path, str, str, str]], processes: int, from_bytes: int
) -> list[list[tuple[Path, str, str, str]]]:
    """``files`` cut into at most ``processes`` runs of whole folders of about equal bytes,
    or left whole (one piece) when they hold fewer than ``from_bytes``.

    Whole folders, because a folder's runs depend on each other: its run=N.json files are read
    only if its summary.json is not, a failure takes the anchor and K of its folder's runs,
    and a run number repeated within a folder is the same run. A folder is never cut, so a
    sweep whose bytes sit in one folder is one piece. Pieces keep the files' order.

    >>> here = Path("a")
    >>> _split([(here, "summary.json", "summary", "")], 4, 0)  # one folder: one piece
    [[(PosixPath('a'), 'summary.json', 'summary', '')]]
    >>> _split([], 4, 0)
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


def _read_split(
    read: Callable[..., _Part], pieces: list[list[tuple[Path, str, str, str]]]
) -> list[_Part] | None:
    """Each piece read at once, all but the first in forked children (:mod:`lib.prefetch`),
    or None where a piece has a run key another piece also met: a run of one may repeat a run
    of another (a copied folder), which only one reader over both can tell (the caller reads
    the whole sweep so). None for one piece too: there is nothing to split."""
    if len(pieces) < 2:
        return None
    children = [Prefetch.start(functools.partial(read, piece)) for piece in pieces[1:]]
    parts = [read(pieces[0])] + [child.result() for child in children]
    met: set[int] = set()
    for part in parts:
        if not met.isdisjoint(part.run_keys):
            return None
        met |= part.run_keys
    return parts


def _joined(
    log: _ProblemLog,
    parts: list[_Part],
    root: Path,
    batch_size_var: str,
    k_var: str,
    metrics: Collection[str] | None,
    kept: tuple[str, ...] | None,
) -> SweepFiles:
    """The parts read, in order, as one read: rows numbered on from the previous part's, each
    problem and config where it was first met (``log`` holds the walk's problems, met first).
    """
    first, later = parts[0], parts[1:]
    derived, numbers, others = first.derived, first.numbers, first.others
    columns, first_seen, texts = first.columns, first.first_seen, first.texts
    input_files, failures = first.input_files, first.failures
    speculative_configs, compilation_configs = (
        first.speculative_configs,
        first.compilation_configs,
    )
    log.extend(first.problems)
    for part in later:
        offset = len(derived["source"])
        log.extend(part.problems)
        input_files += part.input_files
        failures += [(row + offset, combo) for row, combo in part.failures]
        for key, config in part.speculative_configs.items():
            speculative_configs.setdefault(key, config)
        for key, config in part.compilation_configs.items():
            compilation_configs.setdefault(key, config)
        for name, values in part.derived.items():
            derived[name] += values
        numbers += part.numbers
        others += part.others
        for name, values in part.columns.items():
            columns[name] += values
        for name, (row, place) in part.first_seen.items():
            first_seen.setdefault(name, (row + offset, place))
        for name, by_row in part.texts.items():
            texts.setdefault(name, {}).update({row + offset: text for row, text in by_row.items()})
    _place_failures(derived, failures)
    return SweepFiles(
        root=root,
        batch_size_var=batch_size_var,
        k_var=k_var,
        input_files=tuple(input_files),
        problems=tuple(log.problems()),
        speculative_configs=tuple(speculative_configs.values()),
        compilation_configs=tuple(compilation_configs.values()),
        derived=derived,
        metrics=None if metrics is None else tuple(metrics),
        kept=kept,
        numbers=numbers,
        others=others,
        columns=columns,
        first_seen=first_seen,
        texts=texts,
    )
