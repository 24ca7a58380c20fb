"""``WorkerGroup``'s two channels (pickled commands and the raw-pipe fast command) and CPU pinning."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass

import pytest
import torch
from test_sampler_parallel_shutdown import assert_all_gone

from algorithms.cpus import cpu_share
from algorithms.process import process_times
from algorithms.run_config import SamplerConfig
from algorithms.samplers.workers import WorkerError, WorkerGroup


@dataclass(frozen=True)
class CounterSpec:
    """A body whose fast command adds to its slot of a shared tensor (picklable for ``spawn``)."""

    slots: torch.Tensor
    rank: int

    def __call__(self) -> Counter:
        return Counter(self)


class Counter:
    def __init__(self, spec: CounterSpec) -> None:
        self.slot = spec.slots[spec.rank : spec.rank + 1].numpy()
        self.calls = 0
        self.helper = threading.Thread(target=time.sleep, args=(60,), daemon=True)
        self.helper.start()  # started after the pinning: it must inherit the worker's CPUs

    def add(self, value: int) -> None:
        if value < 0:
            raise ValueError(f"negative value {value}")
        if value == 0:
            time.sleep(30)  # a fast command that outlasts the test's patience (the worker gets killed)
        self.slot[0] += value
        self.calls += 1

    def calls_and_total(self) -> tuple[int, int]:
        return self.calls, int(self.slot[0])

    def spin(self, seconds: float) -> float:
        """Compute for ``seconds`` of this process's CPU time: a slow command, not a stuck one."""
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass
        return seconds

    def affinities(self) -> dict[int, set[int]]:
        """Each thread id of this process -> its CPUs."""
        return {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir("/proc/self/task")}

    def close(self) -> None:
        pass


def counters(n: int, **kwargs) -> tuple[WorkerGroup, torch.Tensor]:
    slots = torch.zeros(n, dtype=torch.int64).share_memory_()
    return WorkerGroup(
        "counter", [CounterSpec(slots, r) for r in range(n)], fast_command="add", **kwargs
    ), slots


def test_fast_commands_interleave_with_pickled_ones() -> None:
    group, slots = counters(2)
    try:
        for step in range(1, 501):
            group.send("add", step)
            assert group.receive() == [None, None]
            if step % 100 == 0:  # a pickled command between fast ones sees every fast one done
                expected = step * (step + 1) // 2
                assert group.call("calls_and_total") == [(step, expected)] * 2
        assert slots.tolist() == [125_250, 125_250]
        group.send("add", 1, ranks=[1])  # one worker only
        assert group.receive(ranks=[1]) == [None]
        assert slots.tolist() == [125_250, 125_251]
    finally:
        group.close()


@dataclass(frozen=True)
class DeferringSpec:
    """A body whose fast command leaves part of its work for after the reply."""

    slots: torch.Tensor

    def __call__(self) -> Deferring:
        return Deferring(self.slots)


class Deferring:
    def __init__(self, slots: torch.Tensor) -> None:
        self.slots = slots.numpy()

    def step(self, value: int):
        self.slots[0] = value  # before the reply

        def rest() -> None:
            if value < 0:
                raise ValueError(f"deferred failure {value}")
            time.sleep(2.0)
            self.slots[1] = value

        return rest

    def done(self) -> int:
        return int(self.slots[1])

    def close(self) -> None:
        pass


def test_a_fast_commands_deferred_part_runs_after_the_reply_and_before_the_next_order() -> None:
    slots = torch.zeros(2, dtype=torch.int64).share_memory_()
    group = WorkerGroup("deferring", [DeferringSpec(slots)], fast_command="step")
    try:
        group.send("step", 7)
        assert group.receive() == [None]
        assert slots.tolist() == [7, 0]  # replied; the deferred part (2 s) is still running
        assert group.call("done") == [7]  # the next order is read once it has finished
        group.send("step", 8)
        group.receive()
        group.send("step", 9)  # queued behind step 8's deferred part
        group.receive()
        assert slots.tolist() == [9, 8]
    finally:
        group.close()


@pytest.mark.parametrize("next_command", ["step", "done"])
def test_an_error_in_a_deferred_part_is_reported_at_the_next_reply(next_command: str) -> None:
    slots = torch.zeros(2, dtype=torch.int64).share_memory_()
    group = WorkerGroup("deferring", [DeferringSpec(slots)], fast_command="step")
    pids = group.pids
    group.send("step", -1)
    assert group.receive() == [None]  # the reply came before the deferred part failed
    with pytest.raises(WorkerError, match=r"deferring worker 0 raised during 'step'") as info:
        group.call(next_command, *([1] if next_command == "step" else []))
    assert "ValueError: deferred failure -1" in str(info.value)
    assert_all_gone(pids)


def test_fast_command_takes_one_int() -> None:
    group, _ = counters(1)
    try:
        for args in [(), (1, 2), (1.5,), ("1",)]:
            with pytest.raises(TypeError, match="the fast command 'add' takes one int"):
                group.send("add", *args)
        assert not group.busy
        group.send("add", 3)
        assert group.receive() == [None]
    finally:
        group.close()


def test_exception_in_a_fast_command_is_reported_with_its_traceback() -> None:
    group, _ = counters(2)
    pids = group.pids
    group.send("add", 2, ranks=[0])
    group.send("add", -1, ranks=[1])
    with pytest.raises(WorkerError, match=r"counter worker 1 raised during 'add'") as info:
        group.receive()
    assert "ValueError: negative value -1" in str(info.value)
    assert_all_gone(pids)  # the group closed itself: no process left behind


def test_worker_killed_during_a_fast_command_is_named_at_once() -> None:
    group, _ = counters(2)
    pids = group.pids
    group.send("add", 0)  # sleeps 30 s in both workers
    killer = threading.Timer(0.3, os.kill, args=(pids[1], signal.SIGKILL))
    killer.start()
    start = time.monotonic()
    try:
        with pytest.raises(WorkerError, match=rf"counter worker 1 \(pid {pids[1]}\) was killed by SIGKILL"):
            group.receive()
        assert time.monotonic() - start < 10.0
    finally:
        killer.cancel()
        group.close()
    assert_all_gone(pids)


def test_a_worker_that_exits_after_its_reply_does_not_keep_the_wait_busy() -> None:
    """Waiting for worker 1 while worker 0, which has already answered, dies: the wait sleeps (no
    spinning on the dead worker's sentinel) until worker 1's own end is seen."""
    group, _ = counters(2)
    pids = group.pids
    group.send("add", 1, ranks=[0])
    group.send("add", 0, ranks=[1])  # sleeps 30 s
    timers = [
        threading.Timer(delay, os.kill, args=(pid, signal.SIGKILL)) for delay, pid in zip((0.5, 2.0), pids)
    ]
    for timer in timers:
        timer.start()
    cpu_before = time.process_time()
    try:
        with pytest.raises(WorkerError, match=rf"counter worker 1 \(pid {pids[1]}\) was killed by SIGKILL"):
            group.receive()
        assert time.process_time() - cpu_before < 0.5  # a spinning wait would burn 1.5 s
    finally:
        for timer in timers:
            timer.cancel()
        group.close()
    assert_all_gone(pids)


def test_fast_command_times_out_with_a_clear_error() -> None:
    group, _ = counters(1)
    pids = group.pids
    group.send("add", 0)
    with pytest.raises(WorkerError, match=r"counter worker 0 did not answer 'add' within 1 s"):
        group.receive(timeout_s=1.0)
    assert_all_gone(pids)


def test_a_worker_that_keeps_computing_is_waited_for_past_the_timeout() -> None:
    """Slow is not stuck: a command using CPU for 1.5 s is answered although the timeout is 0.5 s of
    silence (on a loaded machine a worker's start-up imports outlasted the start timeout)."""
    group, _ = counters(1)
    try:
        assert group.call("spin", 1.5, timeout_s=0.5) == [1.5]
    finally:
        group.close()


def test_a_worker_that_computes_forever_still_times_out() -> None:
    group, _ = counters(1)
    pids = group.pids
    group.send("spin", 3600.0)
    began = time.monotonic()
    busy = r"counter worker 0 did not answer 'spin' within 0.3 s, computing all along \(\d+ CPU s"
    with pytest.raises(WorkerError, match=busy):
        group.receive(timeout_s=0.3)
    assert time.monotonic() - began < 300  # PROGRESS_LIMIT times the timeout in CPU time, not the hour
    assert_all_gone(pids)


def test_process_times_reads_this_process_and_not_a_finished_one() -> None:
    started, cpu, parent = process_times(os.getpid())
    assert started > 0 and cpu > 0 and parent == os.getppid()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert process_times(os.getpid())[1] > cpu
    assert process_times(2**22 + 1) is None  # above Linux's pid_max: never a running process


def test_workers_and_the_threads_they_start_run_on_their_cpus() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    spec = ",".join(map(str, cpus))
    n = len(cpus) + 1  # one worker more than CPUs: one CPU each, cycling
    sets = [cpu_share(spec, i, n) for i in range(n)]
    assert sets == [frozenset({c}) for c in cpus] + [frozenset({cpus[0]})]
    group, _ = counters(len(sets), cpus=sets)
    try:
        for pinned, threads in zip(sets, group.call("affinities")):
            assert len(threads) >= 2  # the main thread and the helper it started
            assert all(cpus_of_thread == pinned for cpus_of_thread in threads.values())
    finally:
        group.close()


def test_cpu_share_checks_the_list_against_this_process() -> None:
    assert cpu_share("", 0, 3) == frozenset()
    first = min(os.sched_getaffinity(0))
    assert [cpu_share(str(first), i, 2) for i in (0, 1)] == [frozenset({first})] * 2  # cycling
    with pytest.raises(
        ValueError, match=r"SamplerConfig.worker_cpus '4096': CPUs \[4096\] are not available"
    ):
        cpu_share("4096", 0, 1)
    with pytest.raises(ValueError, match="CPU list 'x'"):
        cpu_share("x", 0, 1)


def test_cpu_share_cuts_the_list_into_contiguous_blocks(monkeypatch) -> None:
    """By hand, on a pretend 8-CPU machine: every listed CPU is used, blocks as even as can be."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert cpu_share("0-7", 0, 1) == frozenset(range(8))  # one member: the whole list
    assert [cpu_share("0-7", i, 2) for i in (0, 1)] == [frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})]
    # blocks from i * 8 // 3: 0, 2, 5
    assert [cpu_share("0-7", i, 3) for i in range(3)] == [{0, 1}, {2, 3, 4}, {5, 6, 7}]
    assert [cpu_share("1,3,5", i, 2) for i in (0, 1)] == [{1}, {3, 5}]  # the list's order, not the CPU ids
    assert [cpu_share("2-3", i, 3) for i in range(3)] == [{2}, {3}, {2}]  # more members than CPUs


def test_sampler_config_checks_worker_cpus() -> None:
    assert SamplerConfig(mode="gpu", batch_B=2, n_workers=2, worker_cpus="0-1").worker_cpus == "0-1"
    with pytest.raises(ValueError, match="SamplerConfig.worker_cpus: CPU list '0-'"):
        SamplerConfig(mode="cpu", worker_cpus="0-")
    with pytest.raises(ValueError, match="worker_cpus must be empty in mode 'serial'"):
        SamplerConfig(mode="serial", worker_cpus="0")
    threads = SamplerConfig(mode="alternating", batch_B=2, env_workers="threads", worker_cpus="0")
    assert threads.worker_cpus == "0"
