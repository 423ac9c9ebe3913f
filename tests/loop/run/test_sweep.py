"""lib/loop/run/sweep.py: the round's script run with its output appended to the log, its
exit status returned, and a stop leaving no process of its session alive."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from lib.loop.run import sweep
from lib.loop.run.sweep import count_runs, run_sweep, set_aside_broken


def test_the_log_keeps_every_attempt_and_the_status_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the script runs from the current folder
    script = tmp_path / "run.sh"
    script.write_text('echo "args: $*"; mkdir -p out/c; echo {} > out/c/run=0.json; exit 3\n')
    log = tmp_path / "logs" / "round-0.log"
    first = run_sweep(script, False, log, [tmp_path / "out"], 1, "round 0")
    second = run_sweep(script, True, log, [tmp_path / "out"], 1, "round 0")
    assert first.status == second.status == 3
    text = log.read_text()
    assert "args: \n" in text and "args: --resume\n" in text
    assert text.index("args: \n") < text.index("args: --resume")
    assert count_runs([tmp_path / "out"]) == 1


def test_a_stop_kills_the_whole_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The script leaves a grandchild that ignores SIGINT and SIGTERM: only SIGKILL ends it.
    monkeypatch.setattr(sweep, "_GRACE_SECONDS", (0.3, 0.3))
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "run.sh"
    script.write_text("trap '' INT TERM; sleep 30 & echo $! > pid; wait\n")
    stopper = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGUSR1))

    class Stop(Exception):
        pass

    def raise_stop(number: int, frame: object) -> None:
        raise Stop

    previous = signal.signal(signal.SIGUSR1, raise_stop)
    started = time.monotonic()
    try:
        stopper.start()
        with pytest.raises(Stop):
            run_sweep(script, False, tmp_path / "log", [tmp_path], 1, "round 0")
    finally:
        signal.signal(signal.SIGUSR1, previous)
        stopper.cancel()
    pid = int((tmp_path / "pid").read_text())
    # The grandchild (in the script's session) is gone, killed by SIGKILL past the graces.
    assert not _alive(pid)
    assert time.monotonic() - started < 10


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_run_file_cut_short_is_kept_aside_not_read_back(tmp_path: Path) -> None:
    combo = tmp_path / "round-0" / "SERVE--k0-BENCH--c1-seed0"
    combo.mkdir(parents=True)
    (combo / "run=0.json").write_text('{"duration": 1.0}')
    (combo / "run=1.json").write_text('{"durat')
    (combo / "run=2.json").write_text("[]")
    (combo / "run=1.json.broken").write_text("an earlier one")
    (combo / "run=3.failure.json").write_text("{")  # a failure's file: not a run, left
    done = tmp_path / "round-0" / "SERVE--k0-BENCH--c2-seed0"
    done.mkdir()
    (done / "run=0.json").write_text("{")  # its summary holds the run: the sweep skips it
    (done / "summary.json").write_text("[]")
    moved = set_aside_broken([tmp_path / "round-0"])
    assert [(old.name, new.name) for old, new in moved] == [
        ("run=1.json", "run=1.json.broken-2"),
        ("run=2.json", "run=2.json.broken"),
    ]
    assert (combo / "run=1.json.broken-2").read_text() == '{"durat'
    assert (combo / "run=1.json.broken").read_text() == "an earlier one"
    assert sorted(
        p.name for p in combo.iterdir() if p.name.startswith("run=") and p.name.endswith(".json")
    ) == [
        "run=0.json",
        "run=3.failure.json",
    ]
    assert (done / "run=0.json").exists()


def test_the_progress_bar_counts_the_run_files_the_sweep_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shown: list[int] = []

    class Bar:
        def update(self, n: int) -> None:
            shown.append(n)

        def close(self) -> None:
            shown.append(-1)

    monkeypatch.setattr(sweep, "_progress_bar", lambda total, description: Bar())
    script = tmp_path / "run.sh"
    # Three runs a moment apart, and a failure's file, which is no run.
    script.write_text(
        "for n in 0 1 2; do mkdir -p out/c$n; echo {} > out/c$n/run=0.json; sleep 0.5; done;"
        " echo {} > out/c0/run=1.failure.json\n"
    )
    run_sweep(script, False, tmp_path / "log", [tmp_path / "out"], 3, "round 0")
    assert sum(n for n in shown if n > 0) == 3 and shown[-1] == -1
    assert len([n for n in shown if n > 0]) >= 2  # it moved while the sweep ran
