"""Finding a field in a `vllm bench serve` record the way the seed does.

The sweep copies serve and bench parameters into every record exactly as the params files
spell them: nested dicts stay nested, dotted keys stay literal keys with dots, values may be
JSON strings, and `-` and `_` are interchangeable in vLLM's argument names.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "LARGEST_WHOLE_NUMBER",
    "MISSING",
    "k_at_batch_size",
    "lookup",
    "parse_json_string",
    "stated_k",
    "whole_number",
    "whole_number_text",
]

#: Sentinel for "the record has no such field" (a present field may hold ``None``).
MISSING: Any = object()

#: The largest batch size, K, run number or schedule bound any command accepts: 2^31 - 1, where
#: vLLM's context-length axis ends its last bucket, and far beyond any batch size or K a server
#: runs. A larger value is a typo or a damaged file; from 2^63 on it would not even fit the
#: tables' 64-bit columns.
LARGEST_WHOLE_NUMBER = 2**31 - 1


def whole_number(value: Any) -> int | None:
    """``value`` as a whole number from 0 to :data:`LARGEST_WHOLE_NUMBER`, else ``None``.

    An int, or a float with no fractional part (``3.0``: JSON writers differ); never a bool
    (``true`` is not 1 here), a string, NaN or an infinity. Callers add their own lower bound
    (a batch size is >= 1).

    >>> whole_number(3), whole_number(3.0), whole_number(True), whole_number(-1)
    (3, 3, None, None)
    >>> whole_number(2**31 - 1), whole_number(2**31), whole_number(1e300)
    (2147483647, None, None)
    """
    if type(value) is int:
        number = value
    elif type(value) is float and value.is_integer():
        number = int(value)
    else:
        return None
    return number if 0 <= number <= LARGEST_WHOLE_NUMBER else None


#: The most digits a whole number up to :data:`LARGEST_WHOLE_NUMBER` has, leading zeros aside.
_MOST_DIGITS = len(str(LARGEST_WHOLE_NUMBER))


def whole_number_text(text: Any) -> int | None:
    """``text`` as a whole number from 0 to :data:`LARGEST_WHOLE_NUMBER` when it is written in
    ASCII digits 0-9 only, else ``None``: the one parser of every text that must be a whole
    number (a JSON object's key, a value in a command line, a run number in a file name).

    Refused: an empty text, a sign, spaces, ``_`` and every other digit ``str.isdigit()``
    takes ("²", which ``int()`` refuses with an error, and "٣", which it reads as 3); a
    number past the limit (read without converting the whole text, so thousands of digits
    cost nothing). Leading zeros are digits like the others ("007" is 7). Not a str: None.

    >>> whole_number_text("63"), whole_number_text("007"), whole_number_text("2147483647")
    (63, 7, 2147483647)
    >>> [whole_number_text(t) for t in ("", "²", "٣", "-1", "+1", " 1", "1_0", "2147483648")]
    [None, None, None, None, None, None, None, None]
    """
    if not (isinstance(text, str) and text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    return whole_number(int(digits)) if len(digits) <= _MOST_DIGITS else None


def stated_k(value: Any) -> int | None:
    """A file's global K (``num_speculative_tokens``, ``max_draft_len``,
    ``configured_global_num_speculative_tokens``): a JSON integer as written, else None (a
    text, a boolean, a float is no K, in every reader). Callers that need a bound apply
    :func:`whole_number` to it.

    >>> stated_k(5), stated_k(5.0), stated_k("5"), stated_k(True), stated_k(2**40)
    (5, None, None, None, 1099511627776)
    """
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# How many names each lookup cache keeps. Loading a sweep looks up six names at most (the
# batch-size and K fields, the global K, speculative_config and their parts), each thousands
# of times: 16 keeps them all, with room for the fields a user tries in the app, so a load
# only misses a name the first time. The bound matters because the app passes whatever is
# typed into its batch-size field: an unbounded cache kept every name typed (about 3 MB per
# distinct 1 MB value), a bounded one keeps the last 16.
_CACHED_NAMES = 16


def parse_json_string(value: Any) -> Any:
    """A string that parses as JSON is replaced by what it parses to; anything else is returned
    unchanged. ``"3"`` becomes ``3`` and ``'{"a": 1}'`` a dict; ``"abc"`` stays ``"abc"``."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            # RecursionError: a string nesting thousands of brackets deep is not a value either.
            return value
    return value


@functools.lru_cache(maxsize=_CACHED_NAMES)
def _spellings(part: str) -> tuple[str, ...]:
    """The part as written, then with every `-` as `_`, then every `_` as `-` (no repeats).
    Cached: the loader looks the same few keys up in every record."""
    spellings = [part]
    for candidate in (part.replace("-", "_"), part.replace("_", "-")):
        if candidate not in spellings:
            spellings.append(candidate)
    return tuple(spellings)


@functools.lru_cache(maxsize=_CACHED_NAMES)
def _path_spellings(key: str) -> tuple[tuple[str, ...], ...]:
    """The spellings of each part of a dotted key."""
    return tuple(_spellings(part) for part in key.split("."))


def lookup(record: Mapping[str, Any], key: str) -> Any:
    """The value of ``key`` in ``record``, or :data:`MISSING`.

    Rule, in order:
    1. ``key`` as a literal key (a params file may contain ``"speculative_config.x"`` verbatim).
    2. ``key`` as a dotted path through nested dicts; each part is tried as written, with `_`
       for `-`, and with `-` for `_`. A JSON string met on the way (a params file that passes
       ``speculative_config`` as a string) is parsed and walked into.
    The value found is itself parsed if it is a JSON string (so ``"3"`` reads as 3).

    >>> record = {"max-concurrency": "8", "speculative_config": '{"num_speculative_tokens": 3}'}
    >>> lookup(record, "max_concurrency")
    8
    >>> lookup(record, "speculative_config.num_speculative_tokens")
    3
    >>> lookup(record, "absent") is MISSING
    True
    """
    for spelling in _spellings(key):
        if spelling in record:
            return parse_json_string(record[spelling])
    node: Any = record
    for part_spellings in _path_spellings(key):
        node = parse_json_string(node)
        # The exact-type test first: the ABC check is slow, and records are plain dicts.
        if type(node) is not dict and not isinstance(node, Mapping):
            return MISSING
        for spelling in part_spellings:
            if spelling in node:
                node = node[spelling]
                break
        else:
            return MISSING
    return parse_json_string(node)


@functools.lru_cache(maxsize=_CACHED_NAMES)
def top_level_names(key: str) -> tuple[str, ...]:
    """The top-level fields :func:`lookup` can read for ``key``: the spellings of the whole key
    (rule 1) and of its first part (rule 2). Everything deeper is reached through the values of
    these fields, so two records whose fields of these names are present alike and hold
    values of the same types and the same contents give the same ``lookup(record, key)``.
    The loader relies on this to look serve and bench params up once per run of equal records.
    """
    names = dict.fromkeys(_spellings(key))
    names.update(dict.fromkeys(_path_spellings(key)[0]))
    return tuple(names)


def k_at_batch_size(value: Any, batch_size: int) -> int | None:
    """The K a record ran with at ``batch_size``, from the K field's value, or ``None`` if the
    value is not a K.

    - A whole number (an int, or a float like ``3.0``) is a static K.
    - A list of ``[lo, hi, K]`` ranges is a schedule: K is the K of the last range whose ``lo``
      is <= ``batch_size``, which is what vLLM's runtime does (gaps and the tail inherit).
      A schedule whose first range starts above ``batch_size`` gives ``None``.
    Booleans, negative numbers, numbers above :data:`LARGEST_WHOLE_NUMBER` and malformed
    schedules give ``None``.

    >>> k_at_batch_size(3, 64), k_at_batch_size([[1, 63, 7], [64, 256, 0]], 64)
    (3, 0)
    >>> k_at_batch_size([[2, 8, 1]], 1) is None
    True
    """
    if isinstance(value, list) and value:
        # The last range in (lo, K) order with lo <= batch_size, in one pass: the loader calls
        # this for every record.
        chosen: tuple[int, int] | None = None
        for entry in value:
            if not (isinstance(entry, list | tuple) and len(entry) == 3):
                return None
            start, k = entry[0], entry[2]
            if type(start) is not int or type(k) is not int:
                return None
            if start <= batch_size and (chosen is None or (start, k) > chosen):
                chosen = (start, k)
        return whole_number(chosen[1]) if chosen is not None else None
    return whole_number(value)
