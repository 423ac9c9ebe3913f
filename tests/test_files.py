"""lib/files.py: reading a user's JSON file and writing ours never raise for a user's mistake."""

from __future__ import annotations

import math
from pathlib import Path

from lib.files import parse_json, read_json, write_files
from lib.keys import MISSING


def test_nan_and_infinity_written_by_python_json_are_read() -> None:
    value, failure, by_orjson = parse_json(b'{"a": NaN, "b": -Infinity}')
    assert failure is None and math.isnan(value["a"]) and value["b"] == -math.inf
    assert not by_orjson  # Python's json read it
    assert parse_json(b'{"a": 1}') == ({"a": 1}, None, True)


def test_broken_json_names_the_line_and_column() -> None:
    value, failure, _ = parse_json(b'[\n  {"a": 1},\n  {"a": \n')
    assert value is MISSING
    assert failure is not None and failure[0] == "invalid-json"
    assert "at line 4 column 1" in failure[1]


def test_text_that_is_not_utf8_is_unreadable() -> None:
    value, failure, _ = parse_json(b'{"a": "\xff"}')
    assert value is MISSING and failure is not None and failure[0] == "unreadable-file"


def test_read_json_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text("[1, 2]")
    assert read_json(good) == ([1, 2], [])
    value, problems = read_json(tmp_path / "absent.json")
    assert value is MISSING
    (problem,) = problems
    assert problem.rule == "unreadable-file"
    assert problem.files == (str(tmp_path / "absent.json"),)
    assert "No such file or directory" in problem.message


def test_write_files_writes_in_order_and_stops_at_the_first_failure(tmp_path: Path) -> None:
    first, blocked, last = tmp_path / "a", tmp_path / "no" / "b", tmp_path / "c"
    problems = write_files([(first, "1"), (blocked, "2"), (last, "3")])
    assert first.read_text() == "1" and not last.exists()
    assert [(p.rule, p.files) for p in problems] == [("unwritable-file", (str(blocked),))]


def test_write_files_can_make_folders_and_executables(tmp_path: Path) -> None:
    script, data = tmp_path / "x" / "run.sh", tmp_path / "x" / "y" / "d.json"
    assert write_files([(script, "#!"), (data, "{}")], make_folders=True, executable={script}) == []
    assert script.stat().st_mode & 0o111 and not data.stat().st_mode & 0o111
