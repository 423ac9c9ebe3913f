"""Every chart of the dashboard renders in Chromium without a console warning or error.

One `marimo run` per folder of experiments: the bundled samples (``data/sample_sweeps``) and the
real sweeps beside the repository (``../shared/data/real``, read in place, never written). Each
experiment is opened with ``?sweeps=`` in a fresh page; the test opens every section that holds
charts and waits until they have drawn, and fails on any console warning or error (Vega logs
its warnings there: "Infinite extent for field ...", "Conflicting legend property ...") and on
any uncaught page error. A second test draws the charts in marimo's dark theme and checks they
follow it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from paths import REAL_DATA, SAMPLE_SWEEPS

from lib.app import support as app_support

LOAD_TIMEOUT_MS = 60_000
#: The charts have drawn when the number of chart canvases stays the same this long.
SETTLED_MS = 500
#: The sections below the answer that hold charts (each built when opened).
CHART_SECTIONS = (
    "How sure",
    "Rules compared",
    "Switch points",
    "Objective per batch size",
    "Acceptance",
)
CANVASES = ".vega-embed canvas"

#: Console messages that are not the app's, each with the evidence (marimo 0.25.2). Nothing
#: else is allowed.
NOT_OURS = (
    # marimo's own page (marimo/_static/index.html) preloads two background images,
    # `<link rel="preload" href="./assets/gradient-*.png" as="image">` and `noise-*.png`, that
    # its run mode does not paint; Chromium says so a few seconds after the load.
    re.compile(
        r"The resource \S+/assets/(gradient|noise)-\w+\.png was preloaded using link preload"
        r" but not used"
    ),
)


def _experiments(root: Path, folder: Path | None = None) -> list[tuple[Path, str]]:
    """Every experiment below ``root`` as the app finds it (a folder of experiments is opened
    in turn), with its ``?sweeps=`` value."""
    if not root.is_dir():
        return []
    found, _ = app_support.find_experiments(folder or root, root)
    if folder is not None and list(found.values()) == [folder]:
        return [(root, folder.relative_to(root).as_posix())]
    return [pair for path in found.values() for pair in _experiments(root, path)]


EXPERIMENTS = _experiments(SAMPLE_SWEEPS) + _experiments(REAL_DATA)


@pytest.fixture(scope="module")
def servers(start_server: Callable[..., Any]) -> dict[Path, Any]:
    """One server per folder of experiments, for the whole module."""
    return {root: start_server(root) for root in (SAMPLE_SWEEPS, REAL_DATA) if root.is_dir()}


def _collect_console(page: Any) -> list[str]:
    """The page's console warnings and errors and its uncaught errors, as they come."""
    messages: list[str] = []
    page.on(
        "console",
        lambda message: (
            messages.append(f"{message.type}: {message.text}")
            if message.type in ("warning", "error")
            else None
        ),
    )
    page.on("pageerror", lambda error: messages.append(f"page error: {error}"))
    return messages


def _wait_for_charts(page: Any) -> None:
    """Until the number of drawn charts stops changing (Vega logs its warnings while it builds
    a view, before it draws)."""
    drawn = page.locator(CANVASES).count()
    while True:
        page.wait_for_timeout(SETTLED_MS)
        if (now := page.locator(CANVASES).count()) == drawn:
            return
        drawn = now


def _open_section(page: Any, name: str) -> None:
    """Open a section below the answer unless it is open (a click on an open one closes it)."""
    header = page.get_by_role("button", name=name).first
    if header.get_attribute("aria-expanded") != "true":
        header.click()


def _open_every_chart(page: Any, url: str | None = None) -> None:
    """The headline chart, then every section that holds charts opened."""
    if url is not None:
        page.goto(url)
        page.get_by_role("heading", name="tune-spec-k ·").wait_for(timeout=LOAD_TIMEOUT_MS)
    _wait_for_charts(page)
    for section in CHART_SECTIONS:
        _open_section(page, section)
    _wait_for_charts(page)


def _ours(messages: list[str]) -> list[str]:
    return [text for text in messages if not any(known.search(text) for known in NOT_OURS)]


@pytest.mark.parametrize(
    ("root", "sweeps"),
    EXPERIMENTS,
    ids=[f"{root.name}/{sweeps}" for root, sweeps in EXPERIMENTS],
)
def test_charts_render_without_console_warnings(
    page: Any, servers: dict[Path, Any], root: Path, sweeps: str
) -> None:
    messages = _collect_console(page)
    _open_every_chart(page, f"{servers[root].url}/?sweeps={sweeps}")
    assert page.locator(CANVASES).count() >= 1
    assert _ours(messages) == []


def test_the_real_experiments_are_covered() -> None:
    if not REAL_DATA.is_dir():
        pytest.skip(f"{REAL_DATA} is absent: the real sweeps live beside the repository")
    assert len(_experiments(REAL_DATA)) >= 2


def test_charts_redrawn_after_changes_stay_quiet(page: Any, servers: dict[Path, Any]) -> None:
    """Redrawn charts too: a comparison with another experiment, then the noise threshold at
    0, which rejects every cell (no schedule, no baseline, no confidence analysis). The page
    opens on the root of the samples, so that the others can be compared with."""
    messages = _collect_console(page)
    _open_every_chart(page, servers[SAMPLE_SWEEPS].url)
    _open_section(page, "Compare with another experiment")
    page.get_by_label("Compare with", exact=True).select_option(label="sonnet-like")
    page.get_by_text("Pick an experiment to compare with.").first.wait_for(
        state="detached", timeout=LOAD_TIMEOUT_MS
    )
    _wait_for_charts(page)
    slider = page.get_by_role("slider", name="Noise threshold (relative MAD)", exact=True)
    slider.focus()
    page.keyboard.press("Home")
    # Without a schedule there is nothing to download.
    download = page.get_by_text(f"Download {app_support.SCHEDULE_FILE}")
    download.wait_for(state="detached", timeout=LOAD_TIMEOUT_MS)
    _open_every_chart(page)
    assert _ours(messages) == []


#: Per pixel of a canvas: how many are drawn, their mean luminance, and the shares of light
#: (luminance > 0.75) and dark (< 0.15) ones.
_INK = """canvas => {
    const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    let drawn = 0, sum = 0, light = 0, dark = 0;
    for (let i = 0; i < pixels.length; i += 4) {
        if (pixels[i + 3] === 0) continue;
        const l = (0.2126 * pixels[i] + 0.7152 * pixels[i + 1] + 0.0722 * pixels[i + 2]) / 255;
        drawn++; sum += l;
        if (l > 0.75) light++;
        if (l < 0.15) dark++;
    }
    return {drawn, mean: sum / drawn, light: light / drawn, dark: dark / drawn};
}"""


@pytest.fixture(scope="module")
def dark_server(start_server: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The samples served with marimo's dark theme (the user configuration's display.theme)."""
    config_home = tmp_path_factory.mktemp("xdg-config")
    (config_home / "marimo").mkdir()
    (config_home / "marimo" / "marimo.toml").write_text('[display]\ntheme = "dark"\n')
    return start_server(SAMPLE_SWEEPS, {"XDG_CONFIG_HOME": str(config_home)})


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_charts_follow_marimo_s_theme(
    page: Any, servers: dict[Path, Any], dark_server: Any, theme: str
) -> None:
    # Vega's dark theme: a dark background with light text and axes; the default: the other
    # way round. A chart that fixed its own background or black text would fail one of them.
    server = dark_server if theme == "dark" else servers[SAMPLE_SWEEPS]
    _open_every_chart(page, f"{server.url}/?sweeps=sonnet-like")
    # The first chart on the page is the headline chart.
    ink = page.locator(CANVASES).first.evaluate(_INK)
    # Text and axes are thin: a few thousandths of the pixels (measured on the samples: 1 %
    # light ink and no black pixel in dark mode, 0.3 % dark ink in light mode).
    if theme == "dark":
        assert ink["mean"] < 0.35 and ink["light"] > 0.002 and ink["dark"] < 0.0005, ink
    else:
        assert ink["mean"] > 0.8 and ink["dark"] > 0.002, ink
