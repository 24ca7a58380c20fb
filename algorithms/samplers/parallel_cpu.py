"""Parallel CPU sampler: worker processes step their envs *and* run their own copy of the policy.

The B environments are split into contiguous rank slices, one per worker (``split_ranks``). Each
worker builds its envs (seeded exactly as env ranks ``[lo, hi)`` of the serial sampler's vector env,
``make_vec_env(..., first_rank=lo)``) and an agent from the picklable ``AgentFactory``, then drives
them with the serial sampler's own ``EnvStepper``, writing its columns ``[:, lo:hi]`` of the [T, B]
batch straight into shared memory. Before every batch the learner's parameters are pushed to a
``SharedStateDict`` and each worker loads them if they changed, with the learner agent's mode and
env-step count (rlpyt's CpuSampler, rlpyt/samplers/parallel/cpu/sampler.py, with ``spawn`` instead
of ``fork``).

Same seed, same samples as ``SerialSampler``, random exploration included: each worker's agent
draws from the random streams of its own env ranks, built from the same seed as the serial
sampler's (``exploration_streams``, ``algorithms.samplers.seeding``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from algorithms.agents.base import RankStreams
from algorithms.arrays import NamedArrays, buffer_from_example
from algorithms.cpus import cpu_share
from algorithms.envs.factory import make_vec_env
from algorithms.samplers.base import BaseSampler, env_spaces
from algorithms.samplers.seeding import env_seed, exploration_streams
from algorithms.samplers.stepper import EnvStepper, StepWriter, allocate_samples, record_example
from algorithms.samplers.workers import SharedStateDict, WorkerGroup, split_ranks


def bootstrap_example(record: NamedArrays, agent: Any) -> NamedArrays:
    """One env's Contract 3 ``bootstrap`` entry (no leading dim), to allocate the shared [B] buffer."""
    example = NamedArrays(
        observation=record.observation, prev_action=record.prev_action, prev_reward=np.float32(0)
    )
    if agent.recurrent:
        example = example.replace(agent_state=agent.initial_state(1)[0].map(lambda x: x.detach().cpu()))
    return example


def merge_traj_infos(per_worker: list[list[tuple[int, dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Worker episode lists of ``(t, info)`` -> one list in the serial sampler's order (t, then env rank)."""
    tagged = [item for items in per_worker for item in items]
    tagged.sort(key=lambda item: (item[0], item[1]["env_rank"]))
    return [info for _, info in tagged]


@dataclass(frozen=True)
class CpuWorkerSpec:
    """Everything a CPU worker needs, picklable for ``spawn``; calling it builds the worker in the child."""

    env_config: Any
    agent_factory: Any  # registry.AgentFactory or another picklable () -> Agent
    env_seed: int
    first_rank: int
    num_envs: int
    global_batch: int
    torch_seed: int
    streams: RankStreams  # generators are built on first use: each worker's copy builds its own ranks'
    action_example: torch.Tensor
    samples: NamedArrays  # shared [T, B] buffer; this worker writes columns [first_rank, +num_envs)
    bootstrap: NamedArrays  # shared [B]
    params: SharedStateDict

    def __call__(self) -> CpuWorker:
        return CpuWorker(self)


class CpuWorker:
    """Inside the worker process: a slice of the envs and a copy of the agent."""

    def __init__(self, spec: CpuWorkerSpec) -> None:
        torch.manual_seed(spec.torch_seed)
        self.spec = spec
        self.columns = slice(spec.first_rank, spec.first_rank + spec.num_envs)
        self.env = make_vec_env(spec.env_config, spec.num_envs, spec.env_seed, first_rank=spec.first_rank)
        self.agent = spec.agent_factory()
        self.params_version = spec.params.pull(self.agent, -1)
        ranks = np.arange(spec.first_rank, spec.first_rank + spec.num_envs)
        self.agent.set_env_ranks(ranks, spec.global_batch, spec.streams)
        self.stepper = EnvStepper(self.env, self.agent, ranks)
        self.stepper.reset(spec.action_example)
        self.writer = StepWriter(spec.samples, self.columns)

    @torch.no_grad()
    def sample(self, mode: str, env_steps: int) -> list[tuple[int, dict[str, Any]]]:
        """Fill this worker's columns of the shared batch; returns ``(t, traj_info)`` of finished games."""
        self.params_version = self.spec.params.pull(self.agent, self.params_version)
        self.agent.set_mode(mode, env_steps)
        finished_games = self.stepper.collect(self.writer, self.spec.samples.observation.shape[0])
        self.spec.bootstrap[self.columns] = self.stepper.bootstrap()
        return finished_games

    def close(self) -> None:
        self.env.close()


class ParallelCpuSampler(BaseSampler):
    """``config.n_workers`` processes, each with ``~B / n_workers`` envs and its own agent copy.

    ``agent_factory`` is a picklable ``() -> Agent`` building an agent like the learner's
    (``registry.AgentFactory(algo, algo_config, observation_space, action_space)``); the workers'
    copies get the learner's parameters before they act.
    """

    def initialize(self) -> None:
        if self.agent_factory is None:
            raise ValueError(
                "ParallelCpuSampler needs agent_factory (e.g. registry.AgentFactory) to build worker agents"
            )
        observation_space, action_space = env_spaces(self.env_config)
        B = self.batch_spec.B
        example = record_example(observation_space, action_space, self.agent)
        self.samples = allocate_samples(example, self.batch_spec, shared=True)
        self.bootstrap = buffer_from_example(bootstrap_example(example, self.agent), B, shared=True)
        self.params = SharedStateDict(self.agent.state_dict())
        seed = env_seed(self.seed, "train", self.start_env_steps)
        streams = exploration_streams(self.seed, "train", self.start_env_steps)
        specs = [
            CpuWorkerSpec(
                env_config=self.env_config,
                agent_factory=self.agent_factory,
                env_seed=seed,
                first_rank=first,
                num_envs=n,
                global_batch=B,
                torch_seed=int(np.random.SeedSequence([self.seed, rank]).generate_state(1)[0]),
                streams=streams,
                action_example=example.action,
                samples=self.samples,
                bootstrap=self.bootstrap,
                params=self.params,
            )
            for rank, (first, n) in enumerate(split_ranks(B, self.config.n_workers))
        ]
        cpus = [cpu_share(self.config.worker_cpus, i, len(specs)) for i in range(len(specs))]
        self.workers = WorkerGroup("parallel-cpu sampler", specs, cpus=cpus)

    def sample(self, itr: int) -> tuple[NamedArrays, list[dict[str, Any]]]:
        self.params.push(self.agent.state_dict())
        per_worker = self.workers.call("sample", self.agent.mode, self.agent.env_steps)
        return self.samples.replace(bootstrap=self.bootstrap), merge_traj_infos(per_worker)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of this sampler's workers (for monitoring and shutdown checks)."""
        return self.workers.pids

    def shutdown(self) -> None:
        super().shutdown()
        workers = getattr(self, "workers", None)
        if workers is not None:
            workers.close()
