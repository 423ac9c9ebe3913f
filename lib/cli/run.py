"""``tune-spec-k run``: the measurement loop, closed (issue 41; docs/loop.md, "Run the loop").

Round 0 measures the design's grid lean (:func:`round_zero`); each round writes its plan
(``tune-spec-k plan``'s own functions), runs its sweep through the plan's ``run.sh``, tunes the
whole experiment (``tune-spec-k EXPERIMENT_DIR``'s own ``main``, which prints what it always
prints), and stops by the rules of :mod:`lib.loop.run.stopping`; otherwise the next round is
``plan --follow-up`` of that tuning. Every round's runs land inside one experiment folder,
``RESULTS_DIR/EXPERIMENT_NAME``, which ``tune-spec-k DIR`` reads like any other:

    RESULTS_DIR/EXPERIMENT_NAME/
      rounds.json                   the log of every round (lib.loop.run.rounds)
      speculative_k_schedule.json   the tuning of every round's runs together
      measurement_plan.json         its measurement plan (the next round's input)
      plans/round-N/                each round's plan (run.sh, params, command.txt, ...)
      logs/round-N.log              each round's sweep output, appended on a resume
      round-0/SERVE--...-BENCH--.../run=0.json ...         round 0's sweep
      round-1-1/..., round-1-2/...                         round 1's sweeps, one per step

Exit status: 0 the loop ended (any verdict, the summary says which), 1 a round's sweep failed
(resume with the same arguments) or the tuning refused the runs, 2 bad input, 130 stopped
(resume with the same arguments).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lib.analysis import analyse
from lib.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FINDING,
    EXIT_OK,
    PROGRAM,
    print_problems,
    say,
)
from lib.cli.plan import PlanArgs, plan_of, write_planned
from lib.files import read_json, write_files
from lib.flags import add_flags, from_arguments, given, to_arguments
from lib.keys import MISSING
from lib.loop.plan.design import SweepDesign, design_from
from lib.loop.plan.lean import bracket_ks
from lib.loop.plan.sweep_plan import SweepPlan
from lib.loop.plan.tuning import tuning_plan
from lib.loop.plan.write import DESIGN_FILE
from lib.loop.run.accounting import (
    MeasuredRun,
    StartBasis,
    plan_estimate,
    read_runs,
    round_cost,
    run_durations,
    start_basis,
    start_gaps,
)
from lib.loop.run.reruns import refusal_reruns, rerun_plan
from lib.loop.run.rounds import ROUNDS_FILE, RoundRecord, RunLog, rounds_of, rounds_text
from lib.loop.run.settings import LoopSettings
from lib.loop.run.stopping import (
    Stop,
    budget_stop,
    hours_text,
    over_budget,
    stop_after_round,
    stop_before_round,
)
from lib.loop.run.sweep import SweepOutcome, run_sweep, set_aside_broken
from lib.loop.run.trim import (
    StepCost,
    affordable_steps,
    measured_anchors_only,
    one_server_per_sweep,
    plan_cells,
    restricted,
    step_cells,
)
from lib.present.rounds import (
    round_measured_lines,
    round_plan_lines,
    round_tuned_lines,
    summary_lines,
)
from lib.present.text import paste_line
from lib.problems import Problem, Severity
from lib.settings import RESULT_FILE, Options, Settings
from lib.sweeps import load_experiment

__all__ = ["RunArgs", "main", "round_zero"]

_COMMAND = f"{PROGRAM} run"
#: The tuning's flags ``run`` takes (the rest keep their defaults).
TUNING_FLAGS = (
    "objective",
    "direction",
    "min_runs",
    "relative_tolerance",
    "max_objective_relative_mad",
)
#: What the loop's tunings set unless given: one run a cell is a cell (round 0 is lean), and
#: a K missing at an anchor (a bracketed round 0's, --first-ks) is judged, not refused.
LOOP_TUNING: Mapping[str, Any] = {"min_runs": 1, "allow_unmeasured_k": True}
OPTION_FLAGS = ("confidence", "server_cv", "seed")
PLAN_JSON = "measurement_plan.json"
PLANS = "plans"
LOGS = "logs"


@dataclass(frozen=True)
class RunArgs:
    """What ``tune-spec-k run`` was asked to do."""

    design: Mapping[str, Any]
    results_dir: str
    experiment_name: str
    loop: LoopSettings
    tuning: Mapping[str, Any]
    options: Mapping[str, Any]

    description: ClassVar[str] = (
        "Measure, tune and measure again until the answer is settled or the budget is spent:"
        " round 0 runs the bracketed lean design (K=0, the middle K and the largest K at every"
        " anchor once plus a noise probe; the other K later, only where those cannot rule"
        " them out; --first-ks with every K for all of them at once, --design full for the"
        " seed's grid), each later round only what the tuning left open (tune-spec-k"
        " plan --follow-up; past the budget, the part of it that fits), each sweep through its"
        " plan's"
        " run.sh (`vllm bench sweep serve` from PATH). Stops when the verdict is ready, when"
        " the next round's estimate would pass --budget-gpu-hours, after --max-rounds, when a"
        " round added nothing its plan asked for, when the plan has nothing left that could"
        " change a decision, or when it would only measure the anchors' current picks again."
        " Every round's runs go into RESULTS_DIR/EXPERIMENT_NAME, with"
        " rounds.json, the log of the rounds. Stopped or failed, the same command resumes"
        " where it stopped (the sweep in flight with vLLM's --resume), measuring no finished"
        " run again.\n\nExit status: 0 done, 1 a sweep failed or the tuning refused the runs"
        " (the same command resumes), 2 bad input, 130 stopped (the same command resumes)."
    )
    example: ClassVar[str] = (
        f"example: {_COMMAND} --model meta-llama/Llama-3.1-8B-Instruct --method eagle3"
        " --draft-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --ks 0,1,2,3,5 --anchors"
        " 1,2,4,8,16,32,64,128,256 --budget-gpu-hours 4 --results-dir results -e loop"
    )

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        add_flags(parser.add_argument_group("design (as tune-spec-k plan)"), SweepDesign)
        parser.add_argument(
            "--results-dir", default="results", help="`-o` of the sweeps (default: results)"
        )
        parser.add_argument(
            "-e",
            "--experiment-name",
            default="tuning",
            help="the experiment folder inside --results-dir, every round's runs in it"
            " (default: tuning)",
        )
        add_flags(parser.add_argument_group("budget and accounting"), LoopSettings)
        tuning = parser.add_argument_group("tuning (as tune-spec-k EXPERIMENT_DIR)")
        add_flags(tuning, Settings, only=TUNING_FLAGS)
        add_flags(tuning, Options, only=OPTION_FLAGS)

    @classmethod
    def from_cli_args(cls, arguments: argparse.Namespace) -> RunArgs:
        return cls(
            design=given(SweepDesign, arguments),
            results_dir=arguments.results_dir,
            experiment_name=arguments.experiment_name,
            loop=from_arguments(LoopSettings, arguments),
            tuning=given(Settings, arguments),
            options=given(Options, arguments),
        )

    @property
    def experiment(self) -> Path:
        return Path(self.results_dir) / self.experiment_name

    def identity(self) -> dict[str, Any]:
        """What a resumed run must share with the run it resumes: the design and the tuning
        (the budget may change), as ``rounds.json`` stores them."""
        design, _ = design_from(None, self.design)
        stored = {
            "design": design.to_json() if design is not None else dict(self.design),
            "tuning": dict(self.tuning),
            "options": dict(self.options),
        }
        parsed: dict[str, Any] = json.loads(json.dumps(stored))
        return parsed


def round_zero(args: RunArgs) -> tuple[PlanArgs, str]:
    """Round 0's plan and what it is, in the round's text: the lean design (every (anchor, K)
    once plus a noise probe, :mod:`lib.loop.plan.lean`), bracketed (``--first-ks``: by
    default :func:`lib.loop.plan.lean.bracket_ks`, the two ends of the K range and its middle;
    the other K are measured by later rounds only where those cannot rule them out), unless
    ``--design full`` asks for the seed's grid, which then runs ``--num-runs`` times per cell
    as ``plan`` would."""
    layout = args.design.get("layout", "lean")
    design = {**args.design, "layout": layout}
    ks = tuple(sorted(args.design.get("ks", SweepDesign().ks)))
    if layout == "lean" and "first_ks" not in args.design and bracket_ks(ks) != ks:
        design["first_ks"] = bracket_ks(ks)
    plan_args = PlanArgs(
        output_dir=_plan_dir(args, 0).as_posix(),
        design_file=None,
        design=design,
        follow_up=None,
        validate=None,
        static_ks=None,
        results_dir=args.experiment.as_posix(),
        experiment_name="round-0",
    )
    first = design.get("first_ks")
    if layout == "lean" and first and set(first) != set(ks):
        purpose = (
            f"the bracketed lean design: K={sorted(first)} at every anchor once plus a noise"
            " probe (K=0 and the largest K repeated at the smallest, middle and largest"
            " anchor); later rounds measure the other K only where those cannot rule them"
            " out, and rerun what the tuning leaves open"
        )
    elif layout == "lean":
        purpose = (
            "the lean design: every (anchor, K) once plus a noise probe (K=0 and the largest K"
            " repeated at the smallest, middle and largest anchor); later rounds rerun what the"
            " tuning leaves open"
        )
    else:
        purpose = (
            "the seed's full grid (--design full): every (anchor, K) --num-runs times; later"
            " rounds rerun what the tuning leaves open"
        )
    return plan_args, purpose


def _plan_dir(args: RunArgs, number: int) -> Path:
    return args.experiment / PLANS / f"round-{number}"


def _follow_up(args: RunArgs, number: int, refused: bool = False) -> tuple[PlanArgs, str]:
    """Round ``number``'s plan (>= 1): the follow-up of the tuning so far, on the design of
    the round before's plan (its replicas continue after that one's). After a ``refused``
    tuning, of the reruns it asked for (:meth:`_Loop.plan_reruns`) alone: the result file is
    an older tuning's."""
    files = [(args.experiment / PLAN_JSON).as_posix()]
    if not refused:
        files.append((args.experiment / RESULT_FILE).as_posix())
    plan_args = PlanArgs(
        output_dir=_plan_dir(args, number).as_posix(),
        design_file=(_plan_dir(args, number - 1) / DESIGN_FILE).as_posix(),
        design={},
        follow_up=tuple(files),
        validate=None,
        static_ks=None,
        results_dir=args.experiment.as_posix(),
        experiment_name=f"round-{number}",
    )
    if refused:
        return (
            plan_args,
            "the cells the tuning refused for their runs (too noisy, or too few), rerun",
        )
    return plan_args, "the follow-up of the tuning so far: only the cells it left open"


def _sweep_dirs(plan: SweepPlan) -> list[Path]:
    return [Path(step.results_dir) / step.experiment_name for step in plan.steps]


def _sweeps_in(folder: Path) -> list[Path]:
    """A sweep's folder and the sweeps written inside it (``-o FOLDER -e NAME``, as a lean
    design's second and third sweeps are): a subfolder that holds combo folders with runs,
    not runs of its own (a combo folder's)."""
    inner = sorted(
        path
        for path in folder.iterdir()
        if path.is_dir() and not any(path.glob("run=*.json")) and any(path.glob("*/run=*.json"))
    )
    return [folder, *inner]


def _counts(runs: list[MeasuredRun]) -> Counter[tuple[int, int]]:
    return Counter((run.anchor, run.k) for run in runs if run.anchor is not None)


class _Failed(Exception):
    """A round that cannot go on: the exit status and the problems or lines to print."""

    def __init__(self, status: int, problems: list[Problem]) -> None:
        super().__init__(status)
        self.status, self.problems = status, problems


class _Loop:
    """The state of one ``tune-spec-k run``: its arguments and the log, saved after each
    step of a round."""

    def __init__(self, args: RunArgs, log: RunLog) -> None:
        self.args = args
        self.log = log

    @property
    def path(self) -> Path:
        return self.args.experiment / ROUNDS_FILE

    def save(self) -> None:
        problems = write_files([(self.path, rounds_text(self.log))], make_folders=True)
        if problems:
            raise _Failed(EXIT_BAD_INPUT, problems)

    def put(self, record: RoundRecord) -> None:
        rounds = list(self.log.rounds)
        if record.number < len(rounds):
            rounds[record.number] = record
        else:
            rounds.append(record)
        self.log = dataclasses.replace(self.log, rounds=tuple(rounds))
        self.save()

    def round_runs(self, number: int) -> list[MeasuredRun]:
        """Round ``number``'s runs: its sweeps' folders, ``round-N`` and ``round-N-*``, and
        the sweeps written inside them (a lean round 0's ``round-0/grid``)."""
        folders = sorted(
            path
            for path in self.args.experiment.glob(f"round-{number}*")
            if path.is_dir()
            and (path.name == f"round-{number}" or path.name.startswith(f"round-{number}-"))
        )
        return read_runs([inner for folder in folders for inner in _sweeps_in(folder)])

    def all_runs(self) -> list[MeasuredRun]:
        return [run for number in range(len(self.log.rounds)) for run in self.round_runs(number)]

    def basis(self) -> StartBasis:
        """What an unmeasured server start counts: the median of every round's measured."""
        gaps = [gap for n in range(len(self.log.rounds)) for gap in start_gaps(self.round_runs(n))]
        return start_basis(gaps, self.args.loop.server_start_seconds)

    # ------------------------------------------------------------------ a round

    def plan(self, number: int) -> tuple[PlanArgs, SweepPlan, str]:
        refused = number > 0 and self.log.rounds[number - 1].verdict == "cannot-tune"
        plan_args, purpose = (
            round_zero(self.args) if number == 0 else _follow_up(self.args, number, refused)
        )
        plan, problems = plan_of(plan_args)
        if plan is None:
            raise _Failed(EXIT_BAD_INPUT if number == 0 else EXIT_FINDING, problems)
        # Round 0's sweeps are the design's; a follow-up's, one server start each (a budget
        # takes or leaves each start on its own).
        return plan_args, plan if number == 0 else one_server_per_sweep(plan), purpose

    def new_round(self, number: int) -> tuple[RoundRecord, SweepPlan] | Stop:
        plan_args, plan, purpose = self.plan(number)
        runs = self.all_runs()
        basis = self.basis()
        estimate = plan_estimate(plan, run_durations(runs), self.args.loop.run_seconds, basis)
        spent = self.log.spent_seconds
        budget = self.args.loop.budget_seconds
        if number == 0 and over_budget(0.0, estimate.seconds, budget):
            raise _Failed(
                EXIT_BAD_INPUT,
                [
                    Problem(
                        Severity.ERROR,
                        "invalid-setting",
                        f"round 0 alone ({estimate.runs} runs, {estimate.starts} server starts)"
                        f" is estimated at {hours_text(estimate.seconds)}",
                        field="--budget-gpu-hours",
                        value=f"{self.args.loop.budget_gpu_hours:g}",
                        expected=f"at least {estimate.seconds / 3600:.2f} (or fewer --ks or"
                        " --anchors, or a lower --run-seconds / --server-start-seconds where"
                        " the estimates are too high)",
                    )
                ],
            )
        before = _counts(runs)
        if number > 0:
            picks = self.log.rounds[number - 1].picks
            stop = stop_before_round(
                len(plan.steps), spent, estimate.seconds, None, plan_cells(plan), picks
            )
            if stop is None and over_budget(spent, estimate.seconds, budget):
                assert budget is not None
                trimmed = self.trimmed(plan, before, budget - spent)
                if trimmed is not None:
                    purpose += (
                        f"; trimmed to the budget left ({hours_text(budget - spent)}):"
                        f" {len(plan_cells(trimmed))} of its {len(plan_cells(plan))} cells, in"
                        f" {len(trimmed.steps)} sweep(s) (no new anchor; whole sweeps, those"
                        " measuring the most cells for the first time first, then the most"
                        " cells per GPU-hour)"
                    )
                    plan = trimmed
                    estimate = plan_estimate(
                        plan, run_durations(runs), self.args.loop.run_seconds, basis
                    )
            if stop is None:
                stop = budget_stop(spent, estimate.seconds, budget)
            if stop is not None:
                return stop
        record = RoundRecord(
            number=number,
            plan_dir=Path(plan_args.output_dir).relative_to(self.args.experiment).as_posix(),
            purpose=purpose,
            planned_runs=estimate.runs,
            planned_starts=estimate.starts,
            estimated_seconds=estimate.seconds,
            asked={cell: before.get(cell, 0) for cell in sorted(plan_cells(plan))},
        )
        say(round_plan_lines(record, spent, budget, basis.text, resumed=False))
        if write_planned(plan_args, plan) != EXIT_OK:
            raise _Failed(EXIT_BAD_INPUT, [])
        self.put(record)
        return record, plan

    def trimmed(
        self, plan: SweepPlan, before: Mapping[tuple[int, int], int], left: float
    ) -> SweepPlan | None:
        """The part of ``plan`` that fits in ``left`` GPU seconds (:mod:`lib.loop.run.trim`:
        :func:`measured_anchors_only`, then :func:`affordable_steps`), or None where none of it
        does."""
        durations, basis = run_durations(self.all_runs()), self.basis()
        plan = measured_anchors_only(plan, before)
        costs = []
        for step in plan.steps:
            cells = step_cells(step)
            alone = dataclasses.replace(plan, steps=(step,))
            seconds = plan_estimate(alone, durations, self.args.loop.run_seconds, basis).seconds
            first = sum(1 for cell in cells if not before.get(cell))
            costs.append(StepCost(step.name, seconds, len(cells), first))
        names = set(affordable_steps(costs, left))
        if not names:
            return None
        return dataclasses.replace(plan, steps=tuple(s for s in plan.steps if s.name in names))

    def measure(self, record: RoundRecord, plan: SweepPlan) -> RoundRecord:
        """Run the round's sweep (resumed where its folders exist) and count what it cost."""
        folders = _sweep_dirs(plan)
        resume = any(folder.exists() for folder in folders)
        if resume:
            # vLLM's --resume needs every sweep's folder; one not started yet runs whole.
            for folder in folders:
                folder.mkdir(parents=True, exist_ok=True)
            for old, new in set_aside_broken(folders):
                say(
                    [
                        f"round {record.number}: {old.as_posix()} is not whole (a run cut short):"
                        f" kept as {new.name}, measured again"
                    ]
                )
            record = dataclasses.replace(record, resumes=record.resumes + 1, status="planned")
            self.put(record)
            basis = self.basis()
            say(
                round_plan_lines(
                    record,
                    self.log.spent_seconds - record.cost.seconds,
                    self.args.loop.budget_seconds,
                    basis.text,
                    resumed=True,
                )
            )
        script = self.args.experiment / record.plan_dir / "run.sh"
        log = self.args.experiment / LOGS / f"round-{record.number}.log"
        outcome = run_sweep(
            script, resume, log, folders, record.planned_runs, f"round {record.number}"
        )
        runs = self.round_runs(record.number)
        cost = round_cost(runs, self.basis(), record.resumes)
        if outcome.status != 0:
            failure = _failure_text(outcome, plan, folders, self.args.experiment / record.plan_dir)
            self.put(dataclasses.replace(record, status="failed", cost=cost, failure=failure))
            raise _Failed(
                EXIT_FINDING,
                [Problem(Severity.ERROR, "sweep-failed", failure)],
            )
        record = dataclasses.replace(record, status="measured", cost=cost, failure=None)
        self.put(record)
        say(round_measured_lines(record, self.log.spent_seconds))
        return record

    def tune(self, record: RoundRecord) -> RoundRecord:
        """Tune the whole experiment as ``tune-spec-k DIR`` does (its output printed), and
        keep the round's verdict, unresolved anchors, picks and P(eps-good)."""
        from lib.cli import tune as tune_cli
        from lib.deploy.result_file import read_result_file
        from lib.settings import ContextSettings, DeploySettings, Fields

        tuning = self.tuning()
        status = tune_cli.main(
            tune_cli.TuneArgs(
                experiment_dir=self.args.experiment.as_posix(),
                output_json=None,
                plan_json=(self.args.experiment / PLAN_JSON).as_posix(),
                fields=Fields(),
                settings=Settings(**tuning),
                options=Options(**self.args.options),
                context=ContextSettings(),
                deploy=DeploySettings(),
            )
        )
        if status != EXIT_OK:
            record = dataclasses.replace(record, status="tuned", verdict="cannot-tune")
            self.put(record)
            return record
        result, problems = read_result_file(self.args.experiment / RESULT_FILE)
        if result is None:
            raise _Failed(EXIT_FINDING, problems)
        picks = {a.batch_size: a.selected_k for a in result.anchors}
        p_eps_good: dict[int, float | None] = {}
        unresolved = []
        for anchor in result.anchors:
            confidence = anchor.confidence
            p = None
            if confidence is not None and anchor.selected_k is not None:
                p = confidence.p_eps_good.get(anchor.selected_k)
            p_eps_good[anchor.batch_size] = p
            if confidence is None or confidence.status != "resolved":
                unresolved.append(anchor.batch_size)
        schedule = None if result.schedule is None else tuple(result.schedule.ranges)
        record = dataclasses.replace(
            record,
            status="tuned",
            verdict=result.verdict_state,
            unresolved=tuple(unresolved),
            picks=picks,
            p_eps_good=p_eps_good,
            schedule=schedule,
        )
        self.put(record)
        return record

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        while True:
            current = self.log.rounds[-1] if self.log.rounds else None
            if current is not None and current.status == "tuned":
                stop = stop_after_round(
                    current.verdict,
                    current.asked,
                    _counts(self.all_runs()),
                    len(self.log.rounds),
                    self.args.loop.max_rounds,
                )
                # A refused tuning goes on only to rerun the refused cells, in a round the
                # other rules allow.
                if current.verdict == "cannot-tune" and (
                    stop is not None or not self.plan_reruns()
                ):
                    return self.finish(
                        Stop("cannot-tune", "the tuning refused the runs (its problems above)"),
                        EXIT_FINDING,
                    )
                if stop is not None:
                    return self.finish(stop)
                planned = self.new_round(current.number + 1)
                if isinstance(planned, Stop):
                    return self.finish(planned)
                record, plan = planned
            elif current is None:
                planned = self.new_round(0)
                assert not isinstance(planned, Stop)
                record, plan = planned
            else:
                record = current
                if record.status in ("planned", "failed"):
                    # Planned again from the same inputs (the round's tuning has not run):
                    # the same plan; its folder is written again only where it is gone.
                    plan_args, plan, _ = self.plan(record.number)
                    # A round trimmed to the budget measures the cells it asked for, no others.
                    plan = restricted(plan, record.asked.__contains__)
                    if not (self.args.experiment / record.plan_dir / "run.sh").exists():
                        write_planned(plan_args, plan)
            if record.status in ("planned", "failed"):
                record = self.measure(record, plan)
            previous = self.log.rounds[record.number - 1] if record.number else None
            record = self.tune(record)
            say(round_tuned_lines(record, previous))

    def plan_reruns(self) -> bool:
        """After a refused tuning: where more runs of the refused cells could clear it
        (:mod:`lib.loop.run.reruns`), write them as the measurement plan the next round
        follows up, and say so; False where they could not (the loop stops)."""
        options = Options(**self.args.options)
        result = analyse(
            load_experiment(self.args.experiment), Settings(**self.tuning()), options
        ).result
        runs = {
            (int(a), int(k)): int(n)
            for a, k, n in result.cells.select("anchor", "k", "num_runs").rows()
        }
        more = refusal_reruns(result.problems, runs)
        if more is None:
            return False
        plan = rerun_plan(more, runs, options.confidence, result.settings.relative_tolerance)
        problems = write_files([((self.args.experiment / PLAN_JSON), plan.to_json_text())])
        if problems:
            raise _Failed(EXIT_BAD_INPUT, problems)
        named = ", ".join(f"K={k} at {a}" for a, k in more)
        say(
            [
                f"the tuning refused the runs of {named} (too noisy to rank, or too few): the"
                " next round reruns them"
            ]
        )
        return True

    def finish(self, stop: Stop, status: int = EXIT_OK) -> int:
        """Record why the loop stopped and the full grid's estimate; print the summary."""
        runs = self.all_runs()
        design, _ = design_from(None, self.args.design)
        full, full_runs = None, None
        if design is not None:
            grid, _ = tuning_plan(design, "r", "e")
            if grid is not None:
                estimate = plan_estimate(
                    grid, run_durations(runs), self.args.loop.run_seconds, self.basis()
                )
                full, full_runs = estimate.seconds, estimate.runs
        self.log = dataclasses.replace(
            self.log, stop_rule=stop.rule, stop_text=stop.text, full_grid_seconds=full
        )
        self.save()
        config = _config_line(self.args.experiment / RESULT_FILE)
        lines = summary_lines(self.log, config, full_runs)
        lines.append(f"the same tuning of every round's runs: {self.tune_command()}")
        say([*lines, f"Wrote {self.path.as_posix()}"])
        return status

    def tuning(self) -> dict[str, Any]:
        """The settings every round is tuned with: :data:`LOOP_TUNING`, the design's K (a
        bracketed round 0 leaves some unmeasured: each is judged where missing, never left
        out) and the tuning flags given."""
        design, _ = design_from(None, round_zero(self.args)[0].design)
        ks = {"design_ks": tuple(sorted(design.ks))} if design is not None else {}
        return {**LOOP_TUNING, **ks, **self.args.tuning}

    def tune_command(self) -> str:
        """``tune-spec-k EXPERIMENT`` with the tuning flags each round was tuned with."""
        import shlex

        tuning = self.tuning()
        words = [PROGRAM, self.args.experiment.as_posix()]
        words += to_arguments(Settings(**tuning), only=(*TUNING_FLAGS, *LOOP_TUNING, "design_ks"))
        words += to_arguments(Options(**self.args.options), only=OPTION_FLAGS)
        return shlex.join(words)


def _config_line(path: Path) -> str | None:
    """The ``--speculative-config`` line of the experiment's result (as the tuning printed)."""
    from lib.deploy.result_file import read_result_file

    if not path.exists():
        return None
    result, _ = read_result_file(path)
    if result is None or result.speculative_config is None:
        return None
    return paste_line(result.speculative_config)


def _failure_text(
    outcome: SweepOutcome, plan: SweepPlan, folders: list[Path], plan_dir: Path
) -> str:
    """The failing sweep: the first of the plan's steps whose runs are not all there (the
    run script stops at the first sweep that fails), its command and the log."""
    from lib.loop.run.sweep import count_runs

    failing = plan.steps[0] if plan.steps else None
    for step, folder in zip(plan.steps, folders, strict=True):
        if count_runs([folder]) < step.runs:
            failing = step
            break
    command = (
        plan.sweep_command(failing, plan_dir.as_posix()) if failing is not None else outcome.command
    )
    return (
        f"the sweep failed (exit {outcome.status} from {outcome.command}): {command};"
        f" its output is in {outcome.log.as_posix()}; the same {_COMMAND} command resumes it"
    )


def _start(args: RunArgs) -> tuple[RunLog | None, list[Problem]]:
    """The log to go on from: a new one, or the experiment's ``rounds.json`` when it was run
    with the same design and tuning; refused: an experiment folder that is not a run's, a
    damaged log, other arguments."""
    path = args.experiment / ROUNDS_FILE
    identity = args.identity()
    if not path.exists():
        if args.experiment.exists() and any(args.experiment.iterdir()):
            return None, [
                Problem(
                    Severity.ERROR,
                    "not-a-run",
                    f"{args.experiment.as_posix()} holds files but no {ROUNDS_FILE}: it is not"
                    f" an experiment of {_COMMAND}, and its runs would mix with this one's",
                    files=(args.experiment.as_posix(),),
                    field="--experiment-name",
                    value=args.experiment_name,
                    expected="a new experiment name (or the folder of an earlier run to resume)",
                )
            ]
        return RunLog(arguments=identity), []
    data, problems = read_json(path)
    if data is MISSING:
        return None, problems
    log, problems = rounds_of(data, path.as_posix())
    if log is None:
        return None, problems
    if dict(log.arguments) != identity:
        changed = sorted(
            f"{part}.{name}"
            for part in ("design", "tuning", "options")
            for name in set(log.arguments.get(part, {})) | set(identity[part])
            if log.arguments.get(part, {}).get(name) != identity[part].get(name)
        )
        return None, [
            Problem(
                Severity.ERROR,
                "other-arguments",
                "this experiment was run with other arguments; resuming it with these would mix"
                " two experiments",
                files=(path.as_posix(),),
                value=", ".join(changed),
                expected="the arguments it was started with (rounds.json's 'arguments'), or a"
                " new --experiment-name",
            )
        ]
    if log.stop_rule in ("budget", "max-rounds", "cannot-tune"):
        # A larger budget or more rounds go on from where the last one stopped; a refused
        # tuning is judged again (its cells are rerun where more runs could clear it).
        log = dataclasses.replace(log, stop_rule=None, stop_text=None)
    return log, []


def main(args: RunArgs) -> int:
    """Run (or resume) the loop; see the module's docstring for the exit status."""
    invalid = args.loop.invalid()
    if invalid:
        problems = [Problem(Severity.ERROR, "invalid-setting", reason) for reason in invalid]
        print_problems(problems, lambda count: f"{_COMMAND}: nothing run: {count} problem(s)")
        return EXIT_BAD_INPUT
    design, problems = design_from(None, round_zero(args)[0].design)
    problems = problems + (design.invalid() if design is not None else [])
    if design is not None and design.context_lengths:
        problems.append(
            Problem(
                Severity.ERROR,
                "invalid-flag",
                f"{_COMMAND} tunes batch sizes only, for now: plan, run and follow up a context"
                ' sweep by hand (docs/context.md, "The loop on context sweeps")',
                field="--context-lengths",
                value=",".join(map(str, design.context_lengths)),
                expected="no --context-lengths",
            )
        )
    if problems:
        print_problems(problems, lambda count: f"{_COMMAND}: nothing run: {count} problem(s)")
        return EXIT_BAD_INPUT
    log, problems = _start(args)
    if log is None:
        print_problems(problems, lambda count: f"{_COMMAND}: nothing run: {count} problem(s)")
        return EXIT_BAD_INPUT
    loop = _Loop(args, log)
    if log.stop_rule is not None:
        return loop.finish(Stop(log.stop_rule, log.stop_text or ""))
    try:
        return loop.run()
    except _Failed as failed:
        print_problems(failed.problems, lambda count: f"{_COMMAND}: stopped: {count} problem(s)")
        if failed.status != EXIT_BAD_INPUT:
            print(f"{_COMMAND}: the same command resumes where this one stopped", file=sys.stderr)
        return failed.status
