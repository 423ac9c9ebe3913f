"""Key lookup in run records (vllm-formats.md section 3) and K at an anchor."""

from __future__ import annotations

import gc
import json
import random
import re
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import SAMPLE_SWEEPS

from lib import keys
from lib.keys import MISSING, k_at_batch_size, lookup, parse_json_string, top_level_names
from lib.settings import DEFAULT_K_VAR, GLOBAL_K_VAR
from lib.sweeps import load_experiment

K_VAR = "speculative_config.num_speculative_tokens_per_batch_size"


def test_parse_json_string() -> None:
    assert parse_json_string("3") == 3
    assert parse_json_string('{"a": 1}') == {"a": 1}
    assert parse_json_string("abc") == "abc"
    assert parse_json_string(4) == 4


def test_literal_key_with_dots_wins_over_the_nested_path() -> None:
    record = {
        "speculative_config.num_speculative_tokens": 5,
        "speculative_config": {"num_speculative_tokens": 7},
    }
    assert lookup(record, "speculative_config.num_speculative_tokens") == 5


def test_dotted_path_walks_nested_dicts() -> None:
    record = {"speculative_config": {"num_speculative_tokens": 7}}
    assert lookup(record, "speculative_config.num_speculative_tokens") == 7


def test_absent_key_is_missing_and_null_is_found() -> None:
    assert lookup({"a": {"b": 1}}, "a.c") is MISSING
    assert lookup({"a": 1}, "a.b") is MISSING
    assert lookup({"a": None}, "a") is None


@pytest.mark.parametrize(
    "record",
    [
        {"speculative-config": {"num-speculative-tokens": 4}},
        {"speculative_config": {"num-speculative-tokens": 4}},
        {"speculative-config": {"num_speculative_tokens": 4}},
    ],
    ids=["all-dashes", "dash-leaf", "dash-root"],
)
def test_dash_and_underscore_spellings_per_part(record: dict[str, object]) -> None:
    assert lookup(record, "speculative_config.num_speculative_tokens") == 4


def test_dash_spelling_of_a_literal_key() -> None:
    assert lookup({"max-concurrency": 8}, "max_concurrency") == 8


def test_json_string_value_is_parsed() -> None:
    assert lookup({"max_concurrency": "16"}, "max_concurrency") == 16
    schedule = [[1, 256, 3]]
    assert lookup({"speculative_config": {"k": json.dumps(schedule)}}, "speculative_config.k") == (
        schedule
    )


def test_json_string_intermediate_dict_is_walked_into() -> None:
    config = {"num_speculative_tokens": 7, "num_speculative_tokens_per_batch_size": [[1, 64, 2]]}
    record = {"speculative_config": json.dumps(config)}
    assert lookup(record, "speculative_config.num_speculative_tokens") == 7
    assert lookup(record, K_VAR) == [[1, 64, 2]]


def test_non_json_string_is_kept_as_is() -> None:
    assert lookup({"label": "fast run"}, "label") == "fast run"


def test_static_k() -> None:
    assert k_at_batch_size(3, 64) == 3
    assert k_at_batch_size(0, 1) == 0
    assert k_at_batch_size(3.0, 64) == 3


@pytest.mark.parametrize("value", [True, False, -1, 2.5, "3", None, {"1-16": 3}, []])
def test_values_that_are_not_a_k(value: object) -> None:
    # bool is an int subclass in Python but never a K; a string must have been parsed already
    assert k_at_batch_size(value, 8) is None


SCHEDULE = [[1, 7, 5], [16, 63, 3], [64, 128, 0]]


@pytest.mark.parametrize(
    ("batch_size", "expected"),
    [
        (1, 5),  # first range
        (7, 5),  # end of the first range
        (8, 5),  # gap 8..15 inherits the previous range's K
        (16, 3),
        (100, 0),
        (500, 0),  # past the last range: the last K
    ],
)
def test_schedule_resolved_at_the_anchor(batch_size: int, expected: int) -> None:
    assert k_at_batch_size(SCHEDULE, batch_size) == expected


def test_schedule_in_any_order_is_sorted_by_start() -> None:
    assert k_at_batch_size(list(reversed(SCHEDULE)), 20) == 3


def test_schedule_starting_above_the_anchor_gives_no_k() -> None:
    assert k_at_batch_size([[8, 64, 3]], 4) is None


@pytest.mark.parametrize(
    "schedule",
    [[[1, 64]], [[1, 64, "3"]], [[True, 64, 3]], [[1, 64, -1]], [3]],
    ids=["two-items", "string-k", "bool-start", "negative-k", "not-a-range"],
)
def test_malformed_schedules_give_no_k(schedule: list[object]) -> None:
    assert k_at_batch_size(schedule, 8) is None


def test_lookups_read_only_the_top_level_names_they_declare() -> None:
    """lib.keys.top_level_names: a record cut down to those names gives the same lookup."""
    generator = random.Random(20261130)
    parts = ["a", "b_c", "b-c", "d"]
    leaves: list[object] = [1, 1.0, True, None, "x", "3", "[1, 2]", '{"d": 4}', [[1, 2, 3]]]

    def value(depth: int) -> object:
        if depth < 2 and generator.random() < 0.4:
            node = {generator.choice(parts): value(depth + 1) for _ in range(3)}
            return json.dumps(node) if generator.random() < 0.2 else node
        return generator.choice(leaves)

    for _ in range(3000):
        names = [".".join(generator.choices(parts, k=generator.randint(1, 3))) for _ in range(5)]
        record_ = {name: value(0) for name in names}
        key = ".".join(generator.choices(parts, k=generator.randint(1, 3)))
        reads = top_level_names(key)
        cut = {name: item for name, item in record_.items() if name in reads}
        assert repr(lookup(record_, key)) == repr(lookup(cut, key)), (record_, key)


def test_names_looked_up_are_not_all_kept() -> None:
    """The app passes whatever is typed into its batch-size field to lookup: the memory kept
    after a thousand distinct long names must be a small part of what they take (a cache that
    keeps every name keeps them all, with their other spellings: several times 10 MB here)."""
    count, length = 1000, 10_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(count):
            # '-', '_' and '.': every spelling differs and the dotted path has two parts.
            name = f"typed-{index}_x.part-{'y' * length}"
            lookup({}, name)
            top_level_names(name)
        del name
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < count * length // 5, f"{kept / 1e6:.1f} MB kept"


def test_loading_sweeps_again_finds_every_name_cached() -> None:
    """The bound leaves room for every name a load looks up: after loading with both K fields
    once, loading with each again computes no spelling anew."""
    caches = (keys._spellings, keys._path_spellings, keys.top_level_names)
    sample = SAMPLE_SWEEPS / "sonnet-like"
    for k_var in (DEFAULT_K_VAR, GLOBAL_K_VAR):
        load_experiment(sample, k_var=k_var)
    misses = [cache.cache_info().misses for cache in caches]
    for k_var in (DEFAULT_K_VAR, GLOBAL_K_VAR):
        load_experiment(sample, k_var=k_var)
    assert [cache.cache_info().misses for cache in caches] == misses


#: Characters ``str.isdigit()`` takes that are not ASCII digits: superscripts (int() refuses
#: them), Arabic-Indic, Extended Arabic-Indic, NKo, Devanagari and Gurmukhi digits, a
#: fullwidth and a mathematical bold digit (int() reads most of these).
DIGITS_OTHER_THAN_ASCII = (
    "\u00b2\u00b3\u00b9\u0663\u06f3\u07c3\u0966\u0967\u0a69\uff10\U0001d7d1\u2460"
)


def _reference_whole_number_text(text: str) -> int | None:
    """The rule, written the other way: a non-empty run of the ten ASCII digits, read by
    ``int`` (in full: the texts drawn are short enough), no larger than the limit."""
    if re.fullmatch(r"[0-9]+", text, flags=re.ASCII) is None:
        return None
    number = int(text)
    return number if number <= keys.LARGEST_WHOLE_NUMBER else None


@settings(max_examples=400, derandomize=True, database=None)
@given(
    st.one_of(
        st.text(),
        st.text(alphabet="0123456789 +-_." + DIGITS_OTHER_THAN_ASCII, max_size=14),
        st.integers(min_value=-(2**40), max_value=2**40).map(str),
        st.integers(min_value=0, max_value=2**31 + 5).map(lambda n: f"{n:012d}"),
    )
)
def test_whole_number_text_reads_ascii_digits_only_and_never_raises(text: str) -> None:
    """Issue 38, kind 16: every reader that tested ``str.isdigit()`` before ``int()`` crashed on
    a superscript ("²": isdigit yes, int no) and read other scripts' digits ("٣" as 3). The one
    parser takes the ten ASCII digits only, up to 2^31 - 1, and returns None for anything else."""
    assert keys.whole_number_text(text) == _reference_whole_number_text(text)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0", 0),
        ("1", 1),
        ("007", 7),
        (str(2**31 - 1), 2**31 - 1),
        ("0" * 5000 + "5", 5),
        (str(2**31), None),
        ("9" * 5000, None),  # past int()'s 4300-digit limit: read without int()
        ("", None),
        ("²", None),
        ("٣", None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1 ", None),
        ("1_000", None),
        ("1.0", None),
    ],
)
def test_whole_number_text_on_both_sides_of_each_rule(text: str, number: int | None) -> None:
    assert keys.whole_number_text(text) == number


@pytest.mark.parametrize("value", [None, 3, 3.0, b"3", ["3"]])
def test_whole_number_text_takes_text_only(value: object) -> None:
    assert keys.whole_number_text(value) is None
