"""The `tune-spec-k` command line: exit codes, where it writes, what it prints, the JSON it
writes (the seed's keys, in the seed's order, byte-identical run to run), and the published
schedules on the sample sweeps.

The good sweep is built in ``tmp_path``; nothing is ever written into the repository.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confidence_helpers import LEAN
from paths import BAD_INPUTS, REPO
from seed_outputs import SEED_CANDIDATE_KEYS, SEED_DECISION_KEYS, SEED_KEYS, SEED_SELECTION_KEYS
from signal_runs import EXPECTED_STATUS, stop_at, temporaries
from sweep_builder import DEFAULT_GLOBAL_K, write_grid

from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.settings import RESULT_FILE

SAMPLE_SWEEPS = REPO / "data" / "sample_sweeps"
BAD_SWEEP = BAD_INPUTS / "three-problems"
SIGMA = 1.4826  # robust sigma per unit of (unscaled) MAD

# Output throughput (tok/s) of 3 runs per (anchor, K). Expected schedule, by hand
# (median; MAD = median of |x - median|; conservative = median - 1.4826 * MAD; ties within 1 %
# of the best conservative score go to the smallest K):
#
# anchor 1:  K=0 [100, 102, 98]      median 100,  MAD median(0, 2, 2)   = 2  -> 97.0348
#            K=2 [150, 153, 148]     median 150,  MAD median(0, 3, 2)   = 2  -> 147.0348
#            K=4 [151, 160, 140]     median 151,  MAD median(0, 9, 11)  = 9  -> 137.6566
#            best K=2; K=4 has the higher median but its spread costs it (ratio 0.936): K=2.
# anchor 8:  K=0 [500, 505, 495]     median 500,  MAD 5                      -> 492.587
#            K=2 [600, 606, 597]     median 600,  MAD median(0, 6, 3)   = 3  -> 595.5522
#            K=4 [603, 604, 602]     median 603,  MAD 1                      -> 601.5174
#            best K=4; K=2 at 595.5522 / 601.5174 = 0.99008 >= 0.99 ties and is smaller: K=2.
# anchor 32: K=0 [2000, 2010, 1990]  median 2000, MAD 10                     -> 1985.174
#            K=2 [1500, 1510, 1495]  median 1500, MAD median(0, 10, 5)  = 5  -> 1492.587
#            K=4 [1200, 1190, 1212]  median 1200, MAD median(0, 10, 12) = 10 -> 1185.174
#            best K=0.
# Picks 2, 2, 0: anchor 1 covers [1, 7], anchor 8 [8, 31] (same K: merged), anchor 32 [32, 32].
GOOD_RUNS = {
    (1, 0): [100.0, 102.0, 98.0],
    (1, 2): [150.0, 153.0, 148.0],
    (1, 4): [151.0, 160.0, 140.0],
    (8, 0): [500.0, 505.0, 495.0],
    (8, 2): [600.0, 606.0, 597.0],
    (8, 4): [603.0, 604.0, 602.0],
    (32, 0): [2000.0, 2010.0, 1990.0],
    (32, 2): [1500.0, 1510.0, 1495.0],
    (32, 4): [1200.0, 1190.0, 1212.0],
}
GOOD_SCHEDULE = [[1, 31, 2], [32, 32, 0]]
GOOD_ANCHORS = [1, 8, 32]

SEED_FLAGS = [
    "--output-json",
    "--batch-size-var",
    "--k-var",
    "--objective-var",
    "--objective-direction",
    "--acceptance-var",
    "--min-runs",
    "--uncertainty-penalty",
    "--max-objective-relative-mad",
    "--max-acceptance-relative-mad",
    "--strict-acceptance-stability",
    "--relative-tolerance",
    "--max-batch-size",
]


@pytest.fixture
def good_sweep(tmp_path: Path) -> Path:
    return write_grid(tmp_path / "good sweep", GOOD_RUNS)


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _run_process(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lib.cli", *argv],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --------------------------------------------------------------------------- exit codes


def test_good_sweep_exits_0_and_writes_beside_the_sweep(
    good_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _main(capsys, good_sweep)
    assert code == EXIT_OK, err
    assert err == ""
    written = good_sweep / RESULT_FILE
    assert written.is_file()
    assert out.splitlines()[-1] == f"Wrote {written}"


def test_output_json_elsewhere(
    good_sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "elsewhere" / "my schedule.json"
    output.parent.mkdir()
    code, out, _ = _main(capsys, good_sweep, "--output-json", output)
    assert code == EXIT_OK
    assert _read(output)["num_speculative_tokens_per_batch_size"] == GOOD_SCHEDULE
    assert not (good_sweep / RESULT_FILE).exists()
    assert out.splitlines()[-1] == f"Wrote {output}"


def test_bad_sweep_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "schedule.json"
    code, out, err = _main(capsys, BAD_SWEEP, "--output-json", output)
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert "no schedule written" in err
    assert not output.exists()


def test_unwritable_output_exits_2(good_sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (good_sweep / "not a folder").write_text("")
    output = good_sweep / "not a folder" / "schedule.json"
    code, out, err = _main(capsys, good_sweep, "--output-json", output)
    assert code == EXIT_BAD_INPUT
    assert f"[unwritable-file] cannot write the file: Not a directory in {output}" in err
    assert "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--relative-tolerance", "1.5"], ["--relative-tolerance 1.5", "[0, 1)"]),
        (["--relative-tolerance", "-0.1"], ["--relative-tolerance -0.1"]),
        (["--uncertainty-penalty", "-1"], ["--uncertainty-penalty -1.0", ">= 0"]),
        # inf cannot be written to the output JSON: refused up front, not a traceback later.
        (["--uncertainty-penalty", "inf"], ["--uncertainty-penalty inf", "finite"]),
        (["--max-objective-relative-mad", "nan"], ["--max-objective-relative-mad nan"]),
        (["--min-runs", "0"], ["--min-runs 0", ">= 1"]),
        (["--max-batch-size", "64"], ["--max-batch-size", "64", "32"]),
        # The loader's own columns: "source" is text, "k" the grid itself.
        (["--objective-var", "source"], ["--objective-var 'source'", "not a measurement"]),
        (["--objective-var", "k"], ["--objective-var 'k'", "not a measurement"]),
        (["--acceptance-var", "combo"], ["--acceptance-var 'combo'", "not a measurement"]),
        # The server model's two settings: a relative sd in [0, 1), a marker name.
        (["--server-cv", "1"], ["--server-cv 1.0", "[0, 1)"]),
        (["--server-cv", "-0.001"], ["--server-cv -0.001", "[0, 1)"]),
        (["--server-cv", "nan"], ["--server-cv nan", "[0, 1)"]),
        # The assumed run noise of lean sweeps: a relative sd in [0, 1) too (0: assume nothing).
        (["--run-cv", "1"], ["--run-cv 1.0", "[0, 1)"]),
        (["--run-cv", "-0.001"], ["--run-cv -0.001", "[0, 1)"]),
        (["--run-cv", "inf"], ["--run-cv inf", "[0, 1)"]),
        (["--replica-var", "seed=1"], ["--replica-var 'seed=1'", "without '-', '=' or '/'"]),
        (["--replica-var", ""], ["--replica-var ''", "serve parameter's name"]),
        # The release: a version number, of a vLLM with Dynamic SD (0.24.0 and newer).
        (["--vllm-version", "latest"], ["--vllm-version latest", "version number"]),
        (["--vllm-version", "0.23.9"], ["--vllm-version 0.23.9", "0.24 and newer"]),
        # The GPU the engines' defaults read: a positive finite GiB, a parallelism >= 1.
        (["--gpu-memory-gib", "0"], ["--gpu-memory-gib 0", "a number of GiB > 0"]),
        (["--gpu-memory-gib", "nan"], ["--gpu-memory-gib nan", "a number of GiB > 0"]),
        (["--tensor-parallel-size", "0"], ["--tensor-parallel-size 0", ">= 1"]),
        # vLLM 0.34's explicit decode settings: whole numbers >= 1.
        (
            ["--max-decode-cudagraph-capture-requests", "0"],
            ["--max-decode-cudagraph-capture-requests 0", ">= 1"],
        ),
        (
            ["--max-decode-cudagraph-capture-tokens", "-8"],
            ["--max-decode-cudagraph-capture-tokens -8", ">= 1"],
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_bad_setting_exits_2_naming_the_flag(
    flags: list[str], named: list[str], good_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _main(capsys, good_sweep, *flags)
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if all(piece in line for piece in named)]
    assert lines, f"no stderr line names {named}:\n{err}"
    assert not (good_sweep / RESULT_FILE).exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--bogus-flag"], "--bogus-flag"),
        (["--relative-tolerance", "abc"], "--relative-tolerance"),
        (["--objective-direction", "sideways"], "--objective-direction"),
        (["--min-runs", str(10**23)], "--min-runs"),
        (["--max-batch-size", str(2**63)], "--max-batch-size"),
    ],
    ids=["unknown flag", "not a number", "not a choice", "huge run count", "huge batch size"],
)
def test_argparse_errors_exit_2_naming_the_flag(
    flags: list[str], named: str, good_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([str(good_sweep), *flags])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert named in err
    assert "Traceback" not in err
    assert not (good_sweep / RESULT_FILE).exists()


def test_help_mentions_every_seed_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    text = capsys.readouterr().out
    assert "EXPERIMENT_DIR" in text
    missing = [flag for flag in SEED_FLAGS if flag not in text]
    assert not missing


# --------------------------------------------------------------------------- stdout


def test_stdout_structure(good_sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(capsys, good_sweep)
    assert code == EXIT_OK
    lines = out.splitlines()
    written = _read(good_sweep / RESULT_FILE)
    # The seed's lines: the schedule, one line per anchor; then tune-spec-k's additions
    # (confidence status per anchor, switch points, plan); then the deploy line and the path.
    assert json.loads(lines[0]) == written["num_speculative_tokens_per_batch_size"]
    assert json.loads(lines[0]) == GOOD_SCHEDULE
    # Each anchor's line exactly as the seed prints it, from the JSON it wrote.
    for line, decision in zip(lines[1:4], written["batch_decisions"], strict=True):
        assert line == (
            f"batch_size={decision['batch_size']}: K={decision['selected_k']},"
            f" conservative_objective={decision['selected_conservative_objective']:.2f},"
            f" vs_best={decision['selected_vs_best_percent']:.2f}%,"
            f" vs_k0={decision['selected_vs_k0_percent']}"
        )
    assert [d["selected_k"] for d in written["batch_decisions"]] == [2, 2, 0]
    # Then tune-spec-k's line per anchor, on lines of their own.
    details = lines[4:7]
    for line, anchor, k in zip(details, GOOD_ANCHORS, [2, 2, 0], strict=True):
        assert line.startswith(f"anchor {anchor}: K={k} median="), line
    statuses = [line for line in lines if line.split(":")[0].startswith("batch_size=")][3:]
    assert [line.split(":")[0] for line in statuses] == [f"batch_size={a}" for a in GOOD_ANCHORS]
    assert all(" resolved" in line or " unresolved" in line for line in statuses)
    deploy = shlex.split(lines[-2])
    assert deploy[0] == "--speculative-config"
    config = json.loads(deploy[1])
    assert config["num_speculative_tokens_per_batch_size"] == GOOD_SCHEDULE
    assert config["num_speculative_tokens"] == DEFAULT_GLOBAL_K
    assert config["method"] == "eagle3"  # shared by every run of the sweep
    assert lines[-1] == f"Wrote {good_sweep / RESULT_FILE}"


def test_anchor_lines_show_the_hand_computed_scores(
    good_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = _main(capsys, good_sweep)
    seed_line, detail = out.splitlines()[1], out.splitlines()[4]
    # K=2 at anchor 1: median 150, conservative 150 - 1.4826 * 2 = 147.0348, and against
    # K=0 (97.0348): 147.0348 / 97.0348 - 1 = +51.53 %.
    assert "conservative_objective=147.03, vs_best=0.00%" in seed_line
    # The seed prints vs_k0 unrounded, as Python writes the float.
    vs_k0 = float(seed_line.rsplit("vs_k0=", 1)[1])
    assert vs_k0 == pytest.approx((147.0348 / 97.0348 - 1) * 100)
    assert "median=150.00" in detail
    assert "conservative=147.03" in detail
    assert "vs_k0=+51.53%" in detail


# --------------------------------------------------------------------------- the JSON file


def test_json_has_the_seed_keys_in_order(
    good_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _main(capsys, good_sweep)
    data = _read(good_sweep / RESULT_FILE)
    assert tuple(data)[: len(SEED_KEYS)] == SEED_KEYS
    assert tuple(data["selection"])[: len(SEED_SELECTION_KEYS)] == SEED_SELECTION_KEYS
    for decision in data["batch_decisions"]:
        # The seed's keys in order, then the confidence block (issue: decision confidence).
        assert list(decision) == [*SEED_DECISION_KEYS, "confidence"]
        assert decision["confidence"]["status"] in ("resolved", "unresolved")
        for candidate in decision["candidates"]:
            # The seed's keys in order, then the effective batch (lib/effective_batch.py).
            assert list(candidate) == [*SEED_CANDIDATE_KEYS, "effective_batch_size"]


def test_json_values_match_the_hand_computation(
    good_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _main(capsys, good_sweep)
    data = _read(good_sweep / RESULT_FILE)
    assert data["num_speculative_tokens_per_batch_size"] == GOOD_SCHEDULE
    assert data["configured_global_num_speculative_tokens"] == DEFAULT_GLOBAL_K
    assert data["max_num_speculative_tokens_observed"] == 4
    assert data["input_summary_files"] == sorted(
        f"SERVE--k{k}-BENCH--c{anchor}/summary.json" for anchor, k in GOOD_RUNS
    )
    selection = data["selection"]
    assert selection["batch_size_metric"] == "max_concurrency"
    assert selection["k_metric"] == "speculative_config.num_speculative_tokens_per_batch_size"
    assert selection["objective_metric"] == "output_throughput"
    assert selection["objective_direction"] == "maximize"
    assert selection["acceptance_metric"] is None
    assert selection["relative_tolerance"] == 0.01
    assert selection["max_batch_size"] == 32

    decisions = {decision["batch_size"]: decision for decision in data["batch_decisions"]}
    assert sorted(decisions) == GOOD_ANCHORS
    assert [decisions[a]["selected_k"] for a in GOOD_ANCHORS] == [2, 2, 0]

    anchor_1 = {c["k"]: c for c in decisions[1]["candidates"]}
    assert sorted(anchor_1) == [0, 2, 4]
    wide = anchor_1[4]
    assert wide["num_runs"] == 3
    assert wide["median_objective"] == pytest.approx(151.0)
    assert wide["mad_objective"] == pytest.approx(9.0)
    assert wide["conservative_objective"] == pytest.approx(151.0 - SIGMA * 9)
    assert wide["objective_relative_mad"] == pytest.approx(9 / 151)
    assert wide["median_acceptance"] is None  # no --acceptance-var
    assert decisions[1]["selected_median_objective"] == pytest.approx(150.0)
    assert decisions[1]["selected_conservative_objective"] == pytest.approx(150 - SIGMA * 2)
    assert decisions[1]["selected_vs_best_percent"] == pytest.approx(0.0)
    assert decisions[1]["selected_vs_k0_percent"] == pytest.approx(
        ((150 - SIGMA * 2) / (100 - SIGMA * 2) - 1) * 100
    )
    # Anchor 8: K=2 won a tie against the better-scoring K=4, so it is below the best.
    assert decisions[8]["selected_vs_best_percent"] == pytest.approx(
        ((600 - SIGMA * 3) / (603 - SIGMA * 1) - 1) * 100
    )
    assert decisions[32]["selected_vs_k0_percent"] == pytest.approx(0.0)


def test_flags_reach_the_policy(good_sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No penalty, no tolerance: the highest median wins everywhere. By hand: anchor 1 K=4
    (151 > 150), anchor 8 K=4 (603 > 600), anchor 32 K=0 (2000): [[1, 31, 4], [32, 32, 0]]."""
    code, out, _ = _main(
        capsys, good_sweep, "--uncertainty-penalty", "0", "--relative-tolerance", "0"
    )
    assert code == EXIT_OK
    assert json.loads(out.splitlines()[0]) == [[1, 31, 4], [32, 32, 0]]
    selection = _read(good_sweep / RESULT_FILE)["selection"]
    assert selection["uncertainty_penalty"] == 0.0
    assert selection["relative_tolerance"] == 0.0


# --------------------------------------------------------------------------- determinism


def test_two_runs_write_identical_bytes(
    good_sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    _main(capsys, good_sweep, "--output-json", first)
    _main(capsys, good_sweep, "--output-json", second)
    assert first.read_bytes() == second.read_bytes()


def test_processes_with_different_hash_seeds_write_identical_bytes(
    good_sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    for seed in ("0", "4242"):
        output = tmp_path / f"seed-{seed}.json"
        completed = _run_process(
            [str(good_sweep), "--output-json", str(output)], PYTHONHASHSEED=seed
        )
        assert completed.returncode == EXIT_OK, completed.stderr
        assert "Traceback" not in completed.stderr
        outputs.append(output.read_bytes())
    in_process = tmp_path / "in-process.json"
    _main(capsys, good_sweep, "--output-json", in_process)
    assert outputs[0] == outputs[1] == in_process.read_bytes()


# --------------------------------------------------------------------------- sample sweeps


def _sample(name: str) -> Path:
    folder = SAMPLE_SWEEPS / name
    if not folder.is_dir():
        pytest.skip(f"sample sweep {folder} not found (generate it with data/sample_sweeps/)")
    return folder


@pytest.mark.parametrize(
    ("sample", "flags", "schedule"),
    [
        # The seed's published results (vLLM PR #49163): Sonnet prompts pay at batch 1 only;
        # random tokens never pay, whatever the objective.
        ("sonnet-like", [], [[1, 63, 7], [64, 256, 0]]),
        ("random-control", [], [[1, 256, 0]]),
        (
            "random-control",
            ["--objective-var", "median_tpot_ms", "--objective-direction", "minimize"],
            [[1, 256, 0]],
        ),
        ("random-control", ["--objective-var", "request_goodput"], [[1, 256, 0]]),
    ],
    ids=["sonnet-like", "random-control", "random-control-tpot", "random-control-goodput"],
)
def test_published_schedules_on_the_samples(
    sample: str,
    flags: list[str],
    schedule: list[list[int]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "schedule.json"
    code, out, err = _main(capsys, _sample(sample), *flags, "--output-json", output)
    assert code == EXIT_OK, err
    assert out.splitlines()[0] == json.dumps(schedule)
    assert _read(output)["num_speculative_tokens_per_batch_size"] == schedule


def test_moe_keeps_k3_on_0_34_and_caps_as_before_on_0_33(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39's "done when": on moe-non-monotone ([[1,63,3],[64,127,1],[128,255,3],
    [256,256,0]], K=7, C0=512) vLLM 0.34's smallest K=0 sets R = min(max_num_seqs, 512), so
    129-255 at K=3 (516-1020 tokens) run FULL graphs (engines-2026-12.md 1b's harness run):
    kept, and the capture line says why. On 0.33 they run without graphs (129 * 4 = 516 >
    512): named with C assumed, capped with C given, as before."""
    tuned = [[1, 63, 3], [64, 127, 1], [128, 255, 3], [256, 256, 0]]
    moe = _sample("moe-non-monotone")
    output = tmp_path / "r.json"
    code, out, err = _main(capsys, moe, "--vllm-version", "0.34.0", "--output-json", output)
    assert code == EXIT_OK, err
    assert out.splitlines()[0] == json.dumps(tuned)
    (line,) = [line for line in out.splitlines() if line.startswith("capture ceiling:")]
    assert line.startswith("capture ceiling: vLLM 0.34.0 (from --vllm-version)")
    assert "(129-255 at K=3 past C0=512 too: not capped)" in line
    assert "graphless-range" not in err and "capped-range" not in err
    assert "note [full-graph-past-ceiling] batch sizes 129-255 run K=3" in err
    block = _read(output)["deployment"]
    assert block["capture_ceiling"]["capture_rule"] == "decode-requests"
    assert block["capture_ceiling"]["decode_request_ceiling"] == 512
    assert block["full_past_ceiling"][0]["lo"] == 129
    code, out, err = _main(
        capsys, moe, "--vllm-version", "0.33.0", "--max-cudagraph-capture-size", "512",
        "--output-json", output,
    )  # fmt: skip
    assert code == EXIT_OK, err
    # 512 // 3 = 170: K=2 to 170; 512 // 2 = 256: K=1 to 255 (the 0.33 repair).
    assert json.loads(out.splitlines()[0]) == [
        [1, 63, 3], [64, 127, 1], [128, 128, 3], [129, 170, 2], [171, 255, 1], [256, 256, 0]
    ]  # fmt: skip
    assert "expected loss 22.7% against K=3" in err
    code, out, err = _main(capsys, moe, "--vllm-version", "0.33.0", "--output-json", output)
    assert out.splitlines()[0] == json.dumps(tuned)
    assert "warning [graphless-range] batch sizes 129-255 run K=3" in err


def test_an_explicit_decode_request_ceiling_flag_on_sonnet_like(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """engines-2026-12.md 1b's harness row "explicit max_decode_cudagraph_capture_requests=32,
    sonnet-like: 1-32 FULL; 33-63 K=7 PIECEWISE; 64-256 K=0 PIECEWISE", through the flag:
    33-63 at K=7 is 264-504 tokens and 64-256 at K=0 64-256 tokens, all <= C0=512 (assumed),
    so PIECEWISE, not none. On 0.33 the flag is ignored and the capture line says so."""
    sonnet = _sample("sonnet-like")
    flag = ["--max-decode-cudagraph-capture-requests", "32"]
    code, out, err = _main(capsys, sonnet, "--vllm-version", "0.34.0", *flag)
    assert code == EXIT_OK, err
    assert out.splitlines()[0] == "[[1, 63, 7], [64, 256, 0]]"  # not capped
    (line,) = [line for line in out.splitlines() if line.startswith("capture ceiling:")]
    assert "R=32: every batch size up to 256 runs a FULL or PIECEWISE CUDA graph" in line
    why = (
        "past vLLM 0.34's decode request ceiling R=32 (explicit:"
        " max_decode_cudagraph_capture_requests from --max-decode-cudagraph-capture-requests)"
    )
    assert (
        "warning [piecewise-range] batch sizes 33-63 run K=7 at 264-504 tokens per decode step"
        f" in PIECEWISE CUDA graphs, not FULL: {why}; raise it:"
        " -cc.max_decode_cudagraph_capture_requests=63"
    ) in err
    assert (
        "warning [piecewise-range] batch sizes 64-256 run K=0 at 64-256 tokens per decode step"
        f" in PIECEWISE CUDA graphs, not FULL: {why}; raise it:"
        " -cc.max_decode_cudagraph_capture_requests=256"
    ) in err
    # Without it 0.34's own R = min(S, 512 // 1) covers 1-256: no PIECEWISE range.
    code, out, err = _main(capsys, sonnet, "--vllm-version", "0.34.0")
    assert code == EXIT_OK and "piecewise-range" not in err
    code, out, err = _main(capsys, sonnet, "--vllm-version", "0.33.0", *flag)
    assert code == EXIT_OK, err
    assert "piecewise-range" not in err
    (line,) = [line for line in out.splitlines() if line.startswith("capture ceiling:")]
    assert (
        "; --max-decode-cudagraph-capture-requests ignored: vLLM 0.33.0 keys its decode CUDA"
        " graphs by tokens per step, not by requests"
    ) in line


# --------------------------------------------------------------------------- a read-only default


@pytest.mark.parametrize("how", ["read-only folder", "a folder in the way"])
def test_a_default_output_that_cannot_be_written_still_prints_the_analysis(
    good_sweep: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    code, expected, _ = _main(capsys, good_sweep, "--output-json", elsewhere)
    assert code == EXIT_OK
    default = good_sweep / RESULT_FILE
    if how == "read-only folder":
        # The experiment folder of a shared data set; chmod 555 does not stop root.
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m: Path(p) != good_sweep and real(p, m))
        reason = "Permission denied"
    else:
        default.mkdir()
        reason = "Is a directory"
    before = sorted(good_sweep.rglob("*"))
    plan = tmp_path / "plan.json"
    code, out, err = _main(capsys, good_sweep, "--plan-json", plan)
    assert code == EXIT_BAD_INPUT
    # The analysis, as a good run prints it, but for the line saying where it was written.
    assert out.splitlines() == expected.splitlines()[:-1]
    assert err.splitlines() == [
        "tune-spec-k: nothing written: 1 problem(s) with --output-json",
        f"  error [unwritable-file] cannot write the file: {reason} in {default}",
        "tune-spec-k: the output above is not saved: choose a path with --output-json PATH",
    ]
    assert not plan.exists() and sorted(good_sweep.rglob("*")) == before


# --------------------------------------------------------------------------- hostile names

FORGED = "\nerror [forged] all is well\r\x1b[2K\u2028"


def test_control_characters_in_paths_print_escaped(
    good_sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    combo = next(path for path in good_sweep.iterdir() if path.is_dir())
    forged_combo = combo.rename(combo.with_name(combo.name + FORGED))
    (forged_combo / "warmup.json").write_text("{}")  # a note naming the file
    output = tmp_path / f"out{FORGED}.json"
    code, out, err = _main(capsys, good_sweep, "--output-json", output)
    assert code == EXIT_OK
    assert output.is_file()
    escaped = "\\nerror [forged] all is well\\r\\x1b[2K\\u2028"
    assert out.splitlines()[-1] == f"Wrote {tmp_path}/out{escaped}.json"
    (note,) = err.splitlines()
    assert note.startswith("note [warmup-ignored]") and escaped in note
    assert not any(line.startswith("error [forged]") for line in (out + err).splitlines())


def test_bytes_that_are_not_utf8_in_paths_print_escaped(good_sweep: Path, tmp_path: Path) -> None:
    odd = os.fsdecode(b"-\xff\xfe")
    sweep = good_sweep.rename(good_sweep.with_name(good_sweep.name + odd))
    output = tmp_path / f"out{odd}.json"
    # A UTF-8 terminal that refuses what is not UTF-8 (as most locales set it).
    strict = {"PYTHONIOENCODING": "utf-8:strict"}
    completed = _run_process([str(sweep), "--output-json", str(output)], **strict)
    assert completed.returncode == EXIT_OK, completed.stderr
    assert output.is_file()
    assert completed.stdout.splitlines()[-1] == f"Wrote {tmp_path}/out-\\xff\\xfe.json"
    completed = _run_process(["diff", str(output), str(sweep)], **strict)
    assert completed.returncode == EXIT_OK, completed.stderr
    assert completed.stdout.splitlines()[:2] == [
        f"A: {json.dumps(GOOD_SCHEDULE)}  ({tmp_path}/out-\\xff\\xfe.json)",
        f"B: {json.dumps(GOOD_SCHEDULE)}  ({tmp_path}/good sweep-\\xff\\xfe)",
    ]


#: README's examples of `tune-spec-k SAMPLE` output: (the sample, the text just before the
#: command's output block).
README_EXAMPLES = {
    "sonnet-like": "uv run tune-spec-k data/sample_sweeps/sonnet-like\n```\nprints",
    "long-context": "uv run tune-spec-k data/sample_sweeps/long-context\n```\nprints",
    "lean": "uv run tune-spec-k data/sample_sweeps/lean --min-runs 1\n```\nprints",
}
#: The flags each README example passes after the folder (its command line above).
README_FLAGS = {"lean": ["--min-runs", "1"]}


def _readme_block(sample: str) -> list[str]:
    """The lines README says `tune-spec-k data/sample_sweeps/SAMPLE` prints."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(README_EXAMPLES[sample])
    block = text[text.index("```\n", start + len(README_EXAMPLES[sample])) + 4 :]
    return block[: block.index("```")].splitlines()


@pytest.mark.parametrize("sample", sorted(README_EXAMPLES))
def test_readme_examples_are_what_the_cli_prints(
    sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / RESULT_FILE
    folder = REPO / "data" / "sample_sweeps" / sample
    flags = README_FLAGS.get(sample, [])
    assert main([str(folder), *flags, "--output-json", str(out)]) == EXIT_OK
    printed = capsys.readouterr().out.splitlines()
    printed[-1] = printed[-1].replace(str(out), f"data/sample_sweeps/{sample}/{RESULT_FILE}")
    # README's lines, in order, are printed lines: whole, or up to "..." where one is cut;
    # a line "..." stands for lines left out.
    position = 0
    for line in _readme_block(sample):
        if line == "...":
            continue
        shown = line.removesuffix("...")
        found = next(
            (
                i
                for i in range(position, len(printed))
                if (printed[i].startswith(shown) if shown != line else printed[i] == line)
            ),
            None,
        )
        assert found is not None, f"README's {sample} line is not printed: {line!r}"
        position = found + 1


def _readme_sessions() -> list[list[str]]:
    """README's shell sessions: each fenced block whose first line starts with ``$ ``."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = text.split("```")[1::2]
    return [block.strip("\n").splitlines() for block in blocks if block.lstrip("\n")[:2] == "$ "]


def _shown_in(line: str, printed: list[str]) -> bool:
    """A README line is a printed line: whole, or up to "..." where it is cut."""
    shown = line.removesuffix("...")
    return any(p.startswith(shown) if shown != line else p == line for p in printed)


@pytest.mark.parametrize("session", _readme_sessions(), ids=lambda s: s[0][:60])
def test_readme_shell_sessions_are_what_the_cli_prints(
    session: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Every ``$ `` command of README's sessions run in a fresh folder (``DIR`` and
    ``data/sample_sweeps/...`` are the bundled samples, ``/tmp/...`` the test's folder; an
    ``echo 'X' > F`` writes F): each line shown after it is a line it printed, on stdout or
    stderr, whole or up to a "..." (a line that is "..." stands for lines left out)."""
    monkeypatch.chdir(tmp_path)
    samples = REPO / "data" / "sample_sweeps"
    # data/traffic/... (a captured mix) is read where README's command names it, relative to
    # the repository, and printed as given.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "traffic").symlink_to(REPO / "data" / "traffic")
    # The files README's sessions make (`echo 'X' > F`), whichever session makes them.
    for line in (line for other in _readme_sessions() for line in other):
        if line.startswith("$ echo "):
            text, _, name = shlex.split(line[2:])[1:]
            (tmp_path / name).write_text(text + "\n")
    commands: list[tuple[str, list[str]]] = []
    for line in session:
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands and line.strip() != "...":
            commands[-1][1].append(line)
    assert commands
    for command, shown in commands:
        words = shlex.split(command.replace("DIR", str(samples / "sonnet-like")))
        if words[0] == "echo":
            continue
        assert words[0] == "tune-spec-k", command
        arguments = [
            str(samples / w.removeprefix("data/sample_sweeps/"))
            if w.startswith("data/sample_sweeps/")
            else str(tmp_path / w.removeprefix("/tmp/"))
            if w.startswith("/tmp/")
            else w
            for w in words[1:]
        ]
        if "export" not in arguments[:1] and "--output-json" not in arguments:
            arguments += ["--output-json", str(tmp_path / "result.json")]
        main(arguments)
        captured = capsys.readouterr()
        printed = captured.out.splitlines() + captured.err.splitlines()
        missing = [line for line in shown if not _shown_in(line, printed)]
        assert missing == [], f"{command}: README's lines not printed"


# --------------------------------------------------------------------------- stopped by a signal


@pytest.fixture(scope="module")
def large_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/make_large_sweep.py's sweep, small (800 runs, 80 combo folders): read in three
    processes at 80 ms a file (tests/signal_runs.py), it takes two seconds to read."""
    spec = importlib.util.spec_from_file_location(
        "make_large_sweep", REPO / "bench" / "make_large_sweep.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path_factory.mktemp("large") / "sweep"
    module.write_sweep(root, 800, 10)
    return root


#: Seeded points at which each signal stops the command: one while the children read, one
#: later (the analysis, the write, or after the end: then the run simply succeeds).
_RANDOM = random.Random(38)
_STOPS = [
    (number, round(_RANDOM.uniform(*span), 2))
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)
    for span in ((0.3, 1.5), (1.5, 3.0))
]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes found in /proc")
@pytest.mark.parametrize(("number", "delay"), _STOPS)
def test_a_signal_stops_tuning_at_once_leaving_no_process_and_whole_files(
    large_sweep: Path, tmp_path: Path, number: int, delay: float
) -> None:
    out = tmp_path / "result.json"
    old = b'{"an": "earlier result"}\n'
    out.write_bytes(old)
    argv = [str(large_sweep), "--output-json", str(out)]
    stopped = stop_at(argv, number, delay, cwd=tmp_path, read_seconds=0.08)
    assert stopped.left == []  # no reader outlives the command
    assert stopped.pipes_open_seconds < 0.5  # nor holds its caller's pipes
    assert "Traceback" not in stopped.stderr
    assert stopped.status in (EXPECTED_STATUS[number], EXIT_OK), stopped.stderr[-2000:]
    if stopped.status == EXIT_OK:
        assert "num_speculative_tokens_per_batch_size" in json.loads(out.read_bytes())
    else:
        written = out.read_bytes()
        assert written == old or "num_speculative_tokens_per_batch_size" in json.loads(written)
    if number != signal.SIGKILL:
        assert temporaries(tmp_path) == []
        if stopped.status != EXIT_OK:
            assert f"stopped by {signal.Signals(number).name}" in stopped.stderr


def test_a_single_run_sweep_states_its_assumed_run_noise_on_every_line_and_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_grid(tmp_path / "lean", LEAN)
    code, _, _ = _main(capsys, sweep)
    assert code == EXIT_BAD_INPUT  # the seed's --min-runs 3 still refuses one run per cell
    code, out, _ = _main(capsys, sweep, "--min-runs", "1", "--run-cv", "0.03")
    assert code == EXIT_OK
    said = (
        "no replicate runs: assumes runs vary by 3.0% (--run-cv; measure it with the noise probe"
        " of `tune-spec-k plan --design lean`)"
    )
    statuses = [
        line for line in out.splitlines() if line.startswith("batch_size=") and "P(" in line
    ]
    assert len(statuses) == 2 and all(said in line for line in statuses)
    assert statuses[0].startswith("batch_size=1: resolved, K=3")
    assert statuses[1].startswith("batch_size=64: unresolved")
    (assumes,) = [line for line in out.splitlines() if line.startswith("  assumes: ")]
    assert (
        "no replicate runs: P(eps-good) assumes runs vary by 3.0% (--run-cv; measure it with the"
        " noise probe of `tune-spec-k plan --design lean`)" in assumes
    )
    document = json.loads((sweep / RESULT_FILE).read_text())
    assert document["decision_policy"]["run_cv"] == 0.03
    assert document["verdict"]["assumption"] == assumes.removeprefix("  assumes: ")
