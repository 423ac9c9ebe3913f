"""The controls of notebooks/tune_spec_k.py, each group built by one function its cell calls.

Functions here rather than in the cells: marimo parses the notebook again on every page load
(for the page, for the new session, for its source map), tokenizing every cell's code in Python
on the server's event loop, where a long cell delays every page and session alike. A cell
here is one call; what the call builds, and in which cell, is unchanged (see
``sections.sidebar_part`` for why controls share a cell). Each returns its controls in the
order the cell names them, then the sidebar part showing them, which the cell shows.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import marimo as mo
from sections import labelled, setting_slider, sidebar_part

from lib.app import context as app_context
from lib.app import guide
from lib.app import support as app_support
from lib.objectives import OBJECTIVES_BY_NAME
from lib.settings import DEFAULT_BATCH_SIZE_VAR, Fields, Options, Settings


def page_start(argv: list[str]) -> tuple[Any, ...]:
    """What the page starts from: the root (``--sweeps``; the page stops with the reason when
    it is no folder), the ``?sweeps=`` query's start, the folder browser, the context export's
    format picker, the states a one-click fix sets, and the engine settings after ``--``."""
    arguments = app_support.parse_app_arguments(argv)
    root = app_support.resolve_root(
        arguments.sweeps, notebook_dir=mo.notebook_dir() or Path.cwd(), cwd=Path.cwd()
    )
    mo.stop(
        not root.is_dir(),
        mo.callout(
            mo.Html(f"--sweeps {app_support.path_html(root)}: not a folder, nothing to show."),
            kind="danger",
        ),
    )
    # A refused ?sweeps= starts the page on the refusal and the picker, nothing chosen.
    query_start = app_support.query_start(root, mo.query_params().get("sweeps"))
    folder_browser = mo.ui.file_browser(
        initial_path=root,
        selection_mode="directory",
        multiple=False,
        restrict_navigation=True,
        label="Choose a folder below the root (an experiment, or a folder of experiments)",
    )
    context_format_picker = mo.ui.radio(
        options={label: name for name, label in app_context.FORMAT_LABELS.items()},
        value=next(iter(app_context.FORMAT_LABELS.values())),
        label="Export the (batch x context) schedule as",
    )
    # The controls a problem's one-click fix may set are built from these states: the K field
    # from its own (a new K field reads the sweep again), the others from one, which a fix sets
    # to their values now with its own; their cells build them again.
    # --traffic FILE after `--`: read once; a refused file stops the page as the CLI exits 2.
    traffic_mix, traffic_problems = app_support.traffic_mix(arguments.traffic)
    mo.stop(
        bool(traffic_problems),
        mo.callout(
            mo.md("\n".join(f"- {html.escape(p.describe())}" for p in traffic_problems)),
            kind="danger",
        ),
    )
    get_k_var, set_k_var = mo.state(Fields().k_var)
    get_fixable, set_fixable = mo.state(guide.fixable_values(Settings()))
    return (
        context_format_picker,
        arguments.deploy,
        folder_browser,
        get_fixable,
        get_k_var,
        query_start,
        root,
        set_fixable,
        set_k_var,
        arguments.traffic,
        traffic_mix,
    )


def input_controls(experiments: dict, query_start: Any) -> tuple[Any, ...]:
    """The experiment picker, the batch-size and replica fields, and the comparison's picker
    (shown with the comparison, in the page); the "Input" part."""
    experiment_picker = mo.ui.dropdown(
        options=experiments,
        value=app_support.first_experiment(query_start, experiments),
        label="Experiment",
        full_width=True,
    )
    batch_size_var_input = mo.ui.text(
        value=DEFAULT_BATCH_SIZE_VAR, label=labelled("batch_size_var")
    )
    replica_var_input = mo.ui.text(value=Fields().replica_var, label=labelled("replica_var"))
    compare_picker = mo.ui.dropdown(
        options={app_support.NO_COMPARISON: None, **experiments},
        value=app_support.NO_COMPARISON,
        label="Compare with",
    )
    part = sidebar_part(
        "Input",
        (experiment_picker, "experiment"),
        (batch_size_var_input, "batch_size_var"),
        (replica_var_input, "replica_var"),
    )
    return batch_size_var_input, compare_picker, experiment_picker, replica_var_input, part


def k_field_control(k_var: str) -> tuple[Any, ...]:
    """The K field's picker, on ``k_var`` (the state a fix sets)."""
    k_var_picker = mo.ui.dropdown(
        options=app_support.K_VAR_CHOICES,
        value=next(name for name, field in app_support.K_VAR_CHOICES.items() if field == k_var),
        label=labelled("k_var"),
    )
    return k_var_picker, sidebar_part((k_var_picker, "k_var"))


def gate_controls(fixable: dict) -> tuple[Any, ...]:
    """The controls a one-click fix sets (``fixable``: their values now): mixed global K, then
    the "Gates" part."""
    mixed_global_checkbox = mo.ui.checkbox(
        value=fixable["allow_mixed_global_k"], label=labelled("allow_mixed_global_k")
    )
    unmeasured_checkbox = mo.ui.checkbox(
        value=fixable["allow_unmeasured_k"], label=labelled("allow_unmeasured_k")
    )
    # A range, not steps: the slider then reports the count itself (aria-valuenow), not its
    # position among the steps.
    min_runs_slider = mo.ui.slider(
        start=1,
        stop=10,
        step=1,
        value=fixable["min_runs"],
        debounce=True,
        show_value=True,
        label=labelled("min_runs"),
    )
    noise_slider = setting_slider(
        "max_objective_relative_mad",
        app_support.slider_steps(1.0, 0.01),
        fixable["max_objective_relative_mad"],
    )
    strict_checkbox = mo.ui.checkbox(
        value=fixable["strict_acceptance_stability"],
        label=labelled("strict_acceptance_stability"),
    )
    part = sidebar_part(
        (mixed_global_checkbox, "allow_mixed_global_k"),
        (unmeasured_checkbox, "allow_unmeasured_k"),
        "Gates",
        (min_runs_slider, "min_runs"),
        (noise_slider, "max_objective_relative_mad"),
        (strict_checkbox, "strict_acceptance_stability"),
    )
    return (
        min_runs_slider,
        mixed_global_checkbox,
        noise_slider,
        strict_checkbox,
        unmeasured_checkbox,
        part,
    )


def measurement_controls(sweep: Any, fields: Fields) -> tuple[Any, ...]:
    """The objective and acceptance pickers, from the sweep's fields: the "Measurements" part."""
    choices = guide.objective_choices(sweep, OBJECTIVES_BY_NAME, fields)
    default = Settings().objective
    objective_picker = mo.ui.dropdown(
        options=choices or [default],
        value=default if default in choices or not choices else choices[0],
        searchable=True,
        label=labelled("objective"),
    )
    acceptance_picker = mo.ui.dropdown(
        options=app_support.acceptance_options(sweep),
        value=app_support.NO_ACCEPTANCE,
        label=labelled("acceptance"),
    )
    part = sidebar_part(
        "Measurements", (objective_picker, "objective"), (acceptance_picker, "acceptance")
    )
    return acceptance_picker, objective_picker, part


def policy_controls() -> tuple[Any, ...]:
    """The policy's, the decision rule's and the context length's controls, at the defaults:
    the "Policy", "Decision rule" and "Context length" part."""
    direction_picker = mo.ui.radio(
        options=app_support.DIRECTION_CHOICES,
        value=app_support.USUAL_DIRECTION,
        label=labelled("direction"),
    )
    penalty_slider = setting_slider(
        "uncertainty_penalty", app_support.slider_steps(5.0, 0.1), Settings().uncertainty_penalty
    )
    tolerance_slider = setting_slider(
        "relative_tolerance", app_support.slider_steps(0.3, 0.005), Settings().relative_tolerance
    )
    acceptance_noise_slider = setting_slider(
        "max_acceptance_relative_mad",
        app_support.slider_steps(1.0, 0.01),
        Settings().max_acceptance_relative_mad,
    )
    policy_picker = mo.ui.radio(
        options=app_support.POLICY_CHOICES,
        value=next(iter(app_support.POLICY_CHOICES)),
        label=labelled("policy"),
    )
    confidence_slider = setting_slider(
        "confidence", app_support.slider_steps(1.0, 0.01, start=0.5), Options().confidence
    )
    interpolated_checkbox = mo.ui.checkbox(
        value=Options().interpolated_schedule, label=labelled("interpolated_schedule")
    )
    server_cv_slider = setting_slider(
        "server_cv", app_support.slider_steps(0.05, 0.0025, start=0.0), Options().server_cv
    )
    run_cv_slider = setting_slider(
        "run_cv", app_support.slider_steps(0.1, 0.0025, start=0.0), Options().run_cv
    )
    context_controls = mo.ui.dictionary(
        {
            "context_var": mo.ui.text(value="auto", label=labelled("context_var")),
            "context_mix": mo.ui.text(
                value="", placeholder="512:0.7,8192:0.3", label=labelled("context_mix")
            ),
        }
    )
    part = sidebar_part(
        "Policy",
        (direction_picker, "direction"),
        (penalty_slider, "uncertainty_penalty"),
        (tolerance_slider, "relative_tolerance"),
        (acceptance_noise_slider, "max_acceptance_relative_mad"),
        "Decision rule",
        (policy_picker, "policy"),
        (confidence_slider, "confidence"),
        (server_cv_slider, "server_cv"),
        (run_cv_slider, "run_cv"),
        (interpolated_checkbox, "interpolated_schedule"),
        "Context length",
        (context_controls["context_var"], "context_var"),
        (context_controls["context_mix"], "context_mix"),
    )
    return (
        acceptance_noise_slider,
        confidence_slider,
        context_controls,
        direction_picker,
        interpolated_checkbox,
        penalty_slider,
        policy_picker,
        run_cv_slider,
        server_cv_slider,
        tolerance_slider,
        part,
    )
