"""lib/deploy/verdict.py: one verdict, every rule tested on both sides of its boundary.

Each expectation is derived from the sweep written in the test (the arithmetic in comments)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_builder import CONTEXT_GRID, WORKED_EXAMPLE, grid, write_context_grid, write_grid

from lib.analysis import Analysis, analyse
from lib.app.context import analyse_sweep
from lib.cli.main import main
from lib.context import ContextAnalysis, analyse_contexts
from lib.context_axis import find_context_axis
from lib.deploy.traffic import with_traffic
from lib.deploy.tuning import deploy_analysis, deploy_contexts
from lib.deploy.verdict import (
    REFUSAL_FIXES,
    Verdict,
    context_loss_reasons,
    context_verdict,
    deployed_engine_reason,
    draft_settings_reasons,
    no_speculation_reason,
    runs_on_deployed_engine,
    switch_reasons,
    verdict_in,
    warning_reasons,
)
from lib.numbers import probability_text
from lib.problems import Problem, Severity
from lib.schedule import Schedule
from lib.settings import GLOBAL_K_VAR, ContextSettings, DeploySettings, Options, Settings
from lib.sweeps import load_experiment

# K=3 beats K=0 by 50 % with 0.5 % noise at both anchors (P(eps-good) is 1), and 8 requests
# of K=3 run 8 * 4 = 32 tokens per step, far inside any capture ceiling.
STEADY = grid([1, 8], {0: [100.0, 100.5, 99.5], 3: [150.0, 150.5, 149.5]})

# K=3 doubles K=0 at batch 1 and quarters it at 16: the step schedule [[1, 15, 3], [16, 16, 0]]
# runs K=3 up to 15, where the interpolated curves have K=0 ahead from 3 on
# (tests/test_switch_points.py).
CROSSING = {(1, 0): [100.0] * 3, (1, 3): [200.0] * 3, (16, 0): [1600.0] * 3, (16, 3): [400.0] * 3}


def _deployed(
    folder: Path,
    settings: Settings | None = None,
    options: Options | None = None,
    deploy: DeploySettings | None = None,
) -> Analysis:
    analysis = analyse(load_experiment(folder), settings or Settings(), options or Options())
    deployed, _ = deploy_analysis(analysis, deploy or DeploySettings(max_num_seqs=8))
    return deployed


def _verdict(folder: Path, **kwargs: object) -> Verdict:
    found = verdict_in(_deployed(folder, **kwargs).result)  # type: ignore[arg-type]
    assert found is not None
    return found


def _rules(verdict: Verdict) -> list[str]:
    return [reason.rule for reason in verdict.reasons]


def test_clear_winners_with_replicates_are_ready(tmp_path: Path) -> None:
    verdict = _verdict(write_grid(tmp_path, STEADY, max_num_seqs=8))
    assert (verdict.state, verdict.reasons, verdict.title) == ("ready", (), "Ready to deploy")
    assert verdict.lines()[0].startswith("verdict: ready")


def test_one_run_per_cell_cannot_tune_then_is_provisional_per_anchor(tmp_path: Path) -> None:
    folder = write_grid(tmp_path, grid([1, 8], {0: [100.0], 1: [120.0], 3: [130.0]}))
    verdict = _verdict(folder)
    assert verdict.state == "cannot-tune" and _rules(verdict)[0] == "too-few-runs"
    # 2 anchors x 3 K = 6 cells of one run each: one reason for the kind, counting the rest.
    assert "and 5 more like it" in verdict.reasons[0].message
    # --run-cv 0 assumes nothing: with no replicate the noise is unknown, neither anchor is
    # resolved.
    fixed = _verdict(folder, settings=Settings(min_runs=1), options=Options(run_cv=0.0))
    assert fixed.state == "provisional"
    assert _rules(fixed).count("unresolved-anchor") == 2
    # No P is stated at all: the only assumption left is the engine release's.
    assert fixed.assumption is not None and "P(eps-good)" not in fixed.assumption
    assert fixed.assumption.startswith("vLLM 0.34.0's capture rule and defaults (assumed")
    # The default assumes runs 2 % apart (a lean sweep): K=3 leads K=1 by 8.0 % (log), 2.5 standard
    # errors of a difference of two single runs with 1 % server offsets (sqrt(2 x (2^2 + 1^2))
    # = 3.2 %), so both anchors resolve, and the verdict says what that rests on.
    lean = _verdict(folder, settings=Settings(min_runs=1))
    assert _rules(lean).count("unresolved-anchor") == 0
    assert lean.assumption is not None and (
        "no replicate runs: P(eps-good) assumes runs vary by 2.0% (--run-cv; measure it with"
        " the noise probe of `tune-spec-k plan --design lean`)" in lean.assumption
    )


def test_an_unsure_pick_names_the_anchor_and_the_p_the_status_rests_on(tmp_path: Path) -> None:
    # The worked example: the seed picks K=2 at batch size 1, whose P(eps-good) is about 0.35.
    folder = write_grid(tmp_path, WORKED_EXAMPLE, max_num_seqs=64)
    deployed = _deployed(folder, deploy=DeploySettings(max_num_seqs=64))
    verdict = verdict_in(deployed.result)
    assert deployed.report is not None and verdict is not None
    (reason,) = [r for r in verdict.reasons if r.message.startswith("batch size 1")]
    cells = deployed.report.cells.filter(deployed.report.cells["anchor"] == 1)
    # The anchor has flagged runs: its status rests on P without them (docs/confidence.md).
    p = dict(zip(cells["k"], cells["p_eps_good_without_flagged"], strict=True))[2]
    status = deployed.report.anchors.filter(deployed.report.anchors["anchor"] == 1)["status"]
    # The confident model leaves batch 1 unresolved (no K reaches 0.9), and the verdict says
    # so with the P of its own pick, formatted as everywhere.
    assert status.item() == "unresolved" and reason.rule == "unresolved-anchor"
    assert f"P(eps-good) {probability_text(reason.size)}" in reason.message
    # The deployed pick is the seed's K=2, and its P is the one shown (the rule's K beside it).
    assert "the deployed K=2" in reason.message and reason.size == p
    assert "the confident rule's K=" in reason.message


def test_an_unmeasured_switch_is_a_reason_beyond_the_tie_tolerance_only(tmp_path: Path) -> None:
    deployed = _deployed(write_grid(tmp_path, CROSSING, max_num_seqs=16))
    points, report = deployed.switch_points, deployed.report
    assert points is not None and report is not None
    (row,) = points.switches.to_dicts()
    loss = row["max_gain_percent"]
    (reason,) = switch_reasons(points, "step", report.tolerance, deployed.plan)
    assert reason.rule == "unmeasured-switch" and reason.size == loss
    assert f"runs K=3 from {row['switch_at']} to 15" in reason.message
    # The boundary: a loss equal to the tolerance is not more than it; just below it is.
    assert switch_reasons(points, "step", loss / 100, None) == []
    assert len(switch_reasons(points, "step", loss / 100 * (1 - 1e-9), None)) == 1
    # Deployed interpolated, the same stretch is a bet on the model, said as such.
    (bet,) = switch_reasons(points, "interpolated", report.tolerance, None)
    assert "on the model alone" in bet.message


def test_the_capture_ceiling_assumed_names_the_graphless_range_and_known_caps_it(
    tmp_path: Path,
) -> None:
    # K=5 wins at 1, K=0 at 128: the step schedule runs K=5 up to 127, and from 86 on
    # 86 * (1 + 5) = 516 > 512 tokens per step (85 * 6 = 510 <= 512).
    cells = {(1, 0): [100.0] * 3, (1, 5): [200.0] * 3, (128, 0): [900.0] * 3, (128, 5): [500.0] * 3}
    folder = write_grid(tmp_path, cells, max_num_seqs=128)
    assumed = _verdict(folder, deploy=DeploySettings(max_num_seqs=128, vllm_version="0.33.0"))
    (graphless,) = [r for r in assumed.reasons if r.rule == "graphless-range"]
    assert graphless.message.startswith("batch sizes 86-127 run K=5")
    assert "--max-cudagraph-capture-size" in graphless.fix
    known = _verdict(
        folder,
        deploy=DeploySettings(
            max_cudagraph_capture_size=512, max_num_seqs=128, vllm_version="0.33.0"
        ),
    )
    assert "graphless-range" not in _rules(known)
    capped = [r for r in known.reasons if r.rule == "capped-range"]
    assert capped and capped[0].message.startswith("capped, not measured: batch sizes 86-")
    # vLLM 0.34: the schedule's K=0 tier at 128 sets R = min(128, 512) = 128, so 86-127 at
    # K=5 run FULL graphs: no capture reason, and the release stated is no assumption.
    newest = _verdict(
        folder,
        deploy=DeploySettings(
            max_cudagraph_capture_size=512, max_num_seqs=128, vllm_version="0.34.0"
        ),
    )
    assert not {"graphless-range", "capped-range"} & set(_rules(newest))
    assert "vLLM" not in (newest.assumption or "")
    # Nothing says which release: the newest is assumed, and the verdict says so.
    unsaid = _verdict(folder, deploy=DeploySettings(max_num_seqs=128))
    assert unsaid.assumption is not None
    assert "vLLM 0.34.0's capture rule and defaults (assumed:" in unsaid.assumption
    assert any(line.startswith("  assumes: ") and "vLLM 0.34.0" in line for line in unsaid.lines())


def _warning(rule: str, severity: Severity = Severity.WARNING) -> Problem:
    return Problem(severity, rule, f"{rule} happened")


def test_only_the_warnings_that_doubt_the_answer_are_reasons() -> None:
    found = warning_reasons(
        [
            _warning("cross-anchor-cliff"),
            _warning("latency-maximized"),
            _warning("cross-anchor-cliff", Severity.NOTE),  # a note is no reason
            _warning("unstable-acceptance"),  # data health the gates handled
        ]
    )
    assert [r.rule for r in found] == ["cross-anchor-cliff", "latency-maximized"]
    assert "--objective-direction minimize" in found[1].fix


def test_k0_everywhere_says_serve_without_speculation() -> None:
    reason = no_speculation_reason(Schedule(((1, 64, 0), (65, 256, 0))))
    assert reason is not None and "without --speculative-config" in reason.fix
    assert no_speculation_reason(Schedule(((1, 1, 1), (2, 256, 0)))) is None
    assert no_speculation_reason(Schedule(())) is None


@pytest.mark.parametrize(
    ("config", "rules"),
    [
        ({"method": "<method>"}, ["missing-method"]),
        ({}, ["missing-method"]),
        ({"method": "eagle3"}, ["missing-draft-model"]),
        ({"method": "eagle3", "model": ""}, ["missing-draft-model"]),
        ({"method": "eagle3", "model": "org/drafter"}, []),
        ({"method": "ngram"}, []),
        ({"method": "MTP"}, []),
        ({"method": "deepseek_mtp"}, []),
    ],
)
def test_a_config_without_its_method_or_draft_model_is_named(
    config: dict[str, str], rules: list[str]
) -> None:
    assert [r.rule for r in draft_settings_reasons(config)] == rules


def test_a_context_export_losing_past_the_tolerance_is_a_reason(
    long_context: ContextAnalysis,
) -> None:
    (reason,) = context_loss_reasons(long_context, 0.01)
    assert reason.rule == "context-loss" and reason.size is not None
    # data/sample_sweeps/README.md: the batch-only vLLM config loses 21.1 % at batch 64 with
    # 32k prompts.
    assert round(reason.size, 1) == 21.1 and "batch size 64 with 32768-token" in reason.message
    # The fix names only the formats that lose no more than the tolerance: RFC 48944's loses
    # nothing, PR 54801's the same 21.1 % (its batch table keeps K=0 at 64 for every length).
    assert "vllm-rfc-48944" in reason.fix and "vllm-pr-54801" not in reason.fix
    assert context_loss_reasons(long_context, reason.size / 100) == []
    assert len(context_loss_reasons(long_context, reason.size / 100 * (1 - 1e-9))) == 1
    assert "context-loss" in _rules(context_verdict(long_context))
    # Found once per grid: what the CLI prints is the object its file writes.
    assert context_verdict(long_context) is context_verdict(long_context)


def test_the_cli_prints_the_verdict_before_the_config_and_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_grid(tmp_path / "sweep", CROSSING, max_num_seqs=16)
    out = tmp_path / "result.json"
    assert main([str(folder), "--max-num-seqs", "16", "--output-json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    config = next(i for i, line in enumerate(lines) if line.startswith("--speculative-config"))
    # The CLI weighs the deployed tuning on the traffic mix (the sweep's own here) last.
    deployed = with_traffic(_deployed(folder, deploy=DeploySettings(max_num_seqs=16)), None)
    verdict = verdict_in(deployed.result)
    assert verdict is not None and verdict.state == "provisional"
    # The lines printed are the verdict's, right before the config line.
    assert lines[head:config] == verdict.lines()
    assert json.loads(out.read_text())["verdict"] == verdict.to_json()


def test_the_app_shows_the_verdict_the_cli_prints(tmp_path: Path) -> None:
    folder = write_grid(tmp_path, CROSSING, max_num_seqs=16)
    deploy = DeploySettings(max_num_seqs=16)
    shown = analyse_sweep(load_experiment(folder), Settings(), Options(), None, None, deploy)
    assert shown.verdict == verdict_in(with_traffic(_deployed(folder, deploy=deploy), None).result)


def test_no_schedule_cannot_tune(tmp_path: Path) -> None:
    # Anchors start at 2: no schedule (vLLM's must start at 1).
    sweep = load_experiment(write_grid(tmp_path / "s", {(2, 0): [1.0, 1.0, 1.0]}))
    deployed, deployment = deploy_analysis(analyse(sweep, Settings()), DeploySettings())
    verdict = verdict_in(deployed.result)
    assert deployment is None and verdict is not None and verdict.state == "cannot-tune"


def test_a_refused_sweep_prints_its_verdict_on_stderr_with_a_fix_per_kind_of_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two runs per cell (fewer than --min-runs 3) and, at batch 1, K=3's runs 100 / 150 / 200
    # (relative MAD 50 / 150 = 0.33 > 0.1): three kinds of error, each with its own fix.
    cells = {(1, 0): [100.0, 101.0], (1, 3): [100.0, 150.0, 200.0], (8, 0): [800.0, 801.0]}
    folder = write_grid(tmp_path / "sweep", cells)
    assert main([str(folder), "--output-json", str(tmp_path / "r.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not (tmp_path / "r.json").exists()
    verdict = _verdict(folder)
    assert verdict.state == "cannot-tune"
    assert captured.err.splitlines()[-len(verdict.lines()) :] == verdict.lines()
    fixes = {reason.rule: reason.fix for reason in verdict.reasons}
    assert fixes["too-few-runs"] == REFUSAL_FIXES["too-few-runs"]
    assert "--min-runs" in fixes["too-few-runs"]
    assert "--max-objective-relative-mad" in fixes["noisy-objective"]


@pytest.mark.parametrize("rule", sorted(REFUSAL_FIXES))
def test_every_refusal_fix_names_flags_the_cli_takes(rule: str) -> None:
    """A fix is only a fix if the CLI accepts what it names: every --flag in it is one of
    `tune-spec-k`'s (its parser, not a list here)."""
    import argparse
    import re

    from lib.cli.tune import TuneArgs

    parser = argparse.ArgumentParser()
    TuneArgs.add_cli_args(parser)
    known = {option for action in parser._actions for option in action.option_strings}
    named = re.findall(r"--[a-z][a-z-]*", REFUSAL_FIXES[rule])
    assert set(named) <= known


def test_a_resolved_anchor_whose_deployed_pick_is_unsure_is_a_reason(tmp_path: Path) -> None:
    # Batch 1: K=1 runs 98.9 three times (score 98.9); K=3 runs 97 / 100 / 103 (median 100,
    # MAD 3, score 100 - 1.4826 x 3 = 95.55). The seed deploys K=1 (the best score), 1.1 %
    # below K=3's median, past the 1 % tolerance: the confident rule resolves the anchor on
    # K=3, and the deployed K=1 is not sure enough. Without K=3's noise (the other side) K=3
    # wins both rules and nothing is in doubt.
    noisy = write_grid(
        tmp_path / "noisy", {(1, 0): [50.0] * 3, (1, 1): [98.9] * 3, (1, 3): [97.0, 100.0, 103.0]}
    )
    verdict = _verdict(noisy, deploy=DeploySettings(max_num_seqs=1))
    (reason,) = [r for r in verdict.reasons if r.rule == "unsure-pick"]
    assert verdict.state == "provisional" and reason.size is not None and reason.size < 0.9
    assert f"K=1 has P(eps-good) {probability_text(reason.size)}, below 0.9" in reason.message
    steady = write_grid(
        tmp_path / "steady", {(1, 0): [50.0] * 3, (1, 1): [98.9] * 3, (1, 3): [100.0] * 3}
    )
    assert "unsure-pick" not in _rules(_verdict(steady, deploy=DeploySettings(max_num_seqs=1)))


def test_a_method_vllm_runs_without_the_schedule_is_a_reason(tmp_path: Path) -> None:
    # vLLM 0.33 keeps Dynamic SD on model runner v1 only for DSD_METHODS_MRV1: a medusa
    # drafter's schedule would not run; eagle3 (the other side) keeps it.
    def static_sweep(folder: Path, method: str) -> Path:
        write_grid(folder, {(1, 0): [100.0, 100.5, 99.5]}, spec="none")
        spec = {"method": method, "model": "org/drafter", "num_speculative_tokens": 3}
        return write_grid(folder, {(1, 3): [150.0, 150.5, 149.5]}, spec=spec)

    def verdict_of_static(folder: Path) -> Verdict:
        analysis = analyse(load_experiment(folder, k_var=GLOBAL_K_VAR), Settings())
        deploy = DeploySettings(max_num_seqs=1, vllm_version="0.33.0")
        deployed, _ = deploy_analysis(analysis, deploy)
        found = verdict_in(deployed.result)
        assert found is not None
        return found

    medusa = verdict_of_static(static_sweep(tmp_path / "medusa", "medusa"))
    (reason,) = [r for r in medusa.reasons if r.rule == "schedule-disabled"]
    assert "'medusa'" in reason.message and medusa.state == "provisional"
    eagle = verdict_of_static(static_sweep(tmp_path / "eagle", "eagle3"))
    assert "schedule-disabled" not in _rules(eagle)


def test_an_unresolved_context_cell_is_a_reason_with_its_p(tmp_path: Path) -> None:
    # CONTEXT_GRID with batch 64 at 8192 tokens made a coin toss: K=0 2000 / 2100 / 1900 and
    # K=3 2010 / 2110 / 1910 (0.5 % apart under 5 % noise): unresolved there, P well below 0.9.
    cells = dict(CONTEXT_GRID)
    cells[(64, 0, 8192)] = [2000.0, 2100.0, 1900.0]
    cells[(64, 3, 8192)] = [2010.0, 2110.0, 1910.0]
    sweep = load_experiment(write_context_grid(tmp_path / "coin", cells))
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    verdict = context_verdict(analyse_contexts(sweep, axis, Settings(), Options()))
    (reason,) = [r for r in verdict.reasons if r.rule == "unresolved-cell"]
    assert reason.message.startswith("batch size 64 at 8192-token prompts:")
    assert reason.size is not None and reason.size < 0.9
    assert f"(P(eps-good) {probability_text(reason.size)})" in reason.message
    # The grid as built (every cell clear) has none.
    clear = load_experiment(write_context_grid(tmp_path / "clear", CONTEXT_GRID))
    axis, _ = find_context_axis(clear, ContextSettings())
    assert axis is not None
    assert "unresolved-cell" not in _rules(
        context_verdict(analyse_contexts(clear, axis, Settings(), Options()))
    )


# --------------------------------------------------------------------------- issue 38


def _runs_at(anchor: int, runs: dict[int, list[float]]) -> dict[tuple[int, int], list[float]]:
    return {(anchor, k): values for k, values in runs.items()}


STEADY_RUNS = {0: [100.0, 100.5, 99.5], 3: [150.0, 150.5, 149.5]}


@pytest.mark.parametrize(("saved_seqs", "state"), [(8, "ready"), (7, "provisional")])
def test_a_saved_server_config_below_an_anchor_is_a_reason(
    tmp_path: Path, saved_seqs: int, state: str
) -> None:
    # Issue 38, kind 3. Every combo saved a server config with max_num_seqs N; the anchors
    # are 1 and 8. N = 8 ran batch 8 (ready); N = 7 never held 8 requests at once.
    folder = write_grid(tmp_path, STEADY)
    for combo in folder.iterdir():
        (combo / "server_info.json").write_text(
            json.dumps({"vllm_config": {"scheduler_config": {"max_num_seqs": saved_seqs}}})
        )
    verdict = _verdict(folder, deploy=DeploySettings(max_num_seqs=8))
    assert verdict.state == state
    if state == "provisional":
        (reason,) = verdict.reasons
        assert reason.rule == "max-num-seqs-below-anchor"
        assert reason.message.startswith("batch size 8: runs at batch size 8 ran on a server")
        assert "max_num_seqs=7" in reason.message and "--max-num-seqs" in reason.fix


@pytest.mark.parametrize(("throughput", "state"), [(7.2, "ready"), (7.1, "provisional")])
def test_an_anchor_whose_runs_held_fewer_requests_is_a_reason(
    tmp_path: Path, throughput: float, state: str
) -> None:
    # Issue 38, kind 3. Little's law at anchor 8: request_throughput x 1000 ms / 1000. 7.2 is
    # exactly 0.9 x 8 (not below: ready); 7.1 is below, for both K (one reason, the anchor's).
    folder = write_grid(tmp_path, _runs_at(1, STEADY_RUNS), max_num_seqs=8)
    write_grid(folder, _runs_at(8, STEADY_RUNS), max_num_seqs=8, request_throughput=throughput)
    verdict = _verdict(folder)
    assert verdict.state == state
    if state == "provisional":
        (reason,) = verdict.reasons
        assert reason.rule == "effective-batch-below-anchor"
        assert reason.message.startswith("batch size 8 (K=[0, 3]): the runs held 7.10 requests")
        assert reason.message.endswith("(and 1 more like it)")


@pytest.mark.parametrize(("max_num_seqs", "tail"), [(8, None), (9, "9"), (256, "9-256")])
def test_batch_sizes_past_the_largest_anchor_up_to_max_num_seqs_are_a_reason(
    tmp_path: Path, max_num_seqs: int, tail: str | None
) -> None:
    # Issue 38, kind 4. Anchors 1 and 8; vLLM carries K=3 to every batch size up to
    # max_num_seqs. 8: all measured. 9: batch size 9 was not (1 of 9 = 11.1 %). 256: 9-256, 248
    # of 256 = 96.875 %.
    folder = write_grid(tmp_path, STEADY)
    verdict = _verdict(folder, deploy=DeploySettings(max_num_seqs=max_num_seqs))
    found = [r for r in verdict.reasons if r.rule == "unmeasured-tail"]
    if tail is None:
        assert verdict.state == "ready"
        return
    (reason,) = found
    assert reason.message.startswith(f"batch sizes {tail} (")
    assert "vLLM carries K=3 from the largest anchor 8" in reason.message
    assert reason.size == pytest.approx(100 * (max_num_seqs - 8) / max_num_seqs)
    assert "--max-num-seqs 8" in reason.fix and f"batch size {max_num_seqs}" in reason.fix


def test_an_unknown_max_num_seqs_is_no_tail_reason(tmp_path: Path) -> None:
    # Nothing states max_num_seqs: the check stops at the schedule's end and says so in the
    # capture line; the verdict does not invent a tail.
    verdict = _verdict(write_grid(tmp_path, STEADY), deploy=DeploySettings())
    assert "unmeasured-tail" not in _rules(verdict)


# K=3 wins at 1, K=1 at 8: a static-K sweep (one server per K, its num_speculative_tokens K)
# deploys num_speculative_tokens=3 with [[1, 7, 3], [8, 8, 1]]: K=1 at 8 ran on a server sized
# for 1, never on the deployed one.
STATIC_SWITCH = {
    (1, 1): [120.0, 120.5, 119.5],
    (1, 3): [150.0, 150.5, 149.5],
    (8, 1): [900.0, 900.5, 899.5],
    (8, 3): [600.0, 600.5, 599.5],
}


def test_a_static_k_sweep_whose_picks_ran_on_other_engines_is_not_ready(tmp_path: Path) -> None:
    # Issue 38, kind 5 (README, "Sweeps that vary K statically").
    folder = write_grid(tmp_path, STATIC_SWITCH, spec="static", max_num_seqs=8)
    analysis = analyse(load_experiment(folder, k_var=GLOBAL_K_VAR), Settings(), Options())
    deployed, _ = deploy_analysis(analysis, DeploySettings(max_num_seqs=8))
    verdict = verdict_in(deployed.result)
    assert verdict is not None and verdict.state == "provisional"
    (reason,) = [r for r in verdict.reasons if r.rule == "deployed-engine-unmeasured"]
    assert "num_speculative_tokens=3 with the schedule" in reason.message
    assert (
        "K=1 at batch size 8 ran on servers started with num_speculative_tokens=1" in reason.message
    )
    assert "batch size 1" not in reason.message  # K=3 at 1 ran on a server sized for 3
    assert "plan --validate" in reason.fix


def test_a_static_k_sweep_that_deploys_its_largest_k_everywhere_ran_the_engine(
    tmp_path: Path,
) -> None:
    # K=3 at both anchors: the deployed engine (3, schedule K=3 everywhere) is the K=3 server.
    folder = write_grid(tmp_path, STEADY, spec="static", max_num_seqs=8)
    analysis = analyse(load_experiment(folder, k_var=GLOBAL_K_VAR), Settings(), Options())
    deployed, _ = deploy_analysis(analysis, DeploySettings(max_num_seqs=8))
    verdict = verdict_in(deployed.result)
    assert verdict is not None and verdict.state == "ready"


def test_k0_picked_from_a_server_without_speculation_did_not_run_the_deployed_engine(
    tmp_path: Path,
) -> None:
    # The seed's design, but K=0 measured on a plain server: K=0 wins at 8, where the deployed
    # engine runs Dynamic SD at K=0 (its drafter loaded), never measured.
    cells = {**STATIC_SWITCH, (1, 0): [100.0] * 3, (8, 0): [1000.0, 1000.5, 999.5]}
    plain = write_grid(tmp_path / "plain", cells, spec="none", max_num_seqs=8)
    verdict = _verdict(plain)
    (reason,) = [r for r in verdict.reasons if r.rule == "deployed-engine-unmeasured"]
    assert "K=0 at batch size 8 ran on a server without speculation" in reason.message
    # The same K=0 on the Dynamic SD engine (a one-range schedule of K=0): no such reason.
    dynamic = write_grid(tmp_path / "dynamic", cells, max_num_seqs=8)
    assert "deployed-engine-unmeasured" not in _rules(_verdict(dynamic))


def test_runs_on_the_deployed_engine_needs_its_very_global_k() -> None:
    assert runs_on_deployed_engine(frozenset({7}), 7)
    assert not runs_on_deployed_engine(frozenset({6, 8}), 7)
    assert not runs_on_deployed_engine(frozenset({None}), 7)
    assert not runs_on_deployed_engine(frozenset({-1}), 7)
    assert not runs_on_deployed_engine(frozenset(), 7)
    # One pick off the engine is one reason naming it; a pick without a known cell is skipped.
    engines = {(1, 3): frozenset({3}), (8, 1): frozenset({1, None})}
    reason = deployed_engine_reason({1: 3, 8: 1, 16: 0}, engines, 3)
    assert reason is not None and "1 pick(s): K=1 at batch size 8 ran on" in reason.message
    assert deployed_engine_reason({1: 3}, engines, 3) is None


def test_nothing_past_a_known_max_num_seqs_is_asked_for(tmp_path: Path) -> None:
    # Issue 38, kind 11. K=3 at 1, 64 and 256 ([[1, 256, 3]]) under C=200 and max_num_seqs=64:
    # 200 // 4 = 50, so 51-64 must run K=2 (51 * 3 = 153 <= 200; 66 * 3 = 198 is the last K=2
    # batch size, past 64). The repair used to report 67-100 (K=1) and 101-256 (K=0) too, and
    # ask for anchors at 67 and 101, which a server of max_num_seqs 64 never runs.
    folder = write_grid(tmp_path, grid([1, 64, 256], STEADY_RUNS))
    analysis = analyse(load_experiment(folder), Settings(), Options())
    deploy = DeploySettings(max_num_seqs=64, max_cudagraph_capture_size=200)
    deployed, deployment = deploy_analysis(analysis, deploy)
    verdict = verdict_in(deployed.result)
    assert verdict is not None and deployment is not None
    assert [(c.lo, c.hi, c.capped_k) for c in deployment.check.capped] == [(51, 64, 2)]
    assert [row["batch_size"] for row in deployment.boundaries()] == [51]
    (capped,) = [r for r in verdict.reasons if r.rule == "capped-range"]
    assert capped.fix == "measure an anchor at 51 with K=2"
    # Anchor 256 is past max_num_seqs: never run, so no reason names it.
    assert not any("256" in reason.message for reason in verdict.reasons)


@pytest.mark.parametrize(("max_num_seqs", "reason"), [(2, False), (3, True), (16, True)])
def test_a_switch_the_server_never_reaches_is_no_reason(
    tmp_path: Path, max_num_seqs: int, reason: bool
) -> None:
    # Issue 38, kind 11. CROSSING's step schedule loses from the switch point 3 to 15: with
    # max_num_seqs 2 the server never runs batch 3 (and never the anchor 16); with 3 it runs
    # batch 3, the stretch named ending at 3.
    deployed = _deployed(
        write_grid(tmp_path, CROSSING), deploy=DeploySettings(max_num_seqs=max_num_seqs)
    )
    points, report = deployed.switch_points, deployed.report
    assert points is not None and report is not None
    found = switch_reasons(points, "step", report.tolerance, deployed.plan, max_num_seqs)
    assert bool(found) is reason
    if reason:
        assert f"runs K=3 from 3 to {min(15, max_num_seqs)}," in found[0].message
    verdict = verdict_in(deployed.result)
    assert verdict is not None
    assert ("unmeasured-switch" in _rules(verdict)) is reason


def test_a_context_anchor_whose_runs_held_fewer_requests_is_a_reason(tmp_path: Path) -> None:
    # The same rule on a (batch x context) grid: the runs at batch 64 held 40 requests
    # (request_throughput 40 x 1000 ms / 1000 < 0.9 x 64 = 57.6) at both prompt lengths: one
    # reason for the anchor, naming both lengths; batch 1 held 1 (as the builder keeps it).
    cells = {cell: runs for cell, runs in CONTEXT_GRID.items() if cell[0] == 1}
    folder = write_context_grid(tmp_path, cells)
    low = {cell: runs for cell, runs in CONTEXT_GRID.items() if cell[0] == 64}
    write_context_grid(folder, low, request_throughput=40.0)
    sweep = load_experiment(folder)
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    verdict = context_verdict(analyse_contexts(sweep, axis, Settings(), Options()))
    (reason,) = [r for r in verdict.reasons if r.rule == "effective-batch-below-anchor"]
    assert reason.message.startswith("batch size 64 (K=[0, 3], 512/8192-token prompts): ")


#: Both prompt lengths pick K=3 at batch 1 and K=0 at batch 64, 0.5 % noise: every cell resolved
#: and the batch-only config loses nothing across lengths, so the grid's own rules are content;
#: but nothing was measured between 1 and 64, where K=3's and K=0's lines cross.
AGREEING = {
    (1, 0, 512): [100.0, 100.5, 99.5],
    (1, 3, 512): [180.0, 180.5, 179.5],
    (64, 0, 512): [4000.0, 4020.0, 3980.0],
    (64, 3, 512): [3000.0, 3015.0, 2985.0],
    (1, 0, 8192): [80.0, 80.5, 79.5],
    (1, 3, 8192): [150.0, 150.5, 149.5],
    (64, 0, 8192): [2000.0, 2010.0, 1990.0],
    (64, 3, 8192): [1600.0, 1608.0, 1592.0],
}


def test_a_grid_is_never_ready_where_one_of_its_prompt_lengths_is_not(tmp_path: Path) -> None:
    """Issue 38, kind 1: the grid's verdict applied none of the batch rules (unmeasured switch,
    capture ceiling, ...): tuned together `ready`, tuned per prompt length `provisional`."""
    sweep = load_experiment(write_context_grid(tmp_path / "agreeing", AGREEING))
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    grid = analyse_contexts(sweep, axis, Settings(), Options())
    # Before the deployment layer nothing but the grid's own rules speaks: ready.
    assert context_verdict(grid).state == "ready"
    deployed = deploy_contexts(grid, DeploySettings())
    points = [verdict_in(point.result) for point in deployed.contexts]
    assert all(found is not None and found.state == "provisional" for found in points)
    verdict = context_verdict(deployed)
    assert verdict.state == "provisional"
    # Each length's own reason, saying which length, and none the grid states itself.
    assert [(r.rule, r.message.split(":")[0]) for r in verdict.reasons] == [
        ("unmeasured-switch", "at 512 tokens"),
        ("unmeasured-switch", "at 8192 tokens"),
    ]
    # The app shows the same verdict (it deploys the grid the same way).
    shown = analyse_sweep(sweep, Settings(), Options(), axis, None, DeploySettings())
    assert shown.verdict == verdict


def test_a_point_refused_outright_adds_nothing_and_grid_rules_are_not_said_twice(
    tmp_path: Path,
) -> None:
    # The coin toss of test_an_unresolved_context_cell_is_a_reason_with_its_p: batch 64 at 8192
    # tokens unresolved. The 8192-token point's own verdict says "unresolved-anchor" for it; the
    # grid says "unresolved-cell" once, and no point reason repeats it.
    cells = dict(AGREEING)
    cells[(64, 0, 8192)] = [2000.0, 2100.0, 1900.0]
    cells[(64, 3, 8192)] = [2010.0, 2110.0, 1910.0]
    sweep = load_experiment(write_context_grid(tmp_path / "coin", cells))
    axis, _ = find_context_axis(sweep, ContextSettings())
    assert axis is not None
    deployed = deploy_contexts(
        analyse_contexts(sweep, axis, Settings(), Options()), DeploySettings()
    )
    own = verdict_in(deployed.contexts[1].result)
    assert own is not None and "unresolved-anchor" in _rules(own)
    rules = _rules(context_verdict(deployed))
    assert "unresolved-cell" in rules and "unresolved-anchor" not in rules


def test_a_context_verdict_says_which_release_it_assumed(long_context: ContextAnalysis) -> None:
    """The grid's verdict rests on the answer's capture check: the release assumed there (no
    flag, no saved server config: the newest known) is said in its ``assumes:``; stated, it
    is no assumption."""
    assumed = context_verdict(deploy_contexts(long_context, DeploySettings()))
    assert assumed.assumption is not None
    assert "vLLM 0.34.0's capture rule and defaults (assumed:" in assumed.assumption
    stated = context_verdict(deploy_contexts(long_context, DeploySettings(vllm_version="0.33.0")))
    assert "vLLM" not in (stated.assumption or "")
