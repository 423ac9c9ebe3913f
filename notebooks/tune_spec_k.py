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
    from lib.context_axis import find_context_axis
    from lib.loop.run.rounds import design_ks_of
    from lib.present.charts import headline
    from lib.present.charts import traffic as traffic_charts
    from lib.settings import ContextSettings, Fields, Options, Settings
    from lib.sweeps import load_experiment

    # The page's layout and the sidebar's parts (notebooks/sections.py) and controls
    # (notebooks/controls.py), beside this file: from any working directory, and when the
    # notebook is imported rather than run by marimo.
    if str(Path(__file__).resolve().parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
    from controls import (
        gate_controls,
        input_controls,
        k_field_control,
        measurement_controls,
        page_start,
        policy_controls,
    )
    from sections import (
        answer_view,
        compare_section,
        context_section,
        fix_action,
        no_experiment_view,
        reading_notes,
        sections_accordion,
    )


@app.cell
def _():
    (
        context_format_picker,
        deploy_settings,
        folder_browser,
        get_fixable,
        get_k_var,
        query_start,
        root,
        set_fixable,
        set_k_var,
        traffic_settings,
        traffic_mix,
    ) = page_start(sys.argv[1:])
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
        traffic_mix,
        traffic_settings,
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
    # Once per experiment, not per setting: a `tune-spec-k run` experiment's rounds, and its
    # design's K, which it is tuned with as the CLI tunes it (rounds.json).
    design_ks = design_ks_of(experiment_picker.value)
    rounds = app_support.experiment_rounds(experiment_picker.value)
    return design_ks, fields, rounds, sweep


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
    design_ks,
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
    root,
    run_cv_slider,
    server_cv_slider,
    set_fixable,
    set_k_var,
    strict_checkbox,
    sweep,
    unmeasured_checkbox,
    tolerance_slider,
    traffic_mix,
    traffic_settings,
):
    # One cell for everything a setting changes (each would run on every change anyway): the
    # CLI's whole analysis (per context point when the sweep varied the prompt length), the
    # problems grouped, the verdict, and the answer shown.
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
        allow_unmeasured_k=unmeasured_checkbox.value,
        # A `tune-spec-k run` experiment's design K (rounds.json), as the CLI tunes it.
        design_ks=design_ks,
    )
    options = Options(
        policy=policy_picker.value,
        confidence=confidence_slider.value,
        interpolated_schedule=interpolated_checkbox.value,
        server_cv=server_cv_slider.value,
        run_cv=run_cv_slider.value,
    )
    cli_arguments = app_support.cli_arguments(
        experiment_picker.value, fields, settings, options, deploy_settings, traffic_settings
    )
    shown = app_context.analyse_sweep(
        sweep,
        settings,
        options,
        context_axis,
        context_point_picker.value,
        deploy_settings,
        traffic_mix,
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
    # The answer is this cell's output, apart from the rest of the page, so that it shows
    # first: all of it changes with every setting.
    headline_chart = headline.headline_chart(result, analysis.report)
    traffic_chart = traffic_charts.traffic_chart(result)
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
            traffic_chart,
        )
    )
    return (
        analysis,
        cli_arguments,
        fix_buttons,
        headline_chart,
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
    cli_arguments,
    compare_picker,
    context_controls,
    context_format_picker,
    context_point_picker,
    engine_files,
    experiment_picker,
    fields,
    fix_buttons,
    options,
    problem_groups,
    root,
    rounds,
    rule_comparison,
    settings,
    shown,
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
            rounds,
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
    batch_size_var_input, compare_picker, experiment_picker, replica_var_input, _part = (
        input_controls(experiments, query_start)
    )
    _part
    return batch_size_var_input, compare_picker, experiment_picker, replica_var_input


@app.cell
def _(experiments, get_k_var):
    mo.stop(not experiments)
    k_var_picker, _part = k_field_control(get_k_var())
    _part
    return (k_var_picker,)


@app.cell
def _(experiments, get_fixable):
    mo.stop(not experiments)
    (
        min_runs_slider,
        mixed_global_checkbox,
        noise_slider,
        strict_checkbox,
        unmeasured_checkbox,
        _part,
    ) = gate_controls(get_fixable())
    _part
    return (
        min_runs_slider,
        mixed_global_checkbox,
        noise_slider,
        strict_checkbox,
        unmeasured_checkbox,
    )


@app.cell
def _(fields, sweep):
    # Both lists come from the sweep's fields: built again for a new experiment only.
    acceptance_picker, objective_picker, _part = measurement_controls(sweep, fields)
    _part
    return acceptance_picker, objective_picker


@app.cell
def _(experiments):
    mo.stop(not experiments)
    (
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
        _part,
    ) = policy_controls()
    _part
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
    )


if __name__ == "__main__":
    app.run()
