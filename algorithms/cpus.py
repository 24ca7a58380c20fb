"""CPU sets for the processes of a run: parsing ``"0,2-3"``-style lists and pinning to them.

The asynchronous runner gives its sampler process and its optimizer their own cores
(``RunnerConfig.async_sampler_cpus`` / ``async_optimizer_cpus``), so that the two stages do not
take turns on the same cores, and a stage can be measured alone on the cores it gets in the run
(``bench/bench_sampler.py``'s runners section). The parallel samplers pin their workers (processes,
or the env threads of thread workers) to the CPUs of ``SamplerConfig.worker_cpus``. Linux only
(``os.sched_setaffinity``).
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


def _worker_cpus(spec: str) -> list[int]:
    """The CPUs of ``SamplerConfig.worker_cpus`` in order, checked against this process's CPUs."""
    cpus = sorted(parse_cpus(spec))
    available = os.sched_getaffinity(0)
    if not set(cpus) <= available:
        raise ValueError(
            f"SamplerConfig.worker_cpus {spec!r}: CPUs {sorted(set(cpus) - available)} are not "
            f"available to this process (available: {sorted(available)})"
        )
    return cpus


def cpu_share(spec: str, member: int, members: int) -> frozenset[int]:
    """The CPUs of ``member`` (0-based) of ``members`` that share ``spec``
    (``SamplerConfig.worker_cpus``): the list cut into ``members`` contiguous blocks as even as
    can be, member i's from position ``i * n // members`` on (one member: the whole list), so that
    worker processes or thread groups use every CPU listed and each keeps to neighbouring CPUs
    (one socket, where the numbering follows them); with more members than CPUs, one CPU each,
    cycling. Empty ``spec``: the empty set (not pinned). Raises ``ValueError`` naming the setting
    when a CPU is not available to this process."""
    cpus = _worker_cpus(spec)
    if not cpus:
        return frozenset()
    n = len(cpus)
    if n < members:
        return frozenset({cpus[member % n]})
    return frozenset(cpus[member * n // members : (member + 1) * n // members])


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


def pin_process(cpus: frozenset[int], what: str) -> None:
    """Pin every thread of this process, and the threads it starts afterwards, to ``cpus``; empty:
    no-op. A worker process needs this rather than ``pin_thread``: importing torch has already
    started a thread of its own there, which would keep every CPU."""
    if not cpus:
        return
    pin_thread(cpus, what)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:
            pass  # the thread ended meanwhile


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
