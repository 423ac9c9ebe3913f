"""lib/records.py: a record's metrics as columns, every metric (one dict a row) or a few named
ones (one list a name) alike, and its fields as JSON text that tells equal records apart."""

from __future__ import annotations

from typing import Any

from sweep_builder import record

from lib.records import MetricColumns, fingerprint


def _every_metric(records: list[dict[str, Any]]) -> MetricColumns:
    metrics = MetricColumns(None)
    metrics.add(records, 0, direct=True)
    return metrics


def test_nested_fields_are_dotted_and_numeric_texts_are_numbers() -> None:
    metrics = _every_metric(
        [{"a": 1, "b": {"c": "2.5", "d": {"e": None}}, "f": "fast", "g": True, "h": [1, 2]}]
    )
    assert metrics.numbers == [{"a": 1, "b.c": 2.5, "b.d.e": None}]
    # Lists are no metrics; a boolean is never a number.
    assert metrics.others == [{"f": "fast", "g": True}]


def test_a_field_named_like_a_derived_column_is_renamed_and_run_number_is_left_out() -> None:
    metrics = _every_metric([{"anchor": 3, "run_number": 2, "x": "7"}])
    assert metrics.numbers == [{"record.anchor": 3, "x": 7.0}]


def test_kept_metrics_read_directly_or_flattened_give_the_same_columns() -> None:
    records = [record(1, 3, output_throughput=100.0 + number, failed=number) for number in range(3)]
    kept = ("output_throughput", "failed", "absent")
    direct, flattened = MetricColumns(kept), MetricColumns(kept)
    direct.add(records, 5, direct=True)
    flattened.add(records, 5, direct=False)
    assert direct.columns == flattened.columns
    assert direct.columns["absent"] == [None] * 3
    # Where each name was first met orders the columns: the same order either way.
    assert sorted(direct.first_seen, key=direct.first_seen.__getitem__) == sorted(
        flattened.first_seen, key=flattened.first_seen.__getitem__
    )
    # A text among the kept metrics sends the records through the flattening: kept by row.
    texts = MetricColumns(kept)
    texts.add([{"failed": "none"}], 0, direct=True)
    assert (texts.columns["failed"], texts.texts) == ([None], {"failed": {0: "none"}})


def test_a_row_without_metrics_fills_every_kept_column() -> None:
    kept = MetricColumns(("output_throughput",))
    kept.add_empty()
    every = MetricColumns(None)
    every.add_empty()
    assert kept.columns == {"output_throughput": [None]}
    assert (every.numbers, every.others) == ([{}], [{}])


def test_the_fingerprint_tells_json_types_apart() -> None:
    texts = {fingerprint({"x": value}) for value in (1, 1.0, True, 0.0, -0.0)}
    assert len(texts) == 5
    assert fingerprint({"x": 2**64}) is None
