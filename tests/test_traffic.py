"""The traffic readers (lib/traffic.py): each format read into the same mix, every refusal
naming the file, the line or JSON field, the value and what was expected."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from paths import REPO

from lib.effective_batch import EFFECTIVE_BATCH_SCHEMA, EffectiveBatch
from lib.traffic import TRAFFIC_RULE, mix_of, read_traffic, sweep_mix

CAPTURE = REPO / "data" / "traffic" / "real-cpu-tiny-ngram"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _range_query(series: list[tuple[str, list[str]]]) -> str:
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {
                        "metric": {"__name__": name, "engine": str(i)},
                        "values": [[1764921600 + j, v] for j, v in enumerate(values)],
                    }
                    for i, (name, values) in enumerate(series)
                ],
            },
        },
        indent=1,
    )


def test_a_range_query_counts_every_point_of_every_engine(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "q.json",
        _range_query(
            [
                ("vllm:num_requests_running", ["0", "1", "1", "4"]),
                ("vllm:num_requests_running", ["4", "4", "2", "0"]),
            ]
        ),
    )
    mix, problems = read_traffic(path)
    assert problems == [] and mix is not None
    # 8 points: two idle (0), two at 1, one at 2, three at 4 -> busy 6: 2/6, 1/6, 3/6.
    assert mix.batch_sizes == (1, 2, 4)
    assert mix.weights == pytest.approx((2 / 6, 1 / 6, 3 / 6))
    assert mix.idle_share == pytest.approx(2 / 8)
    assert mix.samples == 8 and mix.metric == "vllm:num_requests_running"
    assert mix.kind == "prometheus" and mix.given


def test_sglang_gauge_and_a_bare_data_object_are_read(tmp_path: Path) -> None:
    data = json.loads(_range_query([("sglang:num_running_reqs", ["3", "3", "5"])]))["data"]
    mix, problems = read_traffic(_write(tmp_path, "q.json", json.dumps(data)))
    assert problems == [] and mix is not None
    assert mix.batch_sizes == (3, 5) and mix.weights == pytest.approx((2 / 3, 1 / 3))
    assert "SGLang" in mix.description()


def test_weights_csv_adds_repeated_batch_sizes(tmp_path: Path) -> None:
    path = _write(tmp_path, "w.csv", "weight,batch_size\n2,1\n1,8\n1,1\n\n0,16\n")
    mix, problems = read_traffic(path)
    assert problems == [] and mix is not None
    # 1: 2 + 1 = 3, 8: 1, 16: 0 (dropped from the busy mix as a zero weight) -> 3/4, 1/4
    assert mix.batch_sizes == (1, 8) and mix.weights == pytest.approx((0.75, 0.25))
    assert mix.kind == "csv-weights"


def test_samples_csv_weighs_each_sample_by_the_time_it_holds(tmp_path: Path) -> None:
    # 1 holds 0.5 s, 2 holds 1.5 s, 4 holds 1 s, the last 4 the median gap 1 s -> 0.5, 1.5, 2
    path = _write(tmp_path, "s.csv", "timestamp,batch_size\n10,1\n10.5,2\n12,4\n13,4\n")
    mix, problems = read_traffic(path)
    assert problems == [] and mix is not None
    assert mix.batch_sizes == (1, 2, 4)
    assert mix.weights == pytest.approx((0.5 / 4, 1.5 / 4, 2 / 4))
    assert mix.samples == 4 and mix.kind == "csv-samples"


@pytest.mark.parametrize(
    ("name", "text", "field", "value"),
    [
        ("neg.csv", "batch_size,weight\n1,1\n2,-1\n", "line 3: weight", "'-1'"),
        ("frac.csv", "batch_size,weight\n1.5,1\n", "line 2: batch_size", "'1.5'"),
        ("nan.csv", "batch_size,weight\n1,nan\n", "line 2: weight", "'nan'"),
        ("wide.csv", "batch_size,weight\n1,1,1\n", "line 2", "'1,1,1'"),
        ("head.csv", "bs,w\n1,1\n", "line 1: header", "'bs,w'"),
        ("back.csv", "timestamp,batch_size\n5,1\n4,1\n", "line 3: timestamp", "'4'"),
        ("stamp.csv", "timestamp,batch_size\nnoon,1\n", "line 2: timestamp", "'noon'"),
        (
            "name.json",
            _range_query([("vllm:num_requests_waiting", ["1"])]),
            "data.result[0].metric.__name__",
            "'vllm:num_requests_waiting'",
        ),
        (
            "value.json",
            _range_query([("vllm:num_requests_running", ["1", "2.5"])]),
            "data.result[0].values[1][1]",
            "'2.5'",
        ),
        (
            "vector.json",
            '{"status": "success", "data": {"resultType": "vector", "result": []}}',
            "data.resultType",
            "'vector'",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_line_field_and_value(
    tmp_path: Path, name: str, text: str, field: str, value: str
) -> None:
    path = _write(tmp_path, name, text)
    mix, problems = read_traffic(path)
    assert mix is None
    assert [(p.rule, p.files, p.field, p.value) for p in problems] == [
        (TRAFFIC_RULE, (path,), field, value)
    ]
    assert problems[0].expected


def test_only_idle_samples_are_refused(tmp_path: Path) -> None:
    mix, problems = read_traffic(_write(tmp_path, "idle.csv", "batch_size,weight\n0,5\n"))
    assert mix is None and [p.rule for p in problems] == [TRAFFIC_RULE]
    assert "idle" in problems[0].message


def test_a_missing_file_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    mix, problems = read_traffic(str(tmp_path / "none.csv"))
    assert mix is None and problems[0].rule == "unreadable-file"


def test_mix_of_normalises_the_busy_weights() -> None:
    mix = mix_of({0: 2.0, 3: 1.0, 1: 3.0}, "x", "csv-weights", 3)
    assert mix is not None
    assert mix.batch_sizes == (1, 3) and mix.weights == pytest.approx((0.75, 0.25))
    assert mix.idle_share == pytest.approx(2 / 6)
    assert mix_of({0: 1.0}, "x", "csv-weights", 1) is None


def test_the_sweep_mix_is_little_s_law_per_cell_weighted_by_runs() -> None:
    cells = pl.DataFrame(
        {
            "anchor": [1, 1, 8],
            "k": [0, 1, 0],
            "runs": [3, 3, 2],
            "effective_batch": [0.98, 1.0, 7.4],
            "spread": [0.0, 0.0, 0.0],
            "files": [["a"], ["b"], ["c"]],
        },
        schema=EFFECTIVE_BATCH_SCHEMA,
    )
    mix = sweep_mix(EffectiveBatch(cells), [1, 8])
    assert mix is not None and not mix.given
    # 0.98 and 1.0 round to 1 (3 + 3 runs), 7.4 to 7 (2 runs): 6/8, 2/8
    assert mix.batch_sizes == (1, 7) and mix.weights == pytest.approx((0.75, 0.25))
    assert "Little's law" in mix.description()


def test_without_the_fields_the_sweep_mix_is_the_anchors() -> None:
    found = EffectiveBatch(pl.DataFrame(schema=EFFECTIVE_BATCH_SCHEMA), ("request_throughput",))
    mix = sweep_mix(found, [1, 4, 16])
    assert mix is not None and mix.kind == "sweep-anchors"
    assert mix.batch_sizes == (1, 4, 16) and mix.weights == pytest.approx((1 / 3,) * 3)


def test_the_real_capture_reads_the_same_in_both_formats() -> None:
    """The committed capture (data/traffic/real-cpu-tiny-ngram): the JSON assembled from the
    scrapes and the CSV of engine 0's samples hold the same batch sizes; the CSV weighs by
    time held, the JSON by sample, and scrapes 0.5 s apart make the two nearly equal."""
    from_json, problems = read_traffic(str(CAPTURE / "num_requests_running.json"))
    assert problems == [] and from_json is not None
    from_csv, problems = read_traffic(str(CAPTURE / "num_requests_running.csv"))
    assert problems == [] and from_csv is not None
    assert from_json.batch_sizes == from_csv.batch_sizes
    assert max(from_json.batch_sizes) <= 8  # the server's --max-num-seqs 8
    assert from_json.weights == pytest.approx(from_csv.weights, abs=0.02)


def test_the_real_capture_s_idle_share_is_its_zero_samples() -> None:
    """Counted from the CSV's lines here, independently of the reader."""
    lines = (CAPTURE / "num_requests_running.csv").read_text().splitlines()[1:]
    values = [int(line.split(",")[1]) for line in lines]
    mix, problems = read_traffic(str(CAPTURE / "num_requests_running.json"))
    assert problems == [] and mix is not None
    assert mix.samples == len(values)
    assert mix.idle_share == pytest.approx(values.count(0) / len(values))
    busy = [v for v in values if v]
    assert dict(zip(mix.batch_sizes, mix.weights, strict=True)) == pytest.approx(
        {b: busy.count(b) / len(busy) for b in set(busy)}
    )
