"""The layout of notebooks/tune_spec_k.py, with ``mo`` only: the answer, the sections below it,
where the experiments were read, and the sidebar's parts.

Functions here, not ``@app.function`` cells of the notebook: marimo's run mode keeps a page
hidden for about 30 ms per cell (up to 2 s) while it first loads, so every cell the notebook
does not need costs its reader time before the answer shows. The notebook's setup cell imports
this module from the notebook's own folder (marimo puts that folder on ``sys.path``).
"""

from __future__ import annotations

import functools
import html
import json

import marimo as mo

from lib.app import context as app_context
from lib.app import guide
from lib.app import support as app_support
from lib.present import tables, text
from lib.present.charts.base import image_grid
from lib.present.charts.comparison import comparison_chart
from lib.present.charts.confidence import confidence_caption, confidence_charts
from lib.present.charts.headline import headline_chart
from lib.present.charts.heatmap import context_heatmap
from lib.present.charts.rules import rules_chart
from lib.present.charts.schedule import schedule_chart
from lib.present.charts.small_multiples import (
    acceptance_caption,
    acceptance_charts,
    objective_caption,
    objective_charts,
)
from lib.problems import Severity


def with_help(element: object, key: str) -> mo.Html:
    """``element`` with its control's help shown where the pointer rests on it."""
    return mo.Html(f'<div title="{html.escape(guide.CONTROL_HELP[key])}">{element}</div>')


def labelled(key: str) -> str:
    return guide.CONTROL_LABELS[key]


def setting_slider(key: str, steps: list, value: float) -> mo.ui.slider:
    """The slider of the setting ``key``: it sends its value when released, not while dragged."""
    return mo.ui.slider(
        steps=steps, value=value, debounce=True, show_value=True, label=labelled(key)
    )


def sidebar_part(*items: str | tuple[object, str]) -> mo.Html:
    """One part of the sidebar: each ``str`` a heading, each ``(element, key)`` a control with
    its help.

    The cell that defines a group of controls shows their part: a cell that defines a control
    does not run again when the control's value changes, so a slider moved sends nothing to the
    sidebar (a cell showing the whole sidebar would run again, and send it all again, on every
    change). Controls share a cell, and a part, when the same thing builds them again: the
    experiments, the sweep, the state a one-click fix sets; the K field has a cell of its own,
    since building it again reads the sweep again. marimo shows the parts in the order of their
    cells, a part sent again in its place. These cells come last in the file: each leaves an
    empty slot where it stands in the page. Each stops when the folder holds no experiment: no
    sidebar then, only the page's explanation.
    """
    shown = [mo.md(f"### {item}") if isinstance(item, str) else with_help(*item) for item in items]
    # In a box of its own: mo.sidebar stretches what it shows to fill the column, and parts
    # would spread out over a tall window. Every part sets the width: marimo takes the last's.
    part = mo.vstack(shown).style(margin_bottom="0.5rem")
    return mo.sidebar(part, width="22rem")


def verdict_view(verdict, problem_groups: list) -> mo.Html:
    """The verdict the CLI prints (lib/deploy/verdict.py): its state, then each reason with
    its fix; errors in the page's words (the largest group of errors, with the sidebar control
    that fixes it), as the CLI names them with its flags."""
    if verdict.state == "cannot-tune":
        errors = [group for group in problem_groups if group.severity is Severity.ERROR]
        if errors:
            more = len(errors) - 1
            extra = f" ({more} more kind{'s' if more != 1 else ''} of error below)" if more else ""
            return mo.md(f"**{verdict.title}:** {html.escape(errors[0].sentence)}{extra}")
    if not verdict.reasons:
        return mo.md(
            f"**{verdict.title}:** every pick is resolved, and nothing between the anchors,"
            " at the capture ceiling or in the data calls it into doubt."
        )
    items = "".join(
        f"<li>{html.escape(reason.message)}. <em>Fix:</em> {html.escape(reason.fix)}.</li>"
        for reason in verdict.reasons
    )
    count = len(verdict.reasons)
    return mo.Html(
        f"<p><strong>{verdict.title}</strong> ({count} reason{'s' if count != 1 else ''}):</p>"
        f'<ul style="margin: 0">{items}</ul>'
    )


def answer_view(
    name: str,
    verdict,
    problem_groups: list,
    fix_buttons: mo.ui.dictionary,
    result,
    schedule_file: bytes | None,
    point_label: str | None,
    headline_chart,
    traffic_chart=None,
) -> mo.Html:
    """The answer, top to bottom: the experiment's full name, the verdict with the fixes of the
    two largest error groups (the largest is the reason), the schedule (at ``point_label``, the
    context point shown, if any), its `vllm serve` config and the download of
    ``schedule_file`` (only when the CLI writes that file), the headline chart, and what the
    verdict assumes about server starts; under the chart, the traffic mix the schedule was
    weighed on with its three answers (``traffic_chart``, None: not weighed), and which mix
    the verdict judged on."""
    kind = {"ready": "success", "provisional": "warn", "cannot-tune": "danger"}[verdict.state]
    fixes = [
        fix_buttons[group.rule]
        for group in problem_groups[:2]
        if group.severity is Severity.ERROR and group.rule in fix_buttons.elements
    ]
    page = [
        mo.md(f"# tune-spec-k · {html.escape(name)}").style({"overflow-wrap": "anywhere"}),
        mo.callout(
            mo.vstack(
                [
                    verdict_view(verdict, problem_groups),
                    mo.hstack(fixes, justify="start", wrap=True) if fixes else mo.md(""),
                ]
            ),
            kind=kind,
        ),
    ]
    if schedule_file is not None and result.ok:
        where = "" if point_label is None else f" at {point_label}"
        page += [
            mo.md(
                f"**Schedule{where}** (`num_speculative_tokens_per_batch_size`):"
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
        capture = app_support.capture_lines(result)
        if capture:
            page.append(
                mo.callout(
                    mo.md("\n".join(f"- {html.escape(line)}" for line in capture)), kind="warn"
                )
            )
    page.append(headline_chart)
    if traffic_chart is not None:
        page.append(traffic_chart)
    if verdict.assumption is not None:
        # What the verdict's "resolved" rests on, as the CLI's "assumes:" line; under the chart,
        # so that the answer stays on the first screen.
        page.append(mo.md(f"*The verdict assumes:* {html.escape(verdict.assumption)}."))
    if verdict.traffic is not None:
        page.append(mo.md(f"*Traffic:* {html.escape(verdict.traffic)}."))
    return mo.vstack(page)


def sections_accordion(
    problem_groups: list,
    fix_buttons: mo.ui.dictionary,
    analysis,
    options,
    cli_arguments: list[str],
    rule_comparison,
    trtllm_file: bytes | None,
    rounds=None,
) -> mo.Html:
    """The sections below the answer, each built when it is opened (a function), and again
    only while it is open; ``rounds`` (an experiment of `tune-spec-k run`) adds its rounds."""
    problem_count = sum(len(group.problems) for group in problem_groups)
    extra = (
        {}
        if rounds is None
        else {"Rounds (tune-spec-k run)": functools.partial(rounds_section, rounds)}
    )
    return mo.accordion(
        {
            **extra,
            f"Problems ({problem_count})": functools.partial(
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


def no_experiment_view(refusal: str | None, picker) -> mo.Html:
    """The top of the page while no experiment is chosen: why (a refused `?sweeps=`, or no
    choice made) and the experiment picker, and nothing else: no verdict, schedule or config
    of an experiment the query did not name."""
    why = refusal or "No experiment chosen."
    return mo.vstack(
        [
            mo.md("# tune-spec-k"),
            mo.callout(
                mo.vstack([mo.md(html.escape(why)), mo.md("**Choose an experiment:**"), picker]),
                kind="danger" if refusal else "info",
            ),
        ]
    )


def reading_notes(
    root, base_folder, experiments: dict, query_refusal: str | None, refusals: list, browser
) -> mo.Html:
    """Where the experiments were read from (the folder, the root), what was refused and why,
    and, when no experiment was found, what was expected; in `marimo edit`, the folder
    browser."""
    notes = []
    if not experiments:
        notes.append(
            mo.callout(
                mo.Html(
                    f"No experiment in {app_support.path_html(base_folder)}: expected"
                    " <code>summary.json</code> or <code>run=N.json</code> files (the output of"
                    " <code>vllm bench sweep serve</code>) in it or in its subfolders."
                ),
                kind="danger",
            )
        )
    notes.append(
        mo.Html(
            f"Reading experiments in {app_support.path_html(base_folder)}"
            f" (root {app_support.path_html(root)})"
        )
    )
    if query_refusal:
        notes.append(mo.callout(query_refusal, kind="warn"))
    if refusals:
        notes.append(
            mo.callout(
                mo.vstack(
                    [
                        mo.md("**Not listed:** everything the app reads must lie inside the root."),
                        mo.Html(text.html_list(refusals)),
                    ]
                ),
                kind="warn",
            )
        )
    if mo.app_meta().mode == "edit":
        notes.append(mo.accordion({"Browse folders": browser}))
    return mo.vstack(notes)


def context_section(grid, mix, tolerance: float, format_picker, point_picker) -> mo.Html:
    """The (batch x context) answer: the heatmap, the chosen format's config and its loss,
    every format's download (the CLI's `export -o` files), the context picker."""
    batch_only, losses, mix_problems = app_context.heatmap_losses(grid, mix)
    heatmap = context_heatmap(grid.grid(), batch_only, losses, 100 * tolerance)
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


def fix_action(fix: guide.Fix, set_k_var, set_fixable, fixable: dict) -> mo.Html:
    """The button that applies ``fix`` to its sidebar control. The K field has a state of its
    own; the other fixable controls are built from one state, which the fix sets to their
    values now (``fixable``) with its own, so the controls built again keep the values a person
    gave them."""

    def apply(_: object) -> None:
        if fix.control == "k_var":
            set_k_var(fix.value)
        else:
            set_fixable({**fixable, fix.control: fix.value})

    return mo.ui.button(label=html.escape(fix.label), kind="warn", on_click=apply)


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
            mo.md(app_support.direction_text(result.settings)),
        ]
    )


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
    cells = tables.cell_table(report)
    flagged = tables.flagged_runs_table(report)
    basis = report.servers.statement()
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
            mo.md(f"*Assumes:* {basis}.") if basis else mo.md(""),
            mo.md(confidence_caption(result, report)),
            mo.hstack(confidence_charts(result, report), wrap=True, justify="start"),
            mo.ui.table(
                table,
                selection=None,
                pagination=False,
                style_cell=app_support.highlight_rows(table, "status", "unresolved"),
            ),
            mo.md(
                "**Cells:** the runs of each (batch size, K) and the server starts they came"
                " from; a contender's runs and servers needed settle it."
            ),
            mo.ui.table(cells, selection=None, pagination=False),
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


def rounds_section(rounds) -> mo.Html:
    """The rounds of a `tune-spec-k run` experiment (lib.app.support.experiment_rounds): why
    it stopped and a line per round, then P(eps-good) of each anchor's pick by round."""
    if rounds.error is not None:
        return mo.callout(mo.Html(text.text_block_html(rounds.error.splitlines())), kind="warn")
    return mo.vstack(
        [
            mo.Html(text.text_block_html(list(rounds.lines))),
            mo.md("**Each anchor's pick and its P(eps-good), by round**"),
            mo.ui.table(rounds.table, selection=None),
        ]
    )


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
            rules_chart(comparison.seed, comparison.confident),
            mo.ui.table(
                table,
                selection=None,
                pagination=False,
                style_cell=app_support.highlight_rows(table, "differs"),
            ),
        ]
    )


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
            schedule_chart(analysis.result, switch_points),
            mo.Html(text.text_block_html(text.switch_point_lines(switch_points))),
            mo.ui.table(tables.switch_table(switch_points), selection=None, pagination=False)
            if switch_points.switches.height
            else mo.md(""),
        ]
    )


def objective_section(analysis) -> mo.Html:
    # Small charts of a fixed width wrap to the page: nothing is clipped, one column on a phone.
    result = analysis.result
    return mo.vstack(
        [
            mo.md(objective_caption(result)),
            mo.hstack(objective_charts(result), wrap=True, justify="start"),
        ]
    )


def acceptance_section(analysis) -> mo.Html:
    result = analysis.result
    shown = acceptance_charts(result)
    if not shown:
        return mo.callout(acceptance_caption(result), kind="neutral")
    return mo.vstack(
        [mo.md(acceptance_caption(result)), mo.hstack(shown, wrap=True, justify="start")]
    )


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
                comparison_chart(comparison),
                mo.ui.table(tables.comparison_table(comparison), selection=None, pagination=False),
            ]
        )
    elif error is not None:
        view = mo.callout(error, kind="warn")
    else:
        view = mo.md("Pick an experiment to compare with.")
    return mo.vstack([intro, with_help(picker, "compare"), view])


def downloads_section(analysis, engine_files) -> mo.Html:
    if engine_files is None:
        return mo.callout("No files while the result has errors (see Problems).", kind="warn")
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
            *(_engine_file(download) for download in engine_files),
            mo.md("**Chart images** (rendered when clicked)"),
            mo.hstack(images, justify="start", wrap=True),
        ]
    )


def _engine_file(download) -> mo.Html:
    """One engine format's file: what it is, its text and download, what the export says of
    it (the same file and lines as `tune-spec-k export RESULT --format F`)."""
    title = f"**{download.label}** (`tune-spec-k export RESULT --format {download.format}`)"
    if download.text is None:
        reasons = "; ".join(problem.message for problem in download.problems)
        return mo.md(f"{title}: none. {html.escape(reasons)}")
    remarks = "\n".join(f"- {html.escape(line)}" for line in download.lines[1:])
    return mo.vstack(
        [
            mo.md(f"{title}:\n\n```json\n{download.text}```\n\n{remarks}"),
            mo.download(
                download.text.encode(),
                filename=download.filename,
                mimetype="application/json",
                label=f"Download {download.filename}",
            ),
        ]
    )


def _image(name: str, suffix: str, analysis) -> bytes:
    result, report = analysis.result, analysis.report
    chart = {
        "speed_up": lambda: headline_chart(result, report),
        "objective_vs_k": lambda: image_grid(objective_charts(result)),
        "schedule": lambda: schedule_chart(result, analysis.switch_points),
        "p_eps_good": lambda: image_grid(confidence_charts(result, report)),
    }[name]()
    return getattr(chart, suffix)()
