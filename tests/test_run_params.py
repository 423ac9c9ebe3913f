"""lib/run_params.py: a record's anchor, K, speculation and global K, whatever way its
speculative_config is spelled, the problems met, and the lookups reused across equal records."""

from __future__ import annotations

from sweep_builder import record

from lib.run_params import Params, ParamsReader
from lib.settings import DEFAULT_K_VAR

BATCH_SIZE_VAR = "max_concurrency"


def _read(*records: dict[str, object], reuse: bool = True) -> list[Params]:
    reader = ParamsReader(BATCH_SIZE_VAR, DEFAULT_K_VAR)
    return [reader.read(each, reuse) for each in records]


def test_every_spelling_of_the_speculative_config_gives_the_same_params() -> None:
    spellings = [_read(record(4, 3, keys=keys)) for keys in ("nested", "dotted", "json-string")]
    assert spellings == [[Params(4, 3, True, 7, ())]] * 3


def test_a_server_without_speculation_is_k0() -> None:
    assert _read(record(4, 0, spec="none")) == [Params(4, 0, False, None, ())]


def test_what_gives_no_anchor_or_k_is_a_finding() -> None:
    (missing,) = _read(record(None, 3))
    assert (missing.anchor, missing.k) == (None, None)
    assert [finding[0] for finding in missing.findings] == ["invalid-anchor"]
    (no_k,) = _read(record(4, 3, spec={"method": "eagle3"}))
    assert [finding[0] for finding in no_k.findings] == ["missing-k"]


def test_reused_lookups_give_what_fresh_ones_give() -> None:
    records = [record(4, 3), record(4, 3, run_number=1), record(8, 3), record(8, 0, spec="none")]
    assert _read(*records) == _read(*records, reuse=False)


def test_the_distinct_configs_are_kept_once() -> None:
    reader = ParamsReader(BATCH_SIZE_VAR, DEFAULT_K_VAR)
    for anchor in (1, 4):
        reader.read(record(anchor, 3, compilation_config={"cudagraph_capture_sizes": [1]}), True)
    assert len(reader.speculative_configs) == len(reader.compilation_configs) == 1


def test_a_failed_run_gives_what_params_it_has() -> None:
    reader = ParamsReader(BATCH_SIZE_VAR, DEFAULT_K_VAR)
    assert reader.of_failure(record(4, 3)) == (4, 3)
    assert reader.of_failure({"max_concurrency": 4}) == (4, None)
    assert reader.of_failure(["not", "a", "record"]) == (None, None)
