"""Reading the JSON files a user gives and writing every file tune-spec-k writes.

Neither raises for a user's mistake: a file that cannot be read or written becomes a
:class:`~lib.problems.Problem` naming it, so every command reports it the same way (exit 2).

Only regular files are read (:func:`read_file`): a FIFO or a device named like a data file would
otherwise block forever or grow memory without limit.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import orjson

from lib.keys import MISSING
from lib.problems import Problem, Severity

__all__ = [
    "parse_json",
    "read_file",
    "read_json",
    "write_files",
]

#: The deepest nesting of lists and objects read; orjson refuses anything deeper.
MAX_DEPTH = 1024
_BOM = b"\xef\xbb\xbf"
_TOO_DEEP = (
    "invalid-json",
    f"not valid JSON: nested deeper than {MAX_DEPTH} levels of lists and objects",
)


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in a user's words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_file(path: str | os.PathLike[str]) -> tuple[bytes | None, tuple[str, str] | None]:
    """``(the file's bytes, None)``, or ``(None, (rule, message))`` saying why not.

    Only a regular file is read, found by ``os.stat`` (so through symbolic links) before it is
    opened: a FIFO would block the read forever, ``/dev/zero`` or ``/dev/urandom`` would grow
    memory without limit, and opening some devices has side effects. A file swapped for one of
    those between the look and the open is caught too: it is opened without blocking and
    looked at again before a byte is read. A folder, a missing file or one without read
    permission is a problem the same way.
    """
    try:
        status = os.stat(path)
        if not stat.S_ISREG(status.st_mode):
            return None, _not_regular(status.st_mode)
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(descriptor, "rb") as file:
            opened = os.fstat(descriptor).st_mode
            if not stat.S_ISREG(opened):
                return None, _not_regular(opened)
            return file.read(), None
    except OSError as error:
        return None, ("unreadable-file", f"cannot read the file: {error.strerror or error}")


def _not_regular(mode: int) -> tuple[str, str]:
    return "unreadable-file", f"cannot read the file: it is {_kind(mode)}, not a regular file"


def parse_json(raw: bytes) -> tuple[Any, tuple[str, str] | None, bool]:
    """``(value, None, by_orjson)`` for JSON text, else ``(MISSING, (rule, message), False)``.

    orjson first (fast); Python's ``json`` for what orjson refuses: it accepts the ``NaN`` and
    ``Infinity`` that vLLM's ``json.dump`` can write, and names the line and column of a real
    error. ``by_orjson`` says which parser read the value: only Python's ``json`` yields NaN,
    infinities and ints beyond 64 bits.

    A UTF-8 byte order mark (as some Windows editors save) is skipped, by every reader: the
    text after it is read as if it were not there. Lists and objects nested deeper than
    :data:`MAX_DEPTH` levels are refused (orjson's limit), and in a file only Python's ``json``
    reads (NaN, Infinity), deeper than its stack allows (a little under 1000 levels).

    >>> parse_json(b'{"a": NaN}')
    ({'a': nan}, None, False)
    >>> parse_json(b'\\xef\\xbb\\xbf[1]')
    ([1], None, True)
    >>> parse_json(b'[1, 2')[1]
    ('invalid-json', "not valid JSON: Expecting ',' delimiter at line 1 column 6 (a truncated or hand-edited file?)")
    >>> parse_json(b'[' * 2000 + b']' * 2000)[1]
    ('invalid-json', 'not valid JSON: nested deeper than 1024 levels of lists and objects')
    """  # noqa: E501
    text: bytes | memoryview = memoryview(raw)[len(_BOM) :] if raw.startswith(_BOM) else raw
    try:
        return orjson.loads(text), None, True
    except orjson.JSONDecodeError as error:
        if "depth" in error.msg:
            return MISSING, _TOO_DEEP, False
    try:
        return json.loads(bytes(text)), None, False
    except RecursionError:
        # Python's json recurses once per level and runs out of stack below orjson's limit.
        failure = ("invalid-json", "not valid JSON: nested deeper than Python's json can read")
        return MISSING, failure, False
    except UnicodeDecodeError as error:
        return MISSING, ("unreadable-file", f"not UTF-8 text: {error.reason}"), False
    except json.JSONDecodeError as error:
        failure = (
            "invalid-json",
            f"not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
            " (a truncated or hand-edited file?)",
        )
        return MISSING, failure, False


def read_json(path: str | Path) -> tuple[Any, list[Problem]]:
    """The parsed file (:func:`read_file`, :func:`parse_json`), or :data:`~lib.keys.MISSING`
    and the problem saying why not."""
    raw, failure = read_file(path)
    data = MISSING
    if raw is not None:
        data, failure, _ = parse_json(raw)
    if failure is not None:
        rule, message = failure
        return MISSING, [Problem(Severity.ERROR, rule, message, files=(str(path),))]
    return data, []


def write_files(
    files: Sequence[tuple[Path, str]],
    *,
    make_folders: bool = False,
    executable: Collection[Path] = (),
) -> list[Problem]:
    """Write each ``(path, text)`` in order as UTF-8, stopping at the first that fails (its
    problem is returned). ``make_folders`` creates missing parent folders; the files in
    ``executable`` are made runnable (``chmod 755``)."""
    for path, text in files:
        try:
            if make_folders:
                path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            if path in executable:
                path.chmod(0o755)
        except OSError as error:
            reason = f"cannot write the file: {error.strerror or error}"
            shown = error.filename if error.filename is not None else path
            return [Problem(Severity.ERROR, "unwritable-file", reason, files=(str(shown),))]
    return []
