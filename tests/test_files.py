"""lib/files.py: reading a user's JSON file and writing ours never raise for a user's mistake."""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from paths import REPO
from signal_runs import snapshot
from sweep_builder import write_grid

from lib import files, signals
from lib.files import parse_json, read_file, read_json, unwritable_reason, write_files
from lib.keys import MISSING
from lib.settings import DEFAULT_K_VAR, Fields
from lib.sweep_files import read_sweep_files

BATCH_SIZE_VAR = Fields().batch_size_var


def test_nan_and_infinity_written_by_python_json_are_read() -> None:
    value, failure, by_orjson = parse_json(b'{"a": NaN, "b": -Infinity}')
    assert failure is None and math.isnan(value["a"]) and value["b"] == -math.inf
    assert not by_orjson  # Python's json read it
    assert parse_json(b'{"a": 1}') == ({"a": 1}, None, True)


def test_broken_json_names_the_line_and_column() -> None:
    value, failure, _ = parse_json(b'[\n  {"a": 1},\n  {"a": \n')
    assert value is MISSING
    assert failure is not None and failure[0] == "invalid-json"
    assert "at line 4 column 1" in failure[1]


def test_text_that_is_not_utf8_is_unreadable() -> None:
    value, failure, _ = parse_json(b'{"a": "\xff"}')
    assert value is MISSING and failure is not None and failure[0] == "unreadable-file"


def test_read_json_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text("[1, 2]")
    assert read_json(good) == ([1, 2], [])
    value, problems = read_json(tmp_path / "absent.json")
    assert value is MISSING
    (problem,) = problems
    assert problem.rule == "unreadable-file"
    assert problem.files == (str(tmp_path / "absent.json"),)
    assert "No such file or directory" in problem.message


def test_write_files_writes_all_or_none(tmp_path: Path) -> None:
    first, blocked, last = tmp_path / "a", tmp_path / "no" / "b", tmp_path / "c"
    first.write_text("old")
    problems = write_files([(first, "1"), (blocked, "2"), (last, "3")])
    assert first.read_text() == "old" and not last.exists()
    assert [(p.rule, p.files) for p in problems] == [("unwritable-file", (str(blocked),))]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a"]
    assert write_files([(first, "1"), (last, "3")]) == []
    assert (first.read_text(), last.read_text()) == ("1", "3")


def test_write_files_can_make_folders_and_executables(tmp_path: Path) -> None:
    script, data = tmp_path / "x" / "run.sh", tmp_path / "x" / "y" / "d.json"
    assert write_files([(script, "#!"), (data, "{}")], make_folders=True, executable={script}) == []
    assert script.stat().st_mode & 0o111 and not data.stat().st_mode & 0o111


# --------------------------------------------------------------------------- only regular files

#: Reads one file with lib.files.read_json in a process of its own, printing the problem's rule
#: and message: a read that blocks is stopped by the timeout, one that grows without limit by
#: the memory limit, and the test fails either way instead of hanging or exhausting the machine.
READ_IN_A_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from lib.files import read_json
value, problems = read_json(sys.argv[1])
print(*[(problem.rule, problem.message, problem.files) for problem in problems], sep="\\n")
"""


def _special_file(kind: str, path: Path) -> None:
    """Make ``path`` a FIFO, a link to a device, a socket or a folder."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "link to /dev/urandom":
        path.symlink_to("/dev/urandom")
    elif kind == "link to a fifo":
        os.mkfifo(path.with_name("elsewhere"))
        path.symlink_to(path.with_name("elsewhere"))
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))
    elif kind == "folder":
        path.mkdir()


SPECIAL_FILES = [
    ("fifo", "a FIFO (named pipe)"),
    ("link to /dev/zero", "a character device"),
    ("link to /dev/urandom", "a character device"),
    ("link to a fifo", "a FIFO (named pipe)"),
    ("socket", "a socket"),
    ("folder", "a folder"),
]


@pytest.mark.parametrize(("kind", "named"), SPECIAL_FILES)
def test_only_a_regular_file_is_read(tmp_path: Path, kind: str, named: str) -> None:
    path = tmp_path / "summary.json"
    _special_file(kind, path)
    completed = subprocess.run(
        [sys.executable, "-c", READ_IN_A_CHILD, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    message = f"cannot read the file: it is {named}, not a regular file"
    assert completed.stdout == f"{('unreadable-file', message, (str(path),))}\n"


def test_a_large_file_is_handed_over_in_chunks(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40_000  # 10 MB: more than one chunk
    path = tmp_path / "large.json"
    path.write_bytes(data)
    seen: list[int] = []

    def large(chunks: Iterator[bytes]) -> bytes:
        pieces = list(chunks)
        seen.extend(len(piece) for piece in pieces)
        return b"".join(pieces)[:5]

    assert read_file(path, large=large, large_from=len(data)) == (data[:5], None)
    assert len(seen) > 1 and sum(seen) == len(data)
    # One byte smaller than the threshold: read whole, the callback not called.
    seen.clear()
    assert read_file(path, large=large, large_from=len(data) + 1) == (data, None)
    assert seen == []


def test_read_file_reads_a_regular_file_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "data.json").write_bytes(b"[1]")
    (tmp_path / "link.json").symlink_to(tmp_path / "data.json")
    assert read_file(tmp_path / "link.json") == (b"[1]", None)
    assert read_json(tmp_path / "link.json") == ([1], [])


def test_a_file_that_cannot_be_opened_names_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "locked.json"
    path.write_text("[1]")

    def denied(*args: object, **kwargs: object) -> int:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    # chmod 000 does not stop root: the refusal is made by hand.
    monkeypatch.setattr(os, "open", denied)
    assert read_file(path) == (None, ("unreadable-file", "cannot read the file: Permission denied"))
    value, problems = read_json(path)
    assert value is MISSING
    assert [(p.rule, p.message, p.files) for p in problems] == [
        ("unreadable-file", "cannot read the file: Permission denied", (str(path),))
    ]


# --------------------------------------------------------------------------- deep JSON, BOM


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 1024 levels of lists and objects"),
        (b"[" * 100_000, "nested deeper than 1024 levels of lists and objects"),
        (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, "nested deeper than 1024 levels"),
        # NaN: only Python's json reads it, and it recurses once per level.
        (b"[" * 1020 + b"NaN" + b"]" * 1020, "nested deeper than Python's json can read"),
    ],
)
def test_deeply_nested_json_is_a_problem_not_a_crash(raw: bytes, message: str) -> None:
    value, failure, _ = parse_json(raw)
    assert value is MISSING
    assert failure is not None and failure[0] == "invalid-json" and message in failure[1]


def test_nesting_within_the_limit_is_read() -> None:
    value, failure, _ = parse_json(b"[" * 1000 + b"]" * 1000)
    assert failure is None and isinstance(value, list)


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("text", [b"[1, 2]", b'{"a": NaN}', b'{"b": 18446744073709551616}', b"{}"])
def test_a_byte_order_mark_is_skipped(text: bytes) -> None:
    plain, with_bom = parse_json(text), parse_json(BOM + text)
    assert with_bom[1:] == plain[1:] and repr(with_bom[0]) == repr(plain[0])


def test_every_reader_accepts_a_byte_order_mark(tmp_path: Path) -> None:
    cells = {(1, 0): [100.0, 101.0, 99.0], (1, 3): [150.0, 151.0, 149.0]}
    plain, marked = write_grid(tmp_path / "plain", cells), write_grid(tmp_path / "bom", cells)
    for path in marked.rglob("*.json"):
        path.write_bytes(BOM + path.read_bytes())
    read = {
        name: read_sweep_files(root, batch_size_var=BATCH_SIZE_VAR, k_var=DEFAULT_K_VAR)
        for name, root in (("plain", plain), ("bom", marked))
    }
    assert read["bom"].problems == read["plain"].problems == ()
    assert read["bom"].numbers == read["plain"].numbers
    assert read["bom"].derived == read["plain"].derived
    summary = next(marked.rglob("summary.json"))
    assert read_json(summary)[0] == json.loads(summary.read_bytes()[len(BOM) :])


# --------------------------------------------------------------------------- atomic writes


def _listing(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


@pytest.fixture(params=["unnamed", "named"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways to a temporary file: unnamed until complete (Linux), or hidden and named."""
    if request.param == "named":
        monkeypatch.setattr(files, "_TMPFILE", 0)
    elif not files._TMPFILE:
        pytest.skip("this system has no O_TMPFILE")
    return str(request.param)


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_full_disk_leaves_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str, failing: str
) -> None:
    previous = tmp_path / "speculative_k_schedule.json"
    previous.write_bytes(b'{"good": "previous"}\n')
    other = tmp_path / "plan.json"
    before = _listing(tmp_path)

    real, calls = getattr(os, failing), []

    def full(*args: object) -> object:
        # The first call (plan.json) succeeds; the disk is full by the second file.
        calls.append(args)
        if len(calls) == 1:
            return real(*args)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, failing, full)
    problems = write_files([(other, "{}"), (previous, "x" * 1_000_000)])
    monkeypatch.undo()
    assert [(p.rule, p.message, p.files) for p in problems] == [
        ("unwritable-file", "cannot write the file: No space left on device", (str(previous),))
    ]
    assert _listing(tmp_path) == before  # byte-identical, no temporary file, no plan.json


#: A writer that writes a large file slowly: it says so once a first part is written, then
#: waits there to be killed.
SLOW_WRITER = """
import os, sys, time
from pathlib import Path
from lib import files
if sys.argv[2] == "named":
    files._TMPFILE = 0
write = os.write
def slow(descriptor, data):
    written = write(descriptor, bytes(data[: 1 << 16]))
    print("writing", flush=True)
    time.sleep(600)
    return written
os.write = slow
files.write_files([(Path(sys.argv[1]), "x" * (64 << 20))])
"""


def _kill_while_writing(code: str, *arguments: str) -> None:
    """Run the writer ``code``; SIGKILL it once it says it is writing."""
    with subprocess.Popen(
        [sys.executable, "-c", code, *arguments], cwd=REPO, stdout=subprocess.PIPE, text=True
    ) as writer:
        assert writer.stdout is not None
        try:
            assert writer.stdout.readline() == "writing\n"
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=60)


def test_a_writer_killed_while_writing_leaves_the_previous_file(tmp_path: Path) -> None:
    probe = files._anonymous(tmp_path, b"probe", None)
    if probe is None:
        pytest.skip("this file system cannot make an unnamed temporary file")
    os.close(probe)
    previous = tmp_path / "speculative_k_schedule.json"
    previous.write_bytes(b'{"good": "previous"}\n')
    before = _listing(tmp_path)
    _kill_while_writing(SLOW_WRITER, str(previous), "unnamed")
    assert _listing(tmp_path) == before


#: Two files written at once: the first small and complete, the second slow (killed there).
SLOW_SECOND = """
import os, sys, time
from pathlib import Path
from lib import files
write = os.write
def slow(descriptor, data):
    if len(data) < 1 << 20:
        return write(descriptor, data)
    written = write(descriptor, bytes(data[: 1 << 16]))
    print("writing", flush=True)
    time.sleep(600)
    return written
os.write = slow
folder = Path(sys.argv[1])
files.write_files([(folder / "result.json", "{}"), (folder / "plan.json", "x" * (64 << 20))])
"""


def test_a_writer_killed_while_writing_a_later_file_leaves_no_temporary(tmp_path: Path) -> None:
    # The first file is complete but still unnamed: nothing of it is left behind.
    if not files._TMPFILE:
        pytest.skip("this system cannot make an unnamed temporary file")
    (tmp_path / "result.json").write_text("previous")
    _kill_while_writing(SLOW_SECOND, str(tmp_path))
    assert _listing(tmp_path) == {"result.json": b"previous"}


def test_two_files_staged_at_once_never_share_a_temporary_file(tmp_path: Path, route: str) -> None:
    path = tmp_path / "out.json"
    assert write_files([(path, "first " * 100_000), (path, "second")]) == []
    assert _listing(tmp_path) == {"out.json": b"second"}


def test_a_replaced_file_keeps_its_mode_and_run_sh_is_executable(
    tmp_path: Path, route: str
) -> None:
    kept, script, new = tmp_path / "kept.json", tmp_path / "run.sh", tmp_path / "new.json"
    kept.write_text("old")
    kept.chmod(0o640)
    script.write_text("old")
    script.chmod(0o600)
    assert write_files([(kept, "1"), (script, "#!"), (new, "2")], executable={script}) == []
    umask = os.umask(0)
    os.umask(umask)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (kept, script, new)}
    assert modes == {"kept.json": 0o640, "run.sh": 0o755, "new.json": 0o666 & ~umask}


def test_a_link_has_its_target_replaced(tmp_path: Path, route: str) -> None:
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    assert write_files([(link, "new")]) == []
    assert link.is_symlink() and target.read_text() == "new"


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    # `--output-json >(jq .)`: a pipe to another process, which replacing would disconnect.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        assert write_files([(fifo, "through the pipe")]) == []
        reader.join(timeout=60)
    finally:
        if reader.is_alive():  # release the reader (the test fails below)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_read_only_file_is_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "protected.json"
    path.write_text("old")
    real_access = os.access
    # chmod 444 does not stop root: the refusal is made by hand.
    monkeypatch.setattr(os, "access", lambda p, mode: p != path and real_access(p, mode))
    (problem,) = write_files([(path, "new")])
    assert problem.message == "cannot write the file: Permission denied"
    assert unwritable_reason(path) == "cannot write the file: Permission denied"
    monkeypatch.undo()
    assert _listing(tmp_path) == {"protected.json": b"old"}


def _below_a_file(root: Path) -> Path:
    (root / "file").write_text("")
    return root / "file" / "x.json"


def _a_folder(root: Path) -> Path:
    (root / "folder").mkdir()
    return root / "folder"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda root: root / "missing" / "x.json", "No such file or directory"),
        (_below_a_file, "Not a directory"),
        (_a_folder, "Is a directory"),
        (lambda root: root / "x.json", None),
    ],
)
def test_unwritable_reason_says_what_writing_would_fail_with(
    tmp_path: Path, make: Callable[[Path], Path], reason: str | None
) -> None:
    path = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    expected = None if reason is None else f"cannot write the file: {reason}"
    assert unwritable_reason(path) == expected
    assert sorted(tmp_path.rglob("*")) == before  # creates nothing
    if reason is not None:
        (problem,) = write_files([(path, "x")])
        assert problem.message == expected


def test_unwritable_reason_with_folders_to_make(tmp_path: Path) -> None:
    assert unwritable_reason(tmp_path / "a" / "b" / "x.json", make_folders=True) is None
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("")
    reason = unwritable_reason(tmp_path / "file" / "b" / "x.json", make_folders=True)
    assert reason == "cannot write the file: Not a directory"


# --------------------------------------------------------------------------- a folder, whole

PLAN_NAMES = ("a.json", "run.sh", "b.json")


def _old_folder(folder: Path) -> dict[str, bytes]:
    """An earlier write of the folder: a file at the top and a step's folder."""
    (folder / "step1").mkdir(parents=True)
    (folder / "a.json").write_text("old a")
    (folder / "step1" / "b.json").write_text("old b")
    return snapshot(folder)


NEW = [("a.json", "new a"), ("run.sh", "echo"), ("step2/b.json", "new b")]
NEW_TREE = {"a.json": b"new a", "run.sh": b"echo", "step2/b.json": b"new b"}


@pytest.mark.parametrize("exchange", [True, False])
def test_a_folder_is_replaced_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    # Linux swaps the two folders in one step; elsewhere the old one is renamed aside first.
    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    folder = tmp_path / "plan"
    _old_folder(folder)
    assert files.write_folder(folder, NEW, executable={"run.sh"}) == []
    assert snapshot(folder) == NEW_TREE  # the old step's folder is gone with the old plan
    assert os.access(folder / "run.sh", os.X_OK)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["plan"]  # no temporary left


def test_a_new_folder_and_its_parents_are_made(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b" / "plan"
    assert files.write_folder(folder, NEW) == []
    assert snapshot(folder) == NEW_TREE


def test_a_folder_behind_a_link_is_replaced_and_the_link_kept(tmp_path: Path) -> None:
    target = tmp_path / "real"
    _old_folder(target)
    link = tmp_path / "plan"
    link.symlink_to(target)
    assert files.write_folder(link, NEW) == []
    assert link.is_symlink() and snapshot(link) == NEW_TREE


@pytest.mark.parametrize(
    ("entry", "shown"),
    [
        (lambda f: (f / "notes.txt").write_text("mine"), "notes.txt"),
        (lambda f: (f / "step1" / "results.json").write_text("[]"), "step1/results.json"),
        (lambda f: (f / "a.json").unlink() or (f / "a.json").symlink_to("/etc"), "a.json"),
        (lambda f: (f / "linked").symlink_to(f / "step1"), "linked"),
    ],
)
def test_a_folder_holding_anything_else_is_not_replaced(
    tmp_path: Path, entry: Callable[[Path], object], shown: str
) -> None:
    # Replacing the folder would delete what the user keeps there: refused, nothing changed.
    folder = tmp_path / "plan"
    _old_folder(folder)
    entry(folder)
    before = _listing_all(tmp_path)
    reason = files.folder_unwritable_reason(folder, PLAN_NAMES)
    assert reason is not None and f"holds {shown}," in reason
    problems = files.write_folder(folder, NEW)
    assert [(p.rule, p.message, p.files) for p in problems] == [
        ("unwritable-file", reason, (str(folder),))
    ]
    assert _listing_all(tmp_path) == before


def _listing_all(folder: Path) -> list[tuple[str, bool]]:
    return sorted(
        (path.relative_to(folder).as_posix(), path.is_symlink()) for path in folder.rglob("*")
    )


def test_an_empty_folder_or_one_of_folders_is_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "plan"
    (folder / "empty" / "deeper").mkdir(parents=True)
    assert files.folder_unwritable_reason(folder, PLAN_NAMES) is None
    assert files.folder_unwritable_reason(tmp_path / "missing" / "plan", PLAN_NAMES) is None
    (tmp_path / "file").write_text("")
    assert files.folder_unwritable_reason(tmp_path / "file", PLAN_NAMES) == (
        f"cannot write the file: {os.strerror(errno.ENOTDIR)}"
    )


def test_a_folder_that_fails_while_written_leaves_the_old_one_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "plan"
    old = _old_folder(folder)
    written = []
    fill = files._fill

    def full(descriptor: int, data: bytes, mode: int | None) -> None:
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(data)
        fill(descriptor, data, mode)

    monkeypatch.setattr(files, "_fill", full)
    problems = files.write_folder(folder, NEW)
    assert [(p.rule, p.files) for p in problems] == [("unwritable-file", (str(folder / "run.sh"),))]
    assert snapshot(folder) == old
    assert sorted(path.name for path in tmp_path.iterdir()) == ["plan"]


def test_a_stop_signal_waits_until_the_folder_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGTERM in the middle: the write ends (the folder whole, new), then the command stops.
    folder = tmp_path / "plan"
    _old_folder(folder)
    fill = files._fill

    def interrupted(descriptor: int, data: bytes, mode: int | None) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        fill(descriptor, data, mode)

    monkeypatch.setattr(files, "_fill", interrupted)
    with signals.raised(), pytest.raises(signals.Stopped):
        files.write_folder(folder, NEW)
    assert snapshot(folder) == NEW_TREE
    assert sorted(path.name for path in tmp_path.iterdir()) == ["plan"]


def test_a_stop_signal_waits_until_the_files_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill = files._fill

    def interrupted(descriptor: int, data: bytes, mode: int | None) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        fill(descriptor, data, mode)

    monkeypatch.setattr(files, "_fill", interrupted)
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    with signals.raised(), pytest.raises(signals.Stopped):
        write_files([(path, "new") for path in paths])
    assert _listing(tmp_path) == {"a.json": b"new", "b.json": b"new"}
