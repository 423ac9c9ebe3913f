"""What the notebook (``notebooks/tune_spec_k.py``) needs besides the policy: where its input
is, which controls to offer, and the analysis as tables and text.

The app calls :func:`lib.sweeps.load_experiment` and :func:`lib.analysis.analyse` as the CLI
does, and downloads ``result_text(analysis.result)``, the text the CLI writes; everything
here only prepares their input or presents what they return, so the app and the CLI cannot
disagree. :func:`cli_arguments` gives the command line that reproduces the app's file.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from lib.analysis import Analysis
from lib.app.guide import default_experiment
from lib.confidence import ConfidenceReport
from lib.flags import add_flags, flag_name, from_arguments, to_arguments
from lib.loop.diff import DiffReport, DiffSettings, compare, read_side, side_from_result
from lib.loop.run.rounds import ROUNDS_FILE
from lib.objectives import find_objective
from lib.policy import apply_policy
from lib.present import tables, text
from lib.problems import Problem, Severity, printable
from lib.schedule import NO_SCHEDULE, TuningResult
from lib.settings import (
    DEFAULT_K_VAR,
    GLOBAL_K_VAR,
    RESULT_FILE,
    DeploySettings,
    Direction,
    Fields,
    Options,
    Policy,
    Settings,
    TrafficSettings,
)
from lib.sweep_files import holds_runs
from lib.sweeps import Sweep
from lib.traffic import TrafficMix, read_traffic

__all__ = [
    "CAPTURE_RULES",
    "DIRECTION_CHOICES",
    "HIGHLIGHT",
    "K_VAR_CHOICES",
    "NO_ACCEPTANCE",
    "NO_COMPARISON",
    "POLICY_CHOICES",
    "PREFERRED_ACCEPTANCE",
    "SCHEDULE_FILE",
    "USUAL_DIRECTION",
    "AppArguments",
    "HealthCounts",
    "QueryStart",
    "RoundsView",
    "RuleComparison",
    "acceptance_field",
    "acceptance_options",
    "baseline_text",
    "capture_lines",
    "chosen_direction",
    "cli_arguments",
    "cli_command",
    "compare_rules",
    "compare_with",
    "default_direction",
    "diff_settings",
    "direction_text",
    "experiment_rounds",
    "find_experiments",
    "first_experiment",
    "folder_below_root",
    "global_k_text",
    "health_counts",
    "highlight_rows",
    "parse_app_arguments",
    "path_html",
    "problems_of",
    "query_start",
    "resolve_root",
    "rule_text",
    "schedule_text",
    "shown_path",
    "slider_steps",
    "unresolved_lines",
]

#: File name the CLI writes by default, used for the app's download too.
SCHEDULE_FILE = RESULT_FILE

#: How K is recorded in a sweep: the seed's design (a fixed global maximum, the effective K set
#: by a one-range ``num_speculative_tokens_per_batch_size``), or one static-K server per K.
K_VAR_CHOICES: dict[str, str] = {
    "a one-range schedule (seed)": DEFAULT_K_VAR,
    "num_speculative_tokens": GLOBAL_K_VAR,
}

#: Acceptance fields offered first, most useful first.
PREFERRED_ACCEPTANCE = ("spec_decode_acceptance_length", "spec_decode_acceptance_rate")

NO_ACCEPTANCE = "(none)"

#: The decision rules (``--policy``), as the app's toggle names them; the seed's first.
POLICY_CHOICES: dict[str, Policy] = {
    "the seed's: conservative score": "seed",
    "confident: P(eps-good)": "confident",
}

#: The direction choices, as the app names them: the first follows the objective.
USUAL_DIRECTION = "usual for the objective"
DIRECTION_CHOICES = (USUAL_DIRECTION, "maximize", "minimize")

#: Background of the rows a table highlights (unresolved anchors, rules that differ).
HIGHLIGHT = {"backgroundColor": "#fde2e1"}


@dataclass(frozen=True)
class AppArguments:
    """What the notebook was started with (``-- --sweeps DIR`` after the notebook path, and the
    serving engine's settings: ``--max-cudagraph-capture-size C --max-num-seqs N``)."""

    sweeps: str | None
    deploy: DeploySettings = field(default_factory=DeploySettings)
    traffic: TrafficSettings = field(default_factory=TrafficSettings)


def parse_app_arguments(argv: Sequence[str]) -> AppArguments:
    """``--sweeps DIR`` from ``sys.argv[1:]``; anything else is left to marimo.

    One parser for every way the notebook runs: ``marimo run/edit/export ... -- --sweeps DIR``
    and ``python notebooks/tune_spec_k.py --sweeps DIR`` all put the flag in ``sys.argv``.
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--sweeps", default=None)
    add_flags(parser, DeploySettings)
    add_flags(parser, TrafficSettings)
    known, _ = parser.parse_known_args(list(argv))
    return AppArguments(
        sweeps=known.sweeps,
        deploy=from_arguments(DeploySettings, known),
        traffic=from_arguments(TrafficSettings, known),
    )


def traffic_mix(settings: TrafficSettings) -> tuple[TrafficMix | None, list[Problem]]:
    """The ``--traffic`` file's mix, as ``tune-spec-k --traffic`` reads it (None, no problem:
    not given; the page weighs the sweep's own runs then, as the CLI does)."""
    if settings.traffic is None:
        return None, []
    return read_traffic(settings.traffic)


def resolve_root(sweeps: str | None, notebook_dir: Path, cwd: Path) -> Path:
    """The folder the app may read: ``--sweeps`` resolved from the working directory, or the
    bundled ``data/sample_sweeps/`` beside the notebook's folder."""
    if sweeps is None:
        return (notebook_dir.parent / "data" / "sample_sweeps").resolve()
    return (cwd / Path(sweeps).expanduser()).resolve()


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as the app shows it, on one line: a byte of a name that is not UTF-8 (which Python
    holds as a lone surrogate) as ``\\xNN``, as the loader shows it, and every other character
    that is not printable (a newline, a NUL, a tab) as its Python escape, so a folder name can
    neither break a line of the page nor hide what it holds.

    >>> shown_path("a\\nb\\x00c" + b"\\xff".decode("utf-8", "surrogateescape"))
    'a\\\\nb\\\\x00c\\\\xff'
    """
    return printable(os.fspath(path))


def path_html(path: str | os.PathLike[str]) -> str:
    """A path as inline code in HTML, shown by :func:`shown_path` and escaped: Markdown would
    read backticks, ``*`` or a blank line in a folder name as markup.

    >>> path_html("runs/<a>\\n\\n`b`")
    '<code>runs/&lt;a&gt;\\\\n\\\\n`b`</code>'
    """
    return f"<code>{html.escape(shown_path(path))}</code>"


def folder_below_root(root: Path, requested: str | Sequence[str] | None) -> tuple[Path, str | None]:
    """The folder a ``?sweeps=`` query (or the folder browser) asks for, if it is an existing
    folder at or below ``root``; else ``root`` and the reason the request was refused.

    Whoever opens the page sets the query, so it may only narrow what the command line allowed:
    a relative path is taken from ``root``, and ``..`` or symbolic links that lead outside are
    refused after resolving. A query given twice uses its first value. A query the system
    cannot take as a path (a NUL, a name longer than the file system allows) is refused like
    the others, with the system's reason. The refusal shows the query by :func:`shown_path`.
    """
    if requested is not None and not isinstance(requested, str):
        requested = next(iter(requested), None)
    if not requested:
        return root, None
    query = f"?sweeps={shown_path(requested)}"
    below = shown_path(root)
    instead = f"choose an experiment below {below}"
    try:
        candidate = (root / requested).resolve()
        inside = candidate.is_relative_to(root.resolve())
        is_folder = inside and candidate.is_dir()
    except (OSError, ValueError) as error:
        # ValueError: a NUL; OSError: a name too long and the like, from resolve() or stat().
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return root, f"{query} is not a usable path ({why}), not a folder below {below}: {instead}"
    if not inside:
        return root, f"{query} is outside {below}: {instead}"
    if not is_folder:
        return root, f"{query} is not a folder below {below}: {instead}"
    return candidate, None


@dataclass(frozen=True)
class QueryStart:
    """What the page starts from for its ``?sweeps=`` query (:func:`query_start`): the
    ``folder`` whose experiments the picker lists, and ``refusal``, why the query was refused
    (None when it was accepted or absent)."""

    folder: Path
    refusal: str | None


def query_start(root: Path, requested: str | Sequence[str] | None) -> QueryStart:
    """The page's start for a ``?sweeps=`` query: the folder it names below ``root``
    (:func:`folder_below_root`), or, refused (outside the root, not a folder, no path at all),
    ``root`` with the refusal."""
    folder, refusal = folder_below_root(root, requested)
    return QueryStart(folder, refusal)


def first_experiment(start: QueryStart, experiments: Mapping[str, Path]) -> str | None:
    """The experiment the picker starts on: none after a refused query, so that the page shows
    the refusal and the picker and nothing computed from an experiment the query did not name
    (not the default sample's verdict, schedule or config); else the default
    (:func:`lib.app.guide.default_experiment`). None also when there is no experiment."""
    if start.refusal is not None or not experiments:
        return None
    return default_experiment(experiments)


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


class _Search:
    """The picker's walk below a folder, confined to ``root``: a symbolic link whose real path
    is outside ``root`` is neither listed nor looked behind, and is remembered so the app can
    say what it left out. A link inside the root is followed as the loader follows it."""

    def __init__(self, root: Path) -> None:
        self.fence = root.resolve()
        self.outside: set[Path] = set()

    def refuses(self, path: Path) -> bool:
        if Path(os.path.realpath(path)).is_relative_to(self.fence):
            return False
        self.outside.add(path)
        return True

    def entries(self, folder: Path) -> list[os.DirEntry[str]]:
        """The folder's entries, in name order, less the links that lead outside the root
        (an unlistable folder has none: the loader names it when it is picked)."""
        try:
            with os.scandir(folder) as listing:
                found = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            return []
        return [
            entry for entry in found if not (entry.is_symlink() and self.refuses(Path(entry.path)))
        ]

    def subfolders(self, folder: Path) -> list[Path]:
        return [Path(entry.path) for entry in self.entries(folder) if _is_folder(entry)]

    def has_data_files(self, folder: Path, *, any_depth: bool) -> bool:
        """Whether run files lie in ``folder`` (with ``any_depth``, also below it). The walk is
        not cut short at the first file found, so every link outside the root within its
        reach is remembered whatever the order of the entries; a linked folder is walked once
        (a link back up the tree would otherwise never end)."""
        found = False
        pending = [folder]
        linked: set[str] = set()
        while pending:
            here = pending.pop()
            for entry in self.entries(here):
                if not _is_folder(entry):
                    found = found or holds_runs(entry.name)
                elif any_depth and not entry.is_symlink():
                    pending.append(Path(entry.path))
                elif any_depth and os.path.realpath(entry.path) not in linked:
                    linked.add(os.path.realpath(entry.path))
                    pending.append(Path(entry.path))
        return found


def find_experiments(folder: Path, root: Path) -> tuple[dict[str, Path], list[str]]:
    """The experiments to choose from in ``folder``, by name, and what was left out and why.

    ``folder`` is one experiment when run files lie in it or in its immediate subfolders (the
    ``SERVE--...-BENCH--...`` combo folders), or when it is a ``tune-spec-k run`` experiment
    (its ``rounds.json``: every round's sweeps, ``round-0/``, ``round-1-1/``, ..., are one
    experiment, as ``tune-spec-k DIR`` reads it); otherwise each immediate subfolder with run
    files at any depth is an experiment (vLLM writes ``<output-dir>/<experiment-name>/``).

    Everything the app reads must lie inside ``root``: a subfolder or run file that is a
    symbolic link leading outside it counts for nothing, and each one the search met is named
    (relative to ``folder``, by :func:`shown_path`) in the second item, in name order. A
    ``folder`` that is itself outside ``root`` gives no experiment and says so.
    """
    search = _Search(root)
    if search.refuses(folder):
        return {}, [f"{shown_path(folder)} leads outside {shown_path(root)}: nothing listed"]
    subfolders = search.subfolders(folder)
    # Every subfolder is looked at (a list, not a generator), so the refusals do not depend
    # on which one happened to hold the first run file.
    if (
        search.has_data_files(folder, any_depth=False)
        or any([search.has_data_files(sub, any_depth=False) for sub in subfolders])
        or (folder / ROUNDS_FILE).is_file()
    ):
        experiments = {folder.name: folder}
    else:
        experiments = {
            sub.name: sub for sub in subfolders if search.has_data_files(sub, any_depth=True)
        }
    refusals = [
        f"{shown_path(path.relative_to(folder))}: a link that leads outside"
        f" {shown_path(root)}; not listed"
        for path in sorted(search.outside)
    ]
    return experiments, refusals


# --------------------------------------------------------------------------- controls


def default_direction(field: str) -> Direction:
    """The direction that means "better" for a field: the catalogue's
    (:mod:`lib.objectives`) for a field it knows, else the CLI's default (maximize), as the
    CLI decides a field it does not know.

    >>> default_direction("p99_ttft_ms"), default_direction("my_field_ms")
    ('minimize', 'maximize')
    """
    found = find_objective(field)
    return Settings().direction if found is None else found.direction


def chosen_direction(choice: str, objective: str) -> Direction:
    """The direction a choice among :data:`DIRECTION_CHOICES` means for ``objective``:
    :data:`USUAL_DIRECTION` is :func:`default_direction` of the objective, so that a new
    objective brings its own direction and the control needs no rebuilding.

    >>> chosen_direction(USUAL_DIRECTION, "median_tpot_ms"), chosen_direction("maximize", "x_ms")
    ('minimize', 'maximize')
    """
    if choice == USUAL_DIRECTION:
        return default_direction(objective)
    if choice not in ("maximize", "minimize"):
        raise ValueError(f"direction {choice!r}: expected one of {DIRECTION_CHOICES}")
    return "maximize" if choice == "maximize" else "minimize"


def direction_text(settings: Settings) -> str:
    """What the app says beside its command line about the direction it tunes with: whether
    it is the catalogue's (:mod:`lib.objectives`) for the objective, and, where it is not the
    CLI's default (maximize), that the command line needs the flag (the command shown gives
    it).

    >>> print(direction_text(Settings(objective="median_tpot_ms", direction="minimize")))
    ... # doctest: +NORMALIZE_WHITESPACE
    Better is smaller for median_tpot_ms (ms): the catalogue's direction (README, table of
    objectives). The CLI's default is maximize: on the command line the same answer needs
    --objective-direction minimize.
    >>> print(direction_text(Settings(objective="my_field")))  # doctest: +NORMALIZE_WHITESPACE
    Better is larger for my_field: the catalogue does not list this field; the CLI's
    default.
    """
    direction, objective = settings.direction, settings.objective
    found = find_objective(objective)
    better = "larger" if direction == "maximize" else "smaller"
    if found is None:
        source = "the catalogue does not list this field"
    elif found.direction == direction:
        source = "the catalogue's direction (README, table of objectives)"
    else:
        opposite = "larger" if found.direction == "maximize" else "smaller"
        source = f"not the catalogue's direction (it says {opposite} is better)"
    unit = f" ({found.unit})" if found is not None else ""
    cli_default = Settings().direction
    if direction == cli_default:
        return f"Better is {better} for {objective}{unit}: {source}; the CLI's default."
    flag = flag_name(Settings, "direction")
    return (
        f"Better is {better} for {objective}{unit}: {source}. The CLI's default is"
        f" {cli_default}: on the command line the same answer needs {flag} {direction}."
    )


def acceptance_options(sweep: Sweep) -> list[str]:
    """:data:`NO_ACCEPTANCE` (the seed's default), the usual acceptance fields present in the
    sweep, then the other ``spec_decode_*`` fields."""
    metrics = set(sweep.metrics)
    preferred = [name for name in PREFERRED_ACCEPTANCE if name in metrics]
    others = sorted(
        name for name in metrics if name.startswith("spec_decode_") and name not in preferred
    )
    return [NO_ACCEPTANCE, *preferred, *others]


def acceptance_field(choice: str) -> str | None:
    """The ``acceptance`` setting for a dropdown choice."""
    return None if choice == NO_ACCEPTANCE else choice


def slider_steps(stop: float, step: float, start: float = 0.0) -> list[float]:
    """Slider stops ``start, start + step, ..., stop`` rounded to the step's decimals, so a
    slider value is the same float a user types on the CLI (``0.3``, not
    ``0.30000000000000004``) and the exported JSON matches the CLI's byte for byte."""
    return [round(start + index * step, 10) for index in range(round((stop - start) / step) + 1)]


# --------------------------------------------------------------------------- data health


@dataclass(frozen=True)
class HealthCounts:
    """Headline numbers about what was read and what the policy could use."""

    files_read: int
    runs_loaded: int
    runs_excluded: int
    cells: int
    cells_rejected: int
    anchors: int
    errors: int
    warnings: int


def health_counts(result: TuningResult) -> HealthCounts:
    severities = [problem.severity for problem in result.problems]
    return HealthCounts(
        files_read=len(result.sweep.input_files),
        runs_loaded=result.sweep.runs.height,
        runs_excluded=result.excluded_runs.height,
        cells=result.cells.height,
        cells_rejected=result.cells.filter(pl.col("status") == "rejected").height,
        anchors=result.decisions.height,
        errors=severities.count(Severity.ERROR),
        warnings=severities.count(Severity.WARNING),
    )


def global_k_text(result: TuningResult) -> str:
    """The engine's startup maximum (``num_speculative_tokens``): configured, observed, used."""
    configured = result.configured_global_k
    observed = result.max_k_observed
    stated = (
        f"configured num_speculative_tokens = {configured}"
        if configured is not None
        else "no single configured num_speculative_tokens"
    )
    return (
        f"{stated}; largest K measured = {observed if observed is not None else 'none'};"
        f" the exported config starts the engine with {result.deploy_global_k}"
    )


def baseline_text(result: TuningResult) -> str:
    """What the K=0 baseline is: the schedule-enabled engine at K=0 (the seed's honest
    baseline), a server without speculation, both, or missing."""
    k0 = result.sweep.runs.filter(pl.col("k") == 0)
    on_engine = k0.filter(pl.col("speculation").fill_null(False)).height
    plain_notes = [p for p in result.problems if p.rule == "k0-without-speculation"]
    parts = []
    if on_engine:
        parts.append(
            f"{on_engine} K=0 run(s) on the speculative engine with K set to 0 (the seed's"
            " baseline: same engine configuration as the candidates)"
        )
    parts += [note.message for note in plain_notes]
    if not parts:
        return "no K=0 runs: the 'vs K=0' figures are not available"
    return "; ".join(parts)


def problems_of(result: TuningResult, severity: Severity) -> list[Problem]:
    return [problem for problem in result.problems if problem.severity is severity]


# --------------------------------------------------------------------------- decisions


#: The problems that say what the engine runs between the anchors (lib.deploy.tuning).
CAPTURE_RULES = (
    "capped-range",
    "graphless-range",
    "graphless-platform",
    "piecewise-range",
    "full-graph-past-ceiling",
)


def capture_lines(result: TuningResult) -> list[str]:
    """The capture rule's findings on the schedule shown, in the CLI's words: each range
    capped ("capped, not measured") or past the ceiling, one line each."""
    return [problem.message for problem in result.problems if problem.rule in CAPTURE_RULES]


def schedule_text(result: TuningResult) -> str:
    """The schedule as the CLI's first stdout line prints it (``[]`` when undecided)."""
    return (result.schedule or NO_SCHEDULE).json_text()


# --------------------------------------------------------------------------- confidence


def rule_text(options: Options) -> str:
    """Markdown: which decision rule and which schedule the app reports and exports."""
    rule = next(name for name, policy in POLICY_CHOICES.items() if policy == options.policy)
    schedule = (
        "interpolated (switches between anchors)"
        if options.interpolated_schedule
        else "step (switches at the anchors)"
    )
    return f"**Decision rule:** {rule}, confidence {options.confidence:g}; **schedule:** {schedule}"


def highlight_rows(
    frame: pl.DataFrame, column: str, value: Any = True
) -> Callable[[str, str, Any], dict[str, str]]:
    """A ``style_cell`` for ``mo.ui.table(frame)`` that highlights the rows whose ``column``
    holds ``value`` (marimo names rows by their position)."""
    marked = {str(index) for index, cell in enumerate(frame[column].to_list()) if cell == value}

    def style(row: str, _column: str, _value: Any) -> dict[str, str]:
        return HIGHLIGHT if row in marked else {}

    return style


def unresolved_lines(result: TuningResult, report: ConfidenceReport) -> list[str]:
    """The CLI's status line of every unresolved anchor (its provisional K, contenders,
    reasons and flagged runs)."""
    statuses = report.anchors["status"].to_list()
    if "unresolved" not in statuses:
        return []  # the status lines take a few ms on a large sweep: skip them
    lines = text.confidence_lines(report, result)
    return [line for line, status in zip(lines, statuses, strict=True) if status == "unresolved"]


@dataclass(frozen=True, eq=False)
class RuleComparison:
    """Both decision rules on the same confidence report, each with its step schedule."""

    seed: TuningResult
    confident: TuningResult

    def table(self) -> pl.DataFrame:
        """Per anchor: each rule's K and its P(eps-good), and whether they differ."""
        return tables.rule_table(self.seed, self.confident)

    def summary(self) -> str:
        """Markdown: both schedules, and whether each could be written."""
        lines = []
        for name, result in (("seed's rule", self.seed), ("confident rule", self.confident)):
            written = "" if result.ok else " (not written: errors)"
            lines.append(f"- **{name}**: `{schedule_text(result)}`{written}")
        return "\n".join(lines)


def compare_rules(analysis: Analysis, options: Options) -> RuleComparison | None:
    """The seed's and the confident rule's results for the analysed sweep (None without a
    confidence report). Both keep the step schedule, so the rules compare like for like; the
    analysis' own result is reused where it is one of them."""
    report = analysis.report
    if report is None:
        return None
    confident = (
        analysis.result
        if options.policy == "confident" and not options.interpolated_schedule
        else apply_policy(analysis.seed_result, report, "confident")
    )
    return RuleComparison(seed=analysis.seed_result, confident=confident)


# --------------------------------------------------------------------------- export


def cli_arguments(
    experiment: str | os.PathLike[str],
    fields: Fields,
    settings: Settings,
    options: Options,
    deploy: DeploySettings | None = None,
    traffic: TrafficSettings | None = None,
) -> list[str]:
    """The ``tune-spec-k`` arguments that analyse ``experiment`` exactly as the app does."""
    return [
        os.fspath(experiment),
        *to_arguments(fields),
        *to_arguments(settings),
        *to_arguments(options),
        *to_arguments(deploy or DeploySettings()),
        *to_arguments(traffic or TrafficSettings()),
    ]


def cli_command(arguments: Sequence[str]) -> str:
    """The arguments as a shell command line to reproduce the app's result."""
    return shlex.join(["tune-spec-k", *arguments])


# --------------------------------------------------------------------------- comparison


def diff_settings(settings: Settings, options: Options, fields: Fields) -> DiffSettings:
    """How the app tunes the experiment it compares with: as ``tune-spec-k diff`` tunes a
    folder, with the sidebar's settings and rule (the step schedule: ``diff`` compares picks)."""
    return DiffSettings(
        tuning=settings,
        options=dataclasses.replace(options, interpolated_schedule=False),
        fields=fields,
    )


#: The comparison picker's "nothing to compare with" choice.
NO_COMPARISON = "(none)"


def compare_with(
    label: str,
    analysis: Analysis,
    other: str | Path | None,
    settings: DiffSettings,
    root: Path,
) -> tuple[DiffReport | None, str | None]:
    """The app's comparison of the shown experiment (already analysed) with ``other``, as
    ``tune-spec-k diff`` makes it: the report, or why there is none (None, None when nothing
    was picked). ``other`` is read only inside ``root``, as the shown experiment is."""
    if other is None:
        return None, None
    if not analysis.result.ok or analysis.report is None:
        return None, "No comparison: this experiment has no schedule (see the errors above)."
    mine = side_from_result(label, analysis.result, analysis.report)
    theirs, problems = read_side(other, settings, within=root)
    if theirs is not None:
        report, problems = compare(mine, theirs, settings)
        if report is not None:
            return report, None
    return None, "\n".join(problem.describe() for problem in problems)


@dataclass(frozen=True)
class RoundsView:
    """The rounds of a ``tune-spec-k run`` experiment, as the app shows them: P(eps-good) of
    each anchor's pick by round (:func:`lib.present.rounds.rounds_pivot`), a line per round and
    the stop (:func:`lib.present.rounds.summary_lines`' first lines); or why ``rounds.json``
    could not be read."""

    table: pl.DataFrame | None
    lines: tuple[str, ...]
    error: str | None = None


def experiment_rounds(folder: str | os.PathLike[str]) -> RoundsView | None:
    """The rounds of the experiment in ``folder``, None where it has no ``rounds.json`` (it was
    not made by ``tune-spec-k run``)."""
    from lib.files import read_json
    from lib.keys import MISSING
    from lib.loop.run.rounds import rounds_of
    from lib.present.rounds import rounds_pivot, summary_lines

    path = Path(folder) / ROUNDS_FILE
    if not path.is_file():
        return None
    data, problems = read_json(path)
    log = None
    if data is not MISSING:
        log, problems = rounds_of(data, str(path))
    if log is None:
        return RoundsView(None, (), "\n".join(problem.describe() for problem in problems))
    lines = summary_lines(log, None, None)
    shown = lines if log.stop_rule is not None else ["the run has not ended yet", *lines[1:]]
    return RoundsView(rounds_pivot(log), tuple(shown))
