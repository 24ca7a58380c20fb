"""CPU sets for the processes of a run: parsing ``"0,2-3"``-style lists and pinning to them.

The asynchronous runner gives its sampler process and its optimizer their own cores
(``RunnerConfig.async_sampler_cpus`` / ``async_optimizer_cpus``), so that the two stages do not
take turns on the same cores, and a stage can be measured alone on the cores it gets in the run
(``bench/bench_sampler.py``'s runners section). Linux only (``os.sched_setaffinity``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_cpus(spec: str) -> frozenset[int]:
    """``"0,2-3"`` -> ``{0, 2, 3}`` (the list format of ``taskset -c`` and ``/proc/*/status``);
    ``""`` -> the empty set, meaning "no pinning". Raises ``ValueError`` on anything else."""
    spec = spec.replace(" ", "")
    if not spec:
        return frozenset()
    if not _CPU_LIST.match(spec):
        raise ValueError(f"CPU list {spec!r}: expected comma-separated CPUs or ranges, e.g. '0,2-3'")
    cpus: set[int] = set()
    for part in spec.split(","):
        first, _, last = part.partition("-")
        lo, hi = int(first), int(last or first)
        if hi < lo:
            raise ValueError(f"CPU list {spec!r}: range {part!r} runs backwards")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def pin_thread(cpus: frozenset[int], what: str) -> None:
    """Pin the calling thread (and the threads it starts afterwards) to ``cpus``; empty: no-op.

    ``what`` names the setting in errors (e.g. ``"RunnerConfig.async_sampler_cpus"``)."""
    if not cpus:
        return
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError(f"{what}: pinning to CPUs needs os.sched_setaffinity (Linux)")
    available = os.sched_getaffinity(0)
    if not cpus <= available:
        raise ValueError(
            f"{what}: CPUs {sorted(cpus - available)} are not available to this process "
            f"(available: {sorted(available)})"
        )
    os.sched_setaffinity(0, cpus)


@contextmanager
def pinned(cpus: frozenset[int], what: str) -> Iterator[None]:
    """``pin_thread`` for the duration of the block, then the calling thread's CPUs as before."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    pin_thread(cpus, what)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
