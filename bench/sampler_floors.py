"""The hand-off floors of ``bench.bench_sampler``'s trivial section: the raw ale-py env split over
the worker processes of a process-worker sampler mode, with nothing but the hand-offs
(``HandoffFloor``), timed beside the raw env as the modes are."""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch

from algorithms.samplers.alternating import group_workers
from algorithms.samplers.base import env_spaces
from algorithms.samplers.workers import spawn_context, split_ranks
from bench.sampler_parts import Paired, RawAleEnv, env_config, raw_batches, time_interleaved

# The hand-off floor of each process-worker mode (``HandoffFloor``): its name -> the worker
# processes of each group, given the bench's ``--workers``.
FLOORS = {
    "floor_gpu": lambda workers: [workers],
    "floor_alternating": group_workers,
    "floor_gpu_single": lambda workers: [1],
}
# The floor each process-worker mode is compared with.
MODE_FLOORS = {
    "gpu": "floor_gpu",
    "gpu_pinned": "floor_gpu",
    "alternating": "floor_alternating",
    "alternating_pinned": "floor_alternating",
    "gpu_single": "floor_gpu_single",
}


def _floor_worker(
    game: str,
    first_rank: int,
    n_envs: int,
    env_threads: int,
    seed: int,
    actions: torch.Tensor,
    observation: torch.Tensor,
    orders: Any,
    done: Any,
) -> None:
    """A ``HandoffFloor`` worker: ale-py's vector env of ranks ``first_rank ..``, one step per order
    byte with the actions in shared memory, the observations copied into shared memory, one byte back."""
    env = RawAleEnv(game, n_envs, env_threads, seed + first_rank).env
    rows = slice(first_rank, first_rank + n_envs)
    actions, observation = actions[rows].numpy(), observation[rows].numpy()
    order_fd, done_fd = orders.fileno(), done.fileno()
    try:
        os.write(done_fd, b"r")
        while os.read(order_fd, 1) == b"s":  # b"" once the parent closes its end
            env.send(actions)
            observation[:] = env.recv()[0]
            os.write(done_fd, b"d")
    finally:
        env.close()


class HandoffFloor:
    """The least that env-only worker processes cost on this machine: the raw ale-py env split over
    worker processes as a process-worker mode splits it, each step one byte to every worker and one
    back (raw pipes), actions and observations in shared memory, and nothing else (no Contract 1
    bookkeeping, no batch record, no agent). ``groups`` lists each group's worker processes: one
    group steps as the parallel GPU mode does (every worker, then wait for all), two take turns as
    the alternating mode's do. The env threads are ``env_threads`` split over all the workers, and
    each group's envs are split over its workers as ``split_ranks`` splits them, as in the samplers.
    A mode's rate over its floor's (both against the raw env beside them) is how close it comes to
    what its process layout allows here; the floor's own ratio to the raw env is the cost of the
    layout itself: the hand-offs, and the env threads of one worker idling while another finishes.
    """

    def __init__(self, game: str, n_envs: int, env_threads: int, groups: list[int], seed: int) -> None:
        ctx = spawn_context()
        observation_space, _ = env_spaces(env_config(game, 1, 1))
        self.actions = torch.zeros(n_envs, dtype=torch.int64).share_memory_()
        self.observation = torch.zeros((n_envs, *observation_space.shape), dtype=torch.uint8).share_memory_()
        self._actions = self.actions.numpy()
        threads = max(1, env_threads // sum(groups))
        self.groups: list[tuple[slice, list[int], list[int]]] = []  # (columns, order fds, done fds)
        self._procs: list[Any] = []
        self._pipes: list[Any] = []
        try:
            for (first, n), workers in zip(split_ranks(n_envs, len(groups)), groups, strict=True):
                orders, dones = [], []
                for lo, m in split_ranks(n, workers):
                    order_reader, order_writer = ctx.Pipe(duplex=False)
                    done_reader, done_writer = ctx.Pipe(duplex=False)
                    worker_args = (game, first + lo, m, threads, seed, self.actions, self.observation)
                    proc = ctx.Process(
                        target=_floor_worker, args=(*worker_args, order_reader, done_writer), daemon=True
                    )
                    proc.start()
                    order_reader.close()
                    done_writer.close()
                    self._procs.append(proc)
                    self._pipes += [order_writer, done_reader]
                    orders.append(order_writer.fileno())
                    dones.append(done_reader.fileno())
                self.groups.append((slice(first, first + n), orders, dones))
            for _, _, dones in self.groups:
                for fd in dones:
                    if os.read(fd, 1) != b"r":
                        raise RuntimeError("HandoffFloor: a worker died while starting (see its stderr)")
        except BaseException:
            self.close()
            raise

    def batch(self, actions: np.ndarray) -> None:
        """``len(actions)`` steps of every env with ``actions`` [T, B], the groups taking turns."""
        T = len(actions)
        for columns, orders, _ in self.groups:
            self._send(columns, orders, actions[0])
        for t in range(T):
            for columns, orders, dones in self.groups:
                for fd in dones:
                    if os.read(fd, 1) != b"d":
                        raise RuntimeError("HandoffFloor: a worker died")
                if t + 1 < T:
                    self._send(columns, orders, actions[t + 1])

    def _send(self, columns: slice, orders: list[int], actions: np.ndarray) -> None:
        self._actions[columns] = actions[columns]
        for fd in orders:
            os.write(fd, b"s")

    @property
    def pids(self) -> list[int]:
        return [int(proc.pid) for proc in self._procs]

    def close(self) -> None:
        for pipe in self._pipes:
            pipe.close()  # the workers read EOF and end
        for proc in self._procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()


def floor_vs_raw(floor: str, args: argparse.Namespace, seed: int) -> Paired:
    """A ``FLOORS`` layout and the raw env, random actions, timed interleaved batch by batch as the
    samplers are (CPU: this process and the floor's workers)."""
    raw = RawAleEnv(args.game, args.envs, args.env_threads, seed + 1000)
    try:
        layout = HandoffFloor(args.game, args.envs, args.env_threads, FLOORS[floor](args.workers), seed)
        try:
            n_actions = raw.env.single_action_space.n
            actions = np.random.default_rng(seed).integers(
                0, n_actions, size=(args.batches + 1, args.batch_t, args.envs)
            )
            times, cpus = time_interleaved([raw_batches(raw), layout.batch], [[], layout.pids], actions)
        finally:
            layout.close()
    finally:
        raw.close()
    steps = args.batches * args.batch_t * args.envs
    (raw_rate, rate), (raw_cpu, cpu) = steps / times, cpus / steps
    return Paired(rate, raw_rate, cpu, raw_cpu)
