"""Concurrency for a replay shared between processes: a read-write lock, double buffering, a shared ring.

The asynchronous runner puts sampling and optimization in different processes (rlpyt's async mode,
rlpyt/runners/async_rl.py; R2D2's actors and learner, Kapturowski et al. 2019, Sec. 2.3). Three
pieces join them here; the replay's sampling logic (uniform, prioritized, n-step, sequences) is not
in this file:

* ``RWLock``: many readers (optimizer minibatch gathers) or one writer (an append), across
  processes, writer-preferring so a steady stream of reads cannot starve appends, and with
  timeouts so a process that died holding the lock gives an error instead of a hang;
* ``DoubleBuffer``: ``n_slots`` (2 by default) [T, B] batches in shared memory between one producer
  and one consumer. The producer writes the next batch into a free slot while the consumer is still
  copying the other one out, so the sampler never waits on the optimizer's lock, only when the
  consumer has fallen ``n_slots`` whole batches behind (rlpyt's ``double_buffer``);
* ``SharedReplay``: a ring of ``capacity`` items in shared memory with a shared cursor, appended
  under the write lock and read under the read lock, so a reader never sees an item half written.

Everything here is picklable while a ``spawn`` process is being started (pass it in the process's
arguments), like any ``multiprocessing`` lock.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from algorithms.arrays import NamedArrays, buffer_from_example

LOCK_TIMEOUT_S = 60.0
# Granularity of the waits below: how often a blocked caller re-checks its ``alive`` callback.
_POLL_S = 0.05

_READERS, _WRITER, _WRITERS_WAITING = 0, 1, 2


class RWLock:
    """A writer-preferring readers-writer lock for processes (and threads).

    ``with lock.read(): ...`` admits any number of concurrent readers while no writer holds or waits
    for the lock; ``with lock.write(): ...`` waits for the readers inside to leave and admits no new
    ones meanwhile. Both raise ``TimeoutError`` after ``timeout_s``.
    """

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self._cond = ctx.Condition(ctx.Lock())
        self._state = ctx.Array("q", 3, lock=False)  # readers inside, writer inside, writers waiting

    @contextmanager
    def read(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        s = self._state
        with self._cond:
            if not self._cond.wait_for(lambda: s[_WRITER] == 0 and s[_WRITERS_WAITING] == 0, timeout_s):
                raise TimeoutError(f"RWLock.read: no access within {timeout_s} s (state {list(s)})")
            s[_READERS] += 1
        try:
            yield
        finally:
            with self._cond:
                s[_READERS] -= 1
                if s[_READERS] == 0:
                    self._cond.notify_all()

    @contextmanager
    def write(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        s = self._state
        with self._cond:
            s[_WRITERS_WAITING] += 1
            try:
                free = self._cond.wait_for(lambda: s[_WRITER] == 0 and s[_READERS] == 0, timeout_s)
            finally:
                s[_WRITERS_WAITING] -= 1
            if not free:
                self._cond.notify_all()  # readers held back by our waiting may enter again
                raise TimeoutError(f"RWLock.write: no access within {timeout_s} s (state {list(s)})")
            s[_WRITER] = 1
        try:
            yield
        finally:
            with self._cond:
                s[_WRITER] = 0
                self._cond.notify_all()


def _acquire(sem: Any, timeout_s: float, alive: Callable[[], None] | None, what: str) -> None:
    """``sem.acquire`` in short waits, calling ``alive()`` between them (it raises if the peer died)."""
    deadline = time.monotonic() + timeout_s
    while not sem.acquire(timeout=_POLL_S):
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"DoubleBuffer: {what} waited more than {timeout_s} s")


class DoubleBuffer:
    """``n_slots`` shared-memory copies of one batch layout, passed between one producer and one consumer.

    Producer: ``slot = buf.begin_write()``, fill ``buf.slots[slot]``, ``buf.end_write(slot, info)``.
    Consumer: ``slot, info = buf.begin_read()``, copy out of ``buf.slots[slot]``, ``buf.end_read(slot)``.
    Slots are used in order, so batches arrive in the order they were written. ``info`` is a small
    tuple of ints (for example the sampler iteration and env-step count of the batch).
    """

    def __init__(self, example_batch: NamedArrays, n_slots: int = 2, info_size: int = 2) -> None:
        if n_slots < 2:
            raise ValueError(
                f"DoubleBuffer: n_slots must be >= 2 for writing to overlap reading, got {n_slots}"
            )
        ctx = mp.get_context("spawn")
        self.n_slots = n_slots
        self.slots = [
            example_batch.map(lambda x: torch.zeros_like(x).share_memory_()) for _ in range(n_slots)
        ]
        self._free = ctx.Semaphore(n_slots)
        self._full = ctx.Semaphore(0)
        self._info = ctx.Array("q", n_slots * info_size, lock=False)
        self._info_size = info_size
        # Slot counters: written by one side each, so they need no lock.
        self._written = ctx.Value("q", 0, lock=False)
        self._read = ctx.Value("q", 0, lock=False)

    @property
    def ready(self) -> int:
        """Batches written and not yet taken by the consumer."""
        return int(self._written.value - self._read.value)

    def begin_write(self, timeout_s: float = LOCK_TIMEOUT_S, alive: Callable[[], None] | None = None) -> int:
        _acquire(self._free, timeout_s, alive, "the producer (all slots full)")
        return int(self._written.value % self.n_slots)

    def end_write(self, slot: int, info: tuple[int, ...] = ()) -> None:
        base = slot * self._info_size
        for i, v in enumerate(info):
            self._info[base + i] = int(v)
        self._written.value += 1
        self._full.release()

    def begin_read(
        self, timeout_s: float = LOCK_TIMEOUT_S, alive: Callable[[], None] | None = None
    ) -> tuple[int, tuple[int, ...]]:
        _acquire(self._full, timeout_s, alive, "the consumer (no batch ready)")
        slot = int(self._read.value % self.n_slots)
        base = slot * self._info_size
        return slot, tuple(int(v) for v in self._info[base : base + self._info_size])

    def end_read(self, slot: int) -> None:
        self._read.value += 1
        self._free.release()


class SharedReplay:
    """A ring of ``capacity`` items in shared memory, appended and read under an ``RWLock``.

    Items are ``NamedArrays`` with the per-item layout of ``example_item``; ``append`` takes a batch
    [n, ...] of them. The cursor (items ever appended) is shared, so every process agrees on what is
    stored. ``read(indices)`` and ``sample(batch_size, generator)`` return copies taken under the read
    lock: after the lock is released, later appends cannot change what the reader got.
    """

    def __init__(self, example_item: NamedArrays, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SharedReplay: capacity must be >= 1, got {capacity}")
        ctx = mp.get_context("spawn")
        self.capacity = int(capacity)
        self.items: NamedArrays = buffer_from_example(example_item, self.capacity, shared=True)
        self._appended = ctx.Value("q", 0, lock=False)  # changed only under the write lock
        self.lock = RWLock()

    @property
    def appended(self) -> int:
        """Items appended since creation (a monotone counter; ``len`` is capped at ``capacity``)."""
        return int(self._appended.value)

    def __len__(self) -> int:
        return min(self.appended, self.capacity)

    def append(self, batch: NamedArrays, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        """Write ``batch`` [n, ...] after the newest item, overwriting the oldest once full."""
        n = _leading_dim(batch)
        if n > self.capacity:
            raise ValueError(f"SharedReplay.append: batch of {n} items exceeds capacity {self.capacity}")
        with self.lock.write(timeout_s):
            start = self.appended % self.capacity
            idx = (start + np.arange(n)) % self.capacity
            self.items[torch.from_numpy(idx)] = batch
            self._appended.value += n

    def read(self, indices: np.ndarray, timeout_s: float = LOCK_TIMEOUT_S) -> NamedArrays:
        """Copies of the items at ring positions ``indices`` [n] (fancy indexing copies)."""
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        with self.lock.read(timeout_s):
            stored = len(self)
            if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= stored):
                raise IndexError(f"SharedReplay.read: indices must lie in [0, {stored}), got {indices}")
            return self.items[idx]

    def sample(
        self, batch_size: int, generator: np.random.Generator, timeout_s: float = LOCK_TIMEOUT_S
    ) -> NamedArrays:
        """``batch_size`` items drawn uniformly with replacement, copied under one read lock."""
        with self.lock.read(timeout_s):
            stored = len(self)
            if stored == 0:
                raise ValueError("SharedReplay.sample: the replay is empty")
            idx = torch.from_numpy(generator.integers(0, stored, size=batch_size))
            return self.items[idx]


def _leading_dim(batch: NamedArrays) -> int:
    sizes = {int(leaf.shape[0]) for leaf in batch.leaves()}
    if len(sizes) != 1:
        raise ValueError(f"SharedReplay: batch leaves disagree on the leading dimension: {sorted(sizes)}")
    return sizes.pop()
