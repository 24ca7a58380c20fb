"""Parallel GPU sampler: worker processes step envs only; the main process selects every action.

Workers hold rank slices of the B envs (seeded as in the serial sampler through ``make_vec_env(...,
first_rank=lo)``). Each step the main process runs the learner's agent once on all B observations,
on the agent's device (a GPU when the runner has one, the CPU otherwise), writes the actions into a
shared [B] buffer and tells the workers to step; each worker writes its envs' Contract 1 step output
straight into its columns of the shared [T, B] batch and answers on its pipe. Batching inference for all envs
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

from algorithms.arrays import NamedArrays
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


def env_written_fields(samples: NamedArrays) -> frozenset[str]:
    """Dotted names of the batch leaves that remote env workers write themselves (the main process's
    ``StepWriter`` skips them)."""
    return frozenset(name for name, _ in env_step_example(samples).flat_items())


@dataclass(frozen=True)
class EnvWorkerSpec:
    """What an env-only worker needs, picklable for ``spawn``; calling it builds the worker in the child."""

    env_config: Any
    env_seed: int
    first_rank: int  # global rank of this worker's first env: seeding, and its first column of the batch
    first_row: int  # its first row in the group's [n] buffers
    num_envs: int
    actions: torch.Tensor  # shared [n, *act] of the group, written by the main process
    samples: NamedArrays  # the shared [T, B] batch; this worker writes its envs' Contract 1 outputs there
    next_observation: torch.Tensor  # shared [n, *obs] of the group: the observation after the batch

    def __call__(self) -> EnvWorker:
        return EnvWorker(self)


class EnvWorker:
    """Inside the worker process: a slice of the envs, stepped on command with actions from shared
    memory, writing each step's output straight into its columns of the [T, B] batch."""

    def __init__(self, spec: EnvWorkerSpec) -> None:
        self.rows = slice(spec.first_row, spec.first_row + spec.num_envs)
        columns = slice(spec.first_rank, spec.first_rank + spec.num_envs)
        self.env = make_vec_env(spec.env_config, spec.num_envs, spec.env_seed, first_rank=spec.first_rank)
        self.actions = spec.actions[self.rows].numpy()
        self.observation = spec.samples.observation[:, columns].numpy()  # [T, b, *obs]
        self.next_observation = spec.next_observation[self.rows].numpy()
        # The step's other outputs, leaf by leaf through numpy views of this worker's columns.
        outputs = env_step_example(spec.samples).replace(observation=None)
        self.writer = StepWriter(outputs, columns)

    def reset(self) -> None:
        self.next_observation[:] = self.env.reset()

    def step(self, t: int) -> None:
        """Env step ``t`` of the batch: its outputs at ``t``, the next observation at ``t + 1`` (or in
        ``next_observation`` after the last step); the batch's first observation is the previous
        batch's next one."""
        if t == 0:
            self.observation[0] = self.next_observation
        step = self.env.step(self.actions)
        self.writer.write(t, step.replace(observation=None))
        if t + 1 < len(self.observation):
            self.observation[t + 1] = step.observation
        else:
            self.next_observation[:] = step.observation

    def close(self) -> None:
        self.env.close()


class RemoteVecEnv:
    """The envs of a ``WorkerGroup`` of ``EnvWorker``s behind Contract 1's vector-env interface.

    The envs have ranks ``first_rank ..`` and fill those columns of the shared [T, B] batch
    ``samples``: consecutive steps are the batch's time steps 0 .. T-1 in turn (from ``reset`` on),
    as in rlpyt, where workers wrote env outputs straight into the batch buffer
    (rlpyt/samplers/parallel/worker.py). Results are numpy views of the batch (the next
    observation at t + 1, or of the group's ``next_observation`` after the last step), so they stay
    valid until the next batch reaches the same step (with T = 1, the next step: ``VecEnv``'s rule
    that a result outlives the next ``send_step`` does not hold then), and the main process copies
    none of them: its ``StepWriter`` skips ``env_written_fields``, and its ``EnvStepper`` reads the
    observation before the next ``send_step``. ``step`` is ``send_step`` then ``receive_step``;
    split, they let the caller work while the workers step.
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
        samples: NamedArrays,
        observation_space: Any,
        action_space: Any,
        frameskip: int,
    ) -> None:
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space
        self.frameskip = frameskip
        self.actions = torch.zeros(
            (num_envs, *samples.action.shape[2:]), dtype=samples.action.dtype
        ).share_memory_()
        self._actions_numpy = self.actions.numpy()
        self.next_observation = torch.zeros(
            (num_envs, *samples.observation.shape[2:]), dtype=samples.observation.dtype
        ).share_memory_()
        T = samples.observation.shape[0]
        columns = slice(first_rank, first_rank + num_envs)
        outputs = env_step_example(samples.numpy())
        next_observation = self.next_observation.numpy()
        # The [B]-shaped result of each time step, built once: views, no per-step slicing.
        self._results = [
            outputs[t, columns].replace(
                observation=outputs.observation[t + 1, columns] if t + 1 < T else next_observation
            )
            for t in range(T)
        ]
        self._t = 0
        specs = [
            EnvWorkerSpec(
                env_config, seed, first_rank + row, row, n, self.actions, samples, self.next_observation
            )
            for row, n in split_ranks(num_envs, n_workers)
        ]
        self.workers = WorkerGroup(name, specs)

    def reset(self) -> np.ndarray:
        self.workers.call("reset")
        self._t = 0
        return self.next_observation.numpy()

    def send_step(self, actions: np.ndarray | torch.Tensor) -> None:
        self._actions_numpy[:] = np.asarray(actions)  # through numpy: ~1 us, torch's setitem ~6
        self.workers.send("step", self._t)

    def receive_step(self) -> NamedArrays:
        self.workers.receive()
        result = self._results[self._t]
        self._t = (self._t + 1) % len(self._results)
        return result

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
        self.samples = allocate_samples(example, self.batch_spec, shared=True)
        self.env = RemoteVecEnv(
            "parallel-gpu sampler",
            self.env_config,
            env_seed(self.seed, "train", self.start_env_steps),
            first_rank=0,
            num_envs=B,
            n_workers=self.config.n_workers,
            samples=self.samples,
            observation_space=observation_space,
            action_space=action_space,
            frameskip=self.env_config.env_frameskip,
        )
        ranks = np.arange(B)
        self.agent.set_env_ranks(ranks, B, exploration_streams(self.seed, "train", self.start_env_steps))
        # The remote env's outputs are views of the batch, valid until the next batch: no copies.
        self.stepper = EnvStepper(self.env, self.agent, ranks, copy_observation=False)
        self.stepper.reset(example.action)
        self.writer = StepWriter(self.samples, skip=env_written_fields(self.samples))

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
