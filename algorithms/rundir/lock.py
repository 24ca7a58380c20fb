"""One writer per run directory: the exclusive ``flock`` on ``<run>/.lock``, shared by the
``RunDir`` objects of one process, handed from a scheduler to the job it starts
(``LOCK_FDS_ENV``), and probed without writing (``lock_holder``).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from algorithms.rundir.atomic import _now, atomic_write_json
from algorithms.rundir.layout import LOCK_FILE, STATUS_FILE, RunState, RunUnreadable


class RunBusy(Exception):
    """Another process holds the run directory's lock: this one must not write there."""


# Locks this process holds, by resolved run path: [fd, RunDir objects open on it]. Within one process
# the RunDir objects share the lock (a test or a tool may open a run twice); between processes the
# kernel's flock keeps one writer.
_HELD: dict[str, list[int]] = {}


def _lock_key(run_dir: Path) -> str:
    return str(Path(run_dir).resolve())


def take_lock(run_dir: Path) -> int:
    """The descriptor of ``run_dir``'s lock file (created if needed) with its exclusive ``flock``
    taken, this pid written in it; ``RunBusy`` naming the holder when another process has it. For a
    scheduler handing the lock to the job it starts (``LOCK_FDS_ENV``); a writer uses ``acquire_lock``."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError as error:
        raise RunUnreadable.from_error(error, run_dir) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = lock_holder(run_dir)
        who = f"pid {holder}" if holder else "another process"
        raise RunBusy(f"{run_dir}: {who} is writing this run directory (it holds {LOCK_FILE})") from None
    _write_holder(fd)
    return fd


def _write_holder(fd: int) -> None:
    # The holder's pid, for ``RunBusy``'s message; informational only, the flock is the lock.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


# A scheduler takes a run's lock before it writes the attempt's header into the run's log.txt and
# hands it to the job it starts as an inherited descriptor, named here (JSON: resolved run path ->
# descriptor), so that no other scheduler can start a job on the run between the two. A flock belongs
# to the open file, which the job then shares: the lock lasts until the job and the scheduler have
# both closed it (the scheduler closes its copy once the job has started).
LOCK_FDS_ENV = "REPRO_RUN_LOCK_FDS"
_handed: dict[str, int] | None = None


def _handed_lock(key: str) -> int | None:
    """The descriptor of ``key``'s lock handed to this process (``LOCK_FDS_ENV``), once; ``None``
    when there is none or it is not that lock file's (a stale number)."""
    global _handed
    if _handed is None:
        try:
            _handed = {str(k): int(v) for k, v in json.loads(os.environ.pop(LOCK_FDS_ENV, "{}")).items()}
        except (ValueError, TypeError, AttributeError):
            _handed = {}
    fd = _handed.pop(key, None)
    if fd is None:
        return None
    try:
        mine, there = os.fstat(fd), os.stat(Path(key) / LOCK_FILE)
    except OSError:
        return None
    if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
        return None
    os.set_inheritable(fd, False)  # this process's own children must not keep the run locked
    return fd


def acquire_lock(run_dir: Path) -> None:
    """Take the exclusive lock of ``run_dir`` (created if needed) for this process, or raise ``RunBusy``
    naming the process that holds it; a lock its scheduler handed over (``LOCK_FDS_ENV``) is adopted.
    Pair every call with ``release_lock``."""
    key = _lock_key(run_dir)
    if key in _HELD:
        _HELD[key][1] += 1
        return
    fd = _handed_lock(key)
    if fd is None:
        fd = take_lock(run_dir)
    else:
        _write_holder(fd)
    _HELD[key] = [fd, 1]


def release_lock(run_dir: Path) -> None:
    key = _lock_key(run_dir)
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        os.close(held[0])  # closing the only descriptor releases the flock


def lock_holder(run_dir: Path) -> int | None:
    """``None`` when no process holds ``run_dir``'s lock, else the holder's pid (0 when not known yet).
    Opens the lock file read-only and creates nothing, so probing a run never writes to it."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except PermissionError as error:
        raise RunUnreadable.from_error(error, run_dir) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else 0
        return None
    finally:
        os.close(fd)


def set_status_if_free(path: Path, state: RunState, error: str | None = None) -> bool:
    """Write ``status.json`` of a run no process holds (its job ended without writing it: killed, or
    failed before it could); ``False``, writing nothing, when another process holds the run."""
    if not Path(path).is_dir():
        return False
    try:
        acquire_lock(path)
    except RunBusy:
        return False
    try:
        atomic_write_json(Path(path) / STATUS_FILE, {"state": state, "updated": _now(), "error": error})
    finally:
        release_lock(path)
    return True
