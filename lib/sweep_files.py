"""Reading the files of a `vllm bench sweep serve` experiment folder into plain columns.

Layout read (see ``docs/formats.md``)::

    EXPERIMENT/[any/depth/]SERVE--<serve>-BENCH--<bench>/
        summary.json            JSON list of run records: the data, where present and current
        run=N.json              one record each: the data where a combo has no summary.json,
                                or where it is damaged or stale (:func:`stale_summary`)
        run=N.failure.json      a failed run: counted, so a sweep with failures never looks healthy
        warmup.json             a warm-up run: never a sample

:func:`read_sweep_files` walks the folder and parses every file, turning its records into rows
(:mod:`lib.rows`; a large sweep in several processes, :mod:`lib.split_read`) and logging every
problem met; it returns :class:`SweepFiles`, plain Python lists and dicts that
:func:`lib.sweeps.load_experiment` turns into the Polars frame. This module imports neither
Polars nor NumPy: the CLI reads a sweep in a second process while the first imports them.
"""

from __future__ import annotations

import functools
import gc
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.bulky_lists import SCAN_FROM_BYTES, shrink_bulky_lists
from lib.files import parse_json, read_file
from lib.keys import LARGEST_WHOLE_NUMBER, MISSING, whole_number, whole_number_text
from lib.problems import Problem, ProblemLog, Severity, printable, show_value
from lib.repeated_runs import RecordFile, run_content
from lib.rows import Rows, place_failures
from lib.server_info import SERVER_INFO_FILE_GLOB
from lib.settings import DERIVED_COLUMNS
from lib.split_read import SPLIT_FROM_BYTES, Part, read_split, split

__all__ = [
    "DERIVED_COLUMNS",
    "SUMMARY_FILE",
    "WARMUP_FILE",
    "Progress",
    "SweepFiles",
    "holds_runs",
    "read_sweep_files",
    "taken_as_input",
]

SUMMARY_FILE = "summary.json"
WARMUP_FILE = "warmup.json"
_RUN_FILE = re.compile(r"^run=([0-9]+)\.json$")
_FAILURE_FILE = re.compile(r"^run=([0-9]+)\.failure\.json$")

Progress = Callable[[Sequence[Path]], Iterable[Path]]
#: The kinds of :func:`_data_files` read only where their folder's summary.json is not.
_BACKUPS = ("backup", "newer")


def _read_json(
    path: Path,
    relative: str,
    log: ProblemLog,
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


def _data_files(
    root: Path, log: ProblemLog, within: Path | None
) -> list[tuple[Path, str, str, str]]:
    """(folder, file name, kind, run number) of every file that holds runs, in a stable order.

    kind is ``summary``; ``run`` for run=N.json where the folder has no summary.json;
    ``backup`` for run=N.json beside a summary.json (read only if that summary is unreadable
    or stale, so a damaged summary loses no data), ``newer`` for one modified after that
    summary.json (:func:`_modified_after`: a sweep stopped between the two writes may have left
    the summary stale, :func:`stale_summary`); ``failure``; or ``warmup``. Within a folder
    the summary comes first, so the loader knows whether the backups are needed. Folder and name
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

    def first_visit(folder: Path) -> int | None:
        """The folder's modification time, or None where it is not to be read."""
        try:
            status = folder.stat()
        except OSError as error:
            unlistable(folder, error)
            return None
        identity = (status.st_dev, status.st_ino)
        earlier = visited.get(identity)
        if earlier is None:
            visited[identity] = shown(folder)
            return status.st_mtime_ns
        log.add(
            "folder-seen-twice",
            f"the same folder as {earlier} (a symbolic link); its runs are read once, there",
            shown(folder),
            severity=Severity.WARNING,
        )
        return None

    root_time = first_visit(root)
    pending = [] if root_time is None else [(root, root_time)]
    while pending:
        here, changed = pending.pop()
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
        first = len(found)
        for name in names:
            run = _RUN_FILE.match(name)
            failure = _FAILURE_FILE.match(name)
            if run:
                found.append((here, name, "backup" if has_summary else "run", run.group(1)))
            elif failure:
                found.append((here, name, "failure", failure.group(1)))
            elif name == WARMUP_FILE:
                found.append((here, name, "warmup", ""))
        backups = [at for at in range(first, len(found)) if found[at][2] == "backup"]
        if backups:
            newer = _modified_after(here, changed, [found[at][1] for at in backups])
            for at in backups:
                if found[at][1] in newer:
                    found[at] = (here, found[at][1], "newer", found[at][3])
        # Checked in name order, so of two ways to one folder the first in that order reads it.
        new_folders = [
            (folder, time) for folder in subfolders if (time := first_visit(folder)) is not None
        ]
        pending.extend(reversed(new_folders))
    return found


def _modified_after(folder: Path, changed: int, names: Sequence[str]) -> set[str]:
    """The files of ``folder`` among ``names`` modified strictly after its summary.json (the
    records are compared only for such a file, :func:`stale_summary`).

    A sweep's run file arrives as a new entry of its folder (vLLM writes a run's file once,
    and skips a run whose file is there), and a new, removed or renamed entry changes the
    folder's time: where that time (``changed``) is not after the summary's, no file is
    stat'ed and none is newer, so a current sweep costs one stat a folder. Else each file is
    stat'ed (in the open folder where the system allows it: a stat of a bare name costs less
    than one of a path's). vLLM writes a combo's summary.json right after its last run file,
    in the same clock tick at times, so an equal time is not after. A file that cannot be
    stat'ed is not (its reading reports it, if it is read); where the summary cannot be, none
    is. Not seen: a run file rewritten in place, by hand, in a folder otherwise untouched."""
    try:
        written = os.stat(folder / SUMMARY_FILE).st_mtime_ns
    except OSError:
        return set()
    if changed <= written:
        return set()
    opened = None
    if os.stat in os.supports_dir_fd:
        try:
            opened = os.open(folder, os.O_RDONLY)
        except OSError:
            return set()
    try:
        after: set[str] = set()
        for name in names:
            try:
                if opened is None:
                    modified = os.stat(folder / name).st_mtime_ns
                else:
                    modified = os.stat(name, dir_fd=opened).st_mtime_ns
            except OSError:
                continue
            if modified > written:
                after.add(name)
        return after
    finally:
        if opened is not None:
            os.close(opened)


def stale_summary(
    summary: Sequence[Any],
    suspects: Sequence[tuple[str, int | None, Any]],
    content: Callable[[dict[str, Any]], bytes],
) -> tuple[str, ...]:
    """Why a combo's summary.json is stale, one reason per run file; empty if it is current.

    vLLM writes each run's run=N.json as the run ends and the combo's summary.json (the list
    of its runs' records) after the last: a sweep run again into the folder and stopped
    before that write leaves an older, valid summary beside newer run files. The rule: the
    summary is stale when a run file of its folder holds a run the summary lacks, one no
    entry of the summary matches: in :func:`lib.repeated_runs.run_content` (``content``) for
    a record, in value for what is no record (a summary may hold a crashed run's text).

    Only ``suspects`` are checked, (file name, run number, its content or
    :data:`~lib.keys.MISSING` if it cannot be read): the run files that may hold such a run,
    those modified after the summary or numbered as none of its entries is
    (:func:`_suspect_runs`); a current summary costs a stat per run file, no parsing. The
    reason says whether the summary has an entry of that number (``differs from``) or none
    (``is not in``); a suspect that cannot be read is a reason too (its reading reports why).
    A suspect the summary holds (a copy that changed the files' times) is none: such a
    summary is current, and nothing is said.

    >>> record = {"run_number": 0, "output_throughput": 1.0}
    >>> stale_summary([record], [("run=0.json", 0, dict(record))], repr)
    ()
    >>> stale_summary([record], [("run=0.json", 0, {"run_number": 0})], repr)
    ('run=0.json differs from its run in summary.json',)
    >>> stale_summary([record, "crashed"], [("run=1.json", 1, "crashed")], repr)
    ()
    >>> stale_summary([record], [("run=1.json", 1, MISSING), ("run=2.json", 2, record)], repr)
    ('run=1.json cannot be read',)
    >>> stale_summary([], [("run=3.json", 3, record)], repr)
    ('run=3.json is not in summary.json',)
    """

    def held(entry: Any) -> bytes:
        return content(entry) if isinstance(entry, dict) else repr(entry).encode()

    summary_holds = {held(entry) for entry in summary}
    numbers = summary_run_numbers(summary)
    reasons: list[str] = []
    for name, number, data in suspects:
        if data is MISSING:
            reasons.append(f"{name} cannot be read")
        elif held(data) not in summary_holds:
            how = "differs from its run in" if number in numbers else "is not in"
            reasons.append(f"{name} {how} {SUMMARY_FILE}")
    return tuple(reasons)


def summary_run_numbers(summary: Sequence[Any]) -> set[int]:
    """The run numbers of a summary.json's entries: each record's ``run_number``, else its
    place in the list (what :class:`lib.rows.Rows` numbers it), and the place of what is no
    record (a crashed run's text: its run file holds the same).

    >>> sorted(summary_run_numbers([{"run_number": 4}, {}, "x", {"run_number": "?"}]))
    [1, 2, 3, 4]
    >>> sorted(summary_run_numbers([{"run_number": [1]}, {"run_number": 0}]))  # not hashable
    [0]
    """
    # Most summaries number every record: then the distinct values are all there is to check.
    given = {
        whole_number(record.get("run_number")) if isinstance(record, dict) else None
        for record in summary
    }
    if None not in given:
        return {number for number in given if number is not None}
    numbers: set[int] = set()
    for position, record in enumerate(summary):
        number = whole_number(record.get("run_number")) if isinstance(record, dict) else None
        numbers.add(position if number is None else number)
    return numbers


def holds_runs(name: str) -> bool:
    """Whether a file of this name holds runs the loader reads: summary.json, run=N.json or
    run=N.failure.json (warmup.json is never a sample).

    >>> holds_runs("summary.json"), holds_runs("run=2.failure.json"), holds_runs("warmup.json")
    (True, True, False)
    """
    return name == SUMMARY_FILE or bool(_RUN_FILE.match(name) or _FAILURE_FILE.match(name))


def taken_as_input(name: str) -> bool:
    """Whether a later read of an experiment takes a file of this name as its input, wherever
    it lies below the folder read: the sweep's data (:func:`holds_runs`), a warm-up run
    (warmup.json, counted) and a saved server config (server_info.json,
    :mod:`lib.server_info`). Any folder may be read as an experiment later, so no command
    writes an output of such a name anywhere (``lib.cli.common.check_outputs``): it would
    replace an input, or be read as one and refuse or change the next tuning.

    Names only, matched exactly (case-sensitive, as the readers match them): ``Summary.json``,
    ``run=.json`` or ``server_info.json.bak`` are not read.

    >>> [taken_as_input(n) for n in ("summary.json", "run=0.json", "run=3.failure.json")]
    [True, True, True]
    >>> [taken_as_input(n) for n in ("warmup.json", "server_info.json", "result.json")]
    [True, True, False]
    >>> [taken_as_input(n) for n in ("Summary.json", "run=.json", "server_info.json.bak")]
    [False, False, False]
    """
    return holds_runs(name) or name in (WARMUP_FILE, SERVER_INFO_FILE_GLOB)


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
    data, _ = _read_json(path, relative, ProblemLog(), depth, protected)
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
    log = ProblemLog()
    files = _files_to_read(root, shown_root, log, within)
    read = functools.partial(_read_part, root=root, reader=(batch_size_var, k_var, kept))
    part: Part | None = None
    if progress is None and processes > 1:
        part = read_split(read, split(files, processes, split_from_bytes))
    if part is None:
        # The progress wrapper sees the files read unless a summary is damaged or stale (not the
        # backups), and advances as each is read.
        to_read = [folder / name for folder, name, kind, _ in files if kind not in _BACKUPS]
        ticks = iter(progress(to_read)) if progress else None
        part = read(files, ticks=ticks)
        if ticks is not None:
            # Run the wrapper to its end: a progress bar closes when its iteration finishes.
            for _ in ticks:
                pass
    # The walk's problems first, then the reading's.
    log.extend(part.problems)
    place_failures(part.derived, part.failures)
    return SweepFiles(
        root=root,
        batch_size_var=batch_size_var,
        k_var=k_var,
        input_files=tuple(part.input_files),
        problems=tuple(log.problems()),
        speculative_configs=tuple(part.speculative_configs.values()),
        compilation_configs=tuple(part.compilation_configs.values()),
        derived=part.derived,
        metrics=None if metrics is None else tuple(metrics),
        kept=kept,
        numbers=part.numbers,
        others=part.others,
        columns=part.columns,
        first_seen=part.first_seen,
        texts=part.texts,
    )


def _files_to_read(
    root: Path, shown_root: str, log: ProblemLog, within: Path | None
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


def _stale_reasons(
    summary: list[Any],
    files: Sequence[tuple[Path, str, str, str]],
    index: int,
    protected: Callable[[str], bool],
) -> tuple[tuple[str, ...], list[int]]:
    """:func:`stale_summary` of the summary.json at ``files[index]`` (its folder's entries
    follow it), and the run numbers of the summary that no run=N.json of the folder has, in
    order (not used where the summary is current)."""
    folder = files[index][0]
    end = index + 1
    while end < len(files) and files[end][0] is folder:
        end += 1
    runs = [(name, kind, run) for _, name, kind, run in files[index + 1 : end] if kind in _BACKUPS]
    if not runs:
        return (), []
    numbers = summary_run_numbers(summary)
    suspects: list[tuple[str, int | None, Any]] = []
    for name, run in _suspect_runs(runs, numbers):
        data, _ = _read_json(folder / name, name, ProblemLog(), 1, protected)
        number = whole_number(data.get("run_number")) if isinstance(data, dict) else None
        suspects.append((name, whole_number_text(run) if number is None else number, data))
    if not suspects:
        return (), []
    reasons = stale_summary(summary, suspects, functools.partial(run_content, protected=protected))
    return reasons, sorted(numbers - {whole_number_text(run) for _, _, run in runs})


def _suspect_runs(
    runs: Sequence[tuple[str, str, str]], numbers: Collection[int]
) -> list[tuple[str, str]]:
    """The run files that may hold a run their summary.json lacks (:func:`stale_summary`):
    of ``runs`` ((file name, kind, run number of the name) of a folder's run=N.json files),
    those modified after the summary (kind ``newer``) and those whose number, as the name
    writes it, is no run of the summary (``numbers``): (file name, run number of the name)
    each. Compared as texts (cheaper than reading each name's number): a name with leading
    zeros (run=007.json) is checked, and found in the summary if it holds that run.

    >>> _suspect_runs([("run=0.json", "backup", "0"), ("run=1.json", "newer", "1"),
    ...                ("run=2.json", "backup", "2"), ("run=01.json", "backup", "01")], {0, 1})
    [('run=1.json', '1'), ('run=2.json', '2'), ('run=01.json', '01')]
    """
    texts = {str(number) for number in numbers}
    return [(name, run) for name, kind, run in runs if kind == "newer" or run not in texts]


def _read_part(
    files: Sequence[tuple[Path, str, str, str]],
    *,
    root: Path,
    reader: tuple[str, str, tuple[str, ...] | None],
    ticks: Iterator[Path] | None = None,
) -> Part:
    """Read ``files`` (whole folders of :func:`_data_files`, in its order) with a new reader."""
    log = ProblemLog()
    batch_size_var, k_var, kept = reader
    read = Rows(batch_size_var, k_var, log, kept)
    input_files: list[str] = []
    failures: list[tuple[int, str]] = []
    # The ids of the folders whose summary.json was read: _data_files gives all the entries of
    # a folder the same Path object, and hashing a Path costs more than the rest of a skip.
    summaries_read: set[int] = set()
    # The ids of the folders whose summary.json is stale: their run files are the data.
    stale: set[int] = set()
    for index, (folder, name, kind, run) in enumerate(files):
        if kind in _BACKUPS and id(folder) in summaries_read:
            continue
        if ticks is not None and kind not in _BACKUPS:
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
        if kind in _BACKUPS:
            if id(folder) not in stale:
                log.add(
                    "summary-replaced-by-runs",
                    "summary.json could not be used, so the run=N.json files beside it were read",
                    relative,
                    severity=Severity.WARNING,
                )
            kind = "run"
        input_files.append(relative)
        number = whole_number_text(run) if run else None
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
            reasons, unfiled = _stale_reasons(data, files, index, read.protected)
            if reasons:
                stale.add(id(folder))
                dropped = (
                    f"; its runs {', '.join(map(str, unfiled))} have no run file and are not used"
                    if unfiled
                    else ""
                )
                log.add(
                    "stale-summary",
                    f"summary.json lacks runs that run files beside it hold"
                    f" ({'; '.join(reasons)}): a sweep stopped before rewriting it? The"
                    f" folder's run=N.json files are read instead{dropped}",
                    combo or ".",
                    severity=Severity.WARNING,
                )
                continue
            summaries_read.add(id(folder))
        if kind == "failure":
            failures.append((read.add_failure(data, relative, combo, number or 0), combo))
            continue
        if data is MISSING:
            continue
        again = functools.partial(
            _records_again, file_path, relative, depth, read.protected, kind == "run"
        )
        file = RecordFile(relative, again)
        if kind == "run":
            read.add_records([data], file, combo, number, parsed_by_orjson, indexed=False)
        elif isinstance(data, list):
            # A problem inside a summary.json names the record, to find the run among many.
            indexed = relative.endswith("/" + SUMMARY_FILE)
            read.add_records(data, file, combo, None, parsed_by_orjson, indexed=indexed)
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
    metrics = read.metrics
    return Part(
        problems=log.entries,
        input_files=input_files,
        failures=failures,
        speculative_configs=read.params.speculative_configs,
        compilation_configs=read.params.compilation_configs,
        derived=read.derived,
        numbers=metrics.numbers,
        others=metrics.others,
        columns=metrics.columns,
        first_seen=metrics.first_seen,
        texts=metrics.texts,
        run_keys=read.repeats.run_keys(),
    )
