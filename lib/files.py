"""Reading the JSON files a user gives and writing every file tune-spec-k writes.

Neither raises for a user's mistake: a file that cannot be read or written becomes a
:class:`~lib.problems.Problem` naming it, so every command reports it the same way (exit 2).

Only regular files are read (:func:`read_file`): a FIFO or a device named like a data file would
otherwise block forever or grow memory without limit. Every file is written whole or not at all
(:func:`write_files`): a full disk or a killed process leaves the previous file as it was. A
folder of files (a plan) is written whole or not at all too (:func:`write_folder`): a new
folder beside it, then one rename, so it never mixes old files and new ones. A stop signal
(:mod:`lib.signals`) waits until a write ends, and no temporary outlives a failure or a stop.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from lib import signals
from lib.keys import MISSING
from lib.problems import Problem, Severity

__all__ = [
    "folder_unwritable_reason",
    "parse_json",
    "read_file",
    "read_json",
    "unwritable_reason",
    "write_files",
    "write_folder",
]

#: The deepest nesting of lists and objects read; orjson refuses anything deeper.
MAX_DEPTH = 1024
_BOM = b"\xef\xbb\xbf"
#: How much of a large file is read at a time (see :func:`read_file`).
_CHUNK_BYTES = 1 << 22
_TOO_DEEP = (
    "invalid-json",
    f"not valid JSON: nested deeper than {MAX_DEPTH} levels of lists and objects",
)


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in a user's words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_file(
    path: str | os.PathLike[str],
    *,
    large: Callable[[Iterator[bytes]], bytes] | None = None,
    large_from: int = 0,
) -> tuple[bytes | None, tuple[str, str] | None]:
    """``(the file's bytes, None)``, or ``(None, (rule, message))`` saying why not.

    With ``large``, a file of ``large_from`` bytes or more is not read whole: ``large`` gets
    its chunks as they are read and returns what stands for the bytes (a loader that keeps
    only part of the text never holds all of it).

    Only a regular file is read, found by ``os.stat`` (so through symbolic links) before it is
    opened: a FIFO would block the read forever, ``/dev/zero`` or ``/dev/urandom`` would grow
    memory without limit, and opening some devices has side effects. A file swapped for one of
    those between the look and the open is caught too: it is opened without blocking and
    looked at again before a byte is read. A folder, a missing file or one without read
    permission is a problem the same way.
    """
    try:
        status = os.stat(path)
        if not stat.S_ISREG(status.st_mode):
            return None, _not_regular(status.st_mode)
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(descriptor, "rb") as file:
            opened = os.fstat(descriptor)
            if not stat.S_ISREG(opened.st_mode):
                return None, _not_regular(opened.st_mode)
            if large is not None and opened.st_size >= large_from:
                return large(iter(functools.partial(file.read, _CHUNK_BYTES), b"")), None
            return file.read(), None
    except OSError as error:
        return None, ("unreadable-file", f"cannot read the file: {error.strerror or error}")


def _not_regular(mode: int) -> tuple[str, str]:
    return "unreadable-file", f"cannot read the file: it is {_kind(mode)}, not a regular file"


def parse_json(raw: bytes) -> tuple[Any, tuple[str, str] | None, bool]:
    """``(value, None, by_orjson)`` for JSON text, else ``(MISSING, (rule, message), False)``.

    orjson first (fast); Python's ``json`` for what orjson refuses: it accepts the ``NaN`` and
    ``Infinity`` that vLLM's ``json.dump`` can write, and names the line and column of a real
    error. ``by_orjson`` says which parser read the value: only Python's ``json`` yields NaN,
    infinities and ints beyond 64 bits.

    A UTF-8 byte order mark (as some Windows editors save) is skipped, by every reader: the
    text after it is read as if it were not there. Lists and objects nested deeper than
    :data:`MAX_DEPTH` levels are refused (orjson's limit), and in a file only Python's ``json``
    reads (NaN, Infinity), deeper than its stack allows (a little under 1000 levels).

    >>> parse_json(b'{"a": NaN}')
    ({'a': nan}, None, False)
    >>> parse_json(b'\\xef\\xbb\\xbf[1]')
    ([1], None, True)
    >>> parse_json(b'[1, 2')[1]
    ('invalid-json', "not valid JSON: Expecting ',' delimiter at line 1 column 6 (a truncated or hand-edited file?)")
    >>> parse_json(b'[' * 2000 + b']' * 2000)[1]
    ('invalid-json', 'not valid JSON: nested deeper than 1024 levels of lists and objects')
    """  # noqa: E501
    text: bytes | memoryview = memoryview(raw)[len(_BOM) :] if raw.startswith(_BOM) else raw
    try:
        return orjson.loads(text), None, True
    except orjson.JSONDecodeError as error:
        if "depth" in error.msg:
            return MISSING, _TOO_DEEP, False
    try:
        return json.loads(bytes(text)), None, False
    except RecursionError:
        # Python's json recurses once per level and runs out of stack below orjson's limit.
        failure = ("invalid-json", "not valid JSON: nested deeper than Python's json can read")
        return MISSING, failure, False
    except UnicodeDecodeError as error:
        return MISSING, ("unreadable-file", f"not UTF-8 text: {error.reason}"), False
    except json.JSONDecodeError as error:
        failure = (
            "invalid-json",
            f"not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
            " (a truncated or hand-edited file?)",
        )
        return MISSING, failure, False


def read_json(path: str | Path) -> tuple[Any, list[Problem]]:
    """The parsed file (:func:`read_file`, :func:`parse_json`), or :data:`~lib.keys.MISSING`
    and the problem saying why not."""
    raw, failure = read_file(path)
    data = MISSING
    if raw is not None:
        data, failure, _ = parse_json(raw)
    if failure is not None:
        rule, message = failure
        return MISSING, [Problem(Severity.ERROR, rule, message, files=(str(path),))]
    return data, []


# --------------------------------------------------------------------------- writing


def unwritable_reason(path: str | os.PathLike[str], *, make_folders: bool = False) -> str | None:
    """Why :func:`write_files` could not write ``path``, or None when it can; creates nothing.

    The reason is what writing would fail with (``cannot write the file: Permission denied``),
    found without writing: the path (through symbolic links) must not be a folder; an
    existing file must be writable; a new one needs its folder to exist, be a folder and be
    writable (with ``make_folders``, the nearest folder that exists, where the missing ones
    would be made). A device or a FIFO (``/dev/stdout``, ``>(jq .)``) is written in place, so
    only its own permission counts.
    """
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        return f"cannot write the file: {error.strerror or error}"
    if mode is not None and stat.S_ISDIR(mode):
        return _cannot_write(errno.EISDIR)
    if mode is not None and not os.access(target, os.W_OK):
        return _cannot_write(errno.EACCES)
    if mode is not None and not stat.S_ISREG(mode):
        return None
    folder = target.parent
    while make_folders and not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.exists():
        return _cannot_write(errno.ENOENT)
    if not folder.is_dir():
        return _cannot_write(errno.ENOTDIR)
    if not os.access(folder, os.W_OK | os.X_OK):
        return _cannot_write(errno.EACCES)
    return None


def _cannot_write(number: int) -> str:
    return f"cannot write the file: {os.strerror(number)}"


def write_files(
    files: Sequence[tuple[Path, str]],
    *,
    make_folders: bool = False,
    executable: Collection[Path] = (),
) -> list[Problem]:
    """Write each ``(path, text)`` as UTF-8, each whole or not at all: when one cannot be
    written, none is (the problem of the first is returned). ``make_folders`` creates missing
    parent folders (they stay); the files in ``executable`` are made runnable (``chmod 755``).

    Every file is first written in full to a temporary file in its own folder, flushed and
    synced to disk; only when all of them are does each replace its path (``os.replace``,
    atomic), in order (only that rename failing could leave the earlier ones replaced). So a
    full disk, an error or a killed process leaves every previous file byte-identical; a file
    replaced keeps its permissions (a new one gets the umask's, as ``open`` gives). On Linux
    the temporary files have no name until all of them are complete (each is named just
    before the renames), so even a process killed while writing leaves nothing behind;
    elsewhere each is a hidden, uniquely named file (two writers never share one), removed on
    any failure. A path that is a symbolic link has its target
    replaced; a device or a FIFO is written in place, as nothing can replace it. A stop signal
    (:func:`lib.signals.deferred`) waits until every file is replaced or none is.
    """
    with signals.deferred():
        return _write_files(files, make_folders, executable)


def _write_files(
    files: Sequence[tuple[Path, str]], make_folders: bool, executable: Collection[Path]
) -> list[Problem]:
    staged: list[_Staged] = []
    try:
        for path, text in files:
            if make_folders:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as error:
                    # The folder that could not be made, not the file.
                    return [_unwritable(Path(error.filename or path), error)]
            try:
                mode = 0o755 if path in executable else None
                staged.append(_stage(path, text.encode("utf-8"), mode))
            except OSError as error:
                return [_unwritable(path, error)]
        # Every file is complete: only now does each get a name, just before the renames, so
        # that a process killed while writing a later file leaves no named temporary.
        for entry in staged:
            try:
                entry.name()
            except OSError as error:
                return [_unwritable(entry.path, error)]
        while staged:
            entry = staged[0]
            try:
                if entry.temporary is not None:
                    os.replace(entry.temporary, os.path.realpath(entry.path))
                else:
                    with open(entry.path, "wb") as device:
                        device.write(entry.data)
            except OSError as error:
                return [_unwritable(entry.path, error)]
            staged.pop(0)
    finally:
        for entry in staged:
            entry.discard()
    return []


def folder_unwritable_reason(folder: str | os.PathLike[str], names: Collection[str]) -> str | None:
    """Why :func:`write_folder` could not write ``folder``, or None when it can; creates
    nothing.

    The folder (through symbolic links) is replaced whole, so where it exists it must be a
    folder holding only what a write of it holds: regular files named as one of ``names``, in
    it or in folders below it (an earlier plan with other steps), and nothing else (no other
    file, no link, no device): nothing of the user's is lost. Its parent folder (the nearest
    that exists, where missing ones will be made) must be a writable folder: the new folder is
    made there and renamed into place.
    """
    target = Path(os.path.realpath(folder))
    if os.path.lexists(target):
        if not target.is_dir():
            return _cannot_write(errno.ENOTDIR)
        foreign = _foreign_entry(target, frozenset(names))
        if foreign is not None:
            return (
                f"cannot replace the folder: it holds {foreign}, which is not a file this"
                " command writes (the folder is replaced whole); choose a new or empty folder"
            )
    parent = target.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return _cannot_write(errno.ENOTDIR)
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write the folder: its parent {parent}: {os.strerror(errno.EACCES)}"
    return None


def _foreign_entry(folder: Path, names: Collection[str]) -> str | None:
    """The first entry below ``folder`` (relative, as a user would type it) that is not a
    regular file named as one of ``names`` or a folder of such; None when there is none."""
    failures: list[OSError] = []
    for here, subfolders, files in os.walk(folder, onerror=failures.append):
        relative = Path(here).relative_to(folder)
        for name in sorted(subfolders):
            if os.path.islink(Path(here) / name):
                return (relative / name).as_posix()
        for name in sorted(files):
            path = Path(here) / name
            if name not in names or not stat.S_ISREG(os.lstat(path).st_mode):
                return (relative / name).as_posix()
        if failures:
            return f"{relative.as_posix()} (cannot list it)"
    return None


def write_folder(
    folder: Path,
    files: Sequence[tuple[str, str]],
    *,
    executable: Collection[str] = (),
) -> list[Problem]:
    """Make ``folder`` hold exactly ``files`` (relative path, text; UTF-8), all or nothing:
    the problem of the first failure, else none. The files at the relative paths in
    ``executable`` are made runnable (``chmod 755``).

    Every file is written in full and synced in a new hidden folder beside ``folder`` (a
    unique name: two writers never share one); then one rename puts it in place. Where
    ``folder`` exists, the two are exchanged atomically (Linux's ``renameat2`` with
    ``RENAME_EXCHANGE``; elsewhere the old folder is renamed aside first, and back if the
    second rename fails), and the old one, now under the hidden name, is removed. So at every
    instant ``folder`` is the old folder whole or the new one whole, never a mix (files of an
    old plan's steps never linger beside a new plan's). The hidden folder is removed on any
    failure, exception or stop signal (a signal waits until the write ends,
    :func:`lib.signals.deferred`); only a SIGKILL or a power cut during the write can leave
    it. Missing parent folders are made (they stay); a ``folder`` that is a symbolic link
    has its target replaced (the link stays). :func:`folder_unwritable_reason` says first
    whether the folder can be replaced.
    """
    target = Path(os.path.realpath(folder))
    reason = folder_unwritable_reason(folder, {Path(name).name for name, _ in files})
    if reason is not None:
        return [Problem(Severity.ERROR, "unwritable-file", reason, files=(str(folder),))]
    with signals.deferred():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            return [_unwritable(Path(error.filename or target.parent), error)]
        staging: Path | None = None
        # What a failure is blamed on: the file being written, else the folder.
        current = folder
        try:
            staging = _under_a_new_name(lambda name: _made_folder(target.parent / name))
            for relative, text in files:
                current = folder / relative
                path = staging / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                try:
                    mode = 0o755 if relative in executable else None
                    _fill(descriptor, text.encode("utf-8"), mode)
                finally:
                    os.close(descriptor)
            current = folder
            for here, _, _ in os.walk(staging):
                _sync_folder(Path(here))
            _put_in_place(staging, target)
            _sync_folder(target.parent)
        except OSError as error:
            return [_unwritable(current, error)]
        finally:
            # What is left under the hidden name: the new folder (a failure) or the old one.
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
    return []


def _made_folder(path: Path) -> Path:
    os.mkdir(path, 0o777)
    return path


def _sync_folder(folder: Path) -> None:
    """Sync a folder's entries to disk (its new names), where the system allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


#: Linux's renameat2 flag that swaps two paths, and the "current folder" descriptor.
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _put_in_place(staging: Path, target: Path) -> None:
    """Put the folder ``staging`` at ``target`` in one step; where ``target`` exists, the old
    folder is left at ``staging`` (for the caller to remove)."""
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    if _exchange(staging, target):
        return
    aside = _under_a_new_name(lambda name: target.parent / name)
    os.rename(target, aside)
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(aside, target)
        raise
    os.rename(aside, staging)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the two paths atomically (Linux's ``renameat2``); False where the system or the
    file system cannot (the caller renames twice)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(number, os.strerror(number), str(b))


def _unwritable(path: Path, error: OSError) -> Problem:
    reason = f"cannot write the file: {error.strerror or error}"
    return Problem(Severity.ERROR, "unwritable-file", reason, files=(str(path),))


def _remove(path: Path) -> None:
    # Already gone, or past removing: nothing else can be done about it.
    with contextlib.suppress(OSError):
        os.unlink(path)


class _Staged:
    """A file to write, complete before anything is replaced: in an unnamed temporary file
    (``descriptor``, Linux) until :meth:`name` links it, or a hidden named one
    (``temporary``), or, for a device or a FIFO, neither (``data`` is written in place)."""

    def __init__(
        self,
        path: Path,
        data: bytes,
        *,
        mode: int | None = None,
        descriptor: int | None = None,
        temporary: Path | None = None,
    ) -> None:
        self.path, self.data, self.mode = path, data, mode
        self.descriptor, self.temporary = descriptor, temporary

    def name(self) -> None:
        """Give the unnamed temporary file a hidden name in the target's folder (where linking
        it fails for want of ``/proc`` or support, the data is written again under a name)."""
        if self.descriptor is None:
            return
        folder = Path(os.path.realpath(self.path)).parent
        try:
            self.temporary = _link(self.descriptor, folder)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise
            self.temporary = _named(folder, self.data, self.mode)
        finally:
            os.close(self.descriptor)
            self.descriptor = None

    def discard(self) -> None:
        """Remove what is left of the temporary file (an unnamed one vanishes once closed)."""
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None
        if self.temporary is not None:
            _remove(self.temporary)


def _stage(path: Path, data: bytes, mode: int | None) -> _Staged:
    """The file complete in a temporary file that will replace it; for a device or a FIFO,
    only the data: it is written in place when the files are committed."""
    target = Path(os.path.realpath(path))
    try:
        status = target.stat()
    except FileNotFoundError:
        status = None
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(status.st_mode):
            return _Staged(path, data)
        # os.replace would replace a read-only file; writing in place never did.
        if not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        if mode is None:
            mode = stat.S_IMODE(status.st_mode)
    folder = target.parent
    descriptor = _anonymous(folder, data, mode)
    if descriptor is not None:
        return _Staged(path, data, mode=mode, descriptor=descriptor)
    return _Staged(path, data, temporary=_named(folder, data, mode))


#: Linux's flag for a file without a name (0 where there is none).
_TMPFILE = getattr(os, "O_TMPFILE", 0)


def _anonymous(folder: Path, data: bytes, mode: int | None) -> int | None:
    """The open descriptor of an unnamed temporary file in ``folder`` holding the data, synced
    (:class:`_Staged` names it once every file is complete), or None where the system cannot
    make one (no ``O_TMPFILE``, a file system without it): the caller falls back to
    :func:`_named`. A failure to write raises (the file vanishes)."""
    if not _TMPFILE:
        return None
    try:
        descriptor = os.open(folder, _TMPFILE | os.O_WRONLY, 0o666)
    except OSError as error:
        if error.errno in (errno.EISDIR, errno.EOPNOTSUPP, errno.EINVAL):
            return None
        raise
    try:
        _fill(descriptor, data, mode)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _link(descriptor: int, folder: Path) -> Path:
    """Give the open unnamed file a unique hidden name in ``folder``."""
    folder_descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))

    def link(name: str) -> Path:
        # A folder descriptor makes Python call linkat with AT_SYMLINK_FOLLOW, which links the
        # open file; plain link(2) would link the /proc symlink itself (EXDEV).
        os.link(f"/proc/self/fd/{descriptor}", name, dst_dir_fd=folder_descriptor)
        return folder / name

    try:
        return _under_a_new_name(link)
    finally:
        os.close(folder_descriptor)


def _named(folder: Path, data: bytes, mode: int | None) -> Path:
    """The data in a new hidden, uniquely named file in ``folder``, removed if it fails."""

    def create(name: str) -> tuple[Path, int]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        return folder / name, os.open(folder / name, flags, 0o666)

    temporary, descriptor = _under_a_new_name(create)
    try:
        _fill(descriptor, data, mode)
    except BaseException:
        _remove(temporary)
        raise
    finally:
        os.close(descriptor)
    return temporary


_T = TypeVar("_T")
#: Random names tried before giving up (a clash is one chance in 2**48 per name).
_NAME_ATTEMPTS = 100


def _under_a_new_name(create: Callable[[str], _T]) -> _T:
    """``create(name)`` with a new random hidden name, again while the name is taken
    (``FileExistsError``): two writers in one folder never share a temporary file."""
    for _ in range(_NAME_ATTEMPTS - 1):
        with contextlib.suppress(FileExistsError):
            return create(_temporary_name())
    return create(_temporary_name())


def _temporary_name() -> str:
    return f".tune-spec-k-{os.urandom(6).hex()}.tmp"


def _fill(descriptor: int, data: bytes, mode: int | None) -> None:
    """Write all of ``data``, set the mode, and sync it to disk before anything is replaced."""
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]
    if mode is not None:
        os.fchmod(descriptor, mode)
    os.fsync(descriptor)
