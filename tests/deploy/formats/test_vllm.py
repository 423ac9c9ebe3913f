"""lib/deploy/formats/vllm.py: vLLM's two fields, the global-K rule on both sides, and the
capture rule applied to the export (capped when C is given, named when it is assumed)."""

from __future__ import annotations

from lib.deploy.decisions import Decisions
from lib.deploy.registry import export
from lib.deploy.settings import ExportSettings
from lib.schedule import Schedule
from lib.settings import DeploySettings

VLLM = ExportSettings(format="vllm")
PUBLISHED = Schedule(((1, 1, 3), (2, 127, 5), (128, 128, 3)))
#: The token-ceiling rule's release (b*(1+K) <= C); 0.34's rule is tested below it.
V033 = DeploySettings(vllm_version="0.33.0")


def test_the_global_k_comes_from_the_flag_then_the_file_then_the_largest_k() -> None:
    sonnet = Schedule(((1, 63, 7), (64, 256, 0)))
    for given, stated, expected in [(8, 9, 8), (None, 9, 9), (None, None, 7)]:
        exported, problems = export(
            Decisions(sonnet, stated, "t", "t"), ExportSettings(format="vllm", global_k=given)
        )
        assert problems == [] and exported is not None
        assert exported.config == {
            "num_speculative_tokens": expected,
            "num_speculative_tokens_per_batch_size": [[1, 63, 7], [64, 256, 0]],
        }


def test_a_global_k_below_the_largest_k_is_refused_and_equal_is_not() -> None:
    sonnet = Decisions(Schedule(((1, 63, 7), (64, 256, 0))), None, "t", "t")
    refused, problems = export(sonnet, ExportSettings(format="vllm", global_k=6))
    assert refused is None
    assert (problems[0].field, problems[0].value, problems[0].expected) == (
        "--global-k",
        "6",
        ">= 7",
    )
    accepted, problems = export(sonnet, ExportSettings(format="vllm", global_k=7))
    assert accepted is not None and problems == []


def test_an_assumed_ceiling_keeps_the_schedule_and_warns() -> None:
    exported, problems = export(Decisions(PUBLISHED, 5, "t", "t"), VLLM, V033)
    assert problems == [] and exported is not None
    assert exported.config["num_speculative_tokens_per_batch_size"] == PUBLISHED.to_json()
    assert any("batch sizes 86-127 run K=5" in w for w in exported.warnings)


def test_a_given_ceiling_caps_the_export() -> None:
    exported, _ = export(
        Decisions(PUBLISHED, 5, "t", "t"),
        VLLM,
        DeploySettings(max_cudagraph_capture_size=512, max_num_seqs=128, vllm_version="0.33.0"),
    )
    assert exported is not None
    assert exported.config["num_speculative_tokens_per_batch_size"] == [
        [1, 1, 3],
        [2, 85, 5],
        [86, 102, 4],
        [103, 128, 3],
    ]
    # A ceiling of 768 holds 128 * 6: nothing to cap.
    roomy, _ = export(
        Decisions(PUBLISHED, 5, "t", "t"),
        VLLM,
        DeploySettings(max_cudagraph_capture_size=768, max_num_seqs=128, vllm_version="0.33.0"),
    )
    assert roomy is not None and roomy.warnings == ()


def _result_tuned_under(version: str) -> dict[str, object]:
    """A result file of PUBLISHED tuned under C=512, max_num_seqs 128, on ``version``."""
    ceiling = {
        "size": 512,
        "known": True,
        "source": "--max-cudagraph-capture-size",
        "max_num_seqs": 128,
        "max_num_seqs_known": True,
        "max_num_seqs_source": "--max-num-seqs",
        "vllm_version": version,
        "vllm_version_known": True,
        "vllm_version_source": "--vllm-version",
    }
    return {
        "num_speculative_tokens_per_batch_size": PUBLISHED.to_json(),
        "configured_global_num_speculative_tokens": 5,
        "batch_decisions": [],
        "deployment": {"capture_ceiling": ceiling},
    }


def test_the_ceiling_a_result_was_tuned_under_is_kept_on_export() -> None:
    from lib.deploy.registry import decisions_from_json

    found, _ = decisions_from_json(_result_tuned_under("0.33.0"), "r.json")
    assert found is not None
    exported, _ = export(found, VLLM)
    assert exported is not None
    assert exported.config["num_speculative_tokens_per_batch_size"][1] == [2, 85, 5]


def test_a_method_that_loses_the_schedule_is_warned() -> None:
    decisions = Decisions(
        Schedule(((1, 8, 2),)), 2, "t", "t", speculative_config={"method": "medusa"}
    )
    exported, _ = export(decisions, VLLM, V033)
    assert exported is not None and any("medusa" in w for w in exported.warnings)
    # vLLM 0.34 removed model runner v1: no method gate, no warning.
    newest, _ = export(decisions, VLLM, DeploySettings(vllm_version="0.34.0"))
    assert newest is not None and not any("medusa" in w for w in newest.warnings)


def test_on_0_34_the_published_shape_keeps_its_ks_in_full_graphs() -> None:
    """vLLM 0.34 (engines-2026-12.md 1b): the schedule's smallest K=3 sets R = min(128,
    512 // 4) = 128, so 86-127 at K=5 (516-762 tokens, past C0=512) are within R: FULL
    graphs, nothing capped, nothing graphless; 0.33 caps them (above)."""
    exported, problems = export(
        Decisions(PUBLISHED, 5, "t", "t"),
        VLLM,
        DeploySettings(max_cudagraph_capture_size=512, max_num_seqs=128, vllm_version="0.34.0"),
    )
    assert problems == [] and exported is not None
    assert exported.config["num_speculative_tokens_per_batch_size"] == PUBLISHED.to_json()
    assert exported.warnings == ()


def test_a_result_tuned_under_0_34_exports_under_0_34() -> None:
    from lib.deploy.registry import decisions_from_json

    found, _ = decisions_from_json(_result_tuned_under("0.34.0"), "r.json")
    assert found is not None and found.engine.vllm_version is not None
    assert found.engine.vllm_version.value == "0.34.0"
    exported, _ = export(found, VLLM)
    assert exported is not None
    assert exported.config["num_speculative_tokens_per_batch_size"] == PUBLISHED.to_json()
