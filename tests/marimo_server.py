"""`marimo run` of a notebook on a free local port, for the browser tests and the browser bench
(``bench/bench_app_browser.py``): one way to start it, wait for it and stop it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from paths import REPO

STARTUP_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_until_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until the server answers ``/health``; RuntimeError (with its log) when it exits or does
    not answer within STARTUP_TIMEOUT_S."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"marimo run exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    raise RuntimeError(
        f"marimo run did not answer /health in {STARTUP_TIMEOUT_S} s:\n{log.read_text()}"
    )


@contextlib.contextmanager
def serving(
    notebook: Path,
    log: Path,
    *arguments: str,
    environment: Mapping[str, str] | None = None,
    others: Sequence[Path] = (),
) -> Iterator[str]:
    """`marimo run NOTEBOOK -- ARGUMENTS`, its output in ``log``, until the block ends (then
    terminated, and killed if it does not stop): its URL. ``environment`` is added to the
    process's environment. With ``others``, one server runs them all (marimo's gallery: each
    notebook at ``URL/?file=PATH``), so that their loads share one process."""
    port = free_port()
    command = [sys.executable, "-m", "marimo", "-q", "run", str(notebook), *map(str, others)]
    command += [
        "--headless",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-token",
        "--",
        *arguments,
    ]
    full_environment = {**os.environ, "MARIMO_SKIP_UPDATE_CHECK": "1", **(environment or {})}
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=REPO, env=full_environment, stdout=output, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_healthy(url, process, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
