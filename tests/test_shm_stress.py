"""Stress tests of the shared-memory replay: one writer and several reader processes, no torn items.

Every item carries a checksum of its own contents written in a separate field, so an item read
while half written (payload of one append, checksum of another) fails verification.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import numpy as np
import pytest
import torch

from algorithms.arrays import NamedArrays, to_numpy
from algorithms.replay.shared import DoubleBuffer, RWLock, SharedReplay

PAYLOAD = 64
MODULUS = (1 << 61) - 1  # a Mersenne prime: a checksum that mixes every payload entry


def checksum(seq: np.ndarray, payload: np.ndarray) -> np.ndarray:
    """[n] checksums of items with sequence numbers ``seq`` [n] and payloads [n, PAYLOAD]."""
    weights = np.arange(1, PAYLOAD + 1, dtype=np.int64)
    return (seq * 1_000_003 + (payload % 1_000_000) @ weights) % MODULUS


def make_items(seq: np.ndarray, rng: np.random.Generator) -> NamedArrays:
    payload = rng.integers(0, 1 << 40, size=(len(seq), PAYLOAD), dtype=np.int64)
    return NamedArrays(seq=seq, payload=payload, checksum=checksum(seq, payload))


def count_torn(items: NamedArrays) -> int:
    seq, payload, check = (to_numpy(items[k]) for k in ("seq", "payload", "checksum"))
    return int(np.sum(checksum(seq, payload) != check))


def writer_main(replay: SharedReplay, n_appends: int, done: mp.Event) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    seq = 0
    for _ in range(n_appends):
        n = int(rng.integers(1, 9))
        replay.append(make_items(np.arange(seq, seq + n, dtype=np.int64), rng), timeout_s=10)
        seq += n
    done.set()


def reader_main(replay: SharedReplay, seed: int, done: mp.Event, result: mp.Array) -> None:
    """Sample until the writer is done; record (reads, items checked, torn items, order violations)."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    reads = checked = torn = disorder = 0
    while not done.is_set() or reads < 200:
        if len(replay) == 0:
            time.sleep(0.001)
            continue
        items = replay.sample(16, rng, timeout_s=10)
        torn += count_torn(items)
        # Ring position p holds the newest item whose sequence number is p modulo capacity.
        checked += 16
        reads += 1
        stored = replay.read(np.arange(len(replay)), timeout_s=10)
        seqs = to_numpy(stored["seq"])
        torn += count_torn(stored)
        disorder += int(np.sum(seqs % replay.capacity != np.arange(len(seqs))))
    result[:] = [reads, checked, torn, disorder]


def test_checksum_detects_a_torn_item() -> None:
    items = make_items(np.arange(4, dtype=np.int64), np.random.default_rng(1))
    assert count_torn(items) == 0
    items["payload"][2, 5] += 1
    assert count_torn(items) == 1


@pytest.mark.slow
def test_one_writer_three_readers_no_torn_items() -> None:
    ctx = mp.get_context("spawn")
    example = NamedArrays(seq=np.int64(0), payload=np.zeros(PAYLOAD, np.int64), checksum=np.int64(0))
    replay = SharedReplay(example, capacity=97)  # prime: appends wrap at every offset
    done = ctx.Event()
    n_appends, n_readers = 4000, 3
    results = [ctx.Array("q", 4, lock=False) for _ in range(n_readers)]
    procs = [ctx.Process(target=writer_main, args=(replay, n_appends, done))]
    procs += [ctx.Process(target=reader_main, args=(replay, i, done, results[i])) for i in range(n_readers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    alive = [p.name for p in procs if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert not alive, f"processes still running after 60 s: {alive}"
    assert [p.exitcode for p in procs] == [0] * len(procs)
    for reads, checked, torn, disorder in (list(r) for r in results):
        assert reads >= 200 and checked >= 3200
        assert torn == 0 and disorder == 0
    assert replay.appended > n_appends  # batches of 1..8 items
    assert count_torn(replay.read(np.arange(replay.capacity))) == 0


def test_write_waits_for_readers_and_times_out() -> None:
    lock = RWLock()
    with lock.read(), lock.read():  # readers share
        with pytest.raises(TimeoutError, match="RWLock.write"):
            with lock.write(timeout_s=0.2):
                pass
    with lock.write():
        with pytest.raises(TimeoutError, match="RWLock.read"):
            with lock.read(timeout_s=0.2):
                pass
    with lock.write():  # released after the timeouts above
        pass


def test_waiting_writer_holds_back_new_readers() -> None:
    """Writer preference: once a writer waits, a new reader waits behind it (no writer starvation)."""
    lock = RWLock()
    order: list[str] = []
    with lock.read():

        def write() -> None:
            with lock.write(timeout_s=5):
                order.append("write")

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(0.2)  # the writer is now waiting for our read lock
        with pytest.raises(TimeoutError):
            with lock.read(timeout_s=0.2):
                pass
        assert order == []
    writer.join(timeout=5)
    assert order == ["write"]


def producer_main(buf: DoubleBuffer, n_batches: int) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(3)
    for i in range(n_batches):
        slot = buf.begin_write(timeout_s=300)  # a starved consumer on a loaded machine is slow, not gone
        batch = buf.slots[slot]
        payload = rng.integers(0, 1 << 40, size=batch["payload"].shape, dtype=np.int64)
        batch["payload"].numpy()[:] = payload
        batch["seq"].numpy()[:] = i
        batch["checksum"].numpy()[:] = checksum(np.full(payload.shape[0], i), payload)
        buf.end_write(slot, (i, payload.shape[0]))


def test_double_buffer_delivers_every_batch_in_order_untorn() -> None:
    ctx = mp.get_context("spawn")
    example = NamedArrays(
        seq=torch.zeros(8, dtype=torch.int64),
        payload=torch.zeros(8, PAYLOAD, dtype=torch.int64),
        checksum=torch.zeros(8, dtype=torch.int64),
    )
    buf = DoubleBuffer(example, n_slots=2)
    n_batches = 300
    proc = ctx.Process(target=producer_main, args=(buf, n_batches))
    proc.start()

    def producer_alive() -> None:
        if proc.exitcode not in (None, 0):
            raise RuntimeError(f"the producer exited with code {proc.exitcode}")

    try:
        for i in range(n_batches):
            # The first batch waits for a spawned interpreter's imports, minutes on a loaded machine;
            # a producer that died is reported at once instead.
            slot, info = buf.begin_read(timeout_s=300, alive=producer_alive)
            batch = buf.slots[slot].map(torch.clone)
            buf.end_read(slot)
            assert info == (i, 8)
            assert bool((batch["seq"] == i).all())
            assert count_torn(batch) == 0
            if i % 50 == 0:
                time.sleep(0.05)  # a slow consumer: the producer must wait, not overwrite
        proc.join(timeout=300)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()


def test_double_buffer_reports_a_dead_producer() -> None:
    example = NamedArrays(x=torch.zeros(3))
    buf = DoubleBuffer(example)

    def producer_is_dead() -> None:
        raise RuntimeError("producer died")

    with pytest.raises(RuntimeError, match="producer died"):
        buf.begin_read(timeout_s=5, alive=producer_is_dead)
    with pytest.raises(TimeoutError, match="no batch ready"):
        buf.begin_read(timeout_s=0.2)
