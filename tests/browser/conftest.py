"""Real-browser fixtures: the notebook served by `marimo run`, driven by Debian's chromium.

The browser is /usr/bin/chromium (never a downloaded one). Without it the tests skip, except
under CI (``CI=true``), where they fail: CI installs chromium, so its absence is a broken setup.
A failed test leaves a screenshot and the server's log under ``test-artifacts/``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import marimo_server
import pytest
from sweep_builder import WORKED_EXAMPLE, write_grid

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "tune_spec_k.py"
SAMPLE_SWEEPS = REPO / "data" / "sample_sweeps"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"

# A sweep where both sliders visibly matter (runs per cell; the arithmetic is in the tests):
# at batch size 1, K=1 is steady at 118, K=3 is better on median (130) but noisier (MAD 10),
# K=0 is 100; at batch size 64, K=0 wins by far.
SLIDER_SWEEP = {
    (1, 0): [100.0, 100.0, 100.0],
    (1, 1): [118.0, 118.0, 118.0],
    (1, 3): [120.0, 130.0, 140.0],
    (64, 0): [1000.0, 1000.0, 1000.0],
    (64, 1): [700.0, 700.0, 700.0],
    (64, 3): [500.0, 500.0, 500.0],
}

# One run per cell, the shape of the single-run GB200 sweeps (5 anchors x K in {0, 1, 3}): with
# the default 3 runs per cell, every one of its 15 cells is rejected.
SINGLE_RUN_SWEEP = {
    (anchor, k): [value]
    for anchor, values in {
        1: (100.0, 150.0, 180.0),
        4: (380.0, 520.0, 560.0),
        16: (1400.0, 1600.0, 1500.0),
        64: (4000.0, 3600.0, 3000.0),
        256: (9000.0, 7000.0, 5000.0),
    }.items()
    for k, value in zip((0, 1, 3), values, strict=True)
}

# The "rules" experiment is the worked example (sweep_builder.WORKED_EXAMPLE), where the two
# decision rules disagree at batch size 1.


@dataclass(frozen=True)
class Server:
    url: str
    root: Path
    log: Path


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    message = (
        f"{CHROMIUM} not found: the browser tests drive Debian's chromium"
        " (apt-get install -y chromium)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    _require_chromium()
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM)}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {
        **browser_context_args,
        "viewport": {"width": 1500, "height": 1000},
        "accept_downloads": True,
    }


def _sweeps_root(root: Path) -> Path:
    """The folder the server may read: a copy of a sample, the slider sweep, the rules sweep, a
    sweep of one run per cell, and a copy of the sample whose summary.json was cut short."""
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", root / "sonnet-like")
    shutil.copytree(SAMPLE_SWEEPS / "long-context", root / "long-context")
    write_grid(root / "sliders", SLIDER_SWEEP)
    write_grid(root / "rules", WORKED_EXAMPLE)
    write_grid(root / "single-run", SINGLE_RUN_SWEEP)
    shutil.copytree(SAMPLE_SWEEPS / "sonnet-like", root / "broken")
    summary = root / "broken" / "SERVE--k3-BENCH--c64" / "summary.json"
    summary.write_bytes(summary.read_bytes()[:300])
    return root


@contextlib.contextmanager
def serving(
    root: Path, log: Path, environment: Mapping[str, str] | None = None
) -> Iterator[Server]:
    """`marimo run` of the notebook on ``root`` (:func:`marimo_server.serving`), its output in
    ``log``, until the block ends."""
    with marimo_server.serving(
        NOTEBOOK, log, "--sweeps", str(root), environment=environment
    ) as url:
        yield Server(url=url, root=root, log=log)


@pytest.fixture(scope="module")
def start_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Server]]:
    """``start_server(root, environment=None)`` starts `marimo run` on ``root`` (see
    :func:`serving`); every server a module starts stops when the module ends."""
    _require_chromium()
    with contextlib.ExitStack() as running:

        def start(root: Path, environment: Mapping[str, str] | None = None) -> Server:
            log = tmp_path_factory.mktemp("server") / "marimo.log"
            return running.enter_context(serving(root, log, environment))

        yield start


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    _require_chromium()
    if not (SAMPLE_SWEEPS / "sonnet-like").is_dir():
        pytest.skip(f"the sample sweep {SAMPLE_SWEEPS / 'sonnet-like'} is missing")
    root = _sweeps_root(tmp_path_factory.mktemp("sweeps"))
    with serving(root, tmp_path_factory.mktemp("server") / "marimo.log") as running:
        yield running


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(autouse=True)
def _artifacts_on_failure(request: pytest.FixtureRequest, page: Any) -> Iterator[None]:
    yield
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    ARTIFACTS.mkdir(exist_ok=True)
    name = request.node.name.replace("/", "_")
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    # The logs of the servers the test used (the shared one, or a module's own by root).
    for value in request.node.funcargs.values():
        for used in value.values() if isinstance(value, dict) else [value]:
            if isinstance(used, Server):
                log = ARTIFACTS / f"{name}.{used.root.name}.server.log"
                shutil.copyfile(used.log, log)
