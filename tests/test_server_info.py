"""lib/server_info.py: the server configs a sweep saved (GET /server_info?config_format=json),
read in their real shape, every bad field a warning naming the file, field, value and what was
expected, never a traceback."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import REPO, SAMPLE_SWEEPS

from lib.keys import LARGEST_WHOLE_NUMBER
from lib.problems import Severity
from lib.server_info import SERVER_INFO_FILE_GLOB, ServerSettings, read_server_settings

#: The parts of vLLM 0.32.0's answer the reader looks at, in their places (the real answer
#: has many more keys in each section; see data/sample_sweeps/real-cpu-server-info).
RESPONSE: dict[str, Any] = {
    "vllm_config": {
        "model_config": {"model": "/tmp/tiny-llama", "max_model_len": 1024},
        "scheduler_config": {
            "max_num_seqs": 4,
            "max_num_batched_tokens": 2048,
            "max_model_len": 1024,
        },
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": [[1, 2, 1]],
            "prompt_lookup_max": 4,
        },
        "compilation_config": {
            "mode": 3,
            "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 24, 32],
            "max_cudagraph_capture_size": 32,
        },
    },
    "vllm_env": {"VLLM_SERVER_DEV_MODE": True},
    "system_env": {"torch_version": "2.13.0+cpu"},
}

#: What a count and a capture size must be (issue 38: the limit of every count, 2^31 - 1).
COUNT = f"a whole number from 1 to {LARGEST_WHOLE_NUMBER}, or null"
SIZE = f"a whole number from 0 to {LARGEST_WHOLE_NUMBER}, or null"

EXPECTED = ServerSettings(
    max_cudagraph_capture_size=32,
    cudagraph_capture_sizes=(1, 2, 4, 8, 16, 24, 32),
    max_num_seqs=4,
    max_num_batched_tokens=2048,
    num_speculative_tokens=3,
    method="ngram",
    source="SERVE--k1-BENCH--c1/server_info.json",
)


def save(folder: Path, data: Any, combo: str = "SERVE--k1-BENCH--c1") -> Path:
    path = folder / combo / SERVER_INFO_FILE_GLOB
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """The response with the field at ``path`` (below vllm_config) set to ``value``."""
    data = copy.deepcopy(RESPONSE)
    target = data["vllm_config"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def test_the_real_shape_is_read(tmp_path: Path) -> None:
    save(tmp_path, RESPONSE)
    assert read_server_settings(tmp_path) == ([EXPECTED], [])


def test_a_bare_vllm_config_is_read_the_same(tmp_path: Path) -> None:
    save(tmp_path, RESPONSE["vllm_config"])
    assert read_server_settings(str(tmp_path)) == ([EXPECTED], [])


def test_a_server_without_speculation_has_no_k_and_no_problem(tmp_path: Path) -> None:
    save(tmp_path, changed(("speculative_config",), None))
    (settings,), problems = read_server_settings(tmp_path)
    assert problems == []
    assert (settings.num_speculative_tokens, settings.method) == (None, None)
    assert settings.max_cudagraph_capture_size == 32


def test_missing_fields_are_none_without_a_problem(tmp_path: Path) -> None:
    save(tmp_path, {"vllm_config": {"scheduler_config": {"max_num_seqs": 8}}})
    (settings,), problems = read_server_settings(tmp_path)
    assert problems == []
    assert settings == ServerSettings(None, None, 8, None, None, None, EXPECTED.source)


def test_every_file_at_any_depth_in_path_order(tmp_path: Path) -> None:
    for combo in ("b/SERVE--k3-BENCH--c1", "SERVE--k0-BENCH--c2", "a"):
        save(tmp_path, RESPONSE, combo)
    (tmp_path / "SERVE--k0-BENCH--c2" / "server_info.json.part").write_text("{")
    settings, problems = read_server_settings(tmp_path)
    assert problems == []
    assert [s.source for s in settings] == [
        "SERVE--k0-BENCH--c2/server_info.json",
        "a/server_info.json",
        "b/SERVE--k3-BENCH--c1/server_info.json",
    ]


def test_no_saved_config_is_no_settings_and_no_problem(tmp_path: Path) -> None:
    assert read_server_settings(tmp_path) == ([], [])


@pytest.mark.parametrize(
    ("path", "value", "field", "expected"),
    [
        (
            ("compilation_config", "max_cudagraph_capture_size"),
            "512",
            "vllm_config.compilation_config.max_cudagraph_capture_size",
            SIZE,
        ),
        (
            ("compilation_config", "max_cudagraph_capture_size"),
            -1,
            "vllm_config.compilation_config.max_cudagraph_capture_size",
            SIZE,
        ),
        (
            ("compilation_config", "cudagraph_capture_sizes"),
            [1, "2"],
            "vllm_config.compilation_config.cudagraph_capture_sizes",
            f"a list of whole numbers from 0 to {LARGEST_WHOLE_NUMBER}, or null",
        ),
        (
            ("scheduler_config", "max_num_seqs"),
            True,
            "vllm_config.scheduler_config.max_num_seqs",
            COUNT,
        ),
        (
            ("scheduler_config", "max_num_batched_tokens"),
            0,
            "vllm_config.scheduler_config.max_num_batched_tokens",
            COUNT,
        ),
        (
            ("speculative_config", "num_speculative_tokens"),
            2.5,
            "vllm_config.speculative_config.num_speculative_tokens",
            SIZE,
        ),
        (
            ("speculative_config", "method"),
            7,
            "vllm_config.speculative_config.method",
            "a string, or null",
        ),
        (
            ("scheduler_config",),
            [4],
            "vllm_config.scheduler_config",
            "an object, or null",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_named_and_the_rest_read(
    tmp_path: Path, path: tuple[str, ...], value: Any, field: str, expected: str
) -> None:
    file = save(tmp_path, changed(path, value))
    (settings,), (problem,) = read_server_settings(tmp_path)
    assert problem.severity is Severity.WARNING
    assert problem.rule == "invalid-server-info"
    assert (problem.files, problem.field, problem.expected) == ((str(file),), field, expected)
    assert problem.value == (repr(value) if isinstance(value, str) else json.dumps(value))
    assert "Traceback" not in problem.describe()
    # The bad field is unknown; the other sections are still read.
    bad = "max_num_seqs" if path == ("scheduler_config",) else path[-1]
    assert getattr(settings, bad) is None
    if path[0] != "compilation_config":
        assert settings.max_cudagraph_capture_size == EXPECTED.max_cudagraph_capture_size
    if path[0] != "speculative_config":
        assert settings.method == EXPECTED.method


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("compilation_config", "max_cudagraph_capture_size"), SIZE),
        (("scheduler_config", "max_num_seqs"), COUNT),
        (("scheduler_config", "max_num_batched_tokens"), COUNT),
        (("speculative_config", "num_speculative_tokens"), SIZE),
    ],
)
@pytest.mark.parametrize("value", [2**31, 10**300, 1e300], ids=["2^31", "10^300", "1e300"])
def test_a_setting_beyond_every_count_is_unknown_never_taken(
    tmp_path: Path, path: tuple[str, ...], expected: str, value: float
) -> None:
    """Issue 38: a huge C or max_num_seqs was taken and printed as a 301-digit range, then
    dropped by the result reader. One limit for every count: 2^31 - 1 is taken, above is not."""
    save(tmp_path, changed(path, value))
    (settings,), (problem,) = read_server_settings(tmp_path)
    assert (problem.rule, problem.field) == (
        "invalid-server-info",
        ".".join(("vllm_config", *path)),
    )
    assert problem.expected == expected
    assert getattr(settings, path[-1]) is None
    save(tmp_path, changed(path, LARGEST_WHOLE_NUMBER))
    (settings,), problems = read_server_settings(tmp_path)
    assert problems == [] and getattr(settings, path[-1]) == LARGEST_WHOLE_NUMBER


def test_capture_sizes_beyond_every_count_are_unknown(tmp_path: Path) -> None:
    save(tmp_path, changed(("compilation_config", "cudagraph_capture_sizes"), [1, 2**31]))
    (settings,), (problem,) = read_server_settings(tmp_path)
    assert problem.field == "vllm_config.compilation_config.cudagraph_capture_sizes"
    assert settings.cudagraph_capture_sizes is None


def test_whole_floats_are_whole_numbers(tmp_path: Path) -> None:
    save(tmp_path, changed(("compilation_config", "max_cudagraph_capture_size"), 32.0))
    (settings,), problems = read_server_settings(tmp_path)
    assert problems == []
    assert settings.max_cudagraph_capture_size == 32


@pytest.mark.parametrize(
    ("text", "rule", "message"),
    [
        ('{"vllm_config": ', "invalid-json", "not valid JSON"),
        ("[1, 2]", "invalid-server-info", "not usable"),
        (json.dumps({"vllm_config": "ModelConfig(...)"}), "invalid-server-info", "not usable"),
        (json.dumps({"vllm_env": {}}), "invalid-server-info", "not usable"),
    ],
)
def test_a_file_that_holds_no_config_is_a_warning_and_no_settings(
    tmp_path: Path, text: str, rule: str, message: str
) -> None:
    file = save(tmp_path, text)
    settings, (problem,) = read_server_settings(tmp_path)
    assert settings == []
    assert (problem.severity, problem.rule, problem.files) == (
        Severity.WARNING,
        rule,
        (str(file),),
    )
    assert message in problem.message


def test_the_text_form_is_refused_saying_which_form_to_save(tmp_path: Path) -> None:
    save(tmp_path, {"vllm_config": "model='tiny', speculative_config=None"})
    _, (problem,) = read_server_settings(tmp_path)
    assert problem.field == "vllm_config"
    assert problem.expected is not None and "config_format=json" in problem.expected


def test_a_link_leading_outside_is_not_read(tmp_path: Path) -> None:
    outside = save(tmp_path / "elsewhere", RESPONSE)
    root = tmp_path / "experiment"
    inside = save(root, RESPONSE, "SERVE--k1-BENCH--c2")
    (root / "SERVE--k1-BENCH--c1").mkdir()
    (root / "SERVE--k1-BENCH--c1" / SERVER_INFO_FILE_GLOB).symlink_to(outside)
    (root / "SERVE--k3-BENCH--c1").mkdir()
    (root / "SERVE--k3-BENCH--c1" / SERVER_INFO_FILE_GLOB).symlink_to(inside)
    settings, (problem,) = read_server_settings(root)
    assert [s.source for s in settings] == [
        "SERVE--k1-BENCH--c2/server_info.json",
        "SERVE--k3-BENCH--c1/server_info.json",
    ]
    assert "leads outside" in problem.message


def test_reading_loads_neither_polars_nor_numpy() -> None:
    probe = "import sys, lib.server_info; print(sorted({'polars', 'numpy'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_real_cpu_sample_reports_its_servers() -> None:
    """The configs real vLLM (0.32.0, CPU) saved through the plan's run script: one per combo,
    each server's max_num_seqs as planned, the global K every server started with; a CPU has
    no CUDA graphs, so vLLM reports no ceiling (null) and no capture sizes ([])."""
    sample = SAMPLE_SWEEPS / "real-cpu-server-info"
    if not sample.is_dir():
        pytest.skip(f"{sample} has not been committed yet")
    settings, problems = read_server_settings(sample)
    assert problems == []
    assert len(settings) == len(list(sample.glob("SERVE--*")))
    assert {s.max_num_seqs for s in settings} == {4}
    assert {s.num_speculative_tokens for s in settings} == {3}
    assert {s.method for s in settings} == {"ngram"}
    assert {s.max_num_batched_tokens for s in settings} == {2048}
    assert {(s.max_cudagraph_capture_size, s.cudagraph_capture_sizes) for s in settings} == {
        (None, ())
    }


def test_the_release_and_the_gpu_are_read_from_system_env(tmp_path: Path) -> None:
    # vLLM's collect_env, as data/sample_sweeps/real-cpu-server-info holds it (0.32.0, CPU).
    data = copy.deepcopy(RESPONSE)
    data["system_env"] = {
        "vllm_version": "0.34.0",
        "nvidia_gpu_models": "GPU 0: NVIDIA H100 80GB HBM3\nGPU 1: NVIDIA H100 80GB HBM3",
    }
    save(tmp_path, data)
    (settings,), problems = read_server_settings(tmp_path)
    assert problems == []
    assert settings.vllm_version == "0.34.0"
    assert settings.gpu_models is not None and settings.gpu_models.startswith("GPU 0: NVIDIA H100")


def test_the_real_sample_states_its_release(tmp_path: Path) -> None:
    from paths import SAMPLE_SWEEPS

    settings, _ = read_server_settings(SAMPLE_SWEEPS / "real-cpu-server-info")
    assert {s.vllm_version for s in settings} == {"0.32.0"}
    assert {s.gpu_models for s in settings} == {None}  # a CPU server


def test_a_system_env_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    data = copy.deepcopy(RESPONSE)
    data["system_env"] = {"vllm_version": 34, "nvidia_gpu_models": ""}
    save(tmp_path, data)
    (settings,), problems = read_server_settings(tmp_path)
    assert (settings.vllm_version, settings.gpu_models) == (None, None)
    assert [(p.field, p.value) for p in problems] == [
        ("system_env.vllm_version", "34"),
        ("system_env.nvidia_gpu_models", "''"),
    ]
    data["system_env"] = ["0.34.0"]
    save(tmp_path, data)
    _, problems = read_server_settings(tmp_path)
    assert [p.field for p in problems] == ["system_env"]


def test_the_0_34_decode_fields_are_read(tmp_path: Path) -> None:
    """engines-2026-12.md 1b: 0.34's compilation_config states the decode graphs by requests
    and the token graphs' sizes (their largest is C0)."""
    compilation = {
        "max_cudagraph_capture_size": 1024,
        "decode_cudagraph_capture_request_sizes": [1, 2, 4, 8, 16, 24, 32],
        "max_decode_cudagraph_capture_requests": 32,
        "max_decode_cudagraph_capture_tokens": None,
        "prefill_cudagraph_capture_token_sizes": [1, 2, 4, 8, 496, 512],
    }
    save(tmp_path, changed(("compilation_config",), compilation))
    (settings,), problems = read_server_settings(tmp_path)
    assert problems == []
    assert settings.max_decode_cudagraph_capture_requests == 32
    assert settings.decode_cudagraph_capture_request_sizes == (1, 2, 4, 8, 16, 24, 32)
    assert settings.max_decode_cudagraph_capture_tokens is None
    assert settings.prefill_ceiling == 512
    save(
        tmp_path,
        changed(
            ("compilation_config",), {**compilation, "max_prefill_cudagraph_capture_tokens": 256}
        ),
    )
    (settings,), _ = read_server_settings(tmp_path)
    assert settings.prefill_ceiling == 256
    bad = {**compilation, "prefill_cudagraph_capture_token_sizes": [1, -2]}
    save(tmp_path, changed(("compilation_config",), bad))
    (settings,), problems = read_server_settings(tmp_path)
    assert settings.prefill_ceiling is None
    assert [p.field for p in problems] == [
        "vllm_config.compilation_config.prefill_cudagraph_capture_token_sizes"
    ]
