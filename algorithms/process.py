"""What every training process sets before it builds anything: torch's threads and malloc's thresholds;
and how much CPU time another process has used.

glibc's malloc hands the free top of its heap back to the kernel once it exceeds ``M_TRIM_THRESHOLD``
and serves a block above ``M_MMAP_THRESHOLD`` with a mapping of its own, released on free; both
thresholds start at 128 KiB and grow with the blocks freed (``mallopt(3)``). A training update
allocates and frees tens of MB of temporaries (an R2D1 MinAtar update: activations, saved gates,
gradients), and with the default thresholds the kernel takes those pages back after an update and
hands them out again zeroed, one page fault per 4 KiB, in the next: 5,564 minor faults per update,
about a sixth of its CPU time (docs/results/r2d1_minatar_speed.md, "Page faults"). A training process
reaches its peak footprint within the first updates and stays there, so it keeps what it freed:
trimming off, and a fixed mapping threshold at glibc's largest (32 MiB on 64-bit: larger blocks, the
replay's arrays, are allocated once). Setting either threshold turns off the dynamic adjustment of
both, hence both are set. Elsewhere than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import NamedTuple

# malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # DEFAULT_MMAP_THRESHOLD_MAX for 64-bit glibc
_TRIM_NEVER = 2**31 - 1  # mallopt takes an int; ~2 GiB of free top is never reached by one update

_retaining = False

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def retain_freed_memory() -> bool:
    """Stop glibc's malloc from returning freed heap pages to the kernel (module docstring); True
    where it did (glibc), False elsewhere. Idempotent."""
    global _retaining
    if _retaining:
        return True
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return False
    except (AttributeError, ValueError, OSError):  # not a glibc system
        return False
    libc = ctypes.CDLL(None)
    _retaining = bool(
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_NEVER)
    )
    return _retaining


def configure_process(torch_threads: int) -> None:
    """Torch's intra-op threads and ``retain_freed_memory``: called at the start of every process
    that trains or samples (``train``, ``train_packed``, DDP ranks, sampler workers, the benches)."""
    import torch  # here, not at the top: the Ray reaper reads /proc through this module without torch

    torch.set_num_threads(torch_threads)
    retain_freed_memory()


class ProcessTimes(NamedTuple):
    """A process's row of ``/proc/<pid>/stat`` (proc(5)) that the harness reads: when it started (clock
    ticks since boot: with the pid, it names one process even after the pid is reused), the CPU
    seconds of it and its waited-for children, and its parent's pid."""

    start: int
    cpu_s: float
    parent: int


def process_times(pid: int, proc: Path = Path("/proc")) -> ProcessTimes | None:
    """``ProcessTimes`` of ``pid``; None when it is not running or the system has no ``/proc`` (Linux
    only). The fields after the command name (which may hold spaces) are split after its closing
    parenthesis: ppid is field 4 of proc(5), utime, stime, cutime, cstime fields 14-17, starttime 22."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ProcessTimes(int(fields[19]), ticks / _TICKS_PER_S, int(fields[1]))
