"""The traffic mix under the headline chart, in a real browser (issue 42): the app started with
``-- --traffic FILE`` shows the mix as a histogram right under the headline chart, with the
three answers the CLI prints for the same folder and file, and the verdict's reason that the
mix makes. Expected values come from the CLI run in-process (its result file's ``traffic`` and
``verdict``), never written here. One server, one page load.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import marimo_server
import pytest
from paths import NOTEBOOK, SAMPLE_SWEEPS

from lib.cli.common import EXIT_OK
from lib.cli.main import main

LOAD_TIMEOUT_MS = 60_000
HEADLINE_TITLE = "Speed-up over K=0 by batch size"
TRAFFIC_TITLE = "The mix of batch sizes: your traffic"
#: Mostly batch 1 (sonnet-like runs K=7 there, its static best), some at 8 (between the anchors
#: 1 and 64) and above its largest anchor 256.
TRAFFIC = "batch_size,weight\n0,1\n1,6\n8,2\n300,1\n"


@pytest.fixture(scope="module")
def traffic_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("served") / "traffic"
    root.mkdir()
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", root / "sonnet-like")
    traffic = root.parent / "traffic.csv"
    traffic.write_text(TRAFFIC)
    log = root.parent / "marimo.log"
    with marimo_server.serving(
        NOTEBOOK, log, "--sweeps", str(root), "--traffic", str(traffic)
    ) as url:
        yield url, traffic


def _specs(page: Any) -> list[dict[str, Any]]:
    """Every Vega-Lite specification on the page, top to bottom."""
    found = []
    for renderer in page.locator("marimo-mime-renderer").all():
        if "vegalite" in (renderer.get_attribute("data-mime") or ""):
            found.append(json.loads(json.loads(renderer.get_attribute("data-data"))))
    return found


def test_the_mix_and_the_three_answers_show_under_the_headline(
    page: Any, traffic_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, traffic = traffic_server
    folder = traffic.parent / "traffic" / "sonnet-like"
    output = tmp_path / "result.json"
    assert main([str(folder), "--traffic", str(traffic), "--output-json", str(output)]) == EXIT_OK
    written = json.loads(output.read_text())
    expected, verdict = written["traffic"], written["verdict"]

    page.goto(f"{url}/?sweeps=sonnet-like")
    # The charts' titles are drawn, not text: wait for the specification to arrive.
    page.locator(".vega-embed").nth(1).wait_for(timeout=LOAD_TIMEOUT_MS)
    specs = _specs(page)
    titles = [spec.get("title", {}).get("text") for spec in specs]
    # The traffic chart is the next chart after the headline's.
    assert titles[titles.index(HEADLINE_TITLE) + 1] == TRAFFIC_TITLE
    chart = specs[titles.index(TRAFFIC_TITLE)]
    bars = {row["batch_size"]: row["share_percent"] for row in chart["data"]["values"]}
    shares = dict(zip(expected["mix"]["batch_sizes"], expected["mix"]["weights"], strict=True))
    assert bars == pytest.approx({b: 100 * w for b, w in shares.items()}, abs=1e-4)
    # The three answers, as the CLI's traffic block has them.
    subtitle = " ".join(chart["title"]["subtitle"])
    for arm in ("best_static_k", "k0"):
        low, high = expected[arm]["interval_percent"]
        assert f"{expected[arm]['schedule_gain_percent']:+.1f}%" in subtitle
        assert f"[{low:+.1f}, {high:+.1f}]" in subtitle
    # The verdict's reasons the mix makes are on the first screen, word for word.
    for reason in verdict["reasons"]:
        if reason["rule"] in ("static-k-suffices", "no-speculation-on-traffic"):
            page.get_by_text(reason["message"], exact=False).first.wait_for()
    page.get_by_text(f"Traffic: {verdict['traffic']}").first.wait_for()
