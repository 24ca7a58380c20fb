"""The job's side of the scheduler (``repro.scheduler``, ``repro.ray_backend``): its exit codes, and
stopping as on Ctrl-C when the scheduler dies.

A job learns its scheduler's pid (``SCHEDULER_PID_ENV``) and calls ``follow_scheduler``: the kernel
sends it SIGINT when the scheduler dies (Linux ``PR_SET_PDEATHSIG``; elsewhere a thread watches the
parent pid), and it stops as on Ctrl-C, so a ``kill -9`` of the scheduler leaves no job running on.
Kept apart from the scheduler so that a job's start-up imports only this.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType

# The scheduler's pid, in every job's environment: the job stops when that process dies.
SCHEDULER_PID_ENV = "REPRO_SCHEDULER_PID"
# Exit code of a job that found its run directory locked by another process (sysexits EX_TEMPFAIL).
BUSY_EXIT_CODE = 75
# Exit code of a job stopped by a full disk (ENOSPC; sysexits EX_IOERR): not retried, since another
# attempt on the same disk fails the same way, and said in the scheduler's line.
NO_SPACE_EXIT_CODE = 74
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


# The code of Python's import system. A KeyboardInterrupt raised while a module is being imported can
# be swallowed ("Exception ignored in ... _get_module_lock": a weakref callback of the import system),
# or abort the process (-6: "terminate called after throwing an instance of
# 'pybind11::error_already_set'", when torch's initialisation in C++ checks for signals), or leave
# half-imported modules: a stop is taken between imports, never during one.
_IMPORT_SYSTEM = "<frozen importlib."
# The file name of code compiled from a string (``exec``, ``eval``: dataclasses and namedtuple make
# their methods so): a KeyboardInterrupt out of such code marks CPython to end by SIGINT (exit -2)
# even when it is caught and the process exits 130.
_FROM_A_STRING = "<string>"
# How soon a stop signal that came at such a point is taken again (SIGALRM).
RETAKE_S = 0.01


def _not_here(frame: FrameType) -> bool:
    """Whether a ``KeyboardInterrupt`` raised at ``frame`` could be lost or misreported: while a
    module is being imported, or under code run from a string (but the ``python -c`` script itself,
    the outermost frame)."""
    below: FrameType | None = frame
    while below is not None:
        name = below.f_code.co_filename
        if name.startswith(_IMPORT_SYSTEM) or (name == _FROM_A_STRING and below.f_back is not None):
            return True
        below = below.f_back
    return False


def raise_stop(signum: int, frame: FrameType | None) -> None:
    """The stop signals' handler: ``KeyboardInterrupt``, as Ctrl-C, but never where it could be lost
    or misreported (``_not_here``: 1 stop in 35 in a job's first second was swallowed and the job ran
    to its end); there the stop is taken again every ``RETAKE_S`` (a SIGALRM timer, also handled
    here) until it can be raised: after the import under way."""
    if frame is not None and _not_here(frame):
        signal.setitimer(signal.ITIMER_REAL, RETAKE_S)
        return
    signal.setitimer(signal.ITIMER_REAL, 0)  # a stop retaken now needs no second one in the clean-up
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` in the main thread (``raise_stop``),
    also where the process was started with SIGINT ignored (a shell's background job): every stop is
    a Ctrl-C. Then unblocks them: a job starts with them blocked (``repro.scheduler``), so that one
    sent before this handler is in place waits for it instead of killing the interpreter (-2)."""
    for sig in (*STOP_SIGNALS, signal.SIGALRM):
        signal.signal(sig, raise_stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` when the parent dies (Linux); whether it was armed."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGINT)


def follow_scheduler(use_prctl: bool = True, poll_s: float = 1.0) -> None:
    """In a job started by ``run_local``: stop as on Ctrl-C (``KeyboardInterrupt``) when the
    scheduler dies, by the kernel's parent-death signal or, where there is none, a thread that
    polls the parent pid every ``poll_s``. Raises ``KeyboardInterrupt`` at once when the scheduler
    is already gone. Does nothing in a process the scheduler did not start."""
    text = os.environ.get(SCHEDULER_PID_ENV, "")
    if not text.isdigit():
        return
    parent = int(text)
    stop_on_signals()
    if not (use_prctl and _parent_death_signal(signal.SIGINT)):
        threading.Thread(
            target=_watch_parent, args=(parent, poll_s), name="watch-scheduler", daemon=True
        ).start()
    if os.getppid() != parent:  # it died before the signal was armed
        raise KeyboardInterrupt
