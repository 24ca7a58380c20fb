"""Alternating sampler: two groups of env workers take turns, so one group's env stepping overlaps
action selection for the other.

As in the parallel GPU sampler, workers only step envs and the main process selects actions; but
the B envs form two groups (ranks ``[0, B0)`` and ``[B0, B)``), each with its own workers and shared
buffers. Per time step::

    act(group 0, t) -> group 0 steps ...     act(group 1, t) while group 0 steps
    wait(group 0, t), act(group 0, t + 1) while group 1 steps -> group 0 steps ...
    wait(group 1, t), act(group 1, t + 1) while group 0 steps -> ...

so the device (or the CPU running the policy) and the env workers are both busy: with env time E
and inference time I per half-batch, a step costs about ``2 max(E, I)`` instead of ``2 (E + I)``
(rlpyt's alternating GPU sampler, rlpyt/samplers/parallel/gpu/alternating_sampler.py; Stooke &
Abbeel 2019, "rlpyt", Sec. 2.2).

With ``SamplerConfig.env_workers="threads"`` each group is a native ale-py vector env in this
process whose own threads step it between ``send`` and ``recv`` (``parallel_gpu.group_env``): the
same turn-taking, without process hand-offs.

Per-step logic is the serial ``EnvStepper``'s, its ``act``, ``advance`` and ``finish`` called
around the env step (``GroupStepper``).
With the same seed the samples equal the serial sampler's, random exploration included: the agent
acts twice per step on B/2 envs instead of once on B, but draws from per-env-rank streams.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from algorithms.agents.base import RankStreams
from algorithms.arrays import NamedArrays, concatenate
from algorithms.samplers.base import BaseSampler
from algorithms.samplers.parallel_gpu import EnvGroup, group_batch, group_env, group_stepper_args, worker_pids
from algorithms.samplers.seeding import env_seed, exploration_streams
from algorithms.samplers.stepper import EnvStepper, StepWriter
from algorithms.samplers.workers import split_ranks


def group_workers(n_workers: int) -> list[int]:
    """The worker processes of each of the two groups: ``n_workers`` split between them, at least
    one each."""
    return [max(1, n) for _, n in split_ranks(max(2, n_workers), 2)]


class GroupStepper(EnvStepper):
    """``EnvStepper`` for one group: the agent is shared with the other group, so ``act`` sets its
    env ranks (per-env epsilons and random streams) to this group's before acting; the recurrent
    state and previous action/reward are this group's."""

    def __init__(
        self,
        env: Any,
        agent: Any,
        env_ranks: np.ndarray,
        global_batch: int,
        streams: RankStreams,
        copy_observation: bool | None,
    ) -> None:
        super().__init__(env, agent, env_ranks, copy_observation=copy_observation)
        self.global_batch = int(global_batch)
        self.streams = streams

    def act(self) -> np.ndarray:
        self.agent.set_env_ranks(self.env_ranks, self.global_batch, self.streams)
        return super().act()


class AlternatingSampler(BaseSampler):
    """Two groups of env workers (``config.n_workers`` processes split between them, at least one
    each; or, with ``env_workers="threads"``, each group's env threads)."""

    min_batch_B = 2  # one env at least in each of the two groups

    def initialize(self) -> None:
        B = self.batch_spec.B
        batch = group_batch(self)
        self.samples = batch.samples
        seed = env_seed(self.seed, "train", self.start_env_steps)
        streams = exploration_streams(self.seed, "train", self.start_env_steps)
        workers = group_workers(self.config.n_workers)
        self.groups: list[GroupStepper] = []
        self.writers: list[StepWriter] = []
        try:
            for g, (first, n) in enumerate(split_ranks(B, 2)):
                spec = EnvGroup(
                    f"alternating sampler group {g}",
                    self.env_config,
                    seed,
                    first,
                    n,
                    min(workers[g], n),
                    batch,
                )
                env = group_env(
                    self.config,
                    spec,
                    first_worker=sum(workers[:g]),
                    all_workers=sum(workers),
                    index=g,
                    n_groups=2,
                )
                copy_observation, skip = group_stepper_args(env, self.samples)
                ranks = np.arange(first, first + n)
                self.groups.append(GroupStepper(env, self.agent, ranks, B, streams, copy_observation))
                self.writers.append(StepWriter(self.samples, slice(first, first + n), skip=skip))
            for group in self.groups:
                group.reset(batch.example.action)
        except BaseException:
            self.shutdown()
            raise

    @torch.no_grad()
    def sample(self, itr: int) -> tuple[NamedArrays, list[dict[str, Any]]]:
        T = self.batch_spec.T
        traj_infos: list[dict[str, Any]] = []
        for group in self.groups:
            group.env.send_step(group.act())  # returns without waiting for the envs
        for t in range(T):
            # Groups finish step t in rank order, so episodes keep the serial order (t, env rank).
            for group in self.groups:
                group.advance(group.env.receive_step())
                if t + 1 < T:
                    group.env.send_step(group.act())  # overlaps the other group's env step
            # Records once both groups step again: writing group 0's before group 1's receive would
            # keep group 1's envs waiting for it (remote groups: the agent's fields only, the
            # workers wrote the env's).
            for group, writer in zip(self.groups, self.writers):
                record, finished = group.finish()
                traj_infos.extend(finished)
                writer.write(t, record)
        bootstrap = concatenate([group.bootstrap() for group in self.groups])
        return self.samples.replace(bootstrap=bootstrap), traj_infos

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of both groups' workers (for monitoring and shutdown checks)."""
        return worker_pids([group.env for group in self.groups])

    def shutdown(self) -> None:
        super().shutdown()
        for group in getattr(self, "groups", []):
            group.env.close()
        self.groups = []
