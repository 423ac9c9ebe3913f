"""Reading a large run-record file without building its per-request lists.

``vllm bench serve --save-detailed`` stores one list per request field in every record
(``ttfts``, ``itls``, ``input_lens``, ``output_lens``, ``generated_texts``, ``errors``): a
summary.json of a long sweep reaches hundreds of megabytes, nearly all of it lists that no
decision reads (a list is never a metric, :mod:`lib.records`). Parsed whole, such a file
costs about 6 bytes of memory per byte of text.

:func:`shrink_bulky_lists` reads the text in chunks and writes each long list that is the
value of a record's top-level field as :data:`PLACEHOLDER`: the records keep every field (a
list-valued field is still a list to every rule), and memory stays near the text kept plus the
largest single list, not the file. Two records that differ only in such lists are then the
same run to the loader's repeated-run check, which is why it compares records
:func:`without_lists` whatever the size of their file.

Rules, each checked without trusting the text:

- Only the value of a field at the record's top level is replaced (depth 1 in a run=N.json,
  2 in a summary.json's list); lists inside objects (a ``speculative_config``) are kept, and
  so are lists of fewer than :data:`BULKY_ITEMS` items (per-position acceptance rates).
- A field the loader reads (``protected``: the anchor and K fields, the health counts, the
  metrics asked for) is kept whatever its value.
- A list is replaced only if it is valid JSON on its own: a damaged list stays in the text and
  fails the parse exactly as before, and so do NaN, infinities and integers beyond 64 bits,
  which only the fallback parser reads.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson

__all__ = [
    "BULKY_ITEMS",
    "PLACEHOLDER",
    "SCAN_FROM_BYTES",
    "may_hold_bulky_lists",
    "shrink_bulky_lists",
    "without_lists",
]

#: A list of fewer items is kept (a per-position acceptance rate, a schedule): small, and
#: telling runs apart costs less with it than without it.
BULKY_ITEMS = 64

#: What a bulky list is replaced by: a list of :data:`BULKY_ITEMS` nulls, still a bulky list
#: to every rule (:func:`without_lists` drops it as it drops the list it stands for), in a few
#: hundred bytes.
PLACEHOLDER: list[None] = [None] * BULKY_ITEMS
_PLACEHOLDER_TEXT = orjson.dumps(PLACEHOLDER)

#: Files at least this large are read by :func:`shrink_bulky_lists`; smaller ones are parsed
#: whole. The scan walks every string of the text in Python, about 11x orjson's parse where
#: there is no list to drop (a 1.4 MB summary.json of 625 runs: 78 ms against 7 ms), and below
#: ~40 MB it saves no time where there are lists (``bench_bulky_lists.py --megabytes 8``: 0.06
#: s against 0.04 s whole, 23 MiB against 22); what it saves is memory, about 6 bytes a byte of
#: text (``--megabytes 40``: 30 MiB against 135). From 16 MiB, a parse whole costs ~100 MB.
SCAN_FROM_BYTES = 16 << 20

# A JSON string (its closing quote captured, so that one cut by the end of a chunk is seen), or
# a character that opens or closes a list or an object. Numbers, commas and colons in between
# are skipped by the regular expression engine, not by Python.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*("?)|[\[\]{}]', re.DOTALL)
_LIST_VALUE = re.compile(rb"\s*:\s*\[")
_UNDECIDED = re.compile(rb"\s*(?::\s*)?")
_OPENS = frozenset(b"[{")


def without_lists(record: dict[str, Any], protected: Callable[[str], bool]) -> dict[str, Any]:
    """``record`` without the top-level lists :func:`shrink_bulky_lists` replaces (those of
    :data:`BULKY_ITEMS` items or more whose names are not ``protected``, and so its
    :data:`PLACEHOLDER` too): a record compares the same read either way. The record itself
    is returned when it has no such list.

    >>> record = {"ttfts": [0.5] * 64, "rates": [0.8], "failed": [1] * 64, "n": 3}
    >>> without_lists(record, {"failed"}.__contains__).keys()
    dict_keys(['rates', 'failed', 'n'])
    """
    # Run for every record a sweep holds: the scans are C loops (map, compress), and only the
    # names of lists meet Python code.
    kinds = list(map(type, record.values()))
    if list not in kinds:
        return record
    bulky = [
        name
        for name in itertools.compress(record, map(operator.is_, kinds, itertools.repeat(list)))
        if len(record[name]) >= BULKY_ITEMS and not protected(name)
    ]
    if not bulky:
        return record
    kept = dict(record)
    for name in bulky:
        del kept[name]
    return kept


def may_hold_bulky_lists(text: bytes) -> bool:
    """Whether a record written as JSON text may hold a list :func:`without_lists` drops: one
    of :data:`BULKY_ITEMS` items takes that many commas less one. One byte count, for every
    record read: most records have fewer commas, and skip :func:`without_lists`.

    >>> may_hold_bulky_lists(b'{"rates": [0.8, 0.6], "n": 3}')
    False
    >>> may_hold_bulky_lists(orjson.dumps({"ttfts": [0.5] * BULKY_ITEMS}))
    True
    """
    return text.count(b",") >= BULKY_ITEMS - 1


def shrink_bulky_lists(
    chunks: Iterable[bytes], record_depth: int, protected: Callable[[str], bool]
) -> tuple[bytes, bool]:
    """The JSON text of ``chunks`` with the lists of :data:`BULKY_ITEMS` items or more of
    top-level record fields replaced by :data:`PLACEHOLDER`, and whether any was.

    ``record_depth`` is how deep the records' fields sit: 1 for a file holding one record,
    2 for a list of records. A field whose name is ``protected`` is kept. Text that is not
    valid JSON comes back unchanged where it matters: a list is replaced only if it parses on
    its own, so the caller's parse of the result fails wherever the original's would (though
    it may name another line: parse the original for the message).

    >>> requests = b"[" + b", ".join([b"0.5"] * 64) + b"]"
    >>> text = b'[{"failed": [0], "ttfts": ' + requests + b', "rates": [0.8], "c": {"d": [1]}}]'
    >>> shrunk, replaced = shrink_bulky_lists([text[:30], text[30:]], 2, {"failed"}.__contains__)
    >>> record = orjson.loads(shrunk)[0]
    >>> record["ttfts"] == PLACEHOLDER, record["rates"], record["c"], replaced
    (True, [0.8], {'d': [1]}, True)
    >>> shrink_bulky_lists([b'[{"ttfts": [1,, 2]}]'], 2, {"failed"}.__contains__)
    (b'[{"ttfts": [1,, 2]}]', False)
    """
    scanner = _Scanner(record_depth, protected)
    waiting: list[bytes] = []
    waiting_bytes = 0
    for chunk in chunks:
        waiting.append(chunk)
        waiting_bytes += len(chunk)
        # The text held back (an open list) is scanned again with each feed: feeding at
        # least as much new text as is held keeps the work linear in the file's size.
        if waiting_bytes >= len(scanner.pending):
            scanner.feed(b"".join(waiting), final=False)
            waiting, waiting_bytes = [], 0
    scanner.feed(b"".join(waiting), final=True)
    return b"".join(scanner.out), scanner.shrunk


class _Scanner:
    """The state of :func:`shrink_bulky_lists` between chunks.

    ``pending`` is the text not yet written out: it starts outside any string, at the earliest
    point that may still change (the name of a field whose list is still open, or a token cut
    by the chunk's end), at nesting ``depth``. ``region_end``: how much of ``pending`` is
    already known to hold a field's name and text with no quote or brace after it."""

    def __init__(self, record_depth: int, protected: Callable[[str], bool]) -> None:
        self.record_depth = record_depth
        self.protected = protected
        self.out: list[bytes] = []
        self.pending = b""
        self.depth = 0
        self.region_end = 0
        self.shrunk = False

    def feed(self, chunk: bytes, *, final: bool) -> None:
        text = self.pending + chunk if self.pending else chunk
        view = memoryview(text)
        depth = self.depth
        known_region_end, self.region_end = self.region_end, 0
        emitted = 0  # text[:emitted] is in out
        # Where the next call starts when something is cut off by the chunk's end, and the
        # depth there (the depth at the end when nothing is).
        resume, resume_depth = len(text), -1
        # A list followed token by token: where its field's name and its "[" are, and the
        # depth of its field.
        candidate: tuple[int, int, int] | None = None
        position = 0
        while (match := _TOKEN.search(text, position)) is not None:
            start, position = match.span()
            byte = text[start]
            if byte == 0x22:  # a string
                if match.start(1) == match.end(1):
                    # Unterminated: cut by the chunk's end, or a damaged file the parse reports.
                    resume, resume_depth = start, depth
                    break
                if candidate is not None or depth != self.record_depth:
                    continue
                value = _LIST_VALUE.match(text, position)
                if value is None:
                    if not final and _UNDECIDED.fullmatch(text, position) is not None:
                        # The chunk ends before the field's value begins.
                        resume, resume_depth = start, depth
                        break
                    continue
                if self._protected(text[start:position]):
                    continue
                list_start = value.end() - 1
                # Most of the text is lists of numbers (or of lists of numbers), which hold no
                # quote and no brace, while the field after one starts with a quote and the
                # record's end is a brace: the list ends at the last "]" before the first of
                # those (two byte searches), if orjson reads it so; else it holds strings or
                # objects and is followed token by token.
                search_from = max(list_start, known_region_end if start == 0 else 0)
                region_end = _first(text, (b'"', b"}"), search_from)
                if region_end == len(text) and not final:
                    resume, resume_depth = start, depth
                    self.region_end = region_end - start
                    break
                list_end = text.rfind(b"]", list_start, region_end) + 1
                if not (list_end and _is_bulky(view[list_start:list_end])):
                    # Strings or objects in it: followed token by token to its end.
                    candidate = (start, list_start, depth)
                    continue
                emitted = position = self._replace(view, emitted, list_start, list_end)
            elif byte in _OPENS:
                depth += 1
            else:
                depth -= 1
                if candidate is not None and depth == candidate[2]:
                    list_start = candidate[1]
                    candidate = None
                    if _is_bulky(view[list_start:position]):
                        emitted = self._replace(view, emitted, list_start, position)
        if candidate is not None and candidate[0] < resume:
            # Its list is still open: followed again from its name with the next chunk.
            resume, _, resume_depth = candidate
        if final:
            resume = len(text)
        self.out.append(bytes(view[emitted:resume]))
        self.pending = text[resume:]
        self.depth = depth if resume_depth < 0 else resume_depth

    def _replace(self, view: memoryview, emitted: int, start: int, end: int) -> int:
        """Write out the text from ``emitted`` to the list at ``start``, then the placeholder
        for the list; returns where the text after the list begins (``end``)."""
        self.out += (bytes(view[emitted:start]), _PLACEHOLDER_TEXT)
        self.shrunk = True
        return end

    def _protected(self, name: bytes) -> bool:
        try:
            text = orjson.loads(name)
        except orjson.JSONDecodeError:
            return True  # not a name orjson reads: the field is left to the parse
        return not isinstance(text, str) or self.protected(text)


def _first(text: bytes, needles: tuple[bytes, ...], start: int) -> int:
    """Where the first of ``needles`` is in ``text`` from ``start`` (its length if none is)."""
    found = [text.find(needle, start) for needle in needles]
    return min((place for place in found if place >= 0), default=len(text))


def _is_bulky(text: memoryview) -> bool:
    """Whether ``text`` is one valid JSON list of :data:`BULKY_ITEMS` items or more on its
    own, as orjson reads it (orjson refuses NaN and infinities too: those stay for the
    parse)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return type(value) is list and len(value) >= BULKY_ITEMS
