"""Reading the JSON files a user gives and writing every file tune-spec-k writes.

Neither raises for a user's mistake: a file that cannot be read or written becomes a
:class:`~lib.problems.Problem` naming it, so every command reports it the same way (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import orjson

from lib.keys import MISSING
from lib.problems import Problem, Severity

__all__ = ["parse_json", "read_json", "write_files"]


def parse_json(raw: bytes) -> tuple[Any, tuple[str, str] | None, bool]:
    """``(value, None, by_orjson)`` for JSON text, else ``(MISSING, (rule, message), False)``.

    orjson first (fast); Python's ``json`` for what orjson refuses: it accepts the ``NaN`` and
    ``Infinity`` that vLLM's ``json.dump`` can write, and names the line and column of a real
    error. ``by_orjson`` says which parser read the value: only Python's ``json`` yields NaN,
    infinities and ints beyond 64 bits.

    >>> parse_json(b'{"a": NaN}')
    ({'a': nan}, None, False)
    >>> parse_json(b'[1, 2')[1]
    ('invalid-json', "not valid JSON: Expecting ',' delimiter at line 1 column 6 (a truncated or hand-edited file?)")
    """  # noqa: E501
    try:
        return orjson.loads(raw), None, True
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(raw), None, False
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
    """The parsed file, or :data:`~lib.keys.MISSING` and the problem saying why not."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        reason = f"cannot read the file: {error.strerror or error}"
        return MISSING, [Problem(Severity.ERROR, "unreadable-file", reason, files=(str(path),))]
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
