"""lib/flags.py: a settings dataclass gives its parser, its way back and its command line."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pytest

from lib.flags import (
    add_flags,
    flag,
    flag_name,
    from_arguments,
    given,
    int_list,
    to_arguments,
    whole_number_argument,
)


def _pair(text: str) -> tuple[str, int]:
    key, _, value = text.partition("=")
    return key, int(value)


@dataclass(frozen=True)
class Example:
    name: str = field(default="a", metadata=flag("--name", "a name"))
    runs: int = field(default=3, metadata=flag("--runs", "runs per cell"))
    share: float = field(default=0.1, metadata=flag("--share", "a share", in_seed=False))
    side: Literal["left", "right"] = field(default="left", metadata=flag("--side", "a side"))
    limit: int | None = field(default=None, metadata=flag("--limit", "a limit (default: none)"))
    strict: bool = field(default=False, metadata=flag("--strict", "fail on warnings"))
    ks: tuple[int, ...] = field(default=(0, 1), metadata=flag("--ks", "K to measure"))
    tags: tuple[str, ...] = field(default=(), metadata=flag("--tag", "a tag", repeat=True))
    pairs: Mapping[str, int] = field(
        default_factory=dict, metadata=flag("--pair", "K=V", repeat=True, parse=_pair)
    )
    seed: int = field(default=7, metadata=flag("--seed", "a seed", echo="changed"))
    unflagged: int = 5


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="example")
    add_flags(parser, Example)
    return parser


def test_absent_flags_give_the_defaults() -> None:
    assert from_arguments(Example, _parser().parse_args([])) == Example()
    assert given(Example, _parser().parse_args([])) == {}


def test_each_kind_of_field_parses() -> None:
    arguments = _parser().parse_args(
        [
            "--name",
            "b",
            "--runs",
            "5",
            "--share",
            "0.5",
            "--side",
            "right",
            "--limit",
            "9",
            "--strict",
            "--ks",
            "0,2,4",
            "--tag",
            "x",
            "--tag",
            "y",
            "--pair",
            "a=1",
            "--pair",
            "b=2",
            "--seed",
            "8",
        ]
    )
    assert from_arguments(Example, arguments, unflagged=6) == Example(
        "b", 5, 0.5, "right", 9, True, (0, 2, 4), ("x", "y"), {"a": 1, "b": 2}, 8, 6
    )


@pytest.mark.parametrize(
    "argv",
    [["--runs", "x"], ["--side", "up"], ["--ks", "a,b"], ["--ks", ","], ["--unflagged", "1"]],
)
def test_bad_values_are_argparse_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        _parser().parse_args(argv)
    assert stopped.value.code == 2


def test_help_states_each_default_once_and_marks_additions() -> None:
    text = " ".join(_parser().format_help().split())
    assert "--runs RUNS runs per cell (default: 3)" in text
    assert "--share SHARE (not in the seed) a share (default: 0.1)" in text
    assert "--ks KS K to measure (default: 0,1)" in text
    assert "--limit LIMIT a limit (default: none)" in text  # None: the help says it itself
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "--side {left,right}" in text


def test_to_arguments_gives_the_value_back() -> None:
    changed = Example(name="b", limit=4, strict=True, ks=(0, 2), seed=9)
    arguments = to_arguments(changed, only={"name", "runs", "limit", "strict", "ks", "seed"})
    # Echoed always first (in field order), then the optional and changed ones.
    assert arguments == ["--name=b", "--runs=3", "--ks=0,2", "--limit=4", "--strict", "--seed=9"]
    back = from_arguments(Example, _parser().parse_args(arguments))
    assert back == Example(name="b", limit=4, strict=True, ks=(0, 2), seed=9)
    assert "--seed=7" not in to_arguments(Example())


def test_flag_name_is_the_spelling_on_the_field() -> None:
    assert flag_name(Example, "share") == "--share"
    with pytest.raises(StopIteration):
        flag_name(Example, "absent")


def test_int_list() -> None:
    assert int_list("0,1, 3") == (0, 1, 3)
    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated whole numbers"):
        int_list("1,x")


@pytest.mark.parametrize(
    ("text", "value"),
    [("3", 3), ("-1", -1), ("007", 7), ("-0", 0), (str(2**31 - 1), 2**31 - 1)],
)
def test_a_flags_whole_number_is_ascii_digits_after_an_optional_minus(
    text: str, value: int
) -> None:
    assert whole_number_argument(text) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Issue 38, kind 16: int() read Arabic-Indic and fullwidth 3 as 3 and took " 3", "+3"
        # and "3_0".
        ("\u0663", "expected a whole number"),
        ("\uff13", "expected a whole number"),
        ("\u00b3", "expected a whole number"),
        (" 3", "expected a whole number"),
        ("+3", "expected a whole number"),
        ("3_0", "expected a whole number"),
        ("--3", "expected a whole number"),
        ("", "expected a whole number"),
        (str(2**31), "expected a whole number up to 2147483647"),
        ("-" + "9" * 5000, "expected a whole number up to 2147483647"),
    ],
)
def test_a_flags_whole_number_refuses_anything_else(text: str, expected: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=expected):
        whole_number_argument(text)


@pytest.mark.parametrize("name", ["--max-cudagraph-capture-size", "--max-num-seqs"])
def test_engine_setting_flags_take_every_count_and_nothing_beyond(name: str) -> None:
    """Issue 38: the engine settings have the one limit of every count, 2^31 - 1."""
    from lib.keys import LARGEST_WHOLE_NUMBER
    from lib.settings import DeploySettings

    parser = argparse.ArgumentParser()
    add_flags(parser, DeploySettings)
    parsed = from_arguments(DeploySettings, parser.parse_args([name, str(LARGEST_WHOLE_NUMBER)]))
    assert LARGEST_WHOLE_NUMBER in (parsed.max_cudagraph_capture_size, parsed.max_num_seqs)
    assert parsed.invalid() == []
    for beyond in (str(LARGEST_WHOLE_NUMBER + 1), "1" + "0" * 300):
        with pytest.raises(SystemExit) as stopped:
            parser.parse_args([name, beyond])
        assert stopped.value.code == 2
