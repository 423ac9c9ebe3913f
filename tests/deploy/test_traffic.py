"""The traffic mix in the verdict (lib/deploy/traffic.py) and on the command line: each rule
on both sides, the sweep's own mix said and judging nothing, the JSON block after every other
key, a bad file refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_builder import write_grid

from lib.analysis import Analysis, analyse
from lib.cli.common import EXIT_BAD_INPUT, EXIT_OK
from lib.cli.main import main
from lib.deploy.traffic import traffic_in, with_traffic
from lib.deploy.tuning import deploy_analysis
from lib.deploy.verdict import Verdict, verdict_in
from lib.settings import DeploySettings, Settings
from lib.sweeps import load_experiment
from lib.traffic import TrafficMix, mix_of

#: Batch 1: K=2 150 against K=0 100; batch 4: K=0 400 against K=2 380, each as 3 runs whose
#: geometric mean is the centre. The tuning: [[1, 3, 2], [4, 4, 0]].
CELLS = {
    (a, k): [x / 1.01, x, x * 1.01]
    for (a, k), x in {(1, 0): 100.0, (1, 2): 150.0, (4, 0): 400.0, (4, 2): 380.0}.items()
}


def _deployed(tmp_path: Path) -> Analysis:
    analysis = analyse(load_experiment(write_grid(tmp_path / "sweep", CELLS)), Settings())
    deployed, _ = deploy_analysis(analysis, DeploySettings(max_num_seqs=4))
    return deployed


def _mix(weights: dict[int, float]) -> TrafficMix:
    mix = mix_of(weights, "traffic.csv", "csv-weights", len(weights))
    assert mix is not None
    return mix


def _verdict(analysis: Analysis) -> Verdict:
    found = verdict_in(analysis.result)
    assert found is not None
    return found


def _rules(analysis: Analysis) -> list[str]:
    return [reason.rule for reason in _verdict(analysis).reasons]


def test_all_traffic_at_one_batch_the_schedule_ties_the_static_k(tmp_path: Path) -> None:
    # Everything at batch 1: the schedule runs K=2 there, as static K=2 does: gain 0 <= 1 %.
    judged = with_traffic(_deployed(tmp_path), _mix({1: 1.0}))
    assert "static-k-suffices" in _rules(judged)
    assert "no-speculation-on-traffic" not in _rules(judged)  # +50 % over K=0
    reason = next(r for r in _verdict(judged).reasons if r.rule == "static-k-suffices")
    # The config of K=2 in every batch format, as the registry exports it.
    for name in ("vllm", "sglang", "trtllm"):
        assert f"{name}: {{" in reason.fix
    assert '"num_speculative_tokens": 2' in reason.fix
    assert _verdict(judged).state == "provisional"


def test_all_traffic_at_the_k0_batch_says_serve_without_speculation(tmp_path: Path) -> None:
    judged = with_traffic(_deployed(tmp_path), _mix({4: 1.0}))
    assert _rules(judged)[-1:] == ["no-speculation-on-traffic"]
    assert "serve without speculation on this traffic" in _verdict(judged).reasons[-1].fix


def test_a_mix_where_the_schedule_pays_adds_no_reason(tmp_path: Path) -> None:
    # Half at 1, half at 4: schedule 0.5 * 150 + 0.5 * 400 = 275 against static K=2's
    # 0.5 * 150 + 0.5 * 380 = 265 (+3.8 %) and K=0's 250 (+10 %): both beyond 1 %.
    deployed = _deployed(tmp_path)
    judged = with_traffic(deployed, _mix({1: 0.5, 4: 0.5}))
    assert _rules(judged) == _rules(deployed)
    value = traffic_in(judged.result)
    assert value is not None and value.best_static is not None
    assert value.best_static.gain_percent == pytest.approx(100 * (275 / 265 - 1))


def test_the_sweep_s_own_mix_is_said_and_judges_nothing(tmp_path: Path) -> None:
    deployed = _deployed(tmp_path)
    judged = with_traffic(deployed, None)
    assert _rules(judged) == _rules(deployed)
    verdict = _verdict(judged)
    assert verdict.traffic is not None and "no --traffic given" in verdict.traffic
    assert verdict.lines()[-1].startswith("  traffic: no --traffic given")
    given = _verdict(with_traffic(deployed, _mix({1: 1.0})))
    assert given.traffic == "judged on traffic.csv: a histogram of 1 rows"


def test_the_cli_prints_the_line_before_the_verdict_and_writes_the_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_grid(tmp_path / "sweep", CELLS)
    traffic = tmp_path / "traffic.csv"
    traffic.write_text("batch_size,weight\n1,1\n")
    out = tmp_path / "result.json"
    arguments = [str(folder), "--max-num-seqs", "4", "--output-json", str(out)]
    assert main([*arguments, "--traffic", str(traffic)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    verdict_at = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert lines[verdict_at - 1].startswith(f"traffic ({traffic}: a histogram of 1 rows)")
    assert "over the best static K=2" in lines[verdict_at - 1]
    data = json.loads(out.read_text())
    assert list(data)[-2:] == ["verdict", "traffic"]
    assert data["traffic"]["given"] is True
    assert data["traffic"]["best_static_k"]["k"] == 2
    assert "static-k-suffices" in [r["rule"] for r in data["verdict"]["reasons"]]


def test_a_bad_traffic_file_writes_nothing_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_grid(tmp_path / "sweep", CELLS)
    traffic = tmp_path / "traffic.csv"
    traffic.write_text("batch_size,weight\n1,1\n2,-3\n")
    out = tmp_path / "result.json"
    status = main([str(folder), "--output-json", str(out), "--traffic", str(traffic)])
    assert status == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    assert "error [invalid-traffic]" in captured.err
    assert "field 'line 3: weight'; value '-3'" in captured.err
    assert str(traffic) in captured.err


def test_check_weighs_the_dynamic_arm_against_static_and_drafterless_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed validation sweep (a dynamic server, static K=3, no speculation, 2 runs
    per cell): on a mix at its anchors, the line before the per-anchor verdicts names the
    best static arm and the server without a drafter, and the JSON holds the same."""
    from paths import VALIDATION_SWEEP

    traffic = tmp_path / "traffic.csv"
    traffic.write_text("batch_size,weight\n1,1\n8,1\n")
    out = tmp_path / "check.json"
    arguments = [str(VALIDATION_SWEEP), "--min-runs", "2", "--output-json", str(out)]
    main(["check", *arguments, "--traffic", str(traffic)])
    lines = capsys.readouterr().out.splitlines()
    first_verdict = next(i for i, line in enumerate(lines) if line.startswith("batch_size="))
    line = lines[first_verdict - 1]
    assert line.startswith(f"traffic ({traffic}: a histogram of 2 rows)")
    assert "over the best static arm (static K=3)" in line
    assert "over a server without a drafter" in line
    data = json.loads(out.read_text())["traffic"]
    assert data["best_static_k"]["k"] == 3 and data["no_drafter"]["arm"] == "no speculation"
    assert data["shares"]["measured"] == 1.0
    # Without --traffic the check says nothing of traffic (its output is unchanged).
    main(["check", *arguments])
    assert "traffic" not in capsys.readouterr().out
    assert "traffic" not in json.loads(out.read_text())
