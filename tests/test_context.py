"""lib/context.py: a sweep tuned per context point: the grid, its cells and statuses, the CLI's
grid lines and exports, the context plan; the typed grid is what its JSON reads back as."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from sweep_builder import (
    CONTEXT_GRID,
    NUM_PROMPTS,
    record,
    spread,
    write_combo,
    write_context_grid,
)

from lib.cli.main import main
from lib.context import ContextAnalysis, analyse_contexts
from lib.context_axis import find_context_axis
from lib.deploy.result_file import context_document
from lib.deploy.verdict import context_verdict
from lib.settings import ContextSettings, Options, Settings
from lib.sweeps import load_experiment

#: (batch, prompt) -> K the grid must choose, from CONTEXT_GRID's medians (sweep_builder.py).
EXPECTED = {(1, 512): 3, (64, 512): 0, (1, 8192): 3, (64, 8192): 3}


def _axis(root: Path, **settings: object):  # type: ignore[no-untyped-def]
    sweep = load_experiment(root)
    return sweep, *find_context_axis(sweep, ContextSettings(**settings))  # type: ignore[arg-type]


def test_each_context_point_is_tuned_on_its_own(tmp_path: Path) -> None:
    sweep, axis, _ = _axis(write_context_grid(tmp_path, CONTEXT_GRID))
    assert axis is not None
    analysis = analyse_contexts(sweep, axis, Settings())
    grid = analysis.grid()
    assert {(c["batch_size"], c["prompt_tokens"]): c["selected_k"] for c in grid} == EXPECTED
    assert analysis.ok and analysis.deployable
    # Pooled, the seed's rules reject the sweep (see CONTEXT_GRID): the batch-only answer
    # given is the shortest context's, [[1, 63, 3], [64, 64, 0]], and a warning says so.
    assert analysis.answer is analysis.contexts[0]
    assert _document(analysis)["num_speculative_tokens_per_batch_size"] == [
        [1, 63, 3],
        [64, 64, 0],
    ]
    pooled = [p for p in analysis.problems if p.rule == "pooled-contexts"]
    assert len(pooled) == 1 and "shortest context's (512 tokens)" in pooled[0].message


def test_grid_cells_hold_every_candidate_and_a_status(tmp_path: Path) -> None:
    sweep, axis, _ = _axis(write_context_grid(tmp_path, CONTEXT_GRID))
    assert axis is not None
    cell = _document(analyse_contexts(sweep, axis, Settings()))["context_grid"][1]
    assert (cell["batch_size"], cell["prompt_tokens"], cell["context_tokens"]) == (1, 8192, 8256)
    assert [c["k"] for c in cell["candidates"]] == [0, 3]
    assert cell["candidates"][1]["median_objective"] == 150.0
    assert cell["candidates"][1]["num_runs"] == 3 and cell["candidates"][1]["verdict"] == "kept"
    # 150 vs 80, 0.5 % spread: K=3 is surely within 1 % of the best.
    assert cell["status"] == "resolved" and cell["p_eps_good"] > 0.9


def test_a_rejected_cell_leaves_its_pick_unresolved(tmp_path: Path) -> None:
    cells = dict(CONTEXT_GRID)
    cells[(64, 3, 8192)] = [2000.0, 2600.0, 3200.0]  # relative MAD 0.23: rejected
    sweep, axis, _ = _axis(write_context_grid(tmp_path, cells))
    assert axis is not None
    analysis = analyse_contexts(sweep, axis, Settings())
    assert not analysis.ok
    cell = next(c for c in analysis.grid() if (c["batch_size"], c["prompt_tokens"]) == (64, 8192))
    assert cell["status"] == "unresolved"
    noisy = [p for p in analysis.problems if p.rule == "noisy-objective"]
    assert [(p.anchor, p.k) for p in noisy] == [(64, 3)]
    assert noisy[0].message.startswith("at 8192 tokens: ")


def test_pooled_answer_is_kept_when_the_seed_accepts_it(tmp_path: Path) -> None:
    # Lengths that barely change throughput: the pooled cells stay within the noise gate.
    cells = {
        (anchor, k, prompt): spread(value * (1.0 if prompt == 512 else 0.97))
        for (anchor, k), value in {(1, 0): 100.0, (1, 3): 180.0}.items()
        for prompt in (512, 8192)
    }
    sweep, axis, _ = _axis(write_context_grid(tmp_path, cells))
    assert axis is not None
    analysis = analyse_contexts(sweep, axis, Settings())
    assert analysis.answer is analysis.pooled
    assert [p.rule for p in analysis.problems if p.rule == "pooled-contexts"] == ["pooled-contexts"]


def test_fixed_batch_sizes_above_1_give_a_grid_but_no_schedule(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # The published evidence's shape: one batch size (256), several contexts.
    cells = {
        (256, 0, 400): spread(2711.7),
        (256, 3, 400): spread(2139.8),
        (256, 0, 4000): spread(1535.9),
        (256, 3, 4000): spread(1692.8),
    }
    root = write_context_grid(tmp_path / "sweep", cells)
    out = tmp_path / "result.json"
    assert main([str(root), "--output-json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "warning [not-deployable]" in captured.err
    data = json.loads(out.read_text())
    assert data["context_axis"]["deployable"] is False
    assert "start at 256" in data["context_axis"]["not_deployable_reason"]
    assert data["num_speculative_tokens_per_batch_size"] is None
    assert data["speculative_config"] is None
    # K3/no-spec: 0.79 at 400 tokens, 1.10 at 4000.
    assert [(c["prompt_tokens"], c["selected_k"]) for c in data["context_grid"]] == [
        (400, 0),
        (4000, 3),
    ]
    assert ["256", "0", "3"] in [line.split() for line in captured.out.splitlines()]


def test_cli_prints_the_grid_and_writes_it(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = write_context_grid(tmp_path / "sweep", CONTEXT_GRID)
    out = tmp_path / "result.json"
    assert main([str(root), "--output-json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[[1, 63, 3], [64, 64, 0]]"
    start = next(i for i, line in enumerate(lines) if line.startswith("context grid"))
    assert [line.split() for line in lines[start + 1 : start + 5]] == [
        ["batch", "size", "512", "8192"],
        ["(context)", "~576", "~8256"],
        ["1", "3", "3"],
        ["64", "0", "3"],
    ]
    data = json.loads(out.read_text())
    assert len(data["context_grid"]) == 4
    assert data["context_axis"]["field"] == "random_input_len"


def test_cli_with_context_var_none_is_the_seed(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = write_context_grid(tmp_path / "sweep", CONTEXT_GRID)
    out = tmp_path / "result.json"
    # Pooled, the noise gate rejects batch 1 K=0 (see CONTEXT_GRID): the seed's exit status.
    assert main([str(root), "--output-json", str(out), "--context-var", "none"]) == 2
    assert "noisy-objective" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("tolerance", ["-0.1", "1.5", "nan"])
def test_cli_refuses_a_bad_tolerance(tmp_path: Path, capsys, tolerance: str) -> None:  # type: ignore[no-untyped-def]
    root = write_context_grid(tmp_path / "sweep", CONTEXT_GRID)
    assert main([str(root), "--context-tolerance", tolerance]) == 2
    assert "--context-tolerance" in capsys.readouterr().err


def test_the_plan_proposes_a_length_where_neighbouring_picks_disagree(tmp_path: Path) -> None:
    sweep, axis, _ = _axis(write_context_grid(tmp_path, CONTEXT_GRID))
    assert axis is not None
    analysis = analyse_contexts(sweep, axis, Settings())
    # Batch 64 picks K=0 at 512 and K=3 at 8192 (EXPECTED); sqrt(512 * 8192) = 2048.
    assert analysis.context_points_to_measure() == [
        {
            "prompt_tokens": 2048,
            "between": [512, 8192],
            "batch_sizes": [{"batch_size": 64, "k_below": 0, "k_above": 3}],
        }
    ]
    assert _document(analysis)["context_measurement_plan"] == analysis.context_points_to_measure()


def test_no_plan_where_every_batch_size_agrees_across_lengths(tmp_path: Path) -> None:
    cells = {key: values for key, values in CONTEXT_GRID.items() if key[0] == 1}
    sweep, axis, _ = _axis(write_context_grid(tmp_path, cells))
    assert axis is not None
    assert analyse_contexts(sweep, axis, Settings()).context_points_to_measure() == []


def test_cli_prints_each_format_s_config_as_export_does(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = write_context_grid(tmp_path / "sweep", CONTEXT_GRID)
    out = tmp_path / "result.json"
    assert main([str(root), "--output-json", str(out)]) == 0
    tuned = capsys.readouterr().out.splitlines()
    shared = json.loads(out.read_text())["speculative_config"]
    for name in ("vllm-context", "vllm-rfc-48944", "vllm-pr-54801"):
        assert main(["export", str(out), "--format", name]) == 0
        exported = json.loads(capsys.readouterr().out.splitlines()[0])
        (line,) = [line for line in tuned if line.startswith(f"{name}: ")]
        flag, value = shlex.split(line.removeprefix(f"{name}: "))
        # tune prints the export's config whole, after the sweep's draft settings, paste-ready.
        printed = json.loads(value)
        assert flag == "--speculative-config" and printed.items() >= exported.items()
        assert (printed["method"], printed["model"]) == (shared["method"], shared["model"])


def test_the_default_mix_exports_the_shortest_context_s_own_picks(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # At batch 1, 512 tokens, K=1 has the higher median (200 vs 191) but a wide spread: MAD 15,
    # conservative 200 - 1.4826 * 15 = 177.8 < K=3's 191 - 1.4826 * 1 = 189.5. The tuner picks
    # K=3 there, so a batch-only export for that context alone must too.
    cells = dict(CONTEXT_GRID)
    cells[(1, 1, 512)] = [185.0, 200.0, 215.0]
    cells[(1, 3, 512)] = [190.0, 191.0, 192.0]
    cells[(1, 1, 8192)] = spread(120.0)
    cells[(64, 1, 512)] = spread(3500.0)
    cells[(64, 1, 8192)] = spread(2200.0)
    root = write_context_grid(tmp_path / "sweep", cells)
    out = tmp_path / "result.json"
    assert main([str(root), "--output-json", str(out), "--context-var", "auto"]) == 0
    capsys.readouterr()
    assert main(["export", str(out), "--format", "vllm-context"]) == 0
    config = json.loads(capsys.readouterr().out.splitlines()[0])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 63, 3], [64, 64, 0]]


@pytest.mark.parametrize("interpolated", [False, True])
@pytest.mark.parametrize("sample", ["long-context", "real-cpu-context"])
def test_the_typed_grid_is_the_grid_its_json_reads_back_as(sample: str, interpolated: bool) -> None:
    from paths import SAMPLE_SWEEPS

    from lib.context_grid import context_grid_of

    sweep = load_experiment(SAMPLE_SWEEPS / sample)
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    analysis = analyse_contexts(
        sweep, axis, Settings(), Options(interpolated_schedule=interpolated)
    )
    typed, problems = analysis.typed_grid
    read, read_problems = context_grid_of(_document(analysis), "the result")
    assert (typed, problems) == (read, read_problems)
    if typed is not None:
        # Each point holds its interpolated schedule exactly when the tuning emits it.
        assert all((point.interpolated is not None) == interpolated for point in typed.points)
    # long-context exports; real-cpu-context's noisy cells leave some undecided: refused.
    assert (typed is not None) == (sample == "long-context")


def _document(analysis: ContextAnalysis) -> dict[str, Any]:
    """The result JSON the CLI writes for ``analysis``."""
    return context_document(analysis, context_verdict(analysis))


# --------------------------------------------------------------------------- issue 38, kind 15


def _replicas_at_one_length(root: Path) -> Path:
    """A two-length context sweep with server replicas (3 per K) at 512 prompt tokens and
    none at 8192: the batch sizes 1 and 64 are measured at one length and assumed at the
    other."""
    centres = {(1, 0): 100.0, (1, 3): 180.0, (64, 0): 4000.0, (64, 3): 3000.0}
    for prompt, factor, replicas in ((512, 1.0, 3), (8192, 0.8, 1)):
        for (anchor, k), centre in centres.items():
            for replica in range(replicas):
                serve = f"k{k}-seed={replica}" if replicas > 1 else f"k{k}"
                records = [
                    record(
                        anchor,
                        k,
                        run_number=number,
                        random_input_len=prompt,
                        total_input_tokens=prompt * NUM_PROMPTS,
                        total_output_tokens=128 * NUM_PROMPTS,
                        output_throughput=value,
                    )
                    for number, value in enumerate(spread(centre * factor * (1 + 0.01 * replica)))
                ]
                write_combo(root / f"SERVE--{serve}-BENCH--c{anchor}-p{prompt}", records)
    return root


def test_the_server_statement_of_a_grid_says_which_prompt_length_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replicas at 512 prompt tokens only: the batch sizes 1 and 64 are measured there and
    assumed at 8192, so the statement names the prompt length (before: "server replicas at
    batch sizes 1, 64 ...; elsewhere ..." with no batch size elsewhere), in the analysis, the
    verdict and the CLI alike."""
    sweep, axis, _ = _axis(_replicas_at_one_length(tmp_path / "s"))
    assert axis is not None
    analysis = analyse_contexts(sweep, axis, Settings())
    servers = analysis.servers
    assert servers is not None
    statement = servers.statement()
    assert statement is not None
    assert statement.startswith("server replicas at batch sizes 1, 64 at 512 prompt tokens: ")
    assert "; elsewhere P(eps-good) assumes servers vary by at most 1.0%" in statement
    assert [(p.prompt_tokens, p.measured_at, p.assumed_at) for p in servers.points] == [
        (512, (1, 64), ()),
        (8192, (), (1, 64)),
    ]
    assert context_verdict(analysis).assumption == statement
    main([str(tmp_path / "s")])
    assert f"assumes: {statement}" in capsys.readouterr().out
