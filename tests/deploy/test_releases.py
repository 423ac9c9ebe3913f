"""The engines' facts by release (lib/deploy/releases.py): each fact pinned to what its source
says (so changing a row fails here), the lookups, and docs/formats.md against the table."""

from __future__ import annotations

import itertools

import pytest
from paths import REPO

from lib.deploy.releases import (
    ENGINES,
    FACTS,
    KNOWN_RELEASES,
    Release,
    Releases,
    fact,
    facts_table,
    holds,
    names,
    newer_than_known,
    newest,
    number,
    text,
)


def _r(label: str) -> Release:
    release = Release.parse(label)
    assert release is not None
    return release


#: Each vLLM fact at each known release, written from the shared notes (not from the table):
#: (name, release) -> value; None where no row may hold.
#: - engines.md section 1 and engines-2026-12.md 1b: 0.33 and older b*(1+K) <= C; 0.34 the
#:   decode-request rule.
#: - engines.md section 1: P = 512 off SM100 (0.24, 0.33); SM100 1024 from 0.33 (#49390),
#:   512 in 0.24 ("512 everywhere"); 0.34: 8192-token decode budget on SM100.
#: - engines-2026-12.md finding 3: model runner v1 removed in 0.34, so its method gate and
#:   forced PIECEWISE are 0.33 and older; max_num_seqs 1024 on >= 70 GiB in 0.33 and 0.34,
#:   256 below.
#: - engines-2026-12.md 1b "What the tool must change" 2 and 3: the decode fields to read and
#:   the knob to raise the ceiling on 0.34.
VLLM_EXPECTED: dict[tuple[str, str], object] = {
    ("capture_rule", "0.32.0"): "token-ceiling",
    ("capture_rule", "0.33.0"): "token-ceiling",
    ("capture_rule", "0.34.0"): "decode-requests",
    ("platform_ceiling", "0.32.0"): 512,
    ("platform_ceiling", "0.33.0"): 512,
    ("platform_ceiling", "0.34.0"): 512,
    ("sm100_platform_ceiling", "0.32.0"): 512,
    ("sm100_platform_ceiling", "0.33.0"): 1024,
    ("sm100_platform_ceiling", "0.34.0"): 1024,
    ("sm100_decode_token_budget", "0.32.0"): None,
    ("sm100_decode_token_budget", "0.33.0"): None,
    ("sm100_decode_token_budget", "0.34.0"): 8192,
    ("default_max_num_seqs", "0.32.0"): 256,
    ("default_max_num_seqs", "0.33.0"): 256,
    ("default_max_num_seqs", "0.34.0"): 256,
    ("large_gpu_max_num_seqs", "0.32.0"): None,
    ("large_gpu_max_num_seqs", "0.33.0"): 1024,
    ("large_gpu_max_num_seqs", "0.34.0"): 1024,
    ("large_gpu_gib", "0.32.0"): None,
    ("large_gpu_gib", "0.33.0"): 70,
    ("large_gpu_gib", "0.34.0"): 70,
    ("mrv1_dsd_methods", "0.32.0"): ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"),
    ("mrv1_dsd_methods", "0.33.0"): ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"),
    ("mrv1_dsd_methods", "0.34.0"): None,
    ("mrv1_forces_piecewise", "0.32.0"): True,
    ("mrv1_forces_piecewise", "0.33.0"): True,
    ("mrv1_forces_piecewise", "0.34.0"): False,
    ("dp_disables_dsd", "0.33.0"): True,
    ("dp_disables_dsd", "0.34.0"): True,
    ("schedule_field", "0.34.0"): "num_speculative_tokens_per_batch_size",
    ("schedule_entry_items", "0.34.0"): 3,
    ("rejected_fields", "0.34.0"): (
        "speculative_token_schedule",
        "num_speculative_tokens_per_seq_len",
    ),
    ("k_clamped_to_global", "0.34.0"): True,
    ("ranges_past_max_num_seqs_ignored", "0.34.0"): True,
    ("ceiling_fields", "0.33.0"): ("max_cudagraph_capture_size", "cudagraph_capture_sizes"),
    ("ceiling_fields", "0.34.0"): (
        "max_decode_cudagraph_capture_requests",
        "decode_cudagraph_capture_request_sizes",
        "max_decode_cudagraph_capture_tokens",
        "prefill_cudagraph_capture_token_sizes",
    ),
    ("raise_ceiling", "0.33.0"): "list n*(1+K) per tier in cudagraph_capture_sizes",
    ("raise_ceiling", "0.34.0"): "-cc.max_decode_cudagraph_capture_requests=N",
    ("capture_sizes", "0.34.0"): "1, 2, 4, steps of 8 to 256, of 16 beyond",
}


@pytest.mark.parametrize(("name", "release"), sorted(VLLM_EXPECTED))
def test_each_vllm_fact_is_what_its_source_says(name: str, release: str) -> None:
    found = fact("vllm", name, _r(release))
    expected = VLLM_EXPECTED[(name, release)]
    assert (None if found is None else found.value) == expected


def test_every_vllm_fact_is_pinned() -> None:
    """A new vLLM row needs its expected value above (a fact no test pins could change
    unnoticed)."""
    pinned = {name for name, _ in VLLM_EXPECTED}
    assert {row.name for row in FACTS if row.engine == "vllm"} <= pinned


def test_every_row_names_a_source_and_no_two_rows_of_a_fact_overlap() -> None:
    for row in FACTS:
        assert row.source and row.what, row
    probes = [_r(f"0.{minor}.{patch}") for minor in range(20, 40) for patch in (0, 1)]
    probes += [
        release
        for engine in ENGINES
        for label in KNOWN_RELEASES[engine]
        if (release := Release.parse(label)) is not None
    ]
    for a, b in itertools.combinations(FACTS, 2):
        if (a.engine, a.name) != (b.engine, b.name):
            continue
        both = [p for p in probes if a.releases.covers(p) and b.releases.covers(p)]
        assert not both, f"{a.engine} {a.name}: two rows hold for {both[0]}"


def test_releases_compare_on_the_numbers_they_name() -> None:
    assert Releases("0.24", "0.33").covers(_r("0.33.9"))
    assert not Releases("0.24", "0.33").covers(_r("0.34.0"))
    assert not Releases("0.24", "0.33").covers(_r("0.23.5"))
    assert Releases("0.34", None).covers(_r("0.34"))
    assert Releases("0.34", None).covers(_r("1.0.0"))
    assert not Releases("0.34", None).covers(_r("0.33.1"))
    assert str(Releases(None, "0.33")) == "0.33 and older"
    assert str(Releases("0.33", "0.33")) == "0.33"


def test_a_version_is_read_from_what_the_engine_prints() -> None:
    assert _r("0.34.0").key == (0, 34, 0)
    assert _r("v0.33.1rc2+cu128").key == (0, 33, 1)
    assert _r("0.34.0.dev12+g62d4bc3c7").key == (0, 34, 0)
    assert Release.parse("") is None
    assert Release.parse("vllm") is None


def test_the_newest_known_release_is_assumed() -> None:
    assert str(newest("vllm")) == "0.34.0"
    assert str(newest("sglang")) == "0.5.23"
    assert newer_than_known("vllm", _r("0.35.0"))
    assert not newer_than_known("vllm", _r("0.34.0"))
    # A release newer than known is read with the newest rows.
    assert text("vllm", "capture_rule", _r("0.35.0")) == "decode-requests"


def test_the_typed_readers() -> None:
    assert number("vllm", "platform_ceiling", _r("0.33.0")) == 512
    assert holds("vllm", "mrv1_forces_piecewise", _r("0.33.0"))
    assert not holds("vllm", "mrv1_forces_piecewise", _r("0.34.0"))
    assert names("vllm", "mrv1_dsd_methods", _r("0.34.0")) == ()
    with pytest.raises(KeyError, match="sm100_decode_token_budget"):
        number("vllm", "sm100_decode_token_budget", _r("0.33.0"))


def test_docs_formats_prints_the_table() -> None:
    doc = (REPO / "docs" / "formats.md").read_text(encoding="utf-8")
    begin, end = "<!-- facts-table: begin -->\n", "<!-- facts-table: end -->"
    assert begin in doc and end in doc
    printed = doc.split(begin, 1)[1].split(end, 1)[0]
    assert printed == facts_table(), (
        "docs/formats.md section 9 differs from lib.deploy.releases.facts_table(): print it again"
    )
