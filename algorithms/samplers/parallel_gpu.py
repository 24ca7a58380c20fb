"""Parallel GPU sampler: worker processes step envs only; the main process selects every action.

Workers hold rank slices of the B envs (seeded as in the serial sampler through ``make_vec_env(...,
first_rank=lo)``). Each step the main process runs the learner's agent once on all B observations,
on the agent's device (a GPU when the runner has one, the CPU otherwise), writes the actions into a
shared [B] buffer and tells the workers to step; each worker writes its envs' Contract 1 step output
into its rows of a shared [B] step buffer and answers on its pipe. Batching inference for all envs
is what makes one GPU serve many CPU env workers (rlpyt's GpuSampler,
rlpyt/samplers/parallel/gpu/sampler.py; its step and act synchronisation used semaphores, here the
command pipes do, so a dead worker is seen at once through its process sentinel).

``RemoteVecEnv`` presents the workers as one vector env, so the per-step logic is the serial
sampler's own ``EnvStepper``; with the same seed the samples are the serial sampler's, random
exploration included (the agent draws from per-env-rank streams, ``algorithms.samplers.base``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from algorithms.arrays import NamedArrays, buffer_from_example
from algorithms.envs.factory import make_vec_env
from algorithms.samplers.base import (
    BaseSampler,
    EnvStepper,
    StepWriter,
    allocate_samples,
    env_seed,
    env_spaces,
    exploration_streams,
    record_example,
)
from algorithms.samplers.workers import WorkerGroup, split_ranks


def env_step_example(record: NamedArrays) -> NamedArrays:
    """One env's Contract 1 step output (no leading dim), from a sampler record example."""
    return NamedArrays(
        observation=record.observation,
        reward=record.reward,
        terminated=record.terminated,
        truncated=record.truncated,
        final_observation=record.final_observation,
        env_info=record.env_info,
    )


@dataclass(frozen=True)
class EnvWorkerSpec:
    """What an env-only worker needs, picklable for ``spawn``; calling it builds the worker in the child."""

    env_config: Any
    env_seed: int
    first_rank: int  # global rank of this worker's first env (seeding)
    first_row: int  # its row in the group's shared buffers
    num_envs: int
    actions: torch.Tensor  # shared [b, *act] of the group, written by the main process
    env_outs: tuple[NamedArrays, ...]  # the group's shared [b] step output slots; this worker writes its rows

    def __call__(self) -> EnvWorker:
        return EnvWorker(self)


class EnvWorker:
    """Inside the worker process: a slice of the envs, stepped on command with actions from shared memory."""

    def __init__(self, spec: EnvWorkerSpec) -> None:
        self.spec = spec
        self.rows = slice(spec.first_row, spec.first_row + spec.num_envs)
        self.env = make_vec_env(spec.env_config, spec.num_envs, spec.env_seed, first_rank=spec.first_rank)
        self.actions = spec.actions[self.rows].numpy()
        # Leaf by leaf through numpy views of this worker's rows (StepWriter's fast path).
        self.writers = [StepWriter(out[None], self.rows) for out in spec.env_outs]

    def reset(self, slot: int) -> None:
        self.spec.env_outs[slot].observation[self.rows] = torch.from_numpy(self.env.reset())

    def step(self, slot: int) -> None:
        self.writers[slot].write(0, self.env.step(self.actions))

    def close(self) -> None:
        self.env.close()


class RemoteVecEnv:
    """The envs of a ``WorkerGroup`` of ``EnvWorker``s behind Contract 1's vector-env interface.

    ``step`` is ``send_step`` then ``receive_step``; split, they let the caller work while the
    workers step. Results are numpy views of shared step buffers; consecutive steps alternate
    between two of them, so what one step returned stays valid while the next one runs (the
    ``VecEnv`` rule, which lets ``EnvStepper.collect`` write it meanwhile) and is overwritten by the
    step after (hence ``fresh_outputs = False``).
    """

    fresh_outputs = False

    def __init__(
        self,
        name: str,
        env_config: Any,
        seed: int,
        first_rank: int,
        num_envs: int,
        n_workers: int,
        example: NamedArrays,
        observation_space: Any,
        action_space: Any,
        frameskip: int,
    ) -> None:
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space
        self.frameskip = frameskip
        self.actions = torch.zeros(
            (num_envs, *example.action.shape), dtype=example.action.dtype
        ).share_memory_()
        out_example = env_step_example(example)
        env_outs = tuple(buffer_from_example(out_example, num_envs, shared=True) for _ in range(2))
        self._outs_numpy = [out.numpy() for out in env_outs]
        self._slot = 0
        specs = [
            EnvWorkerSpec(env_config, seed, first_rank + row, row, n, self.actions, env_outs)
            for row, n in split_ranks(num_envs, n_workers)
        ]
        self.workers = WorkerGroup(name, specs)

    def reset(self) -> np.ndarray:
        self.workers.call("reset", self._slot)
        return self._outs_numpy[self._slot].observation

    def send_step(self, actions: np.ndarray | torch.Tensor) -> None:
        self.actions[:] = torch.as_tensor(actions)
        self._slot ^= 1
        self.workers.send("step", self._slot)

    def receive_step(self) -> NamedArrays:
        self.workers.receive()
        return self._outs_numpy[self._slot]

    def step(self, actions: np.ndarray | torch.Tensor) -> NamedArrays:
        self.send_step(actions)
        return self.receive_step()

    def close(self) -> None:
        self.workers.close()


class ParallelGpuSampler(BaseSampler):
    """``config.n_workers`` env-only workers; the learner's agent acts for all B envs in this process."""

    def initialize(self) -> None:
        observation_space, action_space = env_spaces(self.env_config)
        B = self.batch_spec.B
        example = record_example(observation_space, action_space, self.agent)
        self.samples = allocate_samples(example, self.batch_spec)
        self.env = RemoteVecEnv(
            "parallel-gpu sampler",
            self.env_config,
            env_seed(self.seed, "train", self.start_env_steps),
            first_rank=0,
            num_envs=B,
            n_workers=self.config.n_workers,
            example=example,
            observation_space=observation_space,
            action_space=action_space,
            frameskip=self.env_config.env_frameskip,
        )
        ranks = np.arange(B)
        self.agent.set_env_ranks(ranks, B, exploration_streams(self.seed, "train", self.start_env_steps))
        self.stepper = EnvStepper(self.env, self.agent, ranks)
        self.stepper.reset(example.action)
        self.writer = StepWriter(self.samples)

    @torch.no_grad()
    def sample(self, itr: int) -> tuple[NamedArrays, list[dict[str, Any]]]:
        finished = self.stepper.collect(self.writer, self.batch_spec.T)
        return self.samples.replace(bootstrap=self.stepper.bootstrap()), [info for _, info in finished]

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of this sampler's workers (for monitoring and shutdown checks)."""
        return self.env.workers.pids

    def shutdown(self) -> None:
        super().shutdown()
        env = getattr(self, "env", None)
        if env is not None:
            env.close()
            self.env = None
