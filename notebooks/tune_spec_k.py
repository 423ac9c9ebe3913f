import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="tune-spec-k")

with app.setup:
    import functools
    import sys
    from pathlib import Path

    import marimo as mo

    from lib.app import context as app_context
    from lib.app import guide
    from lib.app import support as app_support
    from lib.context import find_context_axis
    from lib.objectives import OBJECTIVES_BY_NAME
    from lib.present import charts
    from lib.settings import DEFAULT_BATCH_SIZE_VAR, ContextSettings, Fields, Options, Settings
    from lib.sweeps import load_experiment

    # The page's layout and the sidebar's parts: notebooks/sections.py, beside this file (from any
    # working directory, and when the notebook is imported rather than run by marimo).
    if str(Path(__file__).resolve().parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sections import (
        answer_view,
        compare_section,
        context_section,
        fix_action,
        labelled,
        no_experiment_view,
        reading_notes,
        sections_accordion,
        setting_slider,
        sidebar_part,
    )


@app.cell
def _():
    _arguments = app_support.parse_app_arguments(sys.argv[1:])
    root = app_support.resolve_root(
        _arguments.sweeps, notebook_dir=mo.notebook_dir() or Path.cwd(), cwd=Path.cwd()
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
        options={_label: _name for _name, _label in app_context.FORMAT_LABELS.items()},
        value=next(iter(app_context.FORMAT_LABELS.values())),
        label="Export the (batch x context) schedule as",
    )
    # The controls a problem's one-click fix may set are built from these states: the K field
    # from its own (a new K field reads the sweep again), the others from one, which a fix sets
    # to their values now with its own; their cells build them again.
    get_k_var, set_k_var = mo.state(Fields().k_var)
    get_fixable, set_fixable = mo.state(guide.fixable_values(Settings()))
    # The serving engine's settings (-- --max-cudagraph-capture-size C --max-num-seqs N).
    deploy_settings = _arguments.deploy
    return (
        context_format_picker,
        deploy_settings,
        folder_browser,
        get_fixable,
        get_k_var,
        query_start,
        root,
        set_fixable,
        set_k_var,
    )


@app.cell
def _(
    batch_size_var_input,
    experiment_picker,
    k_var_picker,
    query_start,
    replica_var_input,
    root,
):
    # Nothing is read until an experiment is chosen (none is after a refused ?sweeps=).
    mo.stop(
        experiment_picker.value is None,
        no_experiment_view(query_start.refusal, experiment_picker),
    )
    fields = Fields(
        batch_size_var=batch_size_var_input.value,
        k_var=k_var_picker.value,
        replica_var=replica_var_input.value,
    )
    sweep = load_experiment(
        experiment_picker.value,
        batch_size_var=fields.batch_size_var,
        k_var=fields.k_var,
        replica_var=fields.replica_var,
        within=root,
        progress=functools.partial(
            mo.status.progress_bar, title="Reading sweep files", remove_on_exit=True
        ),
    )
    return fields, sweep


@app.cell
def _(context_controls, objective_picker, sweep):
    # The prompt lengths the sweep varied, if any: the context picker's options.
    context_axis, context_notes = find_context_axis(
        sweep,
        ContextSettings(context_var=context_controls.value["context_var"].strip() or "auto"),
        objective_picker.value,
    )
    _labels = app_context.point_labels(context_axis)
    context_point_picker = mo.ui.dropdown(
        options=_labels or {"the whole sweep": None},
        value=next(iter(_labels), "the whole sweep"),
        label="Show the schedule and details at",
    )
    return context_axis, context_notes, context_point_picker


@app.cell
def _(
    acceptance_noise_slider,
    acceptance_picker,
    confidence_slider,
    context_axis,
    context_notes,
    context_point_picker,
    deploy_settings,
    direction_picker,
    experiment_picker,
    fields,
    interpolated_checkbox,
    min_runs_slider,
    mixed_global_checkbox,
    noise_slider,
    objective_picker,
    penalty_slider,
    policy_picker,
    server_cv_slider,
    set_fixable,
    set_k_var,
    strict_checkbox,
    sweep,
    tolerance_slider,
):
    # One cell for everything a setting changes (each would run on every change anyway): the
    # CLI's whole analysis (per context point when the sweep varied the prompt length), the
    # problems grouped, the verdict.
    settings = Settings(
        objective=objective_picker.value,
        direction=app_support.chosen_direction(direction_picker.value, objective_picker.value),
        acceptance=app_support.acceptance_field(acceptance_picker.value),
        min_runs=min_runs_slider.value,
        uncertainty_penalty=penalty_slider.value,
        max_objective_relative_mad=noise_slider.value,
        max_acceptance_relative_mad=acceptance_noise_slider.value,
        strict_acceptance_stability=strict_checkbox.value,
        relative_tolerance=tolerance_slider.value,
        allow_mixed_global_k=mixed_global_checkbox.value,
    )
    options = Options(
        policy=policy_picker.value,
        confidence=confidence_slider.value,
        interpolated_schedule=interpolated_checkbox.value,
        server_cv=server_cv_slider.value,
    )
    cli_arguments = app_support.cli_arguments(
        experiment_picker.value, fields, settings, options, deploy_settings
    )
    shown = app_context.analyse_sweep(
        sweep, settings, options, context_axis, context_point_picker.value, deploy_settings
    )
    analysis = shown.analysis
    result = analysis.result
    # Eager bytes, so that a static HTML export carries the files too: the CLI's files.
    schedule_file = shown.result_text().encode() if shown.ok else None
    engine_files = (
        app_context.engine_downloads(result, deploy_settings)
        if result.ok and result.schedule
        else None
    )
    rule_comparison = app_support.compare_rules(analysis, options)
    problem_groups = guide.problem_groups([*shown.problems, *context_notes], settings, fields)
    verdict = shown.verdict
    # A global, so that marimo sends the buttons' clicks to the kernel wherever they are shown.
    _fixable = guide.fixable_values(settings)
    fix_buttons = mo.ui.dictionary(
        {
            _group.rule: fix_action(_group.fix, set_k_var, set_fixable, _fixable)
            for _group in problem_groups
            if _group.fix is not None
        }
    )
    return (
        analysis,
        cli_arguments,
        fix_buttons,
        options,
        problem_groups,
        result,
        rule_comparison,
        schedule_file,
        settings,
        shown,
        engine_files,
        verdict,
    )


@app.cell
def _(
    analysis,
    context_point_picker,
    experiment_picker,
    fix_buttons,
    problem_groups,
    result,
    root,
    schedule_file,
    shown,
    verdict,
):
    # The answer in a cell of its own, apart from the rest of the page, so that it shows
    # first: all of it changes with every setting.
    headline_chart = charts.headline_chart(result, analysis.report)
    mo.output.replace(
        answer_view(
            app_support.shown_path(experiment_picker.value.relative_to(root)),
            verdict,
            problem_groups,
            fix_buttons,
            result,
            schedule_file,
            None if shown.grid is None else context_point_picker.selected_key,
            headline_chart,
        )
    )
    return (headline_chart,)


@app.cell
def _(
    analysis,
    cli_arguments,
    compare_picker,
    context_controls,
    context_format_picker,
    context_point_picker,
    experiment_picker,
    fields,
    fix_buttons,
    options,
    problem_groups,
    root,
    rule_comparison,
    settings,
    shown,
    engine_files,
):
    # Below the answer: the (batch x context) grid, then the sections.
    _page = []
    context_block = None
    if shown.grid is not None:
        context_block = context_section(
            shown.grid,
            context_controls.value["context_mix"].strip() or None,
            settings.relative_tolerance,
            context_format_picker,
            context_point_picker,
        )
        _page.append(context_block)
    _page.append(
        sections_accordion(
            problem_groups,
            fix_buttons,
            analysis,
            options,
            cli_arguments,
            rule_comparison,
            engine_files,
        )
    )
    # The other experiment is tuned with the same settings and rule, as `tune-spec-k diff`;
    # nothing is read until one is picked. Not lazy: the picker lives in it, and a lazy
    # section built again while the choice is on its way could show the old content.
    comparison, comparison_error = app_support.compare_with(
        str(experiment_picker.value),
        analysis,
        compare_picker.value,
        app_support.diff_settings(settings, options, fields),
        root,
    )
    _page.append(
        mo.accordion(
            {
                "Compare with another experiment": compare_section(
                    compare_picker, comparison, comparison_error
                )
            }
        )
    )
    mo.output.replace(mo.vstack(_page))
    return comparison, comparison_error, context_block


@app.cell
def _(folder_browser, query_start, root):
    _browsed = folder_browser.path()
    base_folder = (
        app_support.folder_below_root(root, str(_browsed))[0] if _browsed else query_start.folder
    )
    experiments, experiment_refusals = app_support.find_experiments(base_folder, root)
    # Where the experiments were read from, below the answer; without one, all the page shows.
    reading_notes(
        root, base_folder, experiments, query_start.refusal, experiment_refusals, folder_browser
    )
    return base_folder, experiment_refusals, experiments


@app.cell
def _(experiments, query_start):
    mo.stop(not experiments)
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
    # Shown with the comparison, in the page.
    compare_picker = mo.ui.dropdown(
        options={app_support.NO_COMPARISON: None, **experiments},
        value=app_support.NO_COMPARISON,
        label="Compare with",
    )
    sidebar_part(
        "Input",
        (experiment_picker, "experiment"),
        (batch_size_var_input, "batch_size_var"),
        (replica_var_input, "replica_var"),
    )
    return batch_size_var_input, compare_picker, experiment_picker, replica_var_input


@app.cell
def _(experiments, get_k_var):
    mo.stop(not experiments)
    k_var_picker = mo.ui.dropdown(
        options=app_support.K_VAR_CHOICES,
        value=next(
            name for name, field in app_support.K_VAR_CHOICES.items() if field == get_k_var()
        ),
        label=labelled("k_var"),
    )
    sidebar_part((k_var_picker, "k_var"))
    return (k_var_picker,)


@app.cell
def _(experiments, get_fixable):
    mo.stop(not experiments)
    _fixable = get_fixable()
    mixed_global_checkbox = mo.ui.checkbox(
        value=_fixable["allow_mixed_global_k"], label=labelled("allow_mixed_global_k")
    )
    # A range, not steps: the slider then reports the count itself (aria-valuenow), not its
    # position among the steps.
    min_runs_slider = mo.ui.slider(
        start=1,
        stop=10,
        step=1,
        value=_fixable["min_runs"],
        debounce=True,
        show_value=True,
        label=labelled("min_runs"),
    )
    noise_slider = setting_slider(
        "max_objective_relative_mad",
        app_support.slider_steps(1.0, 0.01),
        _fixable["max_objective_relative_mad"],
    )
    strict_checkbox = mo.ui.checkbox(
        value=_fixable["strict_acceptance_stability"],
        label=labelled("strict_acceptance_stability"),
    )
    sidebar_part(
        (mixed_global_checkbox, "allow_mixed_global_k"),
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
    )


@app.cell
def _(fields, sweep):
    # Both lists come from the sweep's fields: built again for a new experiment only.
    _choices = guide.objective_choices(sweep, OBJECTIVES_BY_NAME, fields)
    objective_picker = mo.ui.dropdown(
        options=_choices or [Settings().objective],
        value=Settings().objective
        if Settings().objective in _choices or not _choices
        else _choices[0],
        searchable=True,
        label=labelled("objective"),
    )
    acceptance_picker = mo.ui.dropdown(
        options=app_support.acceptance_options(sweep),
        value=app_support.NO_ACCEPTANCE,
        label=labelled("acceptance"),
    )
    sidebar_part("Measurements", (objective_picker, "objective"), (acceptance_picker, "acceptance"))
    return acceptance_picker, objective_picker


@app.cell
def _(experiments):
    mo.stop(not experiments)
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
    context_controls = mo.ui.dictionary(
        {
            "context_var": mo.ui.text(value="auto", label=labelled("context_var")),
            "context_mix": mo.ui.text(
                value="", placeholder="512:0.7,8192:0.3", label=labelled("context_mix")
            ),
        }
    )
    sidebar_part(
        "Policy",
        (direction_picker, "direction"),
        (penalty_slider, "uncertainty_penalty"),
        (tolerance_slider, "relative_tolerance"),
        (acceptance_noise_slider, "max_acceptance_relative_mad"),
        "Decision rule",
        (policy_picker, "policy"),
        (confidence_slider, "confidence"),
        (server_cv_slider, "server_cv"),
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
        server_cv_slider,
        tolerance_slider,
    )


if __name__ == "__main__":
    app.run()
