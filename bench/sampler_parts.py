"""The pieces the sampler and env benchmarks (``bench.bench_sampler``, ``bench.bench_env``) share: the
trivial random policy and its picklable factory, the raw ale-py env they are measured against, and
the clocks that time several runs interleaved batch by batch (CPU time from /proc for worker
processes)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from algorithms.agents.base import Agent
from algorithms.agents.dqn_agents import EpsilonGreedyAgent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.arrays import NamedArrays
from algorithms.envs.atari import ale_vector_env
from algorithms.envs.config import EnvConfig
from algorithms.models.dqn_model import QNetwork
from algorithms.samplers.base import env_spaces


class RandomAgent(Agent):
    """The trivial policy: uniform random actions, no network evaluation (the linear layer only
    gives ``Agent`` a device).

    Actions are slices of a pool drawn up front, as the raw env loop draws its actions before it is
    timed, so that the policy costs next to nothing and the comparison measures the sampler (a
    ``torch.randint`` per step cost 5-10% of the serial sampler's main-thread time, py-spy)."""

    POOL = 1 << 16

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        super().__init__(nn.Linear(1, 1), observation_space, action_space)
        self.n_actions = int(action_space.n)
        draws = np.random.default_rng(0).integers(0, self.n_actions, size=self.POOL)
        self._pool = torch.from_numpy(draws)
        self._next = 0

    def step(self, observation, prev_action, prev_reward, state):
        B = observation.shape[0]
        if self._next + B > self.POOL:
            self._next = 0
        action = self._pool[self._next : self._next + B]
        self._next += B
        return action, NamedArrays(), None


@dataclass(frozen=True)
class AgentFactory:
    """Picklable agent recipe for the sampler workers: ``"random"`` or ``"nature_cnn"``."""

    policy: str
    env: EnvConfig

    def __call__(self) -> Agent:
        observation_space, action_space = env_spaces(self.env)
        if self.policy == "random":
            return RandomAgent(observation_space, action_space)
        # Epsilon 0.01: the network is evaluated on every step, as in a late-training actor.
        schedule = EpsilonSchedule(start=0.01, final=0.01, decay_steps=0, eval=0.001)
        model = QNetwork(tuple(observation_space.shape), int(action_space.n))
        return EpsilonGreedyAgent(model, observation_space, action_space, schedule)


def env_config(game: str, env_threads: int, n_envs: int) -> EnvConfig:
    """The game's native env config when ``env_threads`` are split over ``n_envs`` vector envs."""
    return EnvConfig(game, num_threads=max(1, env_threads // n_envs))


class RawAleEnv:
    """The raw reference: ale-py's ``AtariVectorEnv`` set up as ``NativeAtariVecEnv`` sets it up
    (``ale_vector_env``), stepped with ``send`` / ``recv`` only (ale-py resets ended games itself,
    on the next step)."""

    def __init__(self, game: str, n_envs: int, env_threads: int, seed: int) -> None:
        self.env = ale_vector_env(env_config(game, env_threads, 1), n_envs)
        self.env.reset(seed=np.arange(seed, seed + n_envs))

    def step(self, actions: np.ndarray) -> None:
        self.env.send(actions)
        self.env.recv()

    def close(self) -> None:
        self.env.close()


def raw_env_rate(game: str, n_envs: int, env_threads: int, steps: int, seed: int) -> tuple[float, float]:
    """(env steps per second, CPU seconds per env step over all its threads) of the raw ale-py
    vector env with random actions."""
    env = RawAleEnv(game, n_envs, env_threads, seed)
    try:
        n_actions = env.env.single_action_space.n
        actions = np.random.default_rng(seed).integers(0, n_actions, size=(steps + 10, n_envs))
        for a in actions[:10]:
            env.step(a)
        start, cpu = time.perf_counter(), time.process_time()
        for a in actions[10:]:
            env.step(a)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        return steps * n_envs / seconds, cpu / (steps * n_envs)
    finally:
        env.close()


class Paired(NamedTuple):
    """A mode timed beside the raw env: env steps per second and CPU seconds per env step (all
    threads of every process taking part) of each."""

    rate: float
    raw_rate: float
    cpu: float
    raw_cpu: float


def process_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system, every thread) the processes ``pids`` have used so far, from
    Linux's /proc (fields 14 and 15 of proc(5)'s ``stat``, in clock ticks); NaN without /proc."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def raw_batches(env: Any) -> Any:
    """``env.step`` over the rows of a [T, B] batch of actions."""

    def run(actions: np.ndarray) -> None:
        for a in actions:
            env.step(a)

    return run


def time_interleaved(
    runs: list[Any], pids: list[list[int]], actions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(wall seconds, CPU seconds) of each of ``runs`` (callables taking a [T, B] batch of actions),
    called in turn on every batch of ``actions`` [N, T, B] but the first, which warms them up; CPU
    time is this process's and that of the ``pids`` of each run (its worker processes)."""
    times, cpus = np.zeros(len(runs)), np.zeros(len(runs))
    for batch, batch_actions in enumerate(actions):
        for i, (run, run_pids) in enumerate(zip(runs, pids, strict=True)):
            cpu = time.process_time() + process_cpu_s(run_pids)  # read before the clock starts
            start = time.perf_counter()
            run(batch_actions)
            if batch:
                times[i] += time.perf_counter() - start
                cpus[i] += time.process_time() + process_cpu_s(run_pids) - cpu
    return times, cpus


def cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
