"""Problems found in a sweep: every one is kept, none stops the analysis.

The seed stops at its first error. tune-spec-k collects every problem, each naming the rule,
the cell, the files, the field and the value, so a user fixes a sweep in one pass and the app
can show the rest of the analysis beside them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "Problem",
    "ProblemLog",
    "Severity",
    "errors",
    "printable",
    "show_value",
]

#: What must not reach a terminal as is: C0 and C1 controls (newline, carriage return, tab,
#: ESC...), DEL, the Unicode line and paragraph separators, and lone surrogates (the bytes of a
#: file name that are not UTF-8, as ``os.walk`` and ``sys.argv`` hand them over).
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:
        # A byte that is not UTF-8, carried as a surrogate: shown as the byte it was.
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def printable(text: str) -> str:
    r"""``text`` safe to print as (part of) one line: every control character, line separator
    and lone surrogate becomes a ``repr``-style escape; everything else, backslashes included,
    is left as written, so the ordinary paths and values a user knows print unchanged and
    escaping twice is escaping once.

    A file name can hold any byte but ``/``: without this, a folder named
    ``"x\nerror [forged] ..."`` would print a line of its own, and one that is not UTF-8
    would stop the print with a ``UnicodeEncodeError``.

    >>> printable("a\nerror [x]\tb\x1b[31m")
    'a\\nerror [x]\\tb\\x1b[31m'
    >>> printable("caf\u00e9 \u2028 \udcff")
    'café \\u2028 \\xff'
    >>> printable("plain/path.json")
    'plain/path.json'
    """
    return text if _UNPRINTABLE.search(text) is None else _UNPRINTABLE.sub(_escape, text)


class Severity(StrEnum):
    """How a problem affects the result.

    ``error``: the seed would fail; the CLI writes nothing and exits 2.
    ``warning``: the result stands but deserves a look (e.g. unstable acceptance, not strict).
    ``note``: information the user should know (e.g. K=0 is a server without speculation).
    """

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True)
class Problem:
    """One finding about the input, with everything needed to locate and fix it."""

    severity: Severity
    rule: str
    message: str
    files: tuple[str, ...] = ()
    field: str | None = None
    value: str | None = None
    anchor: int | None = None
    k: int | None = None
    expected: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        """One line for a terminal: severity, rule, where, what, and what was expected.

        The files, field, value and message may come from the user's data (a folder name, a
        field's value): the line is :func:`printable`, so none of them can start a line of its
        own."""
        where = []
        if self.anchor is not None:
            where.append(f"batch size {self.anchor}")
        if self.k is not None:
            where.append(f"K={self.k}")
        parts = [f"{self.severity.value} [{self.rule}]"]
        if where:
            parts.append(", ".join(where) + ":")
        parts.append(self.message)
        details = []
        if self.field is not None:
            details.append(f"field {self.field!r}")
        if self.value is not None:
            details.append(f"value {self.value}")
        if self.expected is not None:
            details.append(f"expected {self.expected}")
        if details:
            parts.append("(" + "; ".join(details) + ")")
        if self.files:
            shown = ", ".join(self.files[:5])
            more = f" and {len(self.files) - 5} more" if len(self.files) > 5 else ""
            parts.append(f"in {shown}{more}")
        return printable(" ".join(parts))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; ``extra`` holds rule-specific numbers."""
        data = asdict(self)
        data["severity"] = self.severity.value
        data["files"] = list(self.files)
        return data


def errors(problems: list[Problem]) -> list[Problem]:
    """The problems that make the seed fail."""
    return [problem for problem in problems if problem.severity is Severity.ERROR]


def show_value(value: object) -> str:
    """A value as a user would recognise it in their file: JSON-like, short."""
    if isinstance(value, str):
        text = repr(value)
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, dict | list):
        # Spelled as in the user's JSON file, not as a Python repr with single quotes.
        text = json.dumps(value, default=str)
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ProblemLog:
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
