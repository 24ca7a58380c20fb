"""Crash-safe writes: a file written to a temporary file in the same directory, fsynced, then
renamed over the target (``os.replace`` is atomic on POSIX), so a reader sees the old or the new
file, never half of one; and the directory fsync that makes such renames durable.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once: setting the umask to read it is not thread-safe, and runs do not change it.
_UMASK = _umask()


def temporary_beside(path: Path) -> tuple[int, str]:
    """A temporary file in ``path``'s directory for a write that ends renamed over ``path``: its
    descriptor and name, with the mode ``path`` has, or for a new file the mode ``open`` would give
    (0o666 less the umask). ``mkstemp`` makes it 0o600, which the rename would hand on to a report or
    a results table that others on the machine are meant to read."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    os.fchmod(fd, mode)
    return fd, tmp


class NotARegularFile(ValueError):
    """An output path that names a symlink, FIFO, device or directory: the rename would replace it
    (as root, ``--csv /dev/full`` replaced the system's device with a file), so nothing is written."""


_KINDS = (
    (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)  # fmt: skip


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (``os.stat``'s ``st_mode``) that is not a regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "a device")


def check_output(path: Path) -> None:
    """``NotARegularFile`` unless ``path`` is a regular file or does not exist yet: the check every
    output file passes, at the latest just before ``atomic_write_bytes`` renames over it; a command
    calls it first too, to refuse before its work rather than after."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    raise NotARegularFile(f"{path} is {file_kind(mode)}, not a regular file: give a file's path or a new one")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (a regular file or a new path, ``check_output``) so that readers see
    either the old or the new content."""
    path = Path(path)
    check_output(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temporary_beside(path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno is not None:
            # Named after the file written, not its temporary name: what a one-line error shows.
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(
        path, (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode()
    )


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _now() -> str:
    # microseconds: a run's start and a freeze within one second are still ordered (repro.preregister)
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")


def _fsync_dir(path: Path) -> None:
    """Make renames in ``path`` durable (POSIX: the directory entry is data of the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
