"""lib/problems.py: one problem, one line a user can act on."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lib.problems import Problem, Severity, errors, printable, show_value


def test_describe_names_the_rule_the_cell_the_field_the_value_and_the_files() -> None:
    problem = Problem(
        Severity.ERROR,
        "noisy-objective",
        "the runs disagree",
        files=tuple(f"f{i}.json" for i in range(7)),
        field="output_throughput relative MAD",
        value="0.1678",
        anchor=1,
        k=7,
        expected="<= 0.1",
    )
    assert problem.describe() == (
        "error [noisy-objective] batch size 1, K=7: the runs disagree (field 'output_throughput"
        " relative MAD'; value 0.1678; expected <= 0.1) in f0.json, f1.json, f2.json, f3.json,"
        " f4.json and 2 more"
    )


def test_describe_leaves_out_what_is_not_known() -> None:
    assert Problem(Severity.NOTE, "warmup-ignored", "ignored").describe() == (
        "note [warmup-ignored] ignored"
    )


def test_to_json_is_plain_json() -> None:
    problem = Problem(Severity.WARNING, "r", "m", files=("a",), extra={"contenders": [1, 2]})
    data = problem.to_json()
    assert data["severity"] == "warning" and data["files"] == ["a"]
    assert json.loads(json.dumps(data)) == data


def test_errors_keeps_only_errors() -> None:
    found = [Problem(s, "r", "m") for s in (Severity.NOTE, Severity.ERROR, Severity.WARNING)]
    assert errors(found) == [found[1]]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", "'abc'"),
        (None, "null"),
        (True, "true"),
        ({"a": [1]}, '{"a": [1]}'),
        (1.5, "1.5"),
        ("x" * 100, "'" + "x" * 76 + "..."),
    ],
)
def test_values_are_shown_as_in_the_users_file(value: object, shown: str) -> None:
    assert show_value(value) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\nb", "a\\nb"),
        ("a\rb", "a\\rb"),
        ("a\tb", "a\\tb"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("nul\x00", "nul\\x00"),
        ("del\x7f", "del\\x7f"),
        ("next line\x85", "next line\\x85"),
        ("line\u2028separator\u2029", "line\\u2028separator\\u2029"),
        # A byte that is not UTF-8, as os.walk hands it over (surrogateescape).
        (b"bad\xff".decode("utf-8", "surrogateescape"), "bad\\xff"),
        ("\ud800", "\\ud800"),
        # What a user knows prints as they wrote it: accents, braces, quotes, backslashes.
        ('SERVE--{"k": 3}-café\\x', 'SERVE--{"k": 3}-café\\x'),
    ],
)
def test_printable_escapes_what_would_break_a_line(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert printable(shown) == shown  # escaping twice is escaping once
    shown.encode("utf-8")  # prints in any UTF-8 terminal


FORGED = "x\nerror [forged] everything is fine\r\u2028"


@pytest.mark.parametrize(
    "part",
    [
        {"files": (f"SERVE--{FORGED}/summary.json",)},
        {"field": FORGED},
        {"value": FORGED},
        {"expected": FORGED},
        {"message": FORGED},
    ],
)
def test_describe_is_one_line_whatever_the_users_data(part: dict[str, object]) -> None:
    problem = dataclasses.replace(Problem(Severity.ERROR, "noisy-objective", "disagree"), **part)
    line = problem.describe()
    assert len(line.splitlines()) == 1
    assert "x\\nerror [forged] everything is fine\\r\\u2028" in line
