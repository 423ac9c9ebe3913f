"""lib/sweeps.py: an experiment folder as one Polars row per run (docs/formats.md, sections
1-3), read by lib/sweep_files.py."""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
import pytest
from sweep_builder import combo_name, grid, record, write_combo, write_grid, write_json

from lib import repeated_runs, run_params
from lib.problems import Severity
from lib.settings import DERIVED_COLUMNS, GLOBAL_K_VAR
from lib.sweeps import Sweep, load_experiment


def _rules(sweep: Sweep) -> list[str]:
    return [problem.rule for problem in sweep.problems]


def _cells(sweep: Sweep) -> list[tuple[int, int]]:
    return sorted(sweep.runs.select("anchor", "k").rows())


def test_summary_layout(tmp_path: Path) -> None:
    write_grid(tmp_path, grid([1, 64], {0: [100, 101, 99], 3: [150, 151, 149]}))
    sweep = load_experiment(tmp_path)
    assert sweep.problems == ()
    # 2 anchors x 2 K x 3 runs, read from summary.json only
    assert sweep.runs.height == 12
    assert set(sweep.runs["source"]) == {
        f"{combo_name(anchor, k)}/summary.json" for anchor in (1, 64) for k in (0, 3)
    }
    assert _cells(sweep) == [(1, 0)] * 3 + [(1, 3)] * 3 + [(64, 0)] * 3 + [(64, 3)] * 3
    assert sorted(sweep.input_files) == sorted(set(sweep.runs["source"]))


def test_interrupted_sweep_reads_run_files(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 3): [150, 151, 149]}, summary=False)
    sweep = load_experiment(tmp_path)
    assert sweep.problems == ()
    rows = sweep.runs.sort("run_number")
    combo = combo_name(1, 3)
    assert rows["source"].to_list() == [f"{combo}/run={n}.json" for n in range(3)]
    assert rows["output_throughput"].to_list() == [150.0, 151.0, 149.0]
    assert rows["position"].to_list() == [0, 0, 0]


def test_run_number_comes_from_the_file_name_when_the_record_lacks_it(tmp_path: Path) -> None:
    run = record(1, 3)
    del run["run_number"]
    write_json(tmp_path / combo_name(1, 3) / "run=4.json", run)
    assert load_experiment(tmp_path).runs["run_number"].to_list() == [4]


def test_summary_is_preferred_over_run_files_without_double_counting(tmp_path: Path) -> None:
    folder = tmp_path / combo_name(1, 3)
    write_combo(
        folder,
        [record(1, 3, run_number=n, output_throughput=v) for n, v in enumerate([1.0, 2.0, 3.0])],
        summary=False,
    )
    write_combo(
        folder,
        [record(1, 3, run_number=n, output_throughput=v) for n, v in enumerate([7.0, 8.0, 9.0])],
        run_files=False,
    )
    sweep = load_experiment(tmp_path)
    assert sweep.runs["output_throughput"].to_list() == [7.0, 8.0, 9.0]
    assert sweep.input_files == (f"{combo_name(1, 3)}/summary.json",)


def test_summary_columns_source_combo_run_number_position(tmp_path: Path) -> None:
    write_grid(tmp_path / "20260101_120000", {(8, 3): [10, 20, 30]}, run_files=False)
    runs = load_experiment(tmp_path).runs
    combo = f"20260101_120000/{combo_name(8, 3)}"
    assert runs.select("source", "combo", "run_number", "position").rows() == [
        (f"{combo}/summary.json", combo, number, number) for number in range(3)
    ]


def test_combos_at_any_depth(tmp_path: Path) -> None:
    write_grid(tmp_path / "a" / "b" / "c", {(1, 0): [1.0]})
    write_grid(tmp_path / "z", {(2, 0): [2.0]})
    runs = load_experiment(tmp_path).runs.sort("anchor")
    assert runs["combo"].to_list() == [f"a/b/c/{combo_name(1, 0)}", f"z/{combo_name(2, 0)}"]


def test_warmup_is_never_a_sample(tmp_path: Path) -> None:
    for summary in (True, False):
        root = tmp_path / str(summary)
        write_combo(
            root / combo_name(1, 3),
            [record(1, 3, run_number=n) for n in range(3)],
            summary=summary,
            warmup=record(1, 3, run_number=-1, output_throughput=1e9),
        )
        sweep = load_experiment(root)
        assert sweep.runs.height == 3
        assert sweep.runs["output_throughput"].max() == 1000.0
        assert not any("warmup" in file for file in sweep.input_files)
        (note,) = sweep.problems
        assert (note.rule, note.severity) == ("warmup-ignored", Severity.NOTE)


def test_failure_file_is_a_failed_run_at_its_combo(tmp_path: Path) -> None:
    write_combo(
        tmp_path / combo_name(64, 3),
        [record(64, 3, run_number=n) for n in (0, 2)],
        failures={1: {"run_number": 1, "error": "server crashed"}},
    )
    runs = load_experiment(tmp_path).runs.sort("run_number")
    assert runs["failure_file"].to_list() == [False, True, False]
    failed = runs.row(1, named=True)
    assert (failed["anchor"], failed["k"], failed["run_number"]) == (64, 3, 1)
    assert failed["source"] == f"{combo_name(64, 3)}/run=1.failure.json"
    assert failed["output_throughput"] is None


def test_failure_file_with_its_own_parameters(tmp_path: Path) -> None:
    # a combo whose only run failed: anchor and K come from the failure record itself
    write_combo(tmp_path / combo_name(8, 2), [], summary=False, failures={0: record(8, 2)})
    runs = load_experiment(tmp_path).runs
    assert runs.select("failure_file", "anchor", "k").rows() == [(True, 8, 2)]


def test_server_without_speculation_is_k0(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0]}, spec="none")
    sweep = load_experiment(tmp_path)
    assert sweep.problems == ()
    row = sweep.runs.row(0, named=True)
    assert (row["k"], row["speculation"], row["global_k"]) == (0, False, None)


@pytest.mark.parametrize("keys", ["nested", "dotted", "json-string"])
def test_key_spellings_give_the_same_anchor_k_and_global(tmp_path: Path, keys: str) -> None:
    write_grid(tmp_path, {(1, 0): [100.0], (64, 3): [150.0]}, keys=keys)
    sweep = load_experiment(tmp_path)
    assert sweep.problems == ()
    assert sweep.runs.sort("anchor").select("anchor", "k", "speculation", "global_k").rows() == [
        (1, 0, True, 7),
        (64, 3, True, 7),
    ]


def test_speculative_config_is_gathered_from_dotted_keys(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 3): [1.0]}, keys="dotted")
    (config,) = load_experiment(tmp_path).speculative_configs
    assert config["method"] == "eagle3"
    assert config["num_speculative_tokens"] == 7


def test_json_string_values(tmp_path: Path) -> None:
    run = record(16, 0, spec={}, max_concurrency="16")
    run["speculative_config"] = {
        "num_speculative_tokens": "7",
        "num_speculative_tokens_per_batch_size": json.dumps([[1, 8, 5], [9, 256, 2]]),
    }
    write_combo(tmp_path / "SERVE--s-BENCH--c16", [run])
    sweep = load_experiment(tmp_path)
    assert sweep.problems == ()
    assert sweep.runs.select("anchor", "k", "global_k").rows() == [(16, 2, 7)]


def test_schedule_valued_k_is_resolved_at_each_anchor(tmp_path: Path) -> None:
    schedule = {"num_speculative_tokens": 7, "num_speculative_tokens_per_batch_size": None}
    schedule["num_speculative_tokens_per_batch_size"] = [[1, 7, 5], [16, 63, 3], [64, 256, 0]]
    for anchor in (1, 8, 16, 300):
        write_combo(tmp_path / f"SERVE--s-BENCH--c{anchor}", [record(anchor, 0, spec=schedule)])
    runs = load_experiment(tmp_path).runs.sort("anchor")
    # 8 is in the gap (inherits 5), 300 is past the end (inherits 0)
    assert runs.select("anchor", "k").rows() == [(1, 5), (8, 5), (16, 3), (300, 0)]


def test_static_k_with_the_global_as_k_var(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 1): [1.0], (1, 5): [2.0]}, spec="static")
    sweep = load_experiment(tmp_path, k_var=GLOBAL_K_VAR)
    assert sweep.problems == ()
    assert sweep.runs.sort("k").select("k", "global_k").rows() == [(1, 1), (5, 5)]


def test_static_k_with_the_default_k_var_suggests_the_flag(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 1): [1.0]}, spec="static")
    sweep = load_experiment(tmp_path)
    (problem,) = sweep.problems
    assert problem.rule == "missing-k"
    assert f"--k-var {GLOBAL_K_VAR}" in problem.message
    assert sweep.runs["k"].to_list() == [None]


def test_every_numeric_metric_is_a_float_column(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 3): [150.0, 151.0]}, extra={"nested": {"value": 2}})
    sweep = load_experiment(tmp_path)
    runs = sweep.runs
    for name in (
        "output_throughput",
        "median_tpot_ms",
        "completed",
        "num_prompts",
        "failed",
        "max_concurrency",
        "request_goodput",  # null in every record: still a column, all null
        "spec_decode_acceptance_length",
        "speculative_config.num_speculative_tokens",
        "extra.nested.value",
    ):
        assert runs.schema[name] == pl.Float64, name
        assert name in sweep.metrics
    assert runs["request_goodput"].null_count() == 2
    # strings and lists are not metrics
    for name in ("backend", "request_rate", "spec_decode_per_position_acceptance_rates"):
        assert name not in runs.columns


def test_non_numeric_values_in_a_metric_are_kept_by_row(tmp_path: Path) -> None:
    runs = [
        record(1, 3, run_number=0, output_throughput=150.0),
        record(1, 3, run_number=1, output_throughput="fast"),
        record(1, 3, run_number=2, output_throughput=True),
    ]
    write_combo(tmp_path / combo_name(1, 3), runs, run_files=False)
    sweep = load_experiment(tmp_path)
    assert sweep.runs["output_throughput"].to_list() == [150.0, None, None]
    assert sweep.non_numeric["output_throughput"] == {1: "'fast'", 2: "true"}


def test_record_field_named_like_a_derived_column_is_kept_aside(tmp_path: Path) -> None:
    run = record(1, 0)
    run["k"] = 99.0
    write_combo(tmp_path / combo_name(1, 0), [run], run_files=False)
    runs = load_experiment(tmp_path).runs
    assert runs["k"].to_list() == [0]
    assert runs["record.k"].to_list() == [99.0]


def test_missing_folder_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    sweep = load_experiment(tmp_path / "nope")
    assert _rules(sweep) == ["missing-folder"]
    assert sweep.runs.height == 0


def test_file_instead_of_folder(tmp_path: Path) -> None:
    path = write_json(tmp_path / "x.json", [])
    assert _rules(load_experiment(path)) == ["not-a-folder"]


def test_empty_folder_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "SERVE--a-BENCH--b").mkdir()
    sweep = load_experiment(tmp_path)
    assert _rules(sweep) == ["empty-experiment"]
    assert sweep.runs.height == 0


def test_only_warmup_files_is_an_empty_experiment(tmp_path: Path) -> None:
    write_combo(tmp_path / combo_name(1, 0), [], summary=False, warmup=record(1, 0))
    assert "empty-experiment" in _rules(load_experiment(tmp_path))


def test_truncated_file_is_reported_and_the_rest_still_loads(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0, 101.0, 99.0], (1, 3): [150.0, 151.0, 149.0]})
    broken = tmp_path / combo_name(1, 3) / "summary.json"
    broken.write_text(broken.read_text()[:50], encoding="utf-8")
    sweep = load_experiment(tmp_path)
    broken_summary, fallback = sweep.problems
    assert broken_summary.rule == "invalid-json"
    assert broken_summary.files == (f"{combo_name(1, 3)}/summary.json",)
    # The run=N.json files beside the damaged summary still hold the data: nothing is lost.
    assert fallback.rule == "summary-replaced-by-runs"
    assert fallback.severity is Severity.WARNING
    assert _cells(sweep) == [(1, 0)] * 3 + [(1, 3)] * 3


def test_truncated_file_without_run_files_loses_only_that_combo(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0, 101.0, 99.0], (1, 3): [150.0, 151.0, 149.0]})
    broken = tmp_path / combo_name(1, 3) / "summary.json"
    broken.write_text(broken.read_text()[:50], encoding="utf-8")
    for run_file in broken.parent.glob("run=*.json"):
        run_file.unlink()
    sweep = load_experiment(tmp_path)
    (problem,) = sweep.problems
    assert problem.rule == "invalid-json"
    assert _cells(sweep) == [(1, 0)] * 3


def test_huge_integers_do_not_crash_the_loader(tmp_path: Path) -> None:
    # 2**130 fits a float (about 1.36e39); 10**400 does not (the stdlib json fallback parses
    # it as an int): it becomes inf, which the policy rejects by name instead of crashing.
    folder = tmp_path / combo_name(1, 0)
    folder.mkdir()
    text = json.dumps([record(1, 0, output_throughput=1.0)])
    text = text.replace('"output_throughput": 1.0', f'"output_throughput": {2**130}')
    text = text.replace('"failed": 0', f'"failed": 0, "huge": {10**400}')
    (folder / "summary.json").write_text(text, encoding="utf-8")
    sweep = load_experiment(tmp_path)
    assert sweep.runs["output_throughput"][0] == float(2**130)
    assert sweep.runs["huge"][0] == float("inf")


def test_progress_wrapper_sees_every_file_read_and_is_exhausted(tmp_path: Path) -> None:
    write_grid(tmp_path, {(1, 0): [100.0, 101.0, 99.0], (1, 3): [150.0, 151.0, 149.0]})
    seen: list[str] = []
    finished: list[bool] = []

    def progress(paths: Sequence[Path]) -> Iterator[Path]:
        for path in paths:
            seen.append(path.name)
            yield path
        finished.append(True)  # a progress bar closes only when its iterator ends

    sweep = load_experiment(tmp_path, progress=progress)
    # Only the two summaries are read: the run files beside them are backups.
    assert seen == ["summary.json", "summary.json"]
    assert finished == [True]
    assert sweep.runs.height == 6


def test_nan_written_by_python_json_is_read(tmp_path: Path) -> None:
    folder = tmp_path / combo_name(1, 0)
    folder.mkdir()
    (folder / "summary.json").write_text(
        json.dumps([record(1, 0, output_throughput=float("nan"))]), encoding="utf-8"
    )
    sweep = load_experiment(tmp_path)
    assert sweep.problems == ()
    value = sweep.runs["output_throughput"][0]
    assert value != value  # NaN is kept for the policy to reject by name


def test_summary_that_is_not_a_list(tmp_path: Path) -> None:
    write_json(tmp_path / combo_name(1, 0) / "summary.json", record(1, 0))
    assert _rules(load_experiment(tmp_path)) == ["summary-not-list"]


def test_record_that_is_not_an_object(tmp_path: Path) -> None:
    write_json(tmp_path / combo_name(1, 0) / "summary.json", [record(1, 0), 42])
    sweep = load_experiment(tmp_path)
    assert _rules(sweep) == ["record-not-object"]
    assert sweep.runs.height == 1


def test_unusable_anchors_are_reported_per_kind(tmp_path: Path) -> None:
    missing = record(1, 0)
    del missing["max_concurrency"]
    write_combo(tmp_path / "SERVE--a-BENCH--missing", [missing])
    nulls = [record(None, 0, run_number=n) for n in (0, 1)]
    write_combo(tmp_path / "SERVE--a-BENCH--null", nulls, summary=False)
    write_combo(tmp_path / "SERVE--a-BENCH--zero", [record(0, 0)])
    sweep = load_experiment(tmp_path)
    assert sorted(_rules(sweep)) == ["invalid-anchor", "invalid-anchor", "missing-anchor"]
    invalid = {p.value: p for p in sweep.problems if p.rule == "invalid-anchor"}
    assert set(invalid) == {"null", "0"}
    assert "not concurrency-bound" in invalid["null"].message
    # the two null runs share one finding that names both files
    assert invalid["null"].files == (
        "SERVE--a-BENCH--null/run=0.json",
        "SERVE--a-BENCH--null/run=1.json",
    )
    assert sweep.runs["anchor"].null_count() == 4


def test_schedule_that_gives_no_k_at_the_anchor(tmp_path: Path) -> None:
    config = {"num_speculative_tokens": 7, "num_speculative_tokens_per_batch_size": [[8, 64, 3]]}
    write_combo(tmp_path / "SERVE--s-BENCH--c1", [record(1, 0, spec=config)])
    sweep = load_experiment(tmp_path)
    (problem,) = sweep.problems
    assert (problem.rule, problem.value) == ("invalid-k", "[[8, 64, 3]]")
    assert sweep.runs["k"].to_list() == [None]


def test_batch_size_var_can_be_another_field(tmp_path: Path) -> None:
    write_combo(tmp_path / "SERVE--s-BENCH--b", [record(None, 3, max_num_seqs=32)])
    sweep = load_experiment(tmp_path, batch_size_var="max_num_seqs")
    assert sweep.runs.select("anchor", "k").rows() == [(32, 3)]


# --------------------------------------------------------------------------------------------
# load_experiment(metrics=...): the same sweep as the full load, restricted to some metrics
# --------------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
CORPORA = {
    "sample_sweeps": REPO / "data" / "sample_sweeps",
    "validation_sweeps": REPO / "data" / "validation_sweeps",
    "bad_inputs": REPO / "tests" / "bad_inputs",
}
CLI_METRICS = ("output_throughput", "spec_decode_acceptance_length", "failed", "completed")


def _bits(series: pl.Series) -> list[object]:
    """The values of a column exactly: floats by their bits (-0.0, NaN), others as they are."""
    if series.dtype == pl.Float64:
        return [None if v is None else struct.pack("<d", v) for v in series.to_list()]
    return [(type(v), v) for v in series.to_list()]


def _ordered(non_numeric: dict[str, dict[int, str]]) -> list[tuple[str, list[tuple[int, str]]]]:
    return [(name, list(rows.items())) for name, rows in non_numeric.items()]


def _assert_same_sweep(got: Sweep, want: Sweep, columns: Sequence[str] | None = None) -> None:
    """``got`` is ``want`` (its runs restricted to ``columns``), bit for bit and in order."""
    columns = want.runs.columns if columns is None else columns
    assert got.runs.columns == list(columns)
    assert got.runs.height == want.runs.height
    for name in columns:
        assert got.runs.schema[name] == want.runs.schema[name], name
        assert _bits(got.runs[name]) == _bits(want.runs[name]), name
    assert got.problems == want.problems
    assert got.input_files == want.input_files
    # repr tells 1 from 1.0 and keeps the order of keys
    assert repr(got.speculative_configs) == repr(want.speculative_configs)


def _metric_sets(full: Sweep) -> list[list[str]]:
    return [
        [*CLI_METRICS, "num_prompts"],
        full.metrics[::2],
        full.metrics[1::2][::-1],  # asked in another order than the frame's
        full.metrics,
        ["k", "anchor", "run_number", "no_such_metric", "median_tpot_ms", "median_tpot_ms"],
        [GLOBAL_K_VAR, "output_throughput"],  # a dotted name: the full path, then restricted
        ["record.k", "backend", "request_goodput", "request_rate"],
        [],
    ]


def _assert_metrics_contract(folder: Path, **options: str) -> None:
    full = load_experiment(folder, **options)
    for metrics in _metric_sets(full):
        part = load_experiment(folder, metrics=metrics, **options)
        wanted = set(metrics)
        columns = [name for name in full.runs.columns if name in DERIVED_COLUMNS or name in wanted]
        _assert_same_sweep(part, full, columns)
        assert _ordered(part.non_numeric) == _ordered(
            {name: rows for name, rows in full.non_numeric.items() if name in wanted}
        )
        assert part.metrics == [name for name in columns if name not in DERIVED_COLUMNS]


def _assert_reuse_changes_nothing(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookups reused across equal records give what doing every lookup gives."""
    reused = load_experiment(folder)
    with monkeypatch.context() as patch:
        # No fingerprint, no reuse: every record is looked up afresh.
        patch.setattr(run_params, "fingerprint", lambda fields: None)
        patch.setattr(repeated_runs, "fingerprint", lambda fields: None)
        fresh = load_experiment(folder)
    _assert_same_sweep(reused, fresh)
    assert _ordered(reused.non_numeric) == _ordered(fresh.non_numeric)


def _every_folder(root: Path) -> list[Path]:
    found = []
    for folder, subfolders, _ in os.walk(root):
        subfolders.sort()
        found.append(Path(folder))
    return found


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_metrics_contract_on_every_corpus_folder(
    corpus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folders = _every_folder(CORPORA[corpus])
    assert len(folders) > 10
    for folder in folders:
        _assert_metrics_contract(folder)
        _assert_reuse_changes_nothing(folder, monkeypatch)
    # other fields, so the lookups read other names (and miss on these sweeps)
    for folder in folders[:: max(1, len(folders) // 12)]:
        _assert_metrics_contract(folder, k_var=GLOBAL_K_VAR, batch_size_var="max-num-seqs")


def test_metrics_contract_on_every_real_folder(
    real_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for folder in _every_folder(real_data):
        _assert_metrics_contract(folder)
        _assert_reuse_changes_nothing(folder, monkeypatch)


def _odd_sweep(root: Path) -> Path:
    """Records that leave the direct paths of the loader, a few in every file."""
    plain = record(1, 3, run_number=0)
    schedule = [[1, 1, 5], [2, 256, 1]]
    odd = [
        plain,
        # fields named like derived columns, and a run_number that is not a number
        record(1, 3, run_number=1) | {"k": 99.0, "anchor": "x", "source": 5, "combo": None},
        {**record(1, 3), "run_number": "seven"},
        record(1, 3, run_number=3, output_throughput="fast"),
        record(1, 3, run_number=4, output_throughput=True),
        record(1, 3, run_number=5, output_throughput=None),
        record(1, 3, run_number=6, output_throughput={"value": 1.0}),
        record(1, 3, run_number=7, output_throughput=[1.0, 2.0]),
        # (ints past 64 bits in health fields make the run unusable: tests/test_bad_input.py)
        record(1, 3, run_number=8, past_int64=2**63 + 5, largest_uint64=2**64 - 1, huge=2**70),
        42,  # not an object
        # other anchors and K inside the same summary.json, K as a JSON string schedule
        record(2, 0, run_number=10, spec={"num_speculative_tokens_per_batch_size": "[[1, 4, 2]]"}),
        record(2, 0, run_number=11, spec={"num_speculative_tokens_per_batch_size": schedule}),
        record(2, 0, run_number=12, spec={"num_speculative_tokens_per_batch_size": schedule})
        | {"max_concurrency": 2.0},
        record(1, 3, run_number=13, max_concurrency=True),
        record(1, 3, run_number=14),
        record(1, 3, run_number=15, max_concurrency=0.0),
        record(1, 3, run_number=16, max_concurrency=-0.0),
        record(None, 3, run_number=17),
        # equal under ==, different JSON types: the global K is read afresh each time
        record(1, 3, run_number=18, spec={"num_speculative_tokens": 7}),
        record(1, 3, run_number=19, spec={"num_speculative_tokens": 7.0}),
        record(1, 3, run_number=20, spec={"num_speculative_tokens": True}),
        record(1, 3, run_number=21, spec={"num_speculative_tokens": 7.5}),
        # the same fields in another order
        dict(reversed(record(1, 3, run_number=22).items())),
        # dotted speculative_config fields, then other values, then clashing spellings
        record(1, 3, run_number=23, keys="dotted"),
        record(1, 2, run_number=24, keys="dotted"),
        {**record(1, 2, run_number=25, keys="dotted"), "speculative-config.method": "ngram"},
        {
            **{"speculative-config.method": "ngram"},
            **record(1, 2, run_number=26, keys="dotted"),
        },
        record(1, 0, run_number=27, spec="none"),
        record(1, 0, run_number=28, spec="none", extra=1.0),
        record(1, 3, run_number=29, keys="json-string"),
        record(1, 3, run_number=30, keys="json-string", global_k=5),
        {**record(1, 3, run_number=31), "max-concurrency": 4},
        {**record(1, 3, run_number=32), "speculative_config.num_speculative_tokens": 9},
    ]
    write_combo(root / "SERVE--a-BENCH--odd", odd, run_files=False)
    # The same records one per run=N.json file (no summary.json): each file is its own list.
    runs = root / "SERVE--a-BENCH--runs"
    runs.mkdir(parents=True)
    for number, run in enumerate(odd):
        write_json(runs / f"run={number}.json", run)
    write_json(runs / "run=99.failure.json", {"error": "crashed"})
    # Python's json writes NaN and ints of any size: the fallback parser reads this file.
    nan_file = root / "SERVE--a-BENCH--nan" / "summary.json"
    nan_file.parent.mkdir(parents=True)
    fallback = [
        record(1, 3, run_number=0, output_throughput=float("nan")),
        record(1, 3, run_number=1, enormous=10**400, negative=-(10**30), huge=2**130),
        record(1, 3, run_number=2, output_throughput=float("-inf")),
        record(1, 3, run_number=3, max_concurrency=float("nan")),
        record(1, 3, run_number=4, max_concurrency=float("nan")),
        record(1, 3, run_number=5, max_concurrency=None),  # orjson would write NaN as null
    ]
    nan_file.write_text(json.dumps(fallback), encoding="utf-8")
    # Plain records, but a metric first met in the third record, as its first field: the
    # column goes after those of the first record all the same.
    plain_runs = [record(8, 1, run_number=n, output_throughput=10.0 + n) for n in range(3)]
    plain_runs[2] = {"early": 1.0, **plain_runs[2]}
    write_combo(root / "SERVE--b-BENCH--c8", plain_runs, failures={3: {"run_number": 3}})
    return root


def test_metrics_contract_on_odd_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _odd_sweep(tmp_path)
    extra_sets = [
        ["output_throughput"],
        ["completed", "failed", "huge", "early", "past_int64", "enormous", "negative"],
        ["record.k", "k", "output_throughput"],
        ["extra", "output_throughput.value"],
    ]
    for folder in [root, *sorted(path for path in root.iterdir())]:
        _assert_metrics_contract(folder)
        _assert_reuse_changes_nothing(folder, monkeypatch)
        full = load_experiment(folder)
        for metrics in extra_sets:
            part = load_experiment(folder, metrics=metrics)
            wanted = set(metrics)
            columns = [c for c in full.runs.columns if c in DERIVED_COLUMNS or c in wanted]
            _assert_same_sweep(part, full, columns)
            assert _ordered(part.non_numeric) == _ordered(
                {name: rows for name, rows in full.non_numeric.items() if name in wanted}
            )
    # What the odd records are meant to exercise is really there.
    full = load_experiment(root / "SERVE--a-BENCH--odd")
    assert full.non_numeric["output_throughput"] == {3: "'fast'", 4: "true"}
    assert full.runs["record.k"][1] == 99.0
    assert full.runs["anchor"].to_list()[9:17] == [2, 2, 2, None, 1, None, None, None]
    assert full.runs["k"].to_list()[9:12] == [2, 1, 1]
    assert full.runs["global_k"].to_list()[17:21] == [7, 7, None, None]
    values = {(p.rule, p.value) for p in full.problems if p.rule.startswith("invalid")}
    assert values >= {("invalid-anchor", v) for v in ("true", "0.0", "-0.0", "null")}
    assert values >= {("invalid-global-k", "true"), ("invalid-global-k", "7.5")}
    assert load_experiment(root / "SERVE--b-BENCH--c8", metrics=["early", "failed"]).metrics == [
        "failed",
        "early",
    ]
    part = load_experiment(root / "SERVE--a-BENCH--nan", metrics=["output_throughput", "huge"])
    assert part.runs["huge"].to_list()[1] == float(2**130)
    assert math.isnan(part.runs["output_throughput"][0])
