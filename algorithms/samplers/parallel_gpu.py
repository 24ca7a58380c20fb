"""Parallel GPU sampler: worker processes step envs only; the main process selects every action.

Workers hold rank slices of the B envs (seeded as in the serial sampler through ``make_vec_env(...,
first_rank=lo)``). Each step the main process runs the learner's agent once on all B observations,
on the agent's device (a GPU when the runner has one, the CPU otherwise), writes the actions into a
shared [B] buffer and tells the workers to step; each worker writes its envs' Contract 1 step output
straight into its columns of the shared [T, B] batch and answers on its pipe. Batching inference for all envs
is what makes one GPU serve many CPU env workers (rlpyt's GpuSampler,
rlpyt/samplers/parallel/gpu/sampler.py; its step and act synchronisation used semaphores, here
``step`` is the worker group's fast command, one small write on a raw pipe each way, waited on
together with the process sentinels so a dead worker is seen at once).

``RemoteVecEnv`` presents the workers as one vector env, so the per-step logic is the serial
sampler's own ``EnvStepper``; with the same seed the samples are the serial sampler's, random
exploration included (the agent draws from per-env-rank streams, ``algorithms.samplers.seeding``).

With ``SamplerConfig.env_workers="threads"`` the workers are an env backend's own threads instead of
processes (``group_env``): ale-py's native vector env steps its envs on C++ threads between ``send``
and ``recv``, in this process, so a step costs no process hand-off (two pipe messages and two
wake-ups per worker, which hold the process-worker mode well below the raw env rate:
docs/results/core_measurements.md, samplers/parallel_gpu.py). With one group, as here, that is the
serial sampler's loop on the native env; the alternating sampler gets two such groups.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from algorithms.arrays import NamedArrays
from algorithms.cpus import cpu_share, pinned
from algorithms.envs.factory import make_vec_env
from algorithms.samplers.base import BaseSampler, env_spaces
from algorithms.samplers.seeding import env_seed, exploration_streams
from algorithms.samplers.stepper import EnvStepper, StepWriter, allocate_samples, record_example
from algorithms.samplers.workers import WorkerGroup, split_ranks

# The fields of a sampler record that an env's step gives (Contract 1), in its order.
ENV_STEP_FIELDS = ("observation", "reward", "terminated", "truncated", "final_observation", "env_info")


def env_step_example(record: NamedArrays) -> NamedArrays:
    """One env's Contract 1 step output (no leading dim), from a sampler record example."""
    return NamedArrays({name: record[name] for name in ENV_STEP_FIELDS})


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
        self.final_observation = spec.samples.final_observation[:, columns].numpy()
        self.next_observation = spec.next_observation[self.rows].numpy()
        # The step's other outputs, leaf by leaf through numpy views of this worker's columns.
        outputs = env_step_example(spec.samples).replace(observation=None, final_observation=None)
        self.writer = StepWriter(outputs, columns)

    def reset(self) -> None:
        self.next_observation[:] = self.env.reset()

    def step(self, t: int) -> Callable[[], None] | None:
        """Env step ``t`` of the batch: its outputs at ``t``, the next observation at ``t + 1`` (or in
        ``next_observation`` after the last step); the batch's first observation is the previous
        batch's next one.

        Returns the copy of the step's final observations, which the worker runs after its reply
        (``WorkerGroup``'s fast command), except at the batch's last step: nothing the main process
        needs to act reads them, and the copy (a frame per env, 225 kB for 8 Atari envs) was part
        of the worker's batch writes after each env step, on the path env threads -> worker -> main
        -> worker -> env threads while the env threads waited (its share of a step:
        docs/results/core_measurements.md, samplers/parallel_gpu.py). The worker finishes the copy before
        it reads its next order, so the field is complete once the next step is received, and at
        once after the last.
        """
        if t == 0:
            self.observation[0] = self.next_observation
        step = self.env.step(self.actions)
        last = t + 1 == len(self.observation)
        (self.next_observation if last else self.observation[t + 1])[:] = step.observation
        self.writer.write(t, step.replace(observation=None, final_observation=None))
        copy = functools.partial(np.copyto, self.final_observation[t], step["final_observation"])
        if last:
            copy()
            return None
        return copy

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
    observation before the next ``send_step``. ``final_observation`` is the exception: the workers
    write it after their reply (``EnvWorker.step``), so step t's is complete once step t + 1 has
    been received (the batch's last step: at once); nothing in this process reads it, the learner
    reads the finished batch. ``step`` is ``send_step`` then ``receive_step``; split, they let the
    caller work while the workers step.
    """

    fresh_outputs = False

    def __init__(self, group: EnvGroup, cpus: list[frozenset[int]]) -> None:
        """``cpus``: each worker's CPUs (``algorithms.cpus.cpu_share``)."""
        num_envs, first_rank, samples = group.num_envs, group.first_rank, group.batch.samples
        self.num_envs = num_envs
        self.observation_space = group.batch.observation_space
        self.action_space = group.batch.action_space
        self.frameskip = group.env_config.env_frameskip
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
                group.env_config,
                group.seed,
                first_rank + row,
                row,
                n,
                self.actions,
                samples,
                self.next_observation,
            )
            for row, n in split_ranks(num_envs, group.n_workers)
        ]
        self.workers = WorkerGroup(group.name, specs, fast_command="step", cpus=cpus)

    def reset(self) -> np.ndarray:
        self.workers.call("reset")
        self._t = 0
        return self.next_observation.numpy()

    def send_step(self, actions: np.ndarray | torch.Tensor) -> None:
        self._actions_numpy[:] = np.asarray(actions)  # through numpy: cheaper than torch's setitem
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


@dataclass(frozen=True)
class GroupBatch:
    """The batch that an env-only sampler's groups of envs fill, and the spaces it was laid out for."""

    example: NamedArrays  # one step's record (``record_example``)
    samples: NamedArrays  # the [T, B] batch, in shared memory where worker processes write into it
    observation_space: Any
    action_space: Any


def group_batch(sampler: BaseSampler) -> GroupBatch:
    """``sampler``'s ``GroupBatch``, for its agent and env."""
    observation_space, action_space = env_spaces(sampler.env_config)
    example = record_example(observation_space, action_space, sampler.agent)
    shared = sampler.config.env_workers == "processes"  # process workers write into the batch
    samples = allocate_samples(example, sampler.batch_spec, shared=shared)
    return GroupBatch(example, samples, observation_space, action_space)


@dataclass(frozen=True)
class EnvGroup:
    """One group of an env-only sampler's envs: ranks ``first_rank ..`` of ``batch``, ``num_envs``
    of them, seeded from ``seed``, stepped by ``n_workers`` processes that ``name`` names."""

    name: str
    env_config: Any
    seed: int
    first_rank: int
    num_envs: int
    n_workers: int
    batch: GroupBatch


def group_env(
    config: Any,
    group: EnvGroup,
    first_worker: int = 0,
    all_workers: int | None = None,
    index: int = 0,
    n_groups: int = 1,
) -> Any:
    """The envs of ``group`` for an env-only sampler (``config``: its ``SamplerConfig``): a
    ``RemoteVecEnv`` over ``group.n_workers`` processes, the sampler's workers ``first_worker ..`` of
    ``all_workers`` (default ``group.n_workers``) sharing ``config.worker_cpus``, or with
    ``env_workers="threads"`` the backend's vector env in this process (seeded as the workers would
    seed it), whose threads start on group ``index`` of ``n_groups``'s share of it."""
    env_config = group.env_config
    if config.env_workers == "threads":
        if not env_config.native_atari:
            raise ValueError(
                f"SamplerConfig.env_workers 'threads' needs an env that steps on its own threads "
                f"(native ale-py Atari); {env_config.id!r} (kind {env_config.kind!r}) steps synchronously"
            )
        cpus = cpu_share(config.worker_cpus, index, n_groups)
        with pinned(cpus, "SamplerConfig.worker_cpus"):  # the env's threads inherit the CPUs
            return make_vec_env(env_config, group.num_envs, group.seed, first_rank=group.first_rank)
    n_workers = group.n_workers
    all_workers = n_workers if all_workers is None else all_workers
    cpus = [cpu_share(config.worker_cpus, first_worker + i, all_workers) for i in range(n_workers)]
    return RemoteVecEnv(group, cpus)


def group_stepper_args(env: Any, samples: NamedArrays) -> tuple[bool | None, frozenset[str]]:
    """(``EnvStepper``'s ``copy_observation``, ``StepWriter``'s ``skip``) for a ``group_env``: a
    remote group's outputs are views of the batch that its workers wrote (no copy, nothing to
    write); a local env's are fresh arrays the writer copies in."""
    if isinstance(env, RemoteVecEnv):
        return False, env_written_fields(samples)
    return None, frozenset()


def worker_pids(envs: list[Any]) -> list[int]:
    """Process ids of the worker processes behind ``group_env``s (none for thread workers)."""
    return [pid for env in envs if isinstance(env, RemoteVecEnv) for pid in env.workers.pids]


class ParallelGpuSampler(BaseSampler):
    """``config.n_workers`` env-only workers (or the env's threads); the learner's agent acts for
    all B envs in this process."""

    def initialize(self) -> None:
        B = self.batch_spec.B
        batch = group_batch(self)
        self.samples = batch.samples
        seed = env_seed(self.seed, "train", self.start_env_steps)
        self.env = group_env(
            self.config,
            EnvGroup("parallel-gpu sampler", self.env_config, seed, 0, B, self.config.n_workers, batch),
        )
        ranks = np.arange(B)
        self.agent.set_env_ranks(ranks, B, exploration_streams(self.seed, "train", self.start_env_steps))
        copy_observation, skip = group_stepper_args(self.env, self.samples)
        self.stepper = EnvStepper(self.env, self.agent, ranks, copy_observation=copy_observation)
        self.stepper.reset(batch.example.action)
        self.writer = StepWriter(self.samples, skip=skip)

    @torch.no_grad()
    def sample(self, itr: int) -> tuple[NamedArrays, list[dict[str, Any]]]:
        finished = self.stepper.collect(self.writer, self.batch_spec.T)
        return self.samples.replace(bootstrap=self.stepper.bootstrap()), [info for _, info in finished]

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of this sampler's workers (for monitoring and shutdown checks)."""
        return worker_pids([self.env])

    def shutdown(self) -> None:
        super().shutdown()
        env = getattr(self, "env", None)
        if env is not None:
            env.close()
            self.env = None
