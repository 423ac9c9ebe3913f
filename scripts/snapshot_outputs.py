"""Record what every command of tune-spec-k prints and writes, to check a refactoring.

Runs the CLI (``python -m lib.cli``) on every sample sweep, every real sweep under
``../shared/data/real`` (with the flags its README gives), every bad-input case, and every
subcommand example of ``docs/``, and saves per case the exit status, stdout, stderr and every
file the command wrote. Run it before and after a change and compare the two folders::

    uv run python scripts/snapshot_outputs.py /tmp/before
    # ... change the code ...
    uv run python scripts/snapshot_outputs.py /tmp/after
    diff -r /tmp/before /tmp/after

Written files go to a fixed scratch folder (``/tmp/tune-spec-k-snapshot-work``) so that the
paths the commands print are the same in both runs; stdout lines naming it are kept as they
are. Help texts are saved under ``help/`` (a refactoring may reword them on purpose).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = Path("data/sample_sweeps")
REAL = REPO.parent / "shared" / "data" / "real"
BAD = Path("tests/bad_inputs")
WORK = Path("/tmp/tune-spec-k-snapshot-work")


def tune_cases() -> dict[str, list[str]]:
    cases: dict[str, list[str]] = {}
    samples = sorted(p.name for p in (REPO / SAMPLES).iterdir() if p.is_dir())
    variants = {
        "default": [],
        "confident": ["--policy", "confident"],
        "interpolated": ["--interpolated-schedule"],
        "confident-interpolated": ["--policy", "confident", "--interpolated-schedule"],
        "median-tpot": ["--objective-var", "median_tpot_ms", "--objective-direction", "minimize"],
        "mean-tpot": ["--objective-var", "mean_tpot_ms", "--objective-direction", "minimize"],
        "goodput": ["--objective-var", "request_goodput"],
        "acceptance": ["--acceptance-var", "spec_decode_acceptance_length"],
        "strict-acceptance": [
            "--acceptance-var",
            "spec_decode_acceptance_rate",
            "--max-acceptance-relative-mad",
            "0.001",
            "--strict-acceptance-stability",
        ],
        "noise-0.2": ["--max-objective-relative-mad", "0.2"],
        "noise-0.2-penalty-0": [
            "--max-objective-relative-mad",
            "0.2",
            "--uncertainty-penalty",
            "0",
        ],
        "tolerance-0.05": ["--relative-tolerance", "0.05"],
        "min-runs-1": ["--min-runs", "1"],
        "capture-256": ["--max-cudagraph-capture-size", "256", "--max-num-seqs", "256"],
        "max-batch-size-bad": ["--max-batch-size", "3"],
        "seed-7-confident": ["--seed", "7", "--policy", "confident", "--confidence", "0.8"],
        "bad-tolerance": ["--relative-tolerance", "1.5"],
    }
    for sample in samples:
        folder = str(SAMPLES / sample)
        # The default output file inside the experiment folder, once per sample.
        cases[f"tune/{sample}/default-output"] = [folder]
        for name, flags in variants.items():
            out = WORK / f"tune-{sample}-{name}.json"
            cases[f"tune/{sample}/{name}"] = [folder, *flags, "--output-json", str(out)]
        cases[f"tune/{sample}/plan-json"] = [
            folder,
            "--output-json",
            str(WORK / f"tune-{sample}-plan-result.json"),
            "--plan-json",
            str(WORK / f"tune-{sample}-plan.json"),
        ]
    if REAL.is_dir():
        eagle = str(REAL / "qwen3-32b-fp8-eagle3-tp2")
        static = ["--k-var", "speculative_config.num_speculative_tokens", "--allow-mixed-global-k"]
        cases["real/eagle3-tp2/strict"] = [eagle, "--output-json", str(WORK / "x.json")]
        for name, flags in {
            "static": static,
            "static-confident": [*static, "--policy", "confident"],
            "static-interpolated": [*static, "--interpolated-schedule"],
            "static-tpot": [
                *static,
                "--objective-var",
                "median_tpot_ms",
                "--objective-direction",
                "minimize",
            ],
        }.items():
            cases[f"real/eagle3-tp2/{name}"] = [
                eagle,
                *flags,
                "--output-json",
                str(WORK / f"real-eagle-{name}.json"),
            ]
        for experiment in sorted((REAL / "qwen3-32b-h100-single-run").iterdir()):
            if not experiment.is_dir():
                continue
            base = f"real/h100/{experiment.name}"
            cases[f"{base}/default"] = [str(experiment), "--output-json", str(WORK / "x.json")]
            for name, flags in {
                "min-runs-1": ["--min-runs", "1"],
                "min-runs-1-confident": ["--min-runs", "1", "--policy", "confident"],
                "min-runs-1-interpolated": ["--min-runs", "1", "--interpolated-schedule"],
            }.items():
                cases[f"{base}/{name}"] = [
                    str(experiment),
                    *flags,
                    "--output-json",
                    str(WORK / f"real-{experiment.name}-{name}.json"),
                ]
    for case in sorted(p.name for p in (REPO / BAD).iterdir() if p.is_dir()):
        cases[f"bad/{case}"] = [str(BAD / case), "--output-json", str(WORK / "bad.json")]
    cases["bad/missing-folder"] = ["no/such/folder", "--output-json", str(WORK / "bad.json")]
    cases["bad/a-file"] = ["README.md", "--output-json", str(WORK / "bad.json")]
    cases["bad/unwritable-output"] = [
        str(SAMPLES / "sonnet-like"),
        "--output-json",
        "/proc/no/such/file.json",
    ]
    cases["bad/min-runs-zero"] = [str(SAMPLES / "sonnet-like"), "--min-runs", "0"]
    cases["bad/confidence-2"] = [
        str(SAMPLES / "sonnet-like"),
        "--confidence",
        "2",
        "--output-json",
        str(WORK / "bad.json"),
    ]
    cases["validation-as-tuning"] = [
        "data/validation_sweeps/real-cpu-tiny-ngram",
        "--output-json",
        str(WORK / "v.json"),
    ]
    return cases


def loop_cases() -> dict[str, list[str]]:
    """Subcommands, in order: later cases read what earlier ones wrote."""
    plan = WORK / "plan"
    tuned = WORK / "tune-sonnet-like-plan-result.json"
    measurement = WORK / "tune-sonnet-like-plan.json"
    cpu_result = WORK / "tune-real-cpu-tiny-ngram-noise-0.2.json"
    validation = "data/validation_sweeps/real-cpu-tiny-ngram"
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    return {
        "plan/docs-example": [
            "plan",
            "-o",
            str(plan),
            "--model",
            llama,
            "--method",
            "eagle3",
            "--draft-model",
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "--ks",
            "0,1,3,7",
            "--anchors",
            "1,64,128,256",
            "--input-len",
            "128",
            "--output-len",
            "128",
            "--num-runs",
            "3",
            "--goodput",
            "tpot:50",
        ],
        "plan/gpu-ngram": [
            "plan",
            "-o",
            str(WORK / "plan-ngram"),
            "--model",
            llama,
            "--method",
            "ngram",
            "--spec-option",
            "prompt_lookup_max=4",
            "--spec-option",
            "prompt_lookup_min=2",
            "--ks",
            "0,1,2,3,5",
            "--anchors",
            "1,8,32,64,128,256",
            "--input-len",
            "550",
            "--output-len",
            "128",
            "--serve-args",
            "--gpu-memory-utilization 0.9",
        ],
        "plan/max-batch-size": [
            "plan",
            "-o",
            str(WORK / "plan-max"),
            "--model",
            "m",
            "--method",
            "ngram",
            "--max-batch-size",
            "100",
            "--dataset",
            "sharegpt",
            "--dataset-path",
            "x.json",
            "--warmup-num-prompts",
            "4",
        ],
        "plan/follow-up": [
            "plan",
            "--design",
            str(plan / "sweep_plan.json"),
            "-o",
            str(WORK / "followup"),
            "--follow-up",
            str(measurement),
            str(tuned),
            # The result sits in the scratch folder, away from its experiment: name where the
            # follow-up's runs go (the first experiment), as a user must.
            "--results-dir",
            str(WORK / "first-experiment"),
        ],
        "plan/follow-up-result-only": [
            "plan",
            "--design",
            "data/sample_sweeps/real-cpu-tiny-ngram/sweep_plan.json",
            "-o",
            str(WORK / "followup-cpu"),
            "--follow-up",
            str(cpu_result),
            "--results-dir",
            str(WORK / "first-experiment-cpu"),
        ],
        "plan/validate": [
            "plan",
            "--design",
            str(plan / "sweep_plan.json"),
            "--validate",
            str(tuned),
            "-o",
            str(WORK / "validate"),
        ],
        "plan/validate-static": [
            "plan",
            "--design",
            str(plan / "sweep_plan.json"),
            "--validate",
            str(tuned),
            "--static-ks",
            "3,7",
            "-o",
            str(WORK / "validate-static"),
        ],
        "plan/bad-missing-model": ["plan", "-o", str(WORK / "bad-plan"), "--method", "ngram"],
        "plan/bad-no-k0": [
            "plan",
            "-o",
            str(WORK / "bad-plan"),
            "--model",
            "m",
            "--method",
            "ngram",
            "--ks",
            "1,2",
            "--anchors",
            "1,4",
        ],
        "plan/bad-design-file": ["plan", "--design", "README.md", "-o", str(WORK / "bad-plan")],
        "plan/bad-static-ks": [
            "plan",
            "-o",
            str(WORK / "bad-plan"),
            "--model",
            "m",
            "--method",
            "ngram",
            "--anchors",
            "1,4",
            "--static-ks",
            "1",
        ],
        "export/trtllm": ["export", str(tuned), "--format", "trtllm", "-o", str(WORK / "t.json")],
        "export/vllm": ["export", str(tuned), "--format", "vllm"],
        "export/roundtrip": ["export", str(WORK / "t.json"), "--format", "vllm", "--global-k", "9"],
        "export/tuned-schedule": ["export", f"{validation}/tuned_schedule.json"],
        "export/sglang": ["export", str(tuned), "--format", "sglang", "-o", str(WORK / "s.json")],
        "export/trtllm-capped": [
            "export",
            f"{validation}/tuned_schedule.json",
            "--cap-draft-len",
        ],
        "export/vllm-capture-ceiling": [
            "export",
            str(tuned),
            "--format",
            "vllm",
            "--max-cudagraph-capture-size",
            "256",
            "--max-num-seqs",
            "256",
        ],
        "export/bad-missing": ["export", str(WORK / "no-such.json")],
        "export/bad-global-k": ["export", str(tuned), "--global-k", "2"],
        "export/bad-not-schedule": [
            "export",
            "data/sample_sweeps/real-cpu-tiny-ngram/sweep_plan.json",
        ],
        "check/docs-example": [
            "check",
            validation,
            "--min-runs",
            "2",
            "--schedule",
            f"{validation}/tuned_schedule.json",
        ],
        "check/json": [
            "check",
            validation,
            "--min-runs",
            "2",
            "--output-json",
            str(WORK / "check.json"),
        ],
        "check/strict": ["check", validation, "--min-runs", "2", "--strict"],
        "check/default-min-runs": ["check", validation],
        "check/tpot": [
            "check",
            validation,
            "--min-runs",
            "2",
            "--objective-var",
            "median_tpot_ms",
            "--objective-direction",
            "minimize",
        ],
        "check/bad-schedule-file": ["check", validation, "--schedule", "README.md"],
        "check/bad-not-validation": ["check", "data/sample_sweeps/sonnet-like"],
        "diff/same": ["diff", "data/sample_sweeps/sonnet-like", "data/sample_sweeps/sonnet-like"],
        "diff/different": [
            "diff",
            "data/sample_sweeps/sonnet-like",
            "data/sample_sweeps/random-control",
            "--output-json",
            str(WORK / "diff.json"),
        ],
        "diff/json-vs-folder": ["diff", str(tuned), "data/sample_sweeps/sonnet-like"],
        "diff/confident": [
            "diff",
            "data/sample_sweeps/moe-non-monotone",
            "data/sample_sweeps/sonnet-like",
            "--policy",
            "confident",
        ],
        "diff/bad-missing": ["diff", "no/such", "data/sample_sweeps/sonnet-like"],
        "diff/bad-untunable": [
            "diff",
            "data/sample_sweeps/noisy",
            "data/sample_sweeps/sonnet-like",
        ],
        "diff/bad-objectives": [
            "diff",
            str(tuned),
            str(WORK / "tune-sonnet-like-median-tpot.json"),
        ],
        "diff/bad-threshold": [
            "diff",
            "data/sample_sweeps/sonnet-like",
            "data/sample_sweeps/sonnet-like",
            "--max-k-loss",
            "-1",
        ],
    }


HELP = {
    "tune": ["--help"],
    "plan": ["plan", "--help"],
    "check": ["check", "--help"],
    "diff": ["diff", "--help"],
    "export": ["export", "--help"],
}


def run(name: str, arguments: list[str], out: Path) -> None:
    before = {p for p in WORK.rglob("*") if p.is_file()}
    completed = subprocess.run(
        [sys.executable, "-m", "lib.cli", *arguments],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    case = out / name
    case.mkdir(parents=True, exist_ok=True)
    (case / "command").write_text(" ".join(arguments) + "\n")
    (case / "exit").write_text(f"{completed.returncode}\n")
    (case / "stdout").write_bytes(completed.stdout)
    (case / "stderr").write_bytes(completed.stderr)
    written = [p for p in WORK.rglob("*") if p.is_file() and p not in before]
    for path in sorted(written):
        target = case / "files" / path.relative_to(WORK)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    # The default output of a sample sweep lands inside the experiment folder.
    if arguments and arguments[0].startswith(str(SAMPLES)) and "--output-json" not in arguments:
        default = REPO / arguments[0] / "speculative_k_schedule.json"
        if default.exists():
            target = case / "files" / "default-output.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(default.read_bytes())
            default.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to save the snapshot in (replaced)")
    arguments = parser.parse_args()
    shutil.rmtree(arguments.out, ignore_errors=True)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    cases = {**tune_cases(), **loop_cases()}
    for name, case_arguments in cases.items():
        run(name, case_arguments, arguments.out)
    for name, help_arguments in HELP.items():
        run(f"help/{name}", help_arguments, arguments.out)
    print(f"{len(cases)} cases and {len(HELP)} help texts saved in {arguments.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
