"""Where a first load's time goes in the page: the dashboard against the one-chart notebook.

    uv run python bench/profile_app_load.py [--experiment noisy] [--loads 3] [--top 25]

What `bench_app_browser.py` times as phases (to the websocket, the kernel, the drawing), this
breaks down by what runs: each notebook (the dashboard, and `bench_app_browser`'s one-chart
notebook drawing the same headline chart) is loaded fresh ``--loads`` times, interleaved, on
one `marimo run`, each load under Chromium's sampling profiler (CDP ``Profiler``, 200 us) until
the headline chart (``.vega-embed``) is visible. Printed per notebook: the loads' seconds (the
profiler slows them: compare the two, not the figures of `bench_app_browser`), the JavaScript
self time per load by function and script, the websocket messages the kernel sent by op (count
and bytes) and the page's marimo elements once it is still; then the functions the dashboard
spends more time in than the one-chart notebook: what the notebook adds to marimo's own cost in
the frontend. ``(program)`` is Chromium's native work (parsing, style, layout); the script
names are marimo's bundle chunks, minified, so they change with marimo's version.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_app_browser import CHART_NOTEBOOK, CHROMIUM, NOTEBOOK, SAMPLES, VIEWPORT, _url
from playwright.sync_api import Browser, Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from marimo_server import serving  # noqa: E402

SAMPLING_US = 200
IDLE = ("(idle)",)
# The page's marimo elements, counted once it has not changed for a while.
_ELEMENTS = """() => {
  const counts = {};
  for (const element of document.querySelectorAll('*')) {
    if (element.tagName.startsWith('MARIMO-')) {
      counts[element.tagName] = (counts[element.tagName] || 0) + 1;
    }
  }
  return counts;
}"""


@dataclass(frozen=True)
class Profiled:
    """One profiled first load: ``seconds`` to the chart, JavaScript self ``ms`` by function,
    and the websocket's messages by op (count, bytes)."""

    seconds: float
    ms: collections.Counter[str]
    messages: collections.Counter[str]
    message_bytes: collections.Counter[str]


def _self_ms(profile: dict) -> collections.Counter[str]:
    """Self time (ms) of each function of a CDP profile, keyed ``name script:line``."""
    frames = {node["id"]: node["callFrame"] for node in profile["nodes"]}
    spent: collections.Counter[str] = collections.Counter()
    for node, delta_us in zip(profile["samples"], profile["timeDeltas"], strict=True):
        frame = frames[node]
        script = frame["url"].rsplit("/", 1)[-1]
        spent[f"{frame['functionName'] or '(anonymous)'} {script}:{frame['lineNumber']}"] += (
            delta_us / 1000
        )
    return spent


def _total(loads: list[Profiled]) -> collections.Counter[str]:
    """The self time (ms) of each function over ``loads``, summed."""
    return sum((load.ms for load in loads), collections.Counter())


def _op(payload: str | bytes) -> str:
    text = payload if isinstance(payload, str) else payload.decode(errors="replace")
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(text).get("op", "?"))
    return "?"


def profiled_load(browser: Browser, url: str) -> Profiled:
    """A fresh page on ``url`` until its first chart is visible, under the profiler."""
    page = browser.new_page(viewport=VIEWPORT)
    messages: collections.Counter[str] = collections.Counter()
    message_bytes: collections.Counter[str] = collections.Counter()

    def on_frame(payload: str | bytes) -> None:
        op = _op(payload)
        messages[op] += 1
        message_bytes[op] += len(payload)

    page.on("websocket", lambda socket: socket.on("framereceived", on_frame))
    session = page.context.new_cdp_session(page)
    session.send("Profiler.enable")
    session.send("Profiler.setSamplingInterval", {"interval": SAMPLING_US})
    session.send("Profiler.start")
    start = time.perf_counter()
    _open_until_chart(page, url)
    seconds = time.perf_counter() - start
    profile = session.send("Profiler.stop")["profile"]
    session.detach()
    page.close()
    return Profiled(seconds, _self_ms(profile), messages, message_bytes)


def _open_until_chart(page: Page, url: str) -> None:
    page.goto(url)
    page.locator(".vega-embed").first.wait_for(timeout=120_000)


def elements(browser: Browser, url: str) -> dict[str, int]:
    """The marimo elements of ``url``'s page once loaded and still (2 s after the chart)."""
    page = browser.new_page(viewport=VIEWPORT)
    _open_until_chart(page, url)
    time.sleep(2)
    counts: dict[str, int] = page.evaluate(_ELEMENTS)
    page.close()
    return counts


def _report(name: str, loads: list[Profiled], counts: dict[str, int], top: int) -> None:
    total = _total(loads)
    busy = sum(ms for key, ms in total.items() if not key.startswith(IDLE)) / len(loads)
    seconds = ", ".join(f"{load.seconds:.2f}" for load in loads)
    print(f"\n{name}: loads {seconds} s; JavaScript and native work {busy:.0f} ms per load")
    for key, ms in total.most_common(top + 1):
        if not key.startswith(IDLE):
            print(f"  {ms / len(loads):8.1f} ms  {key}")
    first = loads[0]
    sent = ", ".join(
        f"{op} {first.messages[op]} ({first.message_bytes[op]:,} B)" for op in first.messages
    )
    print(f"  messages of the first load: {sum(first.messages.values())}: {sent}")
    shown = ", ".join(f"{tag.lower()} {count}" for tag, count in sorted(counts.items()))
    print(f"  marimo elements in the page: {sum(counts.values())}: {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--experiment", default="noisy", help="a folder of data/sample_sweeps")
    parser.add_argument("--loads", type=int, default=3, help="profiled loads of each notebook")
    parser.add_argument("--top", type=int, default=25, help="functions shown per list")
    args = parser.parse_args()
    if args.loads < 1:
        parser.error(f"--loads {args.loads}: at least 1")
    if not (SAMPLES / args.experiment).is_dir():
        parser.error(f"--experiment {args.experiment!r}: no such folder in {SAMPLES}")
    names = ("dashboard", "one-chart notebook")
    profiled: dict[str, list[Profiled]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        chart = scratch / "chart.py"
        chart.write_text(CHART_NOTEBOOK)
        server = stack.enter_context(
            serving(NOTEBOOK, scratch / "server.log", "--sweeps", str(SAMPLES), others=[chart])
        )
        browser = stack.enter_context(sync_playwright()).chromium.launch(executable_path=CHROMIUM)
        stack.callback(browser.close)
        urls = {
            names[0]: _url(server, NOTEBOOK, args.experiment),
            names[1]: _url(server, chart, str(SAMPLES / args.experiment)),
        }
        counts = {name: elements(browser, url) for name, url in urls.items()}  # warms the server
        for round_number in range(args.loads):
            for name in names[:: 1 if round_number % 2 else -1]:
                profiled[name].append(profiled_load(browser, urls[name]))
    for name in names:
        _report(name, profiled[name], counts[name], args.top)
    dashboard, one_chart = (_total(profiled[name]) for name in names)
    extra = collections.Counter(
        {
            key: (ms - one_chart[key]) / args.loads
            for key, ms in dashboard.items()
            if not key.startswith(IDLE)
        }
    )
    print(f"\nthe dashboard's extra over the one-chart notebook, ms per load (top {args.top}):")
    for key, ms in extra.most_common(args.top):
        print(f"  {ms:8.1f} ms  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
