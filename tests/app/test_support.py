"""lib/app/support.py: where the app's input is, which controls it offers, the command line
that reproduces its file, and the comparison it shows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sweep_builder import grid, write_grid

from lib.app import support as app_support
from lib.cli.main import build_parser
from lib.cli.tune import TuneArgs
from lib.schedule import tune
from lib.settings import DEFAULT_K_VAR, GLOBAL_K_VAR, Fields, Options, Settings
from lib.sweeps import load_experiment


def test_arguments_are_read_from_anywhere_in_argv() -> None:
    argv = ["--sweeps", "results/x", "--port", "2718", "-q"]
    assert app_support.parse_app_arguments(argv).sweeps == "results/x"
    assert app_support.parse_app_arguments(["--port", "1"]).sweeps is None
    # No abbreviations: marimo's own flags must never be mistaken for ours.
    assert app_support.parse_app_arguments(["--sw", "x"]).sweeps is None


def test_root_is_resolved_from_the_working_directory(tmp_path: Path) -> None:
    notebooks = tmp_path / "repo" / "notebooks"
    default = app_support.resolve_root(None, notebooks, cwd=tmp_path / "elsewhere")
    assert default == tmp_path / "repo" / "data" / "sample_sweeps"
    relative = app_support.resolve_root("../runs", notebooks, cwd=tmp_path / "work")
    assert relative == tmp_path / "runs"
    assert app_support.resolve_root(str(tmp_path / "abs"), notebooks, cwd=notebooks) == (
        tmp_path / "abs"
    )


def test_query_folder_must_lie_below_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "link").symlink_to(tmp_path / "secret")
    below = app_support.folder_below_root
    assert below(root, None) == (root, None)
    assert below(root, "a/b") == ((root / "a" / "b").resolve(), None)
    assert below(root, ["a", "a/b"]) == ((root / "a").resolve(), None)
    assert below(root, str(root / "a")) == ((root / "a").resolve(), None)
    for outside in ("..", "../secret", str(tmp_path / "secret"), "link", "a/../../secret"):
        folder, refusal = below(root, outside)
        assert folder == root and refusal is not None and "outside" in refusal, outside
    folder, refusal = below(root, "missing")
    assert folder == root and refusal is not None and "not a folder" in refusal


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ("\x00", "\\x00"),
        ("a\x00b/c", "a\\x00b/c"),
        ("x" * 256, "x" * 256),
        ("a/" + "x" * 300 + "/b", "a/" + "x" * 300 + "/b"),
    ],
    ids=["nul", "nul-inside", "name-too-long", "deep-name-too-long"],
)
def test_query_that_is_no_path_is_refused_not_raised(
    tmp_path: Path, query: str, shown: str
) -> None:
    (tmp_path / "a").mkdir()  # the system checks a name's length only below a folder it finds
    folder, refusal = app_support.folder_below_root(tmp_path, query)
    assert folder == tmp_path
    assert refusal is not None
    assert refusal.startswith(f"?sweeps={shown} is not a usable path (")
    assert f"choose an experiment below {tmp_path}" in refusal


def test_refusals_show_control_characters_escaped(tmp_path: Path) -> None:
    folder, refusal = app_support.folder_below_root(tmp_path, "runs\n\nerror [x] forged")
    assert folder == tmp_path
    assert refusal == (
        f"?sweeps=runs\\n\\nerror [x] forged is not a folder below {tmp_path}:"
        f" choose an experiment below {tmp_path}"
    )


@pytest.mark.parametrize("query", ["sonnet-lik", "..", "\x00"], ids=["mistyped", "outside", "nul"])
def test_a_refused_query_starts_on_no_experiment(tmp_path: Path, query: str) -> None:
    # The default sample and another experiment below the root: a refused query shows
    # neither (the page shows the refusal and the picker), an accepted one its own folder's.
    root = tmp_path / "root"
    write_grid(root / "sonnet-like", grid([1], {0: [1.0]}))
    write_grid(root / "other", grid([1], {0: [1.0]}))
    start = app_support.query_start(root, query)
    experiments, _ = app_support.find_experiments(start.folder, root)
    assert start.folder == root and set(experiments) == {"sonnet-like", "other"}
    assert start.refusal is not None and start.refusal.startswith("?sweeps=")
    assert app_support.first_experiment(start, experiments) is None


def test_an_accepted_or_absent_query_starts_on_its_default_experiment(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_grid(root / "sonnet-like", grid([1], {0: [1.0]}))
    write_grid(root / "runs" / "b", grid([1], {0: [1.0]}))
    write_grid(root / "runs" / "a", grid([1], {0: [1.0]}))
    absent = app_support.query_start(root, None)
    assert absent == app_support.QueryStart(root, None)
    assert app_support.first_experiment(absent, app_support.find_experiments(root, root)[0]) == (
        "sonnet-like"
    )
    runs = app_support.query_start(root, "runs")
    found, _ = app_support.find_experiments(runs.folder, root)
    # No sonnet-like below runs/: the first of the query's own folder.
    assert runs.refusal is None and app_support.first_experiment(runs, found) == next(iter(found))
    assert found[next(iter(found))].parent == (root / "runs").resolve()
    assert app_support.first_experiment(runs, {}) is None


def test_experiments_in_a_folder(tmp_path: Path) -> None:
    one = write_grid(tmp_path / "one", grid([1], {0: [1.0]}))
    # vLLM's newer layout: <output-dir>/<experiment-name>/SERVE--...
    write_grid(tmp_path / "many" / "20261129_101500", grid([1], {0: [1.0]}))
    write_grid(tmp_path / "many" / "baseline" / "deeper", grid([1], {0: [1.0]}))
    (tmp_path / "many" / "empty").mkdir()
    find = app_support.find_experiments
    assert find(one, tmp_path) == ({"one": one}, [])
    assert find(tmp_path / "many", tmp_path) == (
        {
            "20261129_101500": tmp_path / "many" / "20261129_101500",
            "baseline": tmp_path / "many" / "baseline",
        },
        [],
    )
    assert find(tmp_path / "many" / "empty", tmp_path) == ({}, [])
    assert find(tmp_path / "absent", tmp_path) == ({}, [])


def _links_out_of(root: Path, outside: Path) -> None:
    """Below ``root``: experiments that lead outside it in every way the picker meets."""
    write_grid(outside / "elsewhere", grid([1], {0: [1.0]}))
    combo = next((outside / "elsewhere").iterdir())
    write_grid(root / "kept", grid([1], {0: [1.0]}))
    (root / "kept-again").symlink_to(root / "kept")  # a link inside the root is followed
    # Combos assembled from links inside the root, deeper down, with a link back up.
    (root / "assembled" / "day1").mkdir(parents=True)
    (root / "assembled" / "day1" / "combo").symlink_to(next((root / "kept").iterdir()))
    (root / "assembled" / "day1" / "up").symlink_to(root / "assembled")
    (root / "linked-out").symlink_to(outside / "elsewhere")
    (root / "links-inside" / "deep").mkdir(parents=True)
    (root / "links-inside" / "deep" / "summary.json").symlink_to(combo / "summary.json")
    (root / "combo-linked-out").mkdir()
    (root / "combo-linked-out" / combo.name).symlink_to(combo)
    write_grid(root / "partly-out", grid([1], {0: [1.0]}))
    (root / "partly-out" / "SERVE--extra").mkdir()
    (root / "partly-out" / "SERVE--extra" / "run=0.json").symlink_to(combo / "run=0.json")


def test_links_that_lead_outside_the_root_are_not_listed_and_are_named(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    _links_out_of(root, outside)
    experiments, refusals = app_support.find_experiments(root, root)
    assert experiments == {
        "assembled": root / "assembled",
        "kept": root / "kept",
        "kept-again": root / "kept-again",
        "partly-out": root / "partly-out",
    }
    combo = next((outside / "elsewhere").iterdir()).name
    left_out = [
        f"combo-linked-out/{combo}",
        "linked-out",
        "links-inside/deep/summary.json",
        "partly-out/SERVE--extra/run=0.json",
    ]
    assert refusals == [
        f"{name}: a link that leads outside {root}; not listed" for name in left_out
    ]


def test_a_link_back_up_the_tree_is_walked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a guard the walk would go round until the system refuses the path (40 links
    deep), once per link back up: with two, about 2**40 listings."""
    (tmp_path / "empty" / "day1").mkdir(parents=True)
    (tmp_path / "empty" / "day1" / "up").symlink_to(tmp_path / "empty")
    listed: list[object] = []
    scandir = os.scandir

    def counted(path: str) -> Iterator[os.DirEntry[str]]:
        listed.append(path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", counted)
    assert app_support.find_experiments(tmp_path, tmp_path) == ({}, [])
    # The root and "empty" twice each (once as a folder of experiments, once as one), then
    # "day1", and "empty" and "day1" again through the link: 7.
    assert len(listed) <= 7, listed


def test_a_run_experiment_is_one_experiment_and_a_folder_of_sweeps_is_several(
    tmp_path: Path,
) -> None:
    # `tune-spec-k run` writes each round's sweeps inside its experiment (round-0/SERVE--..,
    # round-1-1/SERVE--..): with its rounds.json the folder is one experiment, as
    # `tune-spec-k DIR` reads it; the same folders without it are a folder of experiments.
    cells = grid([1, 4], {0: [100.0], 3: [150.0]})
    for name in ("round-0", "round-1-1"):
        write_grid(tmp_path / "E" / name, cells)
    several, _ = app_support.find_experiments(tmp_path / "E", tmp_path)
    assert sorted(several) == ["round-0", "round-1-1"]
    (tmp_path / "E" / "rounds.json").write_text("{}")
    one, _ = app_support.find_experiments(tmp_path / "E", tmp_path)
    assert one == {"E": tmp_path / "E"}


def test_one_experiment_whose_combos_lead_outside_the_root_is_not_listed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    _links_out_of(root, outside)
    experiments, refusals = app_support.find_experiments(root / "combo-linked-out", root)
    assert experiments == {}
    assert len(refusals) == 1 and "leads outside" in refusals[0]


def test_a_folder_outside_the_root_lists_nothing(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    _links_out_of(root, outside)
    for folder in (outside / "elsewhere", root / "linked-out"):
        experiments, refusals = app_support.find_experiments(folder, root)
        assert experiments == {}
        assert refusals == [f"{folder} leads outside {root}: nothing listed"]


def test_names_are_shown_on_one_line(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_grid(tmp_path / "outside", grid([1], {0: [1.0]}))
    root.mkdir()
    (root / "out\nerror [outside-root] forged").symlink_to(tmp_path / "outside")
    _, refusals = app_support.find_experiments(root, root)
    assert refusals == [
        f"out\\nerror [outside-root] forged: a link that leads outside {root}; not listed"
    ]


def test_slider_steps_are_the_numbers_a_user_types() -> None:
    steps = app_support.slider_steps(0.3, 0.005)
    assert len(steps) == 61 and steps[0] == 0.0 and steps[-1] == 0.3
    assert 0.01 in steps and 0.07 in steps  # 14 * 0.005 is 0.07000000000000001 unrounded
    assert [repr(step) for step in app_support.slider_steps(0.3, 0.1)] == [
        "0.0",
        "0.1",
        "0.2",
        "0.3",
    ]
    confidence = app_support.slider_steps(1.0, 0.01, start=0.5)
    assert len(confidence) == 51 and confidence[0] == 0.5 and confidence[-1] == 1.0
    assert 0.9 in confidence and 0.57 in confidence  # 0.5 + 7 * 0.01 is 0.5700000000000001


def test_the_direction_text_says_where_the_direction_comes_from() -> None:
    latency = app_support.direction_text(Settings(objective="p99_e2el_ms", direction="minimize"))
    assert "the catalogue's direction" in latency
    assert latency.endswith("needs --objective-direction minimize.")
    # Maximised, the latency is not the catalogue's direction, and it is the CLI's default.
    maximised = app_support.direction_text(Settings(objective="p99_e2el_ms"))
    assert "not the catalogue's direction (it says smaller is better)" in maximised
    assert maximised.endswith("; the CLI's default.")
    assert "catalogue's direction" in app_support.direction_text(Settings())
    minimised = app_support.direction_text(Settings(direction="minimize"))
    assert "not the catalogue's direction (it says larger is better)" in minimised
    unknown = app_support.direction_text(Settings(objective="x_ms", direction="minimize"))
    assert "does not list this field" in unknown
    assert "needs --objective-direction minimize" in unknown


def test_directions_and_acceptance_choices(tmp_path: Path) -> None:
    sweep = load_experiment(write_grid(tmp_path, grid([1], {0: [1.0], 3: [2.0]})))
    assert app_support.default_direction("mean_tpot_ms") == "minimize"
    assert app_support.default_direction("p99_ttft_ms") == "minimize"
    assert app_support.default_direction("max_output_tokens_per_s") == "maximize"
    # A field the catalogue does not list takes the CLI's default, whatever its name says.
    assert app_support.default_direction("my_latency_ms") == Settings().direction == "maximize"
    # The direction control's first choice follows whatever objective is picked; the others
    # hold whatever the objective.
    usual = app_support.USUAL_DIRECTION
    assert app_support.DIRECTION_CHOICES[0] == usual
    assert app_support.chosen_direction(usual, "p99_ttft_ms") == "minimize"
    assert app_support.chosen_direction(usual, "output_throughput") == "maximize"
    assert app_support.chosen_direction("maximize", "p99_ttft_ms") == "maximize"
    assert app_support.chosen_direction("minimize", "output_throughput") == "minimize"
    with pytest.raises(ValueError, match="'larger'"):
        app_support.chosen_direction("larger", "output_throughput")
    acceptance = app_support.acceptance_options(sweep)
    assert acceptance[:2] == [app_support.NO_ACCEPTANCE, "spec_decode_acceptance_length"]
    assert app_support.acceptance_field(app_support.NO_ACCEPTANCE) is None
    assert app_support.K_VAR_CHOICES["num_speculative_tokens"] == GLOBAL_K_VAR
    assert DEFAULT_K_VAR in app_support.K_VAR_CHOICES.values()


def test_cli_arguments_give_back_every_setting(tmp_path: Path) -> None:
    settings = Settings(
        objective="p99_tpot_ms",
        direction="minimize",
        acceptance="spec_decode_acceptance_rate",
        min_runs=5,
        uncertainty_penalty=0.7,
        max_objective_relative_mad=0.07,
        max_acceptance_relative_mad=0.3,
        strict_acceptance_stability=True,
        relative_tolerance=0.035,
        max_batch_size=512,
        allow_mixed_global_k=True,
    )
    options = Options(policy="confident", confidence=0.75, seed=7, interpolated_schedule=True)
    folder = tmp_path / "my runs"
    fields = Fields(batch_size_var="batch", k_var=GLOBAL_K_VAR)
    arguments = app_support.cli_arguments(folder, fields, settings, options)
    parsed = TuneArgs.from_cli_args(build_parser().parse_args(arguments))
    assert (parsed.fields, parsed.settings, parsed.options) == (fields, settings, options)
    assert parsed.experiment_dir == str(folder)
    assert app_support.cli_command(arguments).startswith(f"tune-spec-k '{folder}' ")
    default = app_support.cli_arguments(folder, Fields(), Settings(), Options())
    parsed = TuneArgs.from_cli_args(build_parser().parse_args(default))
    assert (parsed.fields, parsed.settings, parsed.options) == (Fields(), Settings(), Options())
    # The decision rule is always spelled out; the Monte-Carlo seed only when not the default.
    assert "--policy=seed" in default and not any(a.startswith("--seed") for a in default)
    assert "--interpolated-schedule" not in default


def test_baseline_without_k0(tmp_path: Path) -> None:
    result = tune(load_experiment(write_grid(tmp_path, grid([1], {3: [1.0] * 3}))), Settings())
    assert app_support.baseline_text(result).startswith("no K=0 runs")


def test_capture_lines_are_the_capture_rules_warnings(tmp_path: Path) -> None:
    from sweep_builder import write_grid

    from lib.analysis import analyse
    from lib.app.support import capture_lines
    from lib.deploy.tuning import deploy_analysis
    from lib.settings import DeploySettings, Settings
    from lib.sweeps import load_experiment

    cells = {
        (1, 0): [100.0, 101.0, 99.0],
        (1, 3): [150.0, 151.0, 149.0],
        (256, 0): [5000.0, 5050.0, 4950.0],
        (256, 3): [4000.0, 4040.0, 3960.0],
    }
    analysis = analyse(load_experiment(write_grid(tmp_path / "s", cells, global_k=3)), Settings())
    assert capture_lines(analysis.result) == []
    deployed, _ = deploy_analysis(analysis, DeploySettings(vllm_version="0.33.0"))
    # [[1, 255, 3], [256, 256, 0]]: 129..255 at K=3 are past the assumed 512.
    (line,) = capture_lines(deployed.result)
    assert line.startswith("batch sizes 129-255 run K=3")
    # vLLM 0.34 (the default, assumed): the K=0 tier sets R = 512, so 129..255 run FULL
    # graphs; the app says why they are kept, in the CLI's words.
    newest, _ = deploy_analysis(analysis, DeploySettings())
    (kept,) = capture_lines(newest.result)
    assert kept.startswith("batch sizes 129-255 run K=3 at 516-1020 tokens per decode step,")
    assert "in FULL CUDA graphs" in kept and "not capped" in kept


def test_the_rounds_of_a_run_experiment_are_read_for_the_app(tmp_path: Path) -> None:
    from lib.loop.run.rounds import RoundCost, RoundRecord, RunLog, rounds_text

    assert app_support.experiment_rounds(tmp_path) is None  # not an experiment of `run`
    record = RoundRecord(
        number=0,
        plan_dir="plans/round-0",
        purpose="x",
        planned_runs=4,
        planned_starts=2,
        estimated_seconds=10.0,
        status="tuned",
        cost=RoundCost(4, 40.0, 2, 20.0, 1, "b"),
        verdict="provisional",
        unresolved=(4,),
        picks={1: 3, 4: 0},
        p_eps_good={1: 0.95, 4: None},
    )
    log = RunLog({}, (record,), stop_rule="max-rounds", stop_text="1 round(s) done")
    (tmp_path / "rounds.json").write_text(rounds_text(log))
    view = app_support.experiment_rounds(tmp_path)
    assert view is not None and view.error is None and view.table is not None
    assert view.table.rows() == [(1, "K=3, P 0.95"), (4, "K=0, P unknown")]
    assert view.table.columns == ["batch_size", "round 0 (provisional)"]
    assert view.lines[0] == "run stopped: 1 round(s) done (max-rounds)"
    (tmp_path / "rounds.json").write_text('{"version": 7}')
    view = app_support.experiment_rounds(tmp_path)
    assert view is not None and view.table is None
    assert view.error is not None and "invalid-rounds" in view.error and "version" in view.error
