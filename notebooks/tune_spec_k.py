import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="tune-spec-k")

with app.setup:
    import functools
    import html
    import json
    import sys
    from pathlib import Path

    import marimo as mo

    from lib.app import context as app_context
    from lib.app import guide
    from lib.app import support as app_support
    from lib.context import find_context_axis
    from lib.loop import export
    from lib.present import charts, tables, text
    from lib.problems import Severity
    from lib.schedule import KNOWN_OBJECTIVES
    from lib.settings import DEFAULT_BATCH_SIZE_VAR, ContextSettings, Fields, Options, Settings
    from lib.sweeps import load_experiment


@app.function
def with_help(element: object, key: str) -> mo.Html:
    """``element`` with its control's help shown where the pointer rests on it."""
    return mo.Html(f'<div title="{html.escape(guide.CONTROL_HELP[key])}">{element}</div>')


@app.function
def labelled(key: str) -> str:
    return guide.CONTROL_LABELS[key]


@app.function
def setting_slider(key: str, steps: list, value: float) -> mo.ui.slider:
    """The slider of the setting ``key``: it sends its value when released, not while dragged."""
    return mo.ui.slider(
        steps=steps, value=value, debounce=True, show_value=True, label=labelled(key)
    )


@app.function
def sidebar_part(element: object, key: str | None, heading: str | None = None) -> mo.Html:
    """``element`` (with its help) as its part of the sidebar, under ``heading`` if given.

    Each control's own cell shows its part: a cell that defines a control does not run again
    when the control's value changes, so a slider moved sends nothing to the sidebar (a cell
    showing the whole sidebar would run again, and send it all again, on every change).
    marimo shows the parts in the order of their cells, a part sent again in its place. These
    cells come last in the file: each leaves an empty slot where it stands in the page. Each
    stops when the folder holds no experiment: no sidebar then, only the page's explanation.
    """
    shown = [mo.md(f"### {heading}")] if heading else []
    helped = element if key is None else with_help(element, key)
    # In a box of its own: mo.sidebar stretches what it shows to fill the column, and parts
    # would spread out over a tall window. Every part sets the width: marimo takes the last's.
    part = mo.vstack([*shown, helped]).style(margin_bottom="0.5rem")
    return mo.sidebar(part, width="22rem")


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
    return (root,)


@app.cell
def _(root):
    start_folder, query_refusal = app_support.folder_below_root(
        root, mo.query_params().get("sweeps")
    )
    return query_refusal, start_folder


@app.cell
def _(root):
    folder_browser = mo.ui.file_browser(
        initial_path=root,
        selection_mode="directory",
        multiple=False,
        restrict_navigation=True,
        label="Choose a folder below the root (an experiment, or a folder of experiments)",
    )
    return (folder_browser,)


@app.cell
def _(folder_browser, root, start_folder):
    _browsed = folder_browser.path()
    base_folder = (
        app_support.folder_below_root(root, str(_browsed))[0] if _browsed else start_folder
    )
    return (base_folder,)


@app.cell
def _(base_folder, root):
    experiments, experiment_refusals = app_support.find_experiments(base_folder, root)
    return experiment_refusals, experiments


@app.cell
def _(base_folder, experiments):
    mo.stop(
        not experiments,
        mo.callout(
            mo.Html(
                f"No experiment in {app_support.path_html(base_folder)}: expected"
                " <code>summary.json</code> or <code>run=N.json</code> files (the output of"
                " <code>vllm bench sweep serve</code>) in it or in its subfolders."
            ),
            kind="danger",
        ),
    )
    return


@app.cell
def _():
    # One state per control a problem's one-click fix may set; the control starts from it.
    get_min_runs, set_min_runs = mo.state(Settings().min_runs)
    get_noise, set_noise = mo.state(Settings().max_objective_relative_mad)
    get_k_var, set_k_var = mo.state(Fields().k_var)
    get_mixed_global, set_mixed_global = mo.state(Settings().allow_mixed_global_k)
    get_strict, set_strict = mo.state(Settings().strict_acceptance_stability)
    fix_setters = {
        "min_runs": set_min_runs,
        "max_objective_relative_mad": set_noise,
        "k_var": set_k_var,
        "allow_mixed_global_k": set_mixed_global,
        "strict_acceptance_stability": set_strict,
    }
    return (
        fix_setters,
        get_k_var,
        get_min_runs,
        get_mixed_global,
        get_noise,
        get_strict,
    )


@app.cell
def _(batch_size_var_input, k_var_picker):
    fields = Fields(batch_size_var=batch_size_var_input.value, k_var=k_var_picker.value)
    return (fields,)


@app.cell
def _(experiment_picker, fields, root):
    sweep = load_experiment(
        experiment_picker.value,
        batch_size_var=fields.batch_size_var,
        k_var=fields.k_var,
        within=root,
        progress=functools.partial(
            mo.status.progress_bar, title="Reading sweep files", remove_on_exit=True
        ),
    )
    return (sweep,)


@app.cell
def _(
    acceptance_noise_slider,
    acceptance_picker,
    direction_picker,
    min_runs_slider,
    mixed_global_checkbox,
    noise_slider,
    objective_picker,
    penalty_slider,
    strict_checkbox,
    tolerance_slider,
):
    settings = Settings(
        objective=objective_picker.value,
        direction=direction_picker.value,
        acceptance=app_support.acceptance_field(acceptance_picker.value),
        min_runs=min_runs_slider.value,
        uncertainty_penalty=penalty_slider.value,
        max_objective_relative_mad=noise_slider.value,
        max_acceptance_relative_mad=acceptance_noise_slider.value,
        strict_acceptance_stability=strict_checkbox.value,
        relative_tolerance=tolerance_slider.value,
        allow_mixed_global_k=mixed_global_checkbox.value,
    )
    return (settings,)


@app.cell
def _(confidence_slider, interpolated_checkbox, policy_picker):
    options = Options(
        policy=policy_picker.value,
        confidence=confidence_slider.value,
        interpolated_schedule=interpolated_checkbox.value,
    )
    return (options,)


@app.cell
def _(context_controls, sweep):
    # The prompt lengths the sweep varied, if any: the context picker's options.
    context_axis, context_notes = find_context_axis(
        sweep, ContextSettings(context_var=context_controls.value["context_var"].strip() or "auto")
    )
    return context_axis, context_notes


@app.cell
def _(context_axis):
    _labels = app_context.point_labels(context_axis)
    context_point_picker = mo.ui.dropdown(
        options=_labels or {"the whole sweep": None},
        value=next(iter(_labels), "the whole sweep"),
        label="Show the schedule and details at",
    )
    return (context_point_picker,)


@app.cell
def _(context_axis, context_point_picker, options, settings, sweep):
    # The CLI's whole analysis (per context point when the sweep varied the prompt length):
    # the seed policy, confidence, the rule, switch points, the plan.
    shown = app_context.analyse_sweep(
        sweep, settings, options, context_axis, context_point_picker.value
    )
    analysis = shown.analysis
    result = analysis.result
    return analysis, result, shown


@app.cell
def _(context_notes, fields, options, settings, shown):
    problem_groups = guide.problem_groups([*shown.problems, *context_notes], settings, fields)
    verdict = (
        guide.verdict(shown.analysis, problem_groups, options)
        if shown.grid is None
        else app_context.grid_verdict(shown.grid, problem_groups, options)
    )
    return problem_groups, verdict


@app.cell
def _(fix_setters, problem_groups):
    # A global, so that marimo sends the buttons' clicks to the kernel wherever they are shown.
    fix_buttons = mo.ui.dictionary(
        {
            _group.rule: fix_action(_group.fix, fix_setters)
            for _group in problem_groups
            if _group.fix is not None
        }
    )
    return (fix_buttons,)


@app.cell
def _(experiment_picker, root):
    _name = app_support.shown_path(experiment_picker.value.relative_to(root))
    mo.md(f"# tune-spec-k · {html.escape(_name)}").style({"overflow-wrap": "anywhere"})
    return


@app.cell
def _(fix_buttons, problem_groups, verdict):
    _kind = {"ready": "success", "provisional": "warn", "cannot-tune": "danger"}[verdict.state]
    # The largest error group is the reason; its fix, and the next group's, one click away.
    _fixes = [
        fix_buttons[_group.rule]
        for _group in problem_groups[:2]
        if _group.severity is Severity.ERROR and _group.rule in fix_buttons.elements
    ]
    mo.callout(
        mo.vstack(
            [
                mo.md(f"**{verdict.title}:** {html.escape(verdict.reason)}"),
                mo.hstack(_fixes, justify="start", wrap=True) if _fixes else mo.md(""),
            ]
        ),
        kind=_kind,
    )
    return


@app.cell
def _(shown):
    # Eager bytes, so that a static HTML export carries the file too: the CLI's file.
    schedule_file = shown.result_text().encode() if shown.ok else None
    return (schedule_file,)


@app.cell
def _(context_point_picker, result, schedule_file, shown):
    mo.stop(schedule_file is None or not result.ok)
    _where = "" if shown.grid is None else f" at {context_point_picker.selected_key}"
    mo.vstack(
        [
            mo.md(
                f"**Schedule{_where}** (`num_speculative_tokens_per_batch_size`):"
                f" `{app_support.schedule_text(result)}`; for `vllm serve`:"
            ),
            # Wrapped, not scrolled: the whole line is in view and still pastes as one.
            mo.Html(
                '<pre style="white-space: pre-wrap; overflow-wrap: anywhere; margin: 0">'
                f"{html.escape(text.speculative_config_line(result))}</pre>"
            ),
            mo.download(
                schedule_file,
                filename=app_support.SCHEDULE_FILE,
                mimetype="application/json",
                label=f"Download {app_support.SCHEDULE_FILE}",
            ),
        ]
    )
    return


@app.cell
def _(analysis, result):
    headline_chart = charts.headline_chart(result, analysis.report)
    mo.output.replace(headline_chart)
    return (headline_chart,)


@app.cell
def _():
    context_format_picker = mo.ui.radio(
        options={_label: _name for _name, _label in app_context.FORMAT_LABELS.items()},
        value=next(iter(app_context.FORMAT_LABELS.values())),
        label="Export the (batch x context) schedule as",
    )
    return (context_format_picker,)


@app.cell
def _(context_controls, context_format_picker, context_point_picker, settings, shown):
    mo.stop(shown.grid is None)
    context_block = context_section(
        shown.grid,
        context_controls.value["context_mix"].strip() or None,
        settings.relative_tolerance,
        context_format_picker,
        context_point_picker,
    )
    mo.output.replace(context_block)
    return (context_block,)


@app.cell
def _(base_folder, experiment_refusals, folder_browser, query_refusal, root):
    _notes = [
        mo.Html(
            f"Reading experiments in {app_support.path_html(base_folder)}"
            f" (root {app_support.path_html(root)})"
        )
    ]
    if query_refusal:
        _notes.append(mo.callout(query_refusal, kind="warn"))
    if experiment_refusals:
        _notes.append(
            mo.callout(
                mo.vstack(
                    [
                        mo.md("**Not listed:** everything the app reads must lie inside the root."),
                        mo.Html(text.html_list(experiment_refusals)),
                    ]
                ),
                kind="warn",
            )
        )
    if mo.app_meta().mode == "edit":
        _notes.append(mo.accordion({"Browse folders": folder_browser}))
    mo.vstack(_notes)
    return


@app.cell
def _(result):
    # Eager bytes, like the vLLM file: a static HTML export carries it too.
    trtllm_file = (
        export.trtllm_text(result.schedule, result.deploy_global_k).encode()
        if result.ok and result.schedule
        else None
    )
    return (trtllm_file,)


@app.cell
def _(analysis, options):
    rule_comparison = app_support.compare_rules(analysis, options)
    return (rule_comparison,)


@app.cell
def _(experiments):
    compare_picker = mo.ui.dropdown(
        options={app_support.NO_COMPARISON: None, **experiments},
        value=app_support.NO_COMPARISON,
        label="Compare with",
    )
    return (compare_picker,)


@app.cell
def _(analysis, compare_picker, experiment_picker, fields, options, root, settings):
    # The other experiment is tuned with the same settings and rule, as `tune-spec-k diff`;
    # nothing is read until one is picked.
    comparison, comparison_error = app_support.compare_with(
        str(experiment_picker.value),
        analysis,
        compare_picker.value,
        app_support.diff_settings(settings, options, fields),
        root,
    )
    return comparison, comparison_error


@app.cell
def _(experiment_picker, fields, options, settings):
    cli_arguments = app_support.cli_arguments(experiment_picker.value, fields, settings, options)
    return (cli_arguments,)


@app.cell
def _(
    analysis,
    cli_arguments,
    fix_buttons,
    options,
    problem_groups,
    rule_comparison,
    trtllm_file,
):
    # Each section is built when it is opened (a function), and again only while it is open.
    _problem_count = sum(len(_group.problems) for _group in problem_groups)
    mo.accordion(
        {
            f"Problems ({_problem_count})": functools.partial(
                problems_section, problem_groups, fix_buttons
            ),
            "Data health": functools.partial(health_section, analysis),
            "Decisions": functools.partial(decisions_section, analysis, options, cli_arguments),
            "How sure": functools.partial(confidence_section, analysis),
            "What to measure next": functools.partial(plan_section, analysis),
            "Rules compared": functools.partial(rules_section, rule_comparison),
            "Switch points": functools.partial(switch_section, analysis),
            "Objective per batch size": functools.partial(objective_section, analysis),
            "Acceptance": functools.partial(acceptance_section, analysis),
            "Downloads": functools.partial(downloads_section, analysis, trtllm_file),
        },
        multiple=True,
        lazy=True,
    )
    return


@app.cell
def _(compare_picker, comparison, comparison_error):
    # Not lazy: the picker lives in it, and a lazy section built again while the choice is
    # on its way could show the old content.
    mo.accordion(
        {
            "Compare with another experiment": compare_section(
                compare_picker, comparison, comparison_error
            )
        }
    )
    return


@app.cell
def _(experiments):
    mo.stop(not experiments)
    experiment_picker = mo.ui.dropdown(
        options=experiments,
        value=guide.default_experiment(experiments),
        label="Experiment",
        full_width=True,
    )
    sidebar_part(experiment_picker, "experiment", "Input")
    return (experiment_picker,)


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
    sidebar_part(k_var_picker, "k_var")
    return (k_var_picker,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    batch_size_var_input = mo.ui.text(
        value=DEFAULT_BATCH_SIZE_VAR, label=labelled("batch_size_var")
    )
    sidebar_part(batch_size_var_input, "batch_size_var")
    return (batch_size_var_input,)


@app.cell
def _(experiments, get_mixed_global):
    mo.stop(not experiments)
    mixed_global_checkbox = mo.ui.checkbox(
        value=get_mixed_global(), label=labelled("allow_mixed_global_k")
    )
    sidebar_part(mixed_global_checkbox, "allow_mixed_global_k")
    return (mixed_global_checkbox,)


@app.cell
def _(fields, sweep):
    _choices = guide.objective_choices(sweep, KNOWN_OBJECTIVES, fields)
    objective_picker = mo.ui.dropdown(
        options=_choices or [Settings().objective],
        value=Settings().objective
        if Settings().objective in _choices or not _choices
        else _choices[0],
        searchable=True,
        label=labelled("objective"),
    )
    sidebar_part(objective_picker, "objective", "Policy")
    return (objective_picker,)


@app.cell
def _(objective_picker):
    direction_picker = mo.ui.radio(
        options=["maximize", "minimize"],
        value=app_support.default_direction(objective_picker.value),
        inline=True,
        label=labelled("direction"),
    )
    sidebar_part(direction_picker, "direction")
    return (direction_picker,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    penalty_slider = setting_slider(
        "uncertainty_penalty", app_support.slider_steps(5.0, 0.1), Settings().uncertainty_penalty
    )
    sidebar_part(penalty_slider, "uncertainty_penalty")
    return (penalty_slider,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    tolerance_slider = setting_slider(
        "relative_tolerance", app_support.slider_steps(0.3, 0.005), Settings().relative_tolerance
    )
    sidebar_part(tolerance_slider, "relative_tolerance")
    return (tolerance_slider,)


@app.cell
def _(experiments, get_noise):
    mo.stop(not experiments)
    noise_slider = setting_slider(
        "max_objective_relative_mad", app_support.slider_steps(1.0, 0.01), get_noise()
    )
    sidebar_part(noise_slider, "max_objective_relative_mad")
    return (noise_slider,)


@app.cell
def _(experiments, get_min_runs):
    mo.stop(not experiments)
    # A range, not steps: the slider then reports the count itself (aria-valuenow), not its
    # position among the steps.
    min_runs_slider = mo.ui.slider(
        start=1,
        stop=10,
        step=1,
        value=get_min_runs(),
        debounce=True,
        show_value=True,
        label=labelled("min_runs"),
    )
    sidebar_part(min_runs_slider, "min_runs")
    return (min_runs_slider,)


@app.cell
def _(sweep):
    acceptance_picker = mo.ui.dropdown(
        options=app_support.acceptance_options(sweep),
        value=app_support.NO_ACCEPTANCE,
        label=labelled("acceptance"),
    )
    sidebar_part(acceptance_picker, "acceptance", "Acceptance")
    return (acceptance_picker,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    acceptance_noise_slider = setting_slider(
        "max_acceptance_relative_mad",
        app_support.slider_steps(1.0, 0.01),
        Settings().max_acceptance_relative_mad,
    )
    sidebar_part(acceptance_noise_slider, "max_acceptance_relative_mad")
    return (acceptance_noise_slider,)


@app.cell
def _(experiments, get_strict):
    mo.stop(not experiments)
    strict_checkbox = mo.ui.checkbox(
        value=get_strict(), label=labelled("strict_acceptance_stability")
    )
    sidebar_part(strict_checkbox, "strict_acceptance_stability")
    return (strict_checkbox,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    policy_picker = mo.ui.radio(
        options=app_support.POLICY_CHOICES,
        value=next(iter(app_support.POLICY_CHOICES)),
        label=labelled("policy"),
    )
    sidebar_part(policy_picker, "policy", "Decision rule")
    return (policy_picker,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    confidence_slider = setting_slider(
        "confidence", app_support.slider_steps(1.0, 0.01, start=0.5), Options().confidence
    )
    sidebar_part(confidence_slider, "confidence")
    return (confidence_slider,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    interpolated_checkbox = mo.ui.checkbox(
        value=Options().interpolated_schedule, label=labelled("interpolated_schedule")
    )
    sidebar_part(interpolated_checkbox, "interpolated_schedule")
    return (interpolated_checkbox,)


@app.cell
def _(experiments):
    mo.stop(not experiments)
    context_controls = mo.ui.dictionary(
        {
            "context_var": mo.ui.text(value="auto", label=labelled("context_var")),
            "context_mix": mo.ui.text(
                value="", placeholder="512:0.7,8192:0.3", label=labelled("context_mix")
            ),
        }
    )
    sidebar_part(
        mo.vstack(
            [with_help(context_controls[_key], _key) for _key in ("context_var", "context_mix")]
        ),
        None,
        "Context length",
    )
    return (context_controls,)


@app.function
def context_section(grid, mix, tolerance: float, format_picker, point_picker) -> mo.Html:
    """The (batch x context) answer: the heatmap, the chosen format's config and its loss,
    every format's download (the CLI's `export -o` files), the context picker."""
    batch_only, losses, mix_problems = app_context.heatmap_losses(grid, mix)
    heatmap = charts.context_heatmap(grid.grid(), batch_only, losses, 100 * tolerance)
    downloads = app_context.context_downloads(grid, mix)
    chosen = next(item for item in downloads if item.format == format_picker.value)
    if chosen.config is None:
        shown = mo.callout(
            mo.Html(text.problem_list_html([*chosen.problems, *mix_problems])), kind="warn"
        )
    else:
        _config = "--speculative-config " + json.dumps(chosen.config)
        shown = mo.vstack(
            [
                mo.md(f"**{html.escape(chosen.summary)}**"),
                mo.Html(
                    '<pre style="white-space: pre-wrap; overflow-wrap: anywhere; margin: 0">'
                    f"{html.escape(_config)}</pre>"
                ),
                mo.Html(text.html_list(list(chosen.remarks))),
            ]
        )
    files = [
        mo.download(
            item.text.encode(),
            filename=item.filename,
            mimetype="application/json",
            label=f"Download {item.filename}",
        )
        for item in downloads
        if item.text is not None
    ]
    return mo.vstack(
        [
            heatmap,
            with_help(format_picker, "context_format"),
            shown,
            mo.hstack(files, justify="start", wrap=True),
            with_help(point_picker, "context_point"),
        ]
    )


@app.function
def fix_action(fix: guide.Fix, setters: dict) -> mo.Html:
    """The button that applies ``fix`` to its sidebar control."""
    return mo.ui.button(
        label=html.escape(fix.label),
        kind="warn",
        on_click=lambda _: setters[fix.control](fix.value),
    )


@app.function
def problems_section(groups: list, buttons: mo.ui.dictionary) -> mo.Html:
    if not groups:
        return mo.md("No problems.")
    _kinds = {Severity.ERROR: "danger", Severity.WARNING: "warn", Severity.NOTE: "neutral"}
    items = []
    for group in groups:
        heading = mo.hstack(
            [
                mo.md(html.escape(group.sentence)),
                buttons[group.rule] if group.rule in buttons.elements else mo.md(""),
            ],
            justify="space-between",
            wrap=True,
        )
        details = mo.accordion(
            {
                f"{len(group.problems)} x {group.severity.value} [{group.rule}]": mo.Html(
                    text.problem_list_html(list(group.problems))
                )
            },
            lazy=True,
        )
        items.append(mo.callout(mo.vstack([heading, details]), kind=_kinds[group.severity]))
    return mo.vstack(items)


@app.function
def health_section(analysis) -> mo.Html:
    result = analysis.result
    counts = app_support.health_counts(result)
    excluded = tables.excluded_runs_table(result)
    rejected = tables.rejected_cells_table(result)
    return mo.vstack(
        [
            mo.hstack(
                [
                    mo.stat(
                        counts.runs_loaded,
                        label="runs loaded",
                        caption=f"from {counts.files_read} files",
                    ),
                    mo.stat(
                        counts.runs_excluded, label="runs excluded", target_direction="decrease"
                    ),
                    mo.stat(
                        counts.cells_rejected,
                        label="cells rejected",
                        caption=f"of {counts.cells} (batch size, K) cells",
                    ),
                    mo.stat(counts.anchors, label="batch-size anchors"),
                    mo.stat(counts.errors, label="errors", caption=f"{counts.warnings} warnings"),
                ],
                widths="equal",
                wrap=True,
            ),
            mo.md(
                f"**K=0 baseline:** {app_support.baseline_text(result)}\n\n"
                f"**Global K:** {app_support.global_k_text(result)}"
            ),
            mo.md("**K measured and kept per batch size**"),
            mo.ui.table(tables.k_sets_table(result), selection=None, pagination=False),
            mo.md("**Runs excluded, by reason**"),
            mo.ui.table(excluded, selection=None) if excluded.height else mo.md("None."),
            mo.md("**Cells rejected (too few runs, noise gate, acceptance)**"),
            mo.ui.table(rejected, selection=None) if rejected.height else mo.md("None."),
        ]
    )


@app.function
def decisions_section(analysis, options, cli_arguments) -> mo.Html:
    result = analysis.result
    table = tables.decision_table(result, guide.pick_confidence(analysis))
    return mo.vstack(
        [
            mo.md(app_support.rule_text(options)),
            mo.md(
                "A pick whose P(eps-good) is below the confidence (or unknown, with one run per"
                " cell) is marked **not sure enough**."
            ),
            mo.ui.table(
                table,
                selection=None,
                pagination=False,
                style_cell=app_support.highlight_rows(table, "sure enough", False),
            ),
            mo.md(
                "**The same on the command line:**\n\n"
                f"```bash\n{app_support.cli_command(cli_arguments)}\n```"
            ),
        ]
    )


@app.function
def confidence_section(analysis) -> mo.Html:
    result, report = analysis.result, analysis.report
    intro = mo.md(
        "**P(eps-good)** is the probability that a K is within the tie tolerance of the best"
        " K at its batch size, from every K's runs with the noise pooled over the anchor"
        " (seeded, so the same sweep gives the same numbers). An anchor is **resolved** when"
        " some K reaches the confidence; otherwise its K is **provisional**."
    )
    if report is None or not result.ok:
        return mo.vstack(
            [
                intro,
                mo.callout(
                    "No anchor is resolved or provisional while the result has errors: fix"
                    " them first (see Problems).",
                    kind="warn",
                ),
            ]
        )
    unresolved = app_support.unresolved_lines(result, report)
    table = tables.confidence_table(result, report)
    flagged = tables.flagged_runs_table(report)
    return mo.vstack(
        [
            intro,
            mo.callout(
                mo.vstack(
                    [
                        mo.md(
                            f"**{len(unresolved)} unresolved anchor(s):** their K is"
                            " provisional; “What to measure next” says what would settle"
                            " them."
                        ),
                        mo.Html(text.html_list(unresolved)),
                    ]
                ),
                kind="warn",
            )
            if unresolved
            else mo.callout(mo.md("**Every anchor is resolved.**"), kind="success"),
            mo.md(charts.confidence_caption(result, report)),
            mo.hstack(charts.confidence_charts(result, report), wrap=True, justify="start"),
            mo.ui.table(
                table,
                selection=None,
                pagination=False,
                style_cell=app_support.highlight_rows(table, "status", "unresolved"),
            ),
            mo.md(
                "**Flagged runs** (far from their cell's median for this anchor's noise):"
                " never dropped; each anchor is also decided without them."
            ),
            mo.ui.table(
                flagged,
                selection=None,
                style_cell=app_support.highlight_rows(flagged, "the pick depends on it"),
            )
            if flagged.height
            else mo.md("None."),
        ]
    )


@app.function
def plan_section(analysis) -> mo.Html:
    plan = analysis.plan
    if plan is None or not analysis.result.ok:
        return mo.callout(
            "No measurement plan while the result has errors: fix them first (see Problems).",
            kind="warn",
        )
    reruns = tables.rerun_table(plan)
    new_anchors = tables.new_anchor_table(plan)
    return mo.vstack(
        [
            mo.Html(text.text_block_html(text.measurement_plan_lines(plan))),
            mo.md("**Reruns at unresolved anchors**"),
            mo.ui.table(reruns, selection=None) if reruns.height else mo.md("None."),
            mo.md("**New anchors where neighbouring picks disagree**"),
            mo.ui.table(new_anchors, selection=None) if new_anchors.height else mo.md("None."),
            mo.download(
                plan.to_json_text().encode(),
                filename="measurement_plan.json",
                mimetype="application/json",
                label="Download measurement_plan.json (as --plan-json writes it)",
            ),
        ]
    )


@app.function
def rules_section(comparison) -> mo.Html:
    intro = mo.md(
        "The seed ranks each K by its median less a MAD penalty; the confident rule picks the"
        " smallest K whose P(eps-good) reaches the confidence. Rows where they differ are"
        " highlighted; the sidebar's **Decision rule** chooses which one is exported."
    )
    if comparison is None:
        return mo.vstack(
            [intro, mo.callout("No comparison: the settings are invalid.", kind="warn")]
        )
    table = comparison.table()
    return mo.vstack(
        [
            intro,
            mo.md(comparison.summary()),
            charts.rules_chart(comparison.seed, comparison.confident),
            mo.ui.table(
                table,
                selection=None,
                pagination=False,
                style_cell=app_support.highlight_rows(table, "differs"),
            ),
        ]
    )


@app.function
def switch_section(analysis) -> mo.Html:
    switch_points = analysis.switch_points
    intro = mo.md(
        "vLLM switches K at the upper anchor. Interpolating each pick's speed-up over K=0 in"
        " log batch size says where between the anchors the switch pays off."
    )
    if switch_points is None:
        return mo.vstack([intro, mo.md("No switch points without a schedule (see Problems).")])
    return mo.vstack(
        [
            intro,
            charts.schedule_chart(analysis.result, switch_points),
            mo.Html(text.text_block_html(text.switch_point_lines(switch_points))),
            mo.ui.table(tables.switch_table(switch_points), selection=None, pagination=False)
            if switch_points.switches.height
            else mo.md(""),
        ]
    )


@app.function
def objective_section(analysis) -> mo.Html:
    # Small charts of a fixed width wrap to the page: nothing is clipped, one column on a phone.
    result = analysis.result
    return mo.vstack(
        [
            mo.md(charts.objective_caption(result)),
            mo.hstack(charts.objective_charts(result), wrap=True, justify="start"),
        ]
    )


@app.function
def acceptance_section(analysis) -> mo.Html:
    result = analysis.result
    shown = charts.acceptance_charts(result)
    if not shown:
        return mo.callout(charts.acceptance_caption(result), kind="neutral")
    return mo.vstack(
        [mo.md(charts.acceptance_caption(result)), mo.hstack(shown, wrap=True, justify="start")]
    )


@app.function
def compare_section(picker, comparison, error) -> mo.Html:
    intro = mo.md(
        "After a hardware or vLLM change: the other experiment (B) is tuned with the same"
        " settings and rule as this one (A). Per batch size, the K each schedule runs, the"
        " objective at each pick with B against A and its interval, and for a changed K what"
        " the other K loses in each sweep, as `tune-spec-k diff A B` prints them."
    )
    if comparison is not None:
        view = mo.vstack(
            [
                mo.callout(
                    mo.md(f"**{text.diff_lines(comparison)[-1]}**"),
                    kind="warn" if comparison.material else "success",
                ),
                charts.comparison_chart(comparison),
                mo.ui.table(tables.comparison_table(comparison), selection=None, pagination=False),
            ]
        )
    elif error is not None:
        view = mo.callout(error, kind="warn")
    else:
        view = mo.md("Pick an experiment to compare with.")
    return mo.vstack([intro, with_help(picker, "compare"), view])


@app.function
def downloads_section(analysis, trtllm_file) -> mo.Html:
    if trtllm_file is None:
        return mo.callout("No files while the result has errors (see Problems).", kind="warn")
    trtllm = trtllm_file.decode()
    images = [
        mo.download(
            functools.partial(_image, name, suffix, analysis),
            filename=f"{name}.{suffix}",
            mimetype=mimetype,
            label=f"{name}.{suffix}",
        )
        for name in ("speed_up", "objective_vs_k", "schedule", "p_eps_good")
        for suffix, mimetype in (("png", "image/png"), ("svg", "image/svg+xml"))
    ]
    return mo.vstack(
        [
            mo.md(
                "**For TensorRT-LLM** (`draft_len_schedule`: each batch-size upper bound and"
                " its K; the same file as `tune-spec-k export --format trtllm`):\n\n"
                f"```json\n{trtllm}```"
            ),
            mo.download(
                trtllm_file,
                filename=export.TRTLLM_FILE,
                mimetype="application/json",
                label=f"Download {export.TRTLLM_FILE}",
            ),
            mo.md("**Chart images** (rendered when clicked)"),
            mo.hstack(images, justify="start", wrap=True),
        ]
    )


@app.function
def _image(name: str, suffix: str, analysis) -> bytes:
    result, report = analysis.result, analysis.report
    chart = {
        "speed_up": lambda: charts.headline_chart(result, report),
        "objective_vs_k": lambda: charts.image_grid(charts.objective_charts(result)),
        "schedule": lambda: charts.schedule_chart(result, analysis.switch_points),
        "p_eps_good": lambda: charts.image_grid(charts.confidence_charts(result, report)),
    }[name]()
    return getattr(chart, suffix)()


if __name__ == "__main__":
    app.run()
