"""One verdict everywhere (issue 20, "Done when"): on every sample experiment (data/sample_sweeps)
and every real one (../shared/data/real, as the app lists them; skipped when absent), the
verdict the CLI prints, the one its result JSON holds and the app's (``SweepAnalysis.verdict``)
are the same, and a ``ready`` verdict is true by every check, read from the result file.

Settings: the app's defaults, found as the notebook finds them (its objective: output_throughput
where the sweep varies it, else the first field it offers; its direction "usual for the
objective", which for a latency is minimise while the CLI's default is maximise; no acceptance
metric; the engine settings of a notebook started with no flag), and the CLI is given them by the
app's own command line (``lib.app.support.cli_arguments``, which spells the direction out). Each
experiment is judged twice: with those defaults, and after every one-click fix the app offers
for its errors, applied until none is left (what a person clicking them gets).

A sweep with a context axis is judged by its grid's verdict (``context_verdict``): the app shows
it, the CLI prints it and writes it. A verdict that cannot tune has no line on stdout and no
file: the CLI exits 2, lists the errors on stderr and then the verdict's lines; each reason is
the first error of its rule as the CLI lists it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from paths import REAL_DATA, SAMPLE_SWEEPS
from sweep_builder import grid, write_grid, write_json

from lib.app import guide
from lib.app import support as app_support
from lib.app.context import SweepAnalysis, analyse_sweep
from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.context_axis import find_context_axis
from lib.deploy.verdict import (
    BATCH_NOT_RUN_FIXES,
    NO_DRAFT_MODEL_METHODS,
    VERDICT_WARNINGS,
    Verdict,
)
from lib.loop.run.rounds import with_design_ks
from lib.objectives import OBJECTIVES_BY_NAME
from lib.problems import Severity
from lib.settings import GLOBAL_K_VAR, ContextSettings, Fields, Options, Settings
from lib.sweeps import load_experiment

#: K=3 beats K=0 by half at both anchors with 0.5 % noise: every check passes (a ready verdict,
#: so that the checks of one are run on one; tests/deploy/test_verdict.py has the same sweep).
STEADY = grid([1, 8], {0: [100.0, 100.5, 99.5], 3: [150.0, 150.5, 149.5]})


def _experiments(root: Path, folder: Path | None = None) -> list[Path]:
    """Every experiment below ``root`` as the app lists it, a folder of experiments opened."""
    if not root.is_dir():
        return []
    found, _ = app_support.find_experiments(folder or root, root)
    if folder is not None and list(found.values()) == [folder]:
        return [folder]
    return [leaf for path in found.values() for leaf in _experiments(root, path)]


CASES = [(SAMPLE_SWEEPS, path) for path in _experiments(SAMPLE_SWEEPS)] + [
    (REAL_DATA, path) for path in _experiments(REAL_DATA)
]


def _app_settings(folder: Path, root: Path, fields: Fields, fixed: dict[str, Any]) -> Settings:
    """The notebook's settings for this sweep and fields: its controls' defaults (the objective
    and direction as its pickers choose them) with the fixes applied."""
    sweep = load_experiment(folder, within=root, **dataclasses.asdict(fields))
    choices = guide.objective_choices(sweep, OBJECTIVES_BY_NAME, fields)
    objective = Settings().objective
    if choices and objective not in choices:
        objective = choices[0]
    direction = app_support.chosen_direction(app_support.USUAL_DIRECTION, objective)
    # A `tune-spec-k run` experiment: its design's K from rounds.json, as the notebook reads.
    return with_design_ks(Settings(objective=objective, direction=direction, **fixed), folder)


def _shown(folder: Path, root: Path, fields: Fields, settings: Settings) -> SweepAnalysis:
    """What the app shows for these settings (the notebook's cells, without the page)."""
    sweep = load_experiment(folder, within=root, **dataclasses.asdict(fields))
    axis, _ = find_context_axis(sweep, ContextSettings(context_var="auto"))
    deploy = app_support.parse_app_arguments([]).deploy
    return analyse_sweep(sweep, settings, Options(), axis, None, deploy)


def _after_the_fixes(folder: Path, root: Path) -> tuple[Fields, Settings]:
    """The fields and settings once every one-click fix of the app's error groups is applied,
    again until none is left or none changes anything."""
    fields, fixed = Fields(), {}
    settings = _app_settings(folder, root, fields, fixed)
    for _ in range(len(guide.CONTROL_LABELS)):
        shown = _shown(folder, root, fields, settings)
        groups = guide.problem_groups(shown.problems, settings, fields)
        fixes = [g.fix for g in groups if g.severity is Severity.ERROR and g.fix is not None]
        changed = False
        for fix in fixes:
            if fix.control == "k_var":
                changed |= fields.k_var != fix.value
                fields = dataclasses.replace(fields, k_var=fix.value)
            else:
                changed |= getattr(settings, fix.control) != fix.value
                fixed[fix.control] = fix.value
        if not changed:
            break
        settings = _app_settings(folder, root, fields, fixed)
    return fields, settings


def _cli(
    folder: Path, fields: Fields, settings: Settings, tmp_path: Path, capsys: Any
) -> tuple[int, list[str], str, dict[str, Any] | None]:
    """The CLI run by the app's command line: exit status, stdout lines, stderr and the result
    JSON (None when it wrote none)."""
    deploy = app_support.parse_app_arguments([]).deploy
    arguments = app_support.cli_arguments(folder, fields, settings, Options(), deploy)
    output = tmp_path / "result.json"
    status = main([*arguments, "--output-json", str(output)])
    captured = capsys.readouterr()
    written = json.loads(output.read_text()) if output.exists() else None
    return status, captured.out.splitlines(), captured.err, written


def _printed_verdict(lines: list[str]) -> list[str]:
    """The lines from ``verdict: `` up to the config line (or the end, without ``Wrote``)."""
    (start,) = [i for i, line in enumerate(lines) if line.startswith("verdict: ")]
    stop = next(
        (i for i, line in enumerate(lines) if line.startswith(("--speculative-config", "Wrote "))),
        len(lines),
    )
    return lines[start:stop]


def _ready_by_the_checks(written: dict[str, Any]) -> list[str]:
    """Every check of a ready verdict, read from the result file (not from the verdict's
    rules): what fails, empty when each holds."""
    failed = []
    policy = written["decision_policy"]
    for decision in written["batch_decisions"]:
        confidence, k = decision.get("confidence") or {}, str(decision["selected_k"])
        p = confidence.get("p_eps_good_without_flagged") or confidence.get("p_eps_good") or {}
        if confidence.get("status") != "resolved" or (p.get(k) or 0) < policy["confidence"]:
            failed.append(f"batch size {decision['batch_size']} is not resolved at K={k}")
    for cell in written.get("context_grid") or []:
        if cell["status"] != "resolved":
            failed.append(f"cell {cell['batch_size']} x {cell['prompt_tokens']} not resolved")
    for switch in (written.get("switch_points") or {}).get("switches", []):
        if switch["changed_batch_sizes"] and (
            switch["max_gain_percent"] > 100 * policy["tie_tolerance"]
        ):
            failed.append(f"the switch after {switch['lower_anchor']} loses past the tolerance")
    deployment = written.get("deployment") or {}
    if deployment.get("capped_ranges") or deployment.get("graphless_ranges"):
        failed.append("capped or graphless ranges")
    ceiling = deployment.get("capture_ceiling") or {}
    anchors = [decision["batch_size"] for decision in written["batch_decisions"]]
    if ceiling.get("max_num_seqs_known") and anchors and ceiling["max_num_seqs"] > max(anchors):
        failed.append("batch sizes past the largest anchor up to max_num_seqs")
    doubting = [
        p["rule"]
        for p in written["problems"]
        if p["severity"] == "warning"
        and (p["rule"] in VERDICT_WARNINGS or p["rule"] in BATCH_NOT_RUN_FIXES)
    ]
    failed += [f"warning {rule}" for rule in doubting]
    if not any(k > 0 for _, _, k in written["num_speculative_tokens_per_batch_size"]):
        failed.append("K=0 everywhere")
    config = written["speculative_config"]
    method = str(config.get("method", "<method>")).lower()
    drafts_itself = method in NO_DRAFT_MODEL_METHODS or method.endswith("_mtp")
    if method == "<method>":
        failed.append("no method")
    elif not drafts_itself and not config.get("model"):
        failed.append("no draft model")
    return failed


def _assert_agree(
    verdict: Verdict, status: int, out: list[str], err: str, written: dict[str, Any] | None
) -> None:
    if verdict.state == "cannot-tune":
        assert status == EXIT_BAD_INPUT and written is None and out == []
        listed = [line.strip() for line in err.splitlines() if line.startswith("  error [")]
        assert verdict.reasons
        for reason in verdict.reasons:
            # One reason per rule: the first error of the rule the CLI lists (after where it
            # was found), and how many more there are.
            of_rule = [line for line in listed if line.startswith(f"error [{reason.rule}] ")]
            more = f" (and {len(of_rule) - 1} more like it)" if len(of_rule) > 1 else ""
            assert reason.message.endswith(more)
            assert reason.message.removesuffix(more) in of_rule[0]
        # And the verdict itself, last on stderr, as the app's first screen says it.
        assert err.splitlines()[-len(verdict.lines()) :] == verdict.lines()
        return
    assert status == EXIT_OK and written is not None
    assert _printed_verdict(out) == verdict.lines()
    assert written["verdict"] == verdict.to_json()
    if verdict.state == "ready":
        assert _ready_by_the_checks(written) == []
    else:
        assert verdict.reasons


@pytest.mark.parametrize("fixed", [False, True], ids=["defaults", "after-the-fixes"])
@pytest.mark.parametrize(
    ("root", "folder"), CASES, ids=[folder.relative_to(root).as_posix() for root, folder in CASES]
)
def test_the_cli_its_file_and_the_app_give_one_verdict(
    root: Path, folder: Path, fixed: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if fixed:
        fields, settings = _after_the_fixes(folder, root)
    else:
        fields = Fields()
        settings = _app_settings(folder, root, fields, {})
    verdict = _shown(folder, root, fields, settings).verdict
    _assert_agree(verdict, *_cli(folder, fields, settings, tmp_path, capsys))


def test_a_ready_verdict_is_ready_by_every_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_grid(tmp_path / "steady", STEADY, max_num_seqs=8)
    fields, settings = Fields(), _app_settings(folder, tmp_path, Fields(), {})
    verdict = _shown(folder, tmp_path, fields, settings).verdict
    assert verdict.state == "ready"
    status, out, err, written = _cli(folder, fields, settings, tmp_path, capsys)
    _assert_agree(verdict, status, out, err, written)
    assert written is not None and _ready_by_the_checks(written) == []
    # The checks can fail: an anchor unresolved, a schedule of K=0 everywhere, a config
    # without its model.
    first, *others = written["batch_decisions"]
    doubtful = {**first, "confidence": {**first["confidence"], "status": "unresolved"}}
    assert _ready_by_the_checks({**written, "batch_decisions": [doubtful, *others]}) == [
        "batch size 1 is not resolved at K=3"
    ]
    assert _ready_by_the_checks(
        {**written, "num_speculative_tokens_per_batch_size": [[1, 8, 0]]}
    ) == ["K=0 everywhere"]
    assert _ready_by_the_checks({**written, "speculative_config": {"method": "eagle3"}}) == [
        "no draft model"
    ]
    # Issue 38: a server that runs past the largest anchor, an anchor its runs did not run.
    past = {**written["deployment"]["capture_ceiling"], "max_num_seqs": 9}
    assert _ready_by_the_checks(
        {**written, "deployment": {**written["deployment"], "capture_ceiling": past}}
    ) == ["batch sizes past the largest anchor up to max_num_seqs"]
    fewer = {"severity": "warning", "rule": "effective-batch-below-anchor"}
    assert _ready_by_the_checks({**written, "problems": [fewer]}) == [
        "warning effective-batch-below-anchor"
    ]


def test_the_real_experiments_are_covered() -> None:
    if not REAL_DATA.is_dir():
        pytest.skip(f"{REAL_DATA} is absent: the real sweeps live beside the repository")
    # qwen3-32b-fp8-eagle3-tp2 and the six single-run experiments.
    assert len([case for case in CASES if case[0] == REAL_DATA]) == 7


def _static_switch(root: Path) -> Path:
    """Issue 38, kind 5: one server per K (its num_speculative_tokens K), K=3 best at 1 and
    K=1 at 8: the deployed engine (3 with a schedule) never ran K=1 at 8."""
    cells = {
        (1, 1): [120.0, 120.5, 119.5],
        (1, 3): [150.0, 150.5, 149.5],
        (8, 1): [900.0, 900.5, 899.5],
        (8, 3): [600.0, 600.5, 599.5],
    }
    return write_grid(root, cells, spec="static", max_num_seqs=8)


def _saved_below(root: Path) -> Path:
    """Issue 38, kind 3: every server saved max_num_seqs 4, below the anchor 8."""
    folder = write_grid(root, STEADY)
    for combo in folder.iterdir():
        write_json(
            combo / "server_info.json",
            {"vllm_config": {"scheduler_config": {"max_num_seqs": 4}}},
        )
    return folder


def _fewer_in_flight(root: Path) -> Path:
    """Issue 38, kind 3: Little's law says the runs at 8 held 4 requests."""
    write_grid(root, {cell: runs for cell, runs in STEADY.items() if cell[0] == 1}, max_num_seqs=8)
    eight = {cell: runs for cell, runs in STEADY.items() if cell[0] == 8}
    return write_grid(root, eight, max_num_seqs=8, request_throughput=4.0)


#: Sweeps that each break one of issue 38's rules (kinds 3, 4, 5, 7 and 11) and were `ready`
#: before, with the rule the verdict must name.
BROKEN = {
    "saved-config-below-anchor": (_saved_below, Fields(), "max-num-seqs-below-anchor"),
    "fewer-in-flight": (_fewer_in_flight, Fields(), "effective-batch-below-anchor"),
    "max-num-seqs-past-the-anchors": (
        lambda root: write_grid(root, STEADY, max_num_seqs=256),
        Fields(),
        "unmeasured-tail",
    ),
    "static-k": (_static_switch, Fields(k_var=GLOBAL_K_VAR), "deployed-engine-unmeasured"),
    "dotted-capture-size": (
        lambda root: write_grid(
            root,
            grid([1, 64], {0: [100.0, 100.5, 99.5], 7: [150.0, 150.5, 149.5]}),
            max_num_seqs=64,
            **{"compilation_config.max_cudagraph_capture_size": 256},
        ),
        Fields(),
        "capped-range",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_sweep_that_breaks_a_rule_is_not_ready_in_the_cli_or_the_app(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build, fields, rule = BROKEN[case]
    folder = build(tmp_path / case)
    settings = _app_settings(folder, tmp_path, fields, {})
    verdict = _shown(folder, tmp_path, fields, settings).verdict
    assert verdict.state == "provisional"
    assert rule in [reason.rule for reason in verdict.reasons]
    _assert_agree(verdict, *_cli(folder, fields, settings, tmp_path, capsys))
