"""lib/bulky_lists.py: a large file's per-request lists are replaced as it is read, and nothing
else changes: the expected text is always computed independently, by parsing the whole file
and replacing the lists in the parsed records."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sweep_builder import write_grid

import lib.sweep_files
from lib.bulky_lists import (
    BULKY_ITEMS,
    PLACEHOLDER,
    may_hold_bulky_lists,
    shrink_bulky_lists,
    without_lists,
)
from lib.files import parse_json
from lib.problems import Severity
from lib.schedule import tune
from lib.settings import Settings
from lib.sweeps import load_experiment

PROTECTED = frozenset({"failed", "completed", "max_concurrency"})


def _protected(name: str) -> bool:
    return name in PROTECTED


def _expected(records: Any, record_depth: int) -> Any:
    """The parsed file with every unprotected top-level list of a record replaced if it has
    BULKY_ITEMS items or more."""

    def replaced(record: Any) -> Any:
        if not isinstance(record, dict):
            return record
        return {
            name: PLACEHOLDER
            if type(value) is list and len(value) >= BULKY_ITEMS and not _protected(name)
            else value
            for name, value in record.items()
        }

    if record_depth == 1:
        return replaced(records)
    return [replaced(record) for record in records] if isinstance(records, list) else records


def _chunks(text: bytes, size: int) -> list[bytes]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def _record(rng: random.Random) -> dict[str, Any]:
    requests = rng.choice([0, 5, BULKY_ITEMS - 1, BULKY_ITEMS, 100])
    return {
        "date": "20261130-101500",
        "failed": 0,
        "completed": requests,
        "max_concurrency": [[1, 8, 3]],  # protected: a list the loader would read
        "output_throughput": rng.uniform(100, 200),
        "ttfts": [rng.random() for _ in range(requests)],
        "itls": [[rng.random() for _ in range(rng.randint(0, 4))] for _ in range(requests)],
        "input_lens": [rng.randint(1, 9) for _ in range(requests)],
        "generated_texts": ['a "quoted" ] } [ { \\ text', "\u00e9\u4e2d", ""] * requests,
        "errors": [""] * requests,
        "nested": [{"inner": [1, 2]}, "x", [["deep"]]] * requests,
        "speculative_config": {"method": "ngram", "schedule": [[1, 4, 2]]},
    }


@pytest.mark.parametrize("indent", [None, 4])
@pytest.mark.parametrize("size", [1, 2, 5, 64, 1 << 20])
def test_every_chunking_gives_the_records_with_their_lists_replaced(
    indent: int | None, size: int
) -> None:
    rng = random.Random(size)
    records = [_record(rng) for _ in range(4)]
    text = json.dumps(records, indent=indent).encode()
    shrunk, changed = shrink_bulky_lists(_chunks(text, size), 2, _protected)
    assert changed
    assert orjson.loads(shrunk) == _expected(records, 2)
    # Only the lists' text went: the rest is byte for byte the file's.
    assert shrunk.count(b'"output_throughput"') == 4
    assert len(shrunk) < len(text)


def test_one_record_file_has_its_top_level_lists_replaced() -> None:
    record = _record(random.Random(1))
    text = json.dumps(record, indent=4).encode()
    shrunk, _ = shrink_bulky_lists(_chunks(text, 7), 1, _protected)
    assert orjson.loads(shrunk) == _expected(record, 1)


@pytest.mark.parametrize("damaged", [b"[1,, 2]", b"[1, 2", b'["unterminated]', b"[1] 2]"])
def test_a_damaged_file_still_fails_to_parse(damaged: bytes) -> None:
    text = b'[{"failed": 0, "ttfts": ' + damaged.replace(b"[", b"[" + b"0, " * 70) + b', "n": 1}]'
    assert parse_json(text)[1] is not None
    for size in (1, 3, len(text)):
        shrunk, _ = shrink_bulky_lists(_chunks(text, size), 2, _protected)
        assert parse_json(shrunk)[1] is not None


@pytest.mark.parametrize("special", [b"[NaN, 1]", b"[1, Infinity]", b"[-Infinity]"])
def test_a_list_only_pythons_json_reads_stays_for_it(special: bytes) -> None:
    text = b'[{"failed": 0, "ttfts": ' + special.replace(b"[", b"[" + b"0, " * 70) + b', "n": 1}]'
    for size in (1, 3, len(text)):
        assert shrink_bulky_lists(_chunks(text, size), 2, _protected) == (text, False)


BULKY = "[" + ", ".join(["1"] * BULKY_ITEMS) + "]"


def test_protected_nested_and_short_lists_are_kept() -> None:
    text = f'[{{"failed": {BULKY}, "c": {{"t": {BULKY}}}, "ttfts": {BULKY}, "r": [1]}}]'.encode()
    shrunk, _ = shrink_bulky_lists([text], 2, _protected)
    nulls = orjson.dumps(PLACEHOLDER).decode()
    expected = f'[{{"failed": {BULKY}, "c": {{"t": {BULKY}}}, "ttfts": {nulls}, "r": [1]}}]'
    assert shrunk == expected.encode()


def test_a_field_name_with_escapes_is_read_as_its_text() -> None:
    # "f\u0061iled" is "failed": protected, however the file spells it.
    text = f'[{{"f\\u0061iled": {BULKY}, "t\\"x": {BULKY}}}]'.encode()
    shrunk, _ = shrink_bulky_lists(_chunks(text, 2), 2, _protected)
    assert orjson.loads(shrunk) == [{"failed": [1] * BULKY_ITEMS, 't"x': PLACEHOLDER}]


def test_without_lists_drops_what_reading_replaces() -> None:
    bulky = [1] * BULKY_ITEMS
    record = {"a": bulky, "p": PLACEHOLDER, "failed": bulky, "e": [], "b": 3, "c": {"d": bulky}}
    assert without_lists(record, _protected) == {
        "failed": bulky,
        "e": [],
        "b": 3,
        "c": {"d": bulky},
    }
    for plain in ({"b": 3}, {"short": [1] * (BULKY_ITEMS - 1), "e": []}):
        assert without_lists(plain, _protected) is plain


_JSON_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab"\\[]{}:, \u00e9\n'), max_size=6)
)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["failed", "ttfts", "a", 'q"', "[x"]), children, max_size=4
        )
    ),
    max_leaves=25,
)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    records=st.lists(st.dictionaries(st.text(max_size=4), _JSON, max_size=5), max_size=4),
    indent=st.sampled_from([None, 0, 2]),
    size=st.integers(1, 40),
)
def test_any_json_reads_as_its_parse_with_lists_replaced(
    records: list[dict[str, Any]], indent: int | None, size: int
) -> None:
    text = json.dumps(records, indent=indent).encode()
    shrunk, _ = shrink_bulky_lists(_chunks(text, size), 2, _protected)
    # The whole file's parse by the same parser (it reads integers beyond 64 bits as floats).
    assert orjson.loads(shrunk) == _expected(orjson.loads(text), 2)


# ----------------------------------------------------------------------------- in the loader

#: The loader tests' threshold: files of a few requests take the scanning path.
SMALL_THRESHOLD = 4096


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lib.sweep_files, "SCAN_FROM_BYTES", SMALL_THRESHOLD)


def _bulky_sweep(root: Path, requests: int, keys: str = "nested", **fields: Any) -> Path:
    """A 2x2 sweep whose records carry per-request lists of ``requests`` requests."""
    rng = random.Random(7)
    write_grid(
        root,
        {(1, 0): [100.0, 101, 99], (1, 3): [150.0, 149, 151], (8, 0): [400.0] * 3},
        keys=keys,
        ttfts=[rng.random() for _ in range(requests)],
        itls=[[rng.random() for _ in range(20)] for _ in range(requests)],
        generated_texts=["text"] * requests,
        **fields,
    )
    return root


@pytest.mark.usefixtures("small_threshold")
def test_a_large_sweep_loads_as_if_parsed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = _bulky_sweep(tmp_path / "sweep", requests=80)
    sizes = [path.stat().st_size for path in sweep.glob("*/summary.json")]
    assert min(sizes) >= SMALL_THRESHOLD  # every summary takes the scanning path
    for metrics in (None, ("output_throughput", "failed", "completed", "num_prompts")):
        scanned = load_experiment(sweep, metrics=metrics)
        monkeypatch.setattr(lib.sweep_files, "SCAN_FROM_BYTES", 1 << 62)
        whole = load_experiment(sweep, metrics=metrics)
        monkeypatch.setattr(lib.sweep_files, "SCAN_FROM_BYTES", SMALL_THRESHOLD)
        assert scanned.problems == whole.problems == ()
        assert scanned.runs.columns == whole.runs.columns
        assert scanned.runs.equals(whole.runs)
        assert scanned.runs.height == 9


@pytest.mark.usefixtures("small_threshold")
def test_a_damaged_large_file_names_the_files_own_line(tmp_path: Path) -> None:
    sweep = _bulky_sweep(tmp_path / "sweep", requests=80)
    summary = next(sweep.glob("*/summary.json"))
    text = summary.read_bytes()
    # A comma missing far into the file, after lists the scan replaces.
    place = text.rindex(b'"output_throughput"')
    summary.write_bytes(text[:place] + b'"broken" 1, ' + text[place:])
    line = text[:place].count(b"\n") + 1
    problems = [
        problem for problem in load_experiment(sweep).problems if problem.rule == "invalid-json"
    ]
    assert len(problems) == 1
    assert f"at line {line} column" in problems[0].message


@pytest.mark.usefixtures("small_threshold")
def test_a_run_differing_only_in_its_lists_counts_once_from_large_or_small_files(
    tmp_path: Path,
) -> None:
    sweep = _bulky_sweep(tmp_path / "sweep", requests=80)
    folder = next(sweep.glob("*k3*"))
    summary = folder / "summary.json"
    first = orjson.loads(summary.read_bytes())[0]
    # The same run as a small file of its own, in a copy of the combo folder.
    copy = sweep / (folder.name + "-copy")
    copy.mkdir()
    small = dict(first, ttfts=first["ttfts"][:BULKY_ITEMS], itls=[[]] * BULKY_ITEMS)
    (copy / "run=0.json").write_bytes(orjson.dumps(small))
    assert (copy / "run=0.json").stat().st_size < SMALL_THRESHOLD
    repeated = [
        problem for problem in load_experiment(sweep).problems if problem.rule == "repeated-run"
    ]
    assert [problem.severity for problem in repeated] == [Severity.WARNING]
    assert repeated[0].files == (f"{copy.name}/run=0.json",)


@pytest.mark.usefixtures("small_threshold")
def test_list_fields_the_loader_reads_are_kept_in_a_large_file(tmp_path: Path) -> None:
    """With dotted keys, the K schedule is a top-level list field of every record
    (``"speculative_config.num_speculative_tokens_per_batch_size": [[1, 256, K]]``)."""
    sweep = _bulky_sweep(tmp_path / "sweep", requests=80, keys="dotted")
    assert b'"speculative_config.num_speculative_tokens_per_batch_size": [' in next(
        sweep.glob("*k3*/summary.json")
    ).read_bytes().replace(b"\n", b"").replace(b" " * 4, b"")
    experiment = load_experiment(sweep)
    assert experiment.problems == ()
    assert sorted(experiment.runs.select("anchor", "k").unique().rows()) == [
        (1, 0),
        (1, 3),
        (8, 0),
    ]
    assert experiment.runs.filter(pl.col("k") == 3).height == 3


@pytest.mark.usefixtures("small_threshold")
def test_a_list_setting_of_the_speculative_config_reaches_the_export(tmp_path: Path) -> None:
    """A params file with dotted keys leaves a list-valued speculative setting at the top level
    of every record; the pasted ``--speculative-config`` must carry it as measured."""
    tree = [[0], [0, 0], [1]] * 100
    sweep = _bulky_sweep(
        tmp_path / "sweep", requests=80, keys="dotted", **{"speculative_config.tree": tree}
    )
    result = tune(load_experiment(sweep), Settings())
    assert result.speculative_config()["tree"] == tree


def test_a_record_without_a_dropped_list_is_told_by_its_text() -> None:
    """may_hold_bulky_lists is the shortcut before without_lists: never False for a record
    that without_lists would change."""
    rng = random.Random(3)
    for _ in range(300):
        record: dict[str, Any] = {f"f{number}": number for number in range(rng.randint(0, 70))}
        if rng.random() < 0.7:
            record["list"] = [1] * rng.choice([0, 1, BULKY_ITEMS - 1, BULKY_ITEMS, 200])
        if without_lists(record, _protected) is not record:
            assert may_hold_bulky_lists(orjson.dumps(record))
            assert may_hold_bulky_lists(json.dumps(record).encode())
