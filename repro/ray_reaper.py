"""The local Ray instance a driver starts stops with the driver, on every way it exits.

Ray ties its head processes (GCS, raylet) to the driver that started them, but the agents the raylet
starts (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) outlived a driver that was killed
(``kill -9``) or left without ``ray.shutdown`` (Ctrl-C while connecting) by 35-80 s, reparented to
init, and they carry no mark of their instance but their ancestry. So a reaper process, in a session
of its own, started by the driver before the instance (``start_reaper``), keeps the driver's
descendants (with their start times, so that a reused pid is never taken for one) while the driver
lives; once it has exited, it stops those still alive and what they started since: SIGTERM, then
SIGKILL what is left after ``GRACE_S``. Linux (``/proc``); elsewhere nothing is done.

    python -m repro.ray_reaper DRIVER_PID
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from algorithms.process import process_times

GRACE_S = 2.0
POLL_S = 0.25

Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def processes() -> dict[int, tuple[int, int]]:
    """``{pid: (parent pid, start time)}`` of every process now (``algorithms.process.process_times``)."""
    table = {}
    for entry in os.scandir("/proc"):
        found = process_times(int(entry.name)) if entry.name.isdigit() else None
        if found is not None:  # None: gone meanwhile
            table[int(entry.name)] = (found.parent, found.start)
    return table


def descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> set[Process]:
    """The processes of ``table`` below the pids ``roots``, at any depth."""
    found: set[Process] = set()
    below = set(roots)
    while below:
        below = {pid for pid, (ppid, _) in table.items() if ppid in below} - {pid for pid, _ in found}
        found |= {(pid, table[pid][1]) for pid in below}
    return found


def reap(kept: set[Process]) -> None:
    """Stop the processes of ``kept`` still alive, and those they started: SIGTERM, then SIGKILL after
    ``GRACE_S``; never this process."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        table = processes()
        alive = {(pid, start) for pid, start in kept if table.get(pid, (0, -1))[1] == start}
        alive |= descendants({pid for pid, _ in alive}, table)
        alive = {(pid, start) for pid, start in alive if pid != os.getpid()}
        if not alive:
            return
        kept = alive
        for pid, _ in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(processes().get(pid, (0, -1))[1] == s for pid, s in alive):
            time.sleep(POLL_S / 2)


def start_reaper() -> None:
    """In the driver, before it starts a local instance: the reaper that stops the instance's
    processes once the driver has exited."""
    if not Path("/proc/self/stat").exists():
        return
    subprocess.Popen(
        [sys.executable, "-m", "repro.ray_reaper", str(os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C at the terminal stops the driver, not the reaper
    )  # fmt: skip


def main(argv: Sequence[str]) -> int:
    driver = int(argv[0])
    for sig in (signal.SIGINT, signal.SIGHUP):  # it outlives the driver's terminal
        signal.signal(sig, signal.SIG_IGN)
    kept: set[Process] = set()
    while os.getppid() == driver:  # reparented once the driver has exited, however it did
        kept |= descendants({driver}, processes())
        time.sleep(POLL_S)
    reap(kept)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
