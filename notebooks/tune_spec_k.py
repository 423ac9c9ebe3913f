import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="tune-spec-k")

with app.setup:
    import functools
    import sys
    from pathlib import Path

    import marimo as mo

    from lib.analysis import analyse
    from lib.app import support as app_support
    from lib.loop import export
    from lib.present import charts, tables, text
    from lib.problems import Severity
    from lib.settings import DEFAULT_BATCH_SIZE_VAR, Fields, Options, Settings
    from lib.sweeps import load_experiment


@app.cell
def _():
    mo.md("""
    # tune-spec-k: the speculative-decoding schedule

    Chooses vLLM's `num_speculative_tokens_per_batch_size` from `vllm bench sweep serve`
    results with the same policy and the same code as the `tune-spec-k` CLI. Pick an experiment
    and adjust the policy and the decision rule in the sidebar; the data health, the decisions,
    how sure each pick is, what to measure next and the charts follow.
    """)
    return


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
    experiment_picker = mo.ui.dropdown(
        options=experiments, value=next(iter(experiments)), label="Experiment"
    )
    return (experiment_picker,)


@app.cell
def _():
    k_var_picker = mo.ui.dropdown(
        options=app_support.K_VAR_CHOICES,
        value=next(iter(app_support.K_VAR_CHOICES)),
        label="K is recorded as",
    )
    return (k_var_picker,)


@app.cell
def _():
    batch_size_var_input = mo.ui.text(value=DEFAULT_BATCH_SIZE_VAR, label="Batch-size field")
    return (batch_size_var_input,)


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
def _(sweep):
    objective_picker = mo.ui.dropdown(
        options=app_support.objective_options(sweep),
        value=Settings().objective,
        searchable=True,
        label="Objective",
    )
    return (objective_picker,)


@app.cell
def _(objective_picker):
    direction_picker = mo.ui.radio(
        options=["maximize", "minimize"],
        value=app_support.default_direction(objective_picker.value),
        inline=True,
        label="Better is",
    )
    return (direction_picker,)


@app.cell
def _():
    penalty_slider = mo.ui.slider(
        steps=app_support.slider_steps(5.0, 0.1),
        value=Settings().uncertainty_penalty,
        debounce=True,
        show_value=True,
        label="MAD penalty (robust sigmas)",
    )
    return (penalty_slider,)


@app.cell
def _():
    tolerance_slider = mo.ui.slider(
        steps=app_support.slider_steps(0.3, 0.005),
        value=Settings().relative_tolerance,
        debounce=True,
        show_value=True,
        label="Tie tolerance (relative)",
    )
    return (tolerance_slider,)


@app.cell
def _():
    noise_slider = mo.ui.slider(
        steps=app_support.slider_steps(1.0, 0.01),
        value=Settings().max_objective_relative_mad,
        debounce=True,
        show_value=True,
        label="Noise threshold (relative MAD)",
    )
    return (noise_slider,)


@app.cell
def _():
    min_runs_slider = mo.ui.slider(
        start=1,
        stop=10,
        step=1,
        value=Settings().min_runs,
        debounce=True,
        show_value=True,
        label="Minimum runs per cell",
    )
    return (min_runs_slider,)


@app.cell
def _(sweep):
    acceptance_picker = mo.ui.dropdown(
        options=app_support.acceptance_options(sweep),
        value=app_support.NO_ACCEPTANCE,
        label="Acceptance metric",
    )
    return (acceptance_picker,)


@app.cell
def _():
    acceptance_noise_slider = mo.ui.slider(
        steps=app_support.slider_steps(1.0, 0.01),
        value=Settings().max_acceptance_relative_mad,
        debounce=True,
        show_value=True,
        label="Acceptance noise threshold (relative MAD)",
    )
    return (acceptance_noise_slider,)


@app.cell
def _():
    strict_checkbox = mo.ui.checkbox(
        value=Settings().strict_acceptance_stability,
        label="Unstable acceptance is an error (strict)",
    )
    return (strict_checkbox,)


@app.cell
def _():
    mixed_global_checkbox = mo.ui.checkbox(
        value=Settings().allow_mixed_global_k,
        label="Allow a global K that differs between runs (static-K sweeps)",
    )
    return (mixed_global_checkbox,)


@app.cell
def _():
    policy_picker = mo.ui.radio(
        options=app_support.POLICY_CHOICES,
        value=next(iter(app_support.POLICY_CHOICES)),
        label="Decision rule",
    )
    return (policy_picker,)


@app.cell
def _():
    confidence_slider = mo.ui.slider(
        steps=app_support.slider_steps(1.0, 0.01, start=0.5),
        value=Options().confidence,
        debounce=True,
        show_value=True,
        label="Confidence a pick needs (P(eps-good))",
    )
    return (confidence_slider,)


@app.cell
def _():
    interpolated_checkbox = mo.ui.checkbox(
        value=Options().interpolated_schedule,
        label="Deploy the interpolated schedule (switch between anchors)",
    )
    return (interpolated_checkbox,)


@app.cell
def _(
    acceptance_noise_slider,
    acceptance_picker,
    batch_size_var_input,
    confidence_slider,
    direction_picker,
    experiment_picker,
    interpolated_checkbox,
    k_var_picker,
    min_runs_slider,
    mixed_global_checkbox,
    noise_slider,
    objective_picker,
    penalty_slider,
    policy_picker,
    strict_checkbox,
    tolerance_slider,
):
    mo.sidebar(
        [
            mo.md("### Input"),
            experiment_picker,
            k_var_picker,
            batch_size_var_input,
            mixed_global_checkbox,
            mo.md("### Policy"),
            objective_picker,
            direction_picker,
            penalty_slider,
            tolerance_slider,
            noise_slider,
            min_runs_slider,
            mo.md("### Acceptance"),
            acceptance_picker,
            acceptance_noise_slider,
            strict_checkbox,
            mo.md("### Decision rule"),
            policy_picker,
            confidence_slider,
            interpolated_checkbox,
        ],
        width="22rem",
    )
    return


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
def _(options, settings, sweep):
    # The CLI's whole analysis: the seed policy, confidence, the rule, switch points, the plan.
    analysis = analyse(sweep, settings, options)
    result = analysis.result
    return analysis, result


@app.cell
def _(result):
    # Eager bytes, so that a static HTML export carries the file too.
    schedule_file = result.to_json_text().encode() if result.ok else None
    return (schedule_file,)


@app.cell
def _(result):
    _errors = app_support.problems_of(result, Severity.ERROR)
    mo.callout(
        mo.vstack(
            [
                mo.md(
                    f"**No schedule can be exported: {len(_errors)} problem(s).** The CLI"
                    " would refuse to write and exit 2 with these lines; the analysis below"
                    " shows everything that could still be computed."
                ),
                mo.Html(text.problem_list_html(_errors)),
            ]
        ),
        kind="danger",
    ) if _errors else mo.callout(
        mo.md("**No errors:** the CLI would write this schedule."), kind="success"
    )
    return


@app.cell
def _(result):
    _counts = app_support.health_counts(result)
    mo.vstack(
        [
            mo.md("## Data health"),
            mo.hstack(
                [
                    mo.stat(
                        _counts.runs_loaded,
                        label="runs loaded",
                        caption=f"from {_counts.files_read} files",
                    ),
                    mo.stat(
                        _counts.runs_excluded, label="runs excluded", target_direction="decrease"
                    ),
                    mo.stat(
                        _counts.cells_rejected,
                        label="cells rejected",
                        caption=f"of {_counts.cells} (batch size, K) cells",
                    ),
                    mo.stat(_counts.anchors, label="batch-size anchors"),
                    mo.stat(_counts.errors, label="errors", caption=f"{_counts.warnings} warnings"),
                ],
                widths="equal",
            ),
            mo.md(
                f"**K=0 baseline:** {app_support.baseline_text(result)}\n\n"
                f"**Global K:** {app_support.global_k_text(result)}"
            ),
        ]
    )
    return


@app.cell
def _(result):
    _excluded = tables.excluded_runs_table(result)
    _rejected = tables.rejected_cells_table(result)
    _notes = app_support.problems_of(result, Severity.WARNING) + app_support.problems_of(
        result, Severity.NOTE
    )
    mo.vstack(
        [
            mo.md("**K measured and kept per batch size**"),
            mo.ui.table(tables.k_sets_table(result), selection=None, pagination=False),
            mo.md("**Runs excluded, by reason**"),
            mo.ui.table(_excluded, selection=None) if _excluded.height else mo.md("None."),
            mo.md("**Cells rejected (too few runs, noise gate, acceptance)**"),
            mo.ui.table(_rejected, selection=None) if _rejected.height else mo.md("None."),
            mo.callout(mo.Html(text.problem_list_html(_notes)), kind="warn")
            if _notes
            else mo.md(""),
        ]
    )
    return


@app.cell
def _(experiment_picker, fields, options, settings):
    cli_arguments = app_support.cli_arguments(experiment_picker.value, fields, settings, options)
    return (cli_arguments,)


@app.cell
def _(cli_arguments, options, result, schedule_file):
    _download = (
        mo.download(
            schedule_file,
            filename=app_support.SCHEDULE_FILE,
            mimetype="application/json",
            label=f"Download {app_support.SCHEDULE_FILE}",
        )
        if schedule_file is not None
        else mo.callout(
            "Export disabled: the CLI would not write a file (see the errors above).", kind="warn"
        )
    )
    mo.vstack(
        [
            mo.md("## Decisions"),
            mo.md(app_support.rule_text(options)),
            mo.md(
                "**Schedule** (`num_speculative_tokens_per_batch_size`):\n\n"
                f"```json\n{app_support.schedule_text(result)}\n```\n\n"
                "**For `vllm serve`:**\n\n"
                f"```bash\n{text.speculative_config_line(result)}\n```"
            ),
            mo.ui.table(tables.decision_table(result), selection=None, pagination=False),
            _download,
            mo.md(
                "**The same on the command line:**\n\n"
                f"```bash\n{app_support.cli_command(cli_arguments)}\n```"
            ),
        ]
    )
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
def _(trtllm_file):
    mo.vstack(
        [
            mo.md(
                "**For TensorRT-LLM** (`draft_len_schedule`: each batch-size upper bound and"
                " its K; the same file as `tune-spec-k export --format trtllm`):\n\n"
                f"```json\n{trtllm_file.decode()}```"
            ),
            mo.download(
                trtllm_file,
                filename=export.TRTLLM_FILE,
                mimetype="application/json",
                label=f"Download {export.TRTLLM_FILE}",
            ),
        ]
    ) if trtllm_file is not None else mo.md("")
    return


@app.cell
def _(analysis, result):
    confidence_charts = (
        charts.confidence_charts(result, analysis.report) if analysis.report is not None else []
    )
    return (confidence_charts,)


@app.cell
def _(analysis, confidence_charts, result):
    _report = analysis.report
    _intro = mo.md(
        "## How sure is each pick?\n\n"
        "**P(eps-good)** is the probability that a K is within the tie tolerance of the best"
        " K at its batch size, from every K's runs with the noise pooled over the anchor"
        " (seeded, so the same sweep gives the same numbers). An anchor is **resolved** when"
        " some K reaches the confidence; otherwise its K is **provisional**."
    )
    if _report is None:
        _view = mo.callout(
            "No confidence analysis: the settings are invalid (see the errors above).", kind="warn"
        )
    else:
        _unresolved = app_support.unresolved_lines(result, _report)
        _table = tables.confidence_table(result, _report)
        _flagged = tables.flagged_runs_table(_report)
        _view = mo.vstack(
            [
                mo.callout(
                    mo.vstack(
                        [
                            mo.md(
                                f"**{len(_unresolved)} unresolved anchor(s):** their K is"
                                " provisional; the measurement plan below says what would"
                                " settle them."
                            ),
                            mo.Html(text.html_list(_unresolved)),
                        ]
                    ),
                    kind="warn",
                )
                if _unresolved
                else mo.callout(mo.md("**Every anchor is resolved.**"), kind="success"),
                mo.md(charts.confidence_caption(result, _report)),
                mo.hstack(confidence_charts, wrap=True, justify="start"),
                mo.ui.table(
                    _table,
                    selection=None,
                    pagination=False,
                    style_cell=app_support.highlight_rows(_table, "status", "unresolved"),
                ),
                mo.md(
                    "**Flagged runs** (far from their cell's median for this anchor's noise):"
                    " never dropped; each anchor is also decided without them."
                ),
                mo.ui.table(
                    _flagged,
                    selection=None,
                    style_cell=app_support.highlight_rows(_flagged, "the pick depends on it"),
                )
                if _flagged.height
                else mo.md("None."),
            ]
        )
    mo.vstack([_intro, _view])
    return


@app.cell
def _(analysis, options):
    rule_comparison = app_support.compare_rules(analysis, options)
    return (rule_comparison,)


@app.cell
def _(rule_comparison):
    rules_chart = (
        charts.rules_chart(rule_comparison.seed, rule_comparison.confident)
        if rule_comparison is not None
        else None
    )
    return (rules_chart,)


@app.cell
def _(rule_comparison, rules_chart):
    _intro = mo.md(
        "## The seed's rule against the confident rule\n\n"
        "The seed ranks each K by its median less a MAD penalty; the confident rule picks the"
        " smallest K whose P(eps-good) reaches the confidence. Rows where they differ are"
        " highlighted; the sidebar's **Decision rule** chooses which one is exported."
    )
    if rule_comparison is None:
        _view = mo.callout("No comparison: the settings are invalid.", kind="warn")
    else:
        _table = rule_comparison.table()
        _view = mo.vstack(
            [
                mo.md(rule_comparison.summary()),
                rules_chart,
                mo.ui.table(
                    _table,
                    selection=None,
                    pagination=False,
                    style_cell=app_support.highlight_rows(_table, "differs"),
                ),
            ]
        )
    mo.vstack([_intro, _view])
    return


@app.cell
def _(analysis):
    _switch_points = analysis.switch_points
    _intro = mo.md(
        "## Switch points between anchors\n\n"
        "vLLM switches K at the upper anchor. Interpolating each pick's speed-up over K=0 in"
        " log batch size says where between the anchors the switch pays off: the dashed line"
        " and the dotted rules of the **Schedule** chart."
    )
    if _switch_points is None:
        _view = mo.md("No switch points without a schedule (see the errors above).")
    else:
        _view = mo.vstack(
            [
                mo.Html(text.text_block_html(text.switch_point_lines(_switch_points))),
                mo.ui.table(tables.switch_table(_switch_points), selection=None, pagination=False)
                if _switch_points.switches.height
                else mo.md(""),
            ]
        )
    mo.vstack([_intro, _view])
    return


@app.cell
def _(analysis):
    _plan = analysis.plan
    _intro = mo.md("## What to measure next")
    if _plan is None:
        _view = mo.md("No measurement plan: the settings are invalid.")
    else:
        _reruns = tables.rerun_table(_plan)
        _new_anchors = tables.new_anchor_table(_plan)
        _view = mo.vstack(
            [
                mo.Html(text.text_block_html(text.measurement_plan_lines(_plan))),
                mo.md("**Reruns at unresolved anchors**"),
                mo.ui.table(_reruns, selection=None) if _reruns.height else mo.md("None."),
                mo.md("**New anchors where neighbouring picks disagree**"),
                mo.ui.table(_new_anchors, selection=None)
                if _new_anchors.height
                else mo.md("None."),
                mo.download(
                    _plan.to_json_text().encode(),
                    filename="measurement_plan.json",
                    mimetype="application/json",
                    label="Download measurement_plan.json (as --plan-json writes it)",
                ),
            ]
        )
    mo.vstack([_intro, _view])
    return


@app.cell
def _(analysis, result):
    headline_chart = charts.headline_chart(result, analysis.report)
    return (headline_chart,)


@app.cell
def _(result):
    objective_charts = charts.objective_charts(result)
    return (objective_charts,)


@app.cell
def _(analysis, result):
    schedule_chart = charts.schedule_chart(result, analysis.switch_points)
    return (schedule_chart,)


@app.cell
def _(result):
    acceptance_charts = charts.acceptance_charts(result)
    return (acceptance_charts,)


@app.cell
def _(acceptance_charts, headline_chart, objective_charts, result, schedule_chart):
    # Small charts of a fixed width wrap to the page: nothing is clipped, one column on a phone.
    _objective = mo.vstack(
        [
            mo.md(charts.objective_caption(result)),
            mo.hstack(objective_charts, wrap=True, justify="start"),
        ]
    )
    _acceptance = (
        mo.vstack(
            [
                mo.md(charts.acceptance_caption(result)),
                mo.hstack(acceptance_charts, wrap=True, justify="start"),
            ]
        )
        if acceptance_charts
        else mo.callout("The sweep has no acceptance field to plot.", kind="neutral")
    )
    mo.vstack(
        [
            mo.md("## Charts"),
            mo.ui.tabs(
                {
                    "Speed-up over K=0": headline_chart,
                    "Objective vs K": _objective,
                    "Schedule": schedule_chart,
                    "Acceptance vs K": _acceptance,
                },
            ),
        ]
    )
    return


@app.cell
def _(
    acceptance_charts,
    confidence_charts,
    headline_chart,
    objective_charts,
    rules_chart,
    schedule_chart,
):
    # vl-convert takes about a second per PNG: images are rendered when clicked.
    _images = [
        mo.download(
            getattr(_chart, _suffix),
            filename=f"{_name}.{_suffix}",
            mimetype=_mimetype,
            label=f"{_name}.{_suffix}",
        )
        for _name, _chart in (
            ("speed_up", headline_chart),
            ("objective_vs_k", charts.image_grid(objective_charts) if objective_charts else None),
            ("schedule", schedule_chart),
            (
                "acceptance_vs_k",
                charts.image_grid(acceptance_charts) if acceptance_charts else None,
            ),
            ("p_eps_good", charts.image_grid(confidence_charts) if confidence_charts else None),
            ("seed_vs_confident", rules_chart),
        )
        if _chart is not None
        for _suffix, _mimetype in (("png", "image/png"), ("svg", "image/svg+xml"))
    ]
    mo.vstack([mo.md("**Chart images**"), mo.hstack(_images, justify="start", wrap=True)])
    return


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
    # The other experiment is tuned with the same settings and rule, as `tune-spec-k diff`.
    comparison, comparison_error = app_support.compare_with(
        str(experiment_picker.value),
        analysis,
        compare_picker.value,
        app_support.diff_settings(settings, options, fields),
        root,
    )
    return comparison, comparison_error


@app.cell
def _(compare_picker, comparison, comparison_error):
    _intro = mo.md(
        "## Compare with another experiment\n\n"
        "After a hardware or vLLM change: the other experiment (B) is tuned with the same"
        " settings and rule as this one (A). Per batch size, the K each schedule runs, the"
        " objective at each pick with B against A and its interval, and for a changed K what"
        " the other K loses in each sweep, as `tune-spec-k diff A B` prints them."
    )
    if comparison is not None:
        _view = mo.vstack(
            [
                mo.callout(
                    mo.md(f"**{text.diff_lines(comparison)[-1]}**"),
                    kind="warn" if comparison.material else "success",
                ),
                charts.comparison_chart(comparison),
                mo.ui.table(tables.comparison_table(comparison), selection=None, pagination=False),
            ]
        )
    elif comparison_error is not None:
        _view = mo.callout(comparison_error, kind="warn")
    else:
        _view = mo.md("Pick an experiment to compare with.")
    mo.vstack([_intro, compare_picker, _view])
    return


if __name__ == "__main__":
    app.run()
