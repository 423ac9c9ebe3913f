"""The engines' facts by release (lib/deploy/releases.py): each fact pinned to what its source
says (so changing a row fails here), the lookups, and docs/formats.md against the table."""

from __future__ import annotations

import ast
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
    # engines.md section 1: "1, 2, 4, steps of 8 to 256, of 16 to C0".
    ("capture_sizes", "0.34.0"): ("1", "2", "4", "8-256/8", "272-max/16"),
    ("capture_sizes", "0.33.0"): ("1", "2", "4", "8-256/8", "272-max/16"),
}

#: Each SGLang 0.5.23 fact, from engines-2026-12.md 1c (and engines.md section 6):
#: - adaptive mode runs EAGLE/EAGLE3 with topk 1 only; NEXTN resolves to EAGLE, a Gemma-4
#:   assistant draft (two architectures) to FROZEN_KV_MTP; vLLM's mtp is NEXTN, draft_model
#:   STANDALONE, ngram NGRAM, dflash DFLASH.
#: - the default decode graph maximum by GPU memory: under 20 GiB 8; 20-35 48/160 (TP < 4 /
#:   >= 4); 35-60 32/160; 60-160 256/512; >= 160 512; unknown 160; the maximum is appended;
#:   an explicit --cuda-graph-bs-decode list replaces the default; --speculative-num-steps
#:   outside the candidates is a ValueError.
#: - the graph sizes: list1 at maximum 256 captures 19 sizes 1-30, 15 sizes 32-120, 17 sizes
#:   128-256: 1-8 (8) + 10-30 by 2 (11) = 19; 32 + 40-64 by 4 (7) + 72-120 by 8 (7) = 15;
#:   128-256 by 8 = 17; past 256 steps of 16 (engines.md section 6's router, 272 the first).
#: - multi-layer EAGLE targets: not listed in the shared notes; from the 0.5.23 files the row
#:   cites (model_overrides/mimo_v2.py, gigachat35.py, arg_groups/overrides.py).
SGLANG_EXPECTED: dict[str, object] = {
    "adaptive_algorithms": ("EAGLE", "EAGLE3"),
    "adaptive_topk": 1,
    "nextn_resolves_to": "EAGLE",
    "gemma4_assistant_architectures": (
        "Gemma4AssistantForCausalLM",
        "Gemma4UnifiedAssistantForCausalLM",
    ),
    "gemma4_assistant_algorithm": "FROZEN_KV_MTP",
    "method_algorithms": (
        "eagle=EAGLE",
        "eagle3=EAGLE3",
        "mtp=NEXTN",
        "draft_model=STANDALONE",
        "ngram=NGRAM",
        "dflash=DFLASH",
    ),
    "multi_layer_eagle_architectures": (
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "GigaChat35ForCausalLM",
        "GigaChat35ForCausalLMNextN",
        "Step3p5ForCausalLM",
        "Step3p7ForConditionalGeneration",
    ),
    "num_steps_in_candidates": True,
    "decode_graph_sizes": ("1-8/1", "10-32/2", "40-64/4", "72-256/8", "272-max/16"),
    "decode_graph_max_appended": True,
    "decode_graph_max_by_gpu_memory": (
        "20:8:8",
        "35:48:160",
        "60:32:160",
        "160:256:512",
        "inf:512:512",
    ),
    "decode_graph_max_large_tp": 4,
    "decode_graph_max_unknown_gpu": 160,
    "decode_graph_list_flag": "--cuda-graph-bs-decode",
    "decode_graph_list_replaces_default": True,
}

#: Each TensorRT-LLM fact, from engines.md section 5 and engines-2026-12.md 1d:
#: - validator @00043967: keys >= 1, values <= max_draft_len, schedule[min key] ==
#:   max_draft_len; Eagle's config: "max_draft_len must be > 0 for Eagle" (eagle, eagle3);
#:   the older stage-1 copy requires key 1.
#: - runtime @011d0933: above the largest key min_draft_len, 0 by default; floor 0 on linear
#:   Eagle3 one-model, MTP one-model, NGram; floor 1 runs K=1 where the schedule says 0 (the
#:   modes as the tool's warning names them); vanilla MTP ignores the schedule; before #10860
#:   keys were lower bounds.
TRTLLM_EXPECTED: dict[str, object] = {
    "schedule_field": "draft_len_schedule",
    "max_draft_len_field": "max_draft_len",
    "max_draft_len_at_smallest_key": True,
    "k_above_max_draft_len_refused": True,
    "positive_max_draft_len_methods": ("eagle", "eagle3"),
    "older_copies_require_key_one": True,
    "upper_bound_keys_since": "#10860",
    "draft_len_past_largest_key": 0,
    "floor_zero_modes": ("linear Eagle3 one-model", "MTP one-model", "NGram"),
    "floor_one_modes": ("Eagle3 dynamic tree", "MTP with the SA enhancer", "draft-target", "PARD"),
    "schedule_ignored_by": ("mtp",),
}


@pytest.mark.parametrize(("name", "release"), sorted(VLLM_EXPECTED))
def test_each_vllm_fact_is_what_its_source_says(name: str, release: str) -> None:
    found = fact("vllm", name, _r(release))
    expected = VLLM_EXPECTED[(name, release)]
    assert (None if found is None else found.value) == expected


@pytest.mark.parametrize("name", sorted(SGLANG_EXPECTED))
def test_each_sglang_fact_is_what_its_source_says(name: str) -> None:
    found = fact("sglang", name, _r("0.5.23"))
    assert found is not None and found.value == SGLANG_EXPECTED[name]


@pytest.mark.parametrize("name", sorted(TRTLLM_EXPECTED))
def test_each_trtllm_fact_is_what_its_source_says(name: str) -> None:
    found = fact("trtllm", name, newest("trtllm"))
    assert found is not None and found.value == TRTLLM_EXPECTED[name]


def test_every_fact_is_pinned() -> None:
    """A new row needs its expected value above (a fact no test pins could change
    unnoticed)."""
    pinned = {
        "vllm": {name for name, _ in VLLM_EXPECTED},
        "sglang": set(SGLANG_EXPECTED),
        "trtllm": set(TRTLLM_EXPECTED),
    }
    for row in FACTS:
        assert row.name in pinned[row.engine], f"{row.engine} {row.name} is not pinned"


#: The table's readers: a row is read where one of them is called with its name.
_READERS = {"fact", "number", "number_or_none", "holds", "text", "names", "size_runs"}


def _read_names() -> set[tuple[str | None, str]]:
    """(engine or None, name) for every text literal in the arguments of a call to a reader
    (``releases.number(...)``, ``names(...)``, ``ceiling.fact(...)``) in lib's modules other
    than releases.py; the engine is the call's first argument where it is a literal engine."""
    found: set[tuple[str | None, str]] = set()
    for path in sorted((REPO / "lib").rglob("*.py")):
        if path == REPO / "lib" / "deploy" / "releases.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called not in _READERS or not node.args:
                continue
            first = node.args[0]
            engine = (
                first.value if isinstance(first, ast.Constant) and first.value in ENGINES else None
            )
            for argument in node.args[1:] if engine else node.args:
                for sub in ast.walk(argument):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        found.add((engine, sub.value))
    return found


def test_every_row_is_read_by_the_code() -> None:
    """Issue 39: every row is a rule the deployment layer applies, so lib reads each name
    (a row no code reads is a fact stated and not applied; document it in the row's text and
    read it, or delete it)."""
    read = _read_names()
    unread = sorted(
        f"{row.engine} {row.name}"
        for row in FACTS
        if (row.engine, row.name) not in read and (None, row.name) not in read
    )
    assert not unread, f"rows no lib module reads: {unread}"


def test_the_read_check_sees_a_missing_reader() -> None:
    """The check above can fail: a name no code passes to a reader is not in what it finds."""
    read = _read_names()
    assert ("vllm", "capture_rule") in read
    assert ("vllm", "no_such_fact") not in read and (None, "no_such_fact") not in read


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
