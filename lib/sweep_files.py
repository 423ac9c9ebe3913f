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

import gc
import math
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from lib.files import parse_json, read_file
from lib.flags import flag_name
from lib.keys import MISSING, k_at_batch_size, lookup, parse_json_string, top_level_names
from lib.problems import Problem, Severity, show_value
from lib.settings import DEFAULT_K_VAR, GLOBAL_K_VAR, Fields, Settings

__all__ = [
    "DERIVED_COLUMNS",
    "SUMMARY_FILE",
    "WARMUP_FILE",
    "Progress",
    "SweepFiles",
    "read_sweep_files",
]

SUMMARY_FILE = "summary.json"


WARMUP_FILE = "warmup.json"


_RUN_FILE = re.compile(r"^run=(\d+)\.json$")


_FAILURE_FILE = re.compile(r"^run=(\d+)\.failure\.json$")


#: Columns the loader derives; a record field with one of these names is kept as ``record.<name>``.
DERIVED_COLUMNS = (
    "source",
    "position",
    "combo",
    "run_number",
    "failure_file",
    "speculation",
    "anchor",
    "k",
    "global_k",
)


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


def _read_json(path: Path, relative: str, log: _ProblemLog) -> tuple[Any, bool]:
    """(the parsed file, whether orjson parsed it), or (MISSING, False) after logging why it
    could not be read. Only Python's json, the fallback, yields NaN, infinities and ints beyond
    64 bits: the loader takes its exact per-record path for what that parser read. Only a
    regular file is read (:func:`lib.files.read_file`: a FIFO named summary.json would block)."""
    raw, failure = read_file(path)
    if raw is None:
        log.add(*(failure or ("unreadable-file", "cannot read the file")), relative)
        return MISSING, False
    data, failure, by_orjson = parse_json(raw)
    if failure is not None:
        log.add(*failure, relative)
    return data, by_orjson


_NUMERIC = frozenset({float, int, type(None)})


_TEXT = frozenset({str, bool})


_RENAMED = frozenset(name for name, renamed in _TOP_LEVEL_NAMES.items() if renamed is not None)


_SPECULATIVE_PREFIXES = ("speculative_config.", "speculative-config.")


def _flatten(
    record: dict[str, Any],
    numbers: dict[str, float | None],
    others: dict[str, Any],
) -> None:
    """Numeric (and null) fields into ``numbers``, other scalars into ``others``; lists (per
    request latencies, per-position rates, schedules) are not metrics and are skipped.

    Runs on every record, so the common case is three dict comprehensions over exact types (a
    JSON parser makes nothing else; ``bool`` is not ``int`` here); ints stay ints: the Float64
    frame converts them exactly as ``float()`` would (:func:`_frame` handles ints beyond 128
    bits). The rare record with a field named like a derived column takes the slow path."""
    if _RENAMED.isdisjoint(record):
        numbers.update({k: v for k, v in record.items() if type(v) in _NUMERIC})
        numbers.pop("run_number", None)  # the derived column holds it
        others.update({k: v for k, v in record.items() if type(v) in _TEXT})
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
        elif kind in _TEXT:
            others[prefix + key] = value
        elif kind is dict:
            _flatten_nested(value, prefix + key + ".", numbers, others)


def _as_whole_number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


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
        )
        self._config_names = frozenset(top_level_names("speculative_config"))
        self._previous_fingerprint: bytes | None = None
        self._previous_params = _Params(None, None, False, None, ())
        self._previous_fields: tuple[str, ...] | None = None
        self._previous_dotted: tuple[str, ...] = ()

    def _anchor(self, record: dict[str, Any], found: list[_Finding]) -> int | None:
        raw = lookup(record, self.batch_size_var)
        if raw is MISSING:
            found.append(
                (
                    "missing-anchor",
                    "the run has no batch-size field, so it cannot be placed at an anchor",
                    self.batch_size_var,
                    None,
                    "a whole number >= 1 (choose the field with"
                    f" {flag_name(Fields, 'batch_size_var')})",
                )
            )
            return None
        anchor = _as_whole_number(raw)
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
                    "a whole number >= 1",
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
                    f" {flag_name(Settings, 'allow_mixed_global_k')}"
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
                    "a whole number >= 0, or [[lo, hi, K], ...] ranges covering the anchor",
                )
            )
        return k, speculation

    def _global_k(self, record: dict[str, Any], found: list[_Finding]) -> int | None:
        raw = lookup(record, GLOBAL_K_VAR)
        if raw is MISSING or raw is None:
            return None
        global_k = _as_whole_number(raw)
        if global_k is None or global_k < 0:
            found.append(
                (
                    "invalid-global-k",
                    "the global speculative-token count is not a whole number",
                    GLOBAL_K_VAR,
                    show_value(raw),
                    "a whole number >= 1",
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
        params = _Params(anchor, k, speculation, global_k, tuple(found))
        self._previous_fingerprint = fingerprint
        self._previous_params = params
        return params

    def add_records(
        self,
        records: list[Any],
        source: str,
        combo: str,
        run_number: int | None,
        parsed_by_orjson: bool,
    ) -> None:
        """The records of one file: a summary.json's list (``run_number`` None: a record
        without its own ``run_number`` gets its position) or ``[record]`` of a run=N.json
        (``run_number`` N). Records that are not objects are reported and give no row."""
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
            raw = record.get("run_number")
            number = raw if type(raw) is int else _as_whole_number(raw)
            params = self._params(record, parsed_by_orjson)
            if params.findings:
                where = f"{source}[{position}]" if indexed else source
                for rule, message, name, value, expected in params.findings:
                    self.log.add(rule, message, where, field=name, value=value, expected=expected)
            positions(position)
            if number is None:
                number = position if run_number is None else run_number
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
            anchor = _as_whole_number(raw_anchor) if raw_anchor is not MISSING else None
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


def _data_files(root: Path) -> list[tuple[Path, str, str, str]]:
    """(folder, file name, kind, run number) of every file that holds runs, in a stable order.

    kind is ``summary``; ``run`` for run=N.json where the folder has no summary.json;
    ``backup`` for run=N.json beside a summary.json (read only if that summary is unreadable,
    so a damaged summary loses no data); ``failure``; or ``warmup``. Within a folder the
    summary comes first, so the loader knows whether the backups are needed. Folder and name
    stay apart: most entries are backups never read, not worth a Path each.
    """
    found: list[tuple[Path, str, str, str]] = []
    for folder, subfolders, names in os.walk(root):
        subfolders.sort()
        here = Path(folder)
        has_summary = SUMMARY_FILE in names
        if has_summary:
            found.append((here, SUMMARY_FILE, "summary", ""))
        for name in sorted(names):
            run = _RUN_FILE.match(name)
            failure = _FAILURE_FILE.match(name)
            if run:
                found.append((here, name, "backup" if has_summary else "run", run.group(1)))
            elif failure:
                found.append((here, name, "failure", failure.group(1)))
            elif name == WARMUP_FILE:
                found.append((here, name, "warmup", ""))
    return found


def _place_failures(reader: _Reader, failures: list[tuple[int, str]]) -> None:
    """A failure file usually holds no parameters: it belongs to its combo's anchor and K."""
    derived = reader.derived
    anchors, ks = derived["anchor"], derived["k"]
    for row, combo in failures:
        if anchors[row] is not None and ks[row] is not None:
            continue
        for sibling, (sibling_combo, failed) in enumerate(
            zip(derived["combo"], derived["failure_file"], strict=True)
        ):
            if sibling_combo == combo and not failed:
                anchors[row] = anchors[row] or anchors[sibling]
                ks[row] = ks[sibling] if ks[row] is None else ks[row]
                break


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


def read_sweep_files(
    path: str | os.PathLike[str],
    *,
    batch_size_var: str,
    k_var: str,
    progress: Progress | None = None,
    metrics: Collection[str] | None = None,
) -> SweepFiles:
    """Read every run under an experiment folder (see :func:`lib.sweeps.load_experiment` for
    the arguments); never raises for bad input: every problem is in the result.

    The cyclic garbage collector is paused while reading (and restarted if it was running):
    parsed JSON holds no cycles, and otherwise every few thousand new dicts trigger a
    collection that walks all the records read so far.
    """
    if isinstance(metrics, str):
        raise TypeError("metrics must be a collection of metric names, not a str")
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _read(Path(path), str(path), batch_size_var, k_var, progress, metrics)
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
) -> SweepFiles:
    kept: tuple[str, ...] | None = None
    if metrics is not None:
        kept = tuple(dict.fromkeys(name for name in metrics if name not in DERIVED_COLUMNS))
        if any("." in name for name in kept):
            kept = None
    log = _ProblemLog()
    reader = _Reader(batch_size_var, k_var, log, kept)
    if not root.exists():
        log.add("missing-folder", "the experiment folder does not exist", shown_root)
    elif not root.is_dir():
        log.add("not-a-folder", "the experiment path is not a folder", shown_root)
    files = _data_files(root) if root.is_dir() else []
    if root.is_dir() and not any(kind != "warmup" for _, _, kind, _ in files):
        log.add(
            "empty-experiment",
            "no summary.json or run=N.json files anywhere below the folder "
            "(is this the output of `vllm bench sweep serve`?)",
            shown_root,
        )
    # The progress wrapper sees the files read unless a summary is damaged (not the backups),
    # and advances as each is read.
    to_read = [folder / name for folder, name, kind, _ in files if kind != "backup"]
    ticks = iter(progress(to_read)) if progress else None
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
        relative = file_path.relative_to(root).as_posix()
        combo = folder.relative_to(root).as_posix()
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
        data, parsed_by_orjson = _read_json(file_path, relative, log)
        if kind == "summary" and isinstance(data, list):
            summaries_read.add(id(folder))
        if kind == "failure":
            failures.append((reader.add_failure(data, relative, combo, int(run)), combo))
            continue
        if data is MISSING:
            continue
        if kind == "run":
            reader.add_records([data], relative, combo, int(run), parsed_by_orjson)
        elif isinstance(data, list):
            reader.add_records(data, relative, combo, None, parsed_by_orjson)
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
    if ticks is not None:
        # Run the wrapper to its end: a progress bar closes when its iteration finishes.
        for _ in ticks:
            pass
    _place_failures(reader, failures)
    return SweepFiles(
        root=root,
        batch_size_var=batch_size_var,
        k_var=k_var,
        input_files=tuple(input_files),
        problems=tuple(log.problems()),
        speculative_configs=tuple(reader.speculative_configs.values()),
        derived=reader.derived,
        metrics=None if metrics is None else tuple(metrics),
        kept=kept,
        numbers=reader.numbers,
        others=reader.others,
        columns=reader.columns,
        first_seen=reader.first_seen,
        texts=reader.texts,
    )
