"""Same seed, same samples, exploration included: serial vs parallel CPU vs parallel GPU (CPU
fallback) vs alternating; and after ``shutdown`` no worker process is left.

Real exploring agents act with 5 envs split unevenly over 2 workers (or the alternating sampler's
two groups), over several batches so that episodes end inside batches and across batch boundaries:
epsilon-greedy (epsilon 0.5) over an MLP Q-network and over the recurrent R2D1 model, and PPO's
categorical policy on CartPole; SAC on Pendulum, through its uniform warm-up and then its
tanh-Gaussian samples. Every field of every batch, the bootstrap entry (with the recurrent state)
and the finished-episode list must equal the serial sampler's; the global torch RNG is seeded
differently in every mode, since per-env streams (``agents.base.RankStreams``) make it irrelevant.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from algorithms import registry
from algorithms.agents.dqn_agents import EpsilonGreedyAgent, R2D1Agent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.algos import ppo, sac
from algorithms.arrays import NamedArrays
from algorithms.cpus import cpu_share
from algorithms.envs.config import EnvConfig
from algorithms.models.dqn_model import QNetwork
from algorithms.models.r2d1_model import R2D1Model
from algorithms.run_config import SamplerConfig
from algorithms.samplers.base import env_spaces
from algorithms.samplers.modes import make_sampler

ENV = EnvConfig(id="CartPole-v1", kind="gym")
PENDULUM = EnvConfig(id="Pendulum-v1", kind="gym")
T, B = 9, 5
MODES = ("serial", "cpu", "gpu", "alternating")


@dataclass(frozen=True)
class CartPoleAgentFactory:
    """Picklable recipe for a small real agent on CartPole, as ``registry.AgentFactory`` is for an algo."""

    recurrent: bool = False
    epsilon: float = 0.5

    def __call__(self) -> EpsilonGreedyAgent:
        observation_space, action_space = env_spaces(ENV)
        # Evaluation explores too (its own streams): the eval episodes must match across modes.
        schedule = EpsilonSchedule(start=self.epsilon, final=self.epsilon, decay_steps=0, eval=self.epsilon)
        if self.recurrent:
            model = R2D1Model((4,), 2, lstm_size=8, fc_size=0, head_hidden_size=8, mlp_hidden_sizes=(8,))
            return R2D1Agent(model, observation_space, action_space, schedule)
        model = QNetwork((4,), 2, mlp_hidden_sizes=(16,))
        return EpsilonGreedyAgent(model, observation_space, action_space, schedule)


def algo_factory(algo: str, config: object, env: EnvConfig) -> registry.AgentFactory:
    return registry.AgentFactory(algo, config, *env_spaces(env))


def collect(
    mode: str, factory, env: EnvConfig = ENV, n_batches: int = 2, eval_after=(1,), seed: int = 7
) -> list:
    """(samples, traj_infos) of ``n_batches`` batches from a fresh sampler of ``mode`` (samples
    copied), each batch whose index is in ``eval_after`` followed by (empty, evaluation episodes)."""
    torch.manual_seed(0)
    agent = factory()  # same parameters in every mode: seeded construction
    config = SamplerConfig(mode=mode, batch_T=T, batch_B=B, n_workers=2, eval_max_steps=50)
    sampler = make_sampler(mode, env, agent, config, seed, agent_factory=factory)
    out = []
    try:
        sampler.initialize()
        pids = sampler.worker_pids
        torch.manual_seed(100 + MODES.index(mode))  # per-env streams make the global RNG irrelevant
        for itr in range(n_batches):
            agent.set_mode("sample", itr * config.batch_size)
            samples, traj_infos = sampler.sample(itr)
            out.append((samples.map(torch.clone), traj_infos))
            if itr in eval_after:
                # Evaluation works in every mode (eval-mode episodes on separate envs in this process).
                out.append((NamedArrays(), sampler.evaluate(2, (itr + 1) * config.batch_size)))
    finally:
        sampler.shutdown()
    assert len(pids) == (0 if mode == "serial" else 2)
    for pid in pids:  # a normal close joins every worker: none is left running (or as a zombie)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    return out


def assert_same_batches(
    expected: list, got: list, mode: str, min_episodes: int = 2, continuous: bool = False
) -> None:
    """Every field equal, except network outputs: a forward pass on a slice of the batch may round
    differently (BLAS blocking depends on the batch size), so ``agent_info`` and the recurrent state
    are equal up to float rounding; so are all float fields when the actions are ``continuous``
    (network outputs themselves, which the env data then follows; measured 2e-7 on Pendulum)."""
    for itr, ((s_exp, t_exp), (s_got, t_got)) in enumerate(zip(expected, got, strict=True)):
        assert s_exp.fields == s_got.fields, f"{mode}: fields differ"
        for (name, a), (_, b) in zip(s_exp.flat_items(), s_got.flat_items(), strict=True):
            assert a.shape == b.shape, (
                f"{mode}, batch {itr}: {name} shape {tuple(b.shape)} != {tuple(a.shape)}"
            )
            network_output = name.startswith("agent_info.") or name.startswith("bootstrap.agent_state.")
            if network_output or (continuous and a.is_floating_point()):
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{mode}, batch {itr}: {name}")
            else:
                assert torch.equal(a, b.to(a.dtype)), f"{mode}, batch {itr}: {name} differs from serial"
        assert t_got == t_exp, f"{mode}, batch {itr}: finished episodes differ from serial"
    episodes = sum(len(t) for s, t in expected if s.fields)  # training batches only
    assert episodes >= min_episodes, "the comparison should span episode ends"


# name -> (agent factory, env, modes compared with serial, episodes the batches must span)
EXPLORING_AGENTS = {
    "dqn": (lambda: CartPoleAgentFactory(), ENV, MODES[1:], 2),
    # Recurrent state kept per worker (cpu) or per group (alternating) while acting on slices.
    "r2d1": (lambda: CartPoleAgentFactory(recurrent=True), ENV, ("cpu", "alternating"), 2),
    # PPO's initial policy keeps CartPole up longer than epsilon 0.5 does: one episode end.
    "ppo": (lambda: algo_factory("ppo", ppo.Config(hidden_sizes=(16,)), ENV), ENV, MODES[1:], 1),
    # Batch 0 inside the uniform warm-up (random_steps = one batch), batch 1 from the policy.
    # Pendulum's episodes last 200 steps: none ends in 2 batches of 9.
    "sac": (
        lambda: algo_factory("sac", sac.Config(hidden_sizes=(16, 16), random_steps=T * B), PENDULUM),
        PENDULUM,
        MODES[1:],
        0,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPLORING_AGENTS))
def test_parallel_modes_match_serial_with_exploration(name: str) -> None:
    make_factory, env, modes, min_episodes = EXPLORING_AGENTS[name]
    factory = make_factory()
    serial = collect("serial", factory, env)
    actions = torch.stack([s.action for s, _ in serial if s.fields])
    assert len(torch.unique(actions)) > 1, "the agent should explore"
    for mode in modes:
        continuous = env is PENDULUM
        assert_same_batches(serial, collect(mode, factory, env), mode, min_episodes, continuous)


def test_evaluation_does_not_shift_training_draws() -> None:
    """Evaluating between two batches (epsilon 0.5 there too) leaves the next batch unchanged."""
    factory = CartPoleAgentFactory()
    with_eval = collect("serial", factory, eval_after=(0,))
    without = collect("serial", factory, eval_after=())
    assert len(with_eval[1][1]) == 2  # the evaluation ran
    del with_eval[1]
    assert_same_batches(without, with_eval, "serial with evaluation")


def test_split_ranks_cover_all_envs() -> None:
    from algorithms.samplers.workers import split_ranks

    assert split_ranks(5, 2) == [(0, 3), (3, 2)]
    assert split_ranks(4, 4) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    with pytest.raises(ValueError, match="n_workers"):
        split_ranks(2, 3)
    firsts = np.array([f for f, _ in split_ranks(17, 5)])
    assert firsts[0] == 0 and np.all(np.diff(firsts) >= 3)


@dataclass(frozen=True)
class PongAgentFactory:
    """The Nature DQN network behind the epsilon-greedy agent on Pong (epsilon 0.5: random actions)."""

    def __call__(self) -> EpsilonGreedyAgent:
        observation_space, action_space = env_spaces(PONG)
        schedule = EpsilonSchedule(start=0.5, final=0.5, decay_steps=0, eval=0.0)
        model = QNetwork(tuple(observation_space.shape), int(action_space.n))
        return EpsilonGreedyAgent(model, observation_space, action_space, schedule)


# Truncated after 40 frames (10 steps): the 3 batches of 6 steps span episode ends, so final
# observations and resets go through every mode's buffers (the remote envs' alternating slots).
PONG = EnvConfig(id="pong", num_threads=1, max_episode_frames=40)


# The env-only modes again with the native env's threads as their workers (``env_workers="threads"``).
THREAD_MODES = ("gpu", "alternating")


@pytest.mark.slow
def test_native_atari_worker_slices_match_serial() -> None:
    """Every mode on slices of ale-py's native vector env sees the serial sampler's episodes, with
    process workers, pinned process workers (each on its block of ``worker_cpus``, its env threads
    too; the alternating groups' workers numbered across the groups) and, where the workers only
    step envs, with the env's threads as workers, pinned (group g's on block g) or not."""
    all_cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    results = {}
    runs = (
        [(mode, "processes", "") for mode in MODES]
        + [(mode, "processes", all_cpus) for mode in ("cpu", "alternating")]
        + [(mode, "threads", "") for mode in THREAD_MODES]
        + [("alternating", "threads", all_cpus)]
    )
    for mode, env_workers, worker_cpus in runs:
        torch.manual_seed(0)
        agent = PongAgentFactory()()
        config = SamplerConfig(
            mode=mode, batch_T=6, batch_B=4, n_workers=2, env_workers=env_workers, worker_cpus=worker_cpus
        )
        sampler = make_sampler(mode, PONG, agent, config, seed=5, agent_factory=PongAgentFactory())
        threads_before = set(os.listdir("/proc/self/task"))
        main_cpus = os.sched_getaffinity(0)
        try:
            sampler.initialize()
            agent.set_mode("sample", 0)
            if env_workers == "threads":
                assert sampler.worker_pids == []
            if env_workers == "threads" and worker_cpus:
                env_threads = set(os.listdir("/proc/self/task")) - threads_before
                on = sorted(sorted(os.sched_getaffinity(int(tid))) for tid in env_threads)
                assert len(env_threads) == 2, "one env thread per group"
                assert on == sorted(sorted(cpu_share(worker_cpus, g, 2)) for g in (0, 1))
                assert os.sched_getaffinity(0) == main_cpus  # the main thread's CPUs are as before
            for rank, pid in enumerate(sampler.worker_pids if worker_cpus else []):
                threads = os.listdir(f"/proc/{pid}/task")
                assert len(threads) >= 2  # the worker's own and ale-py's env thread
                on = {cpu for tid in threads for cpu in os.sched_getaffinity(int(tid))}
                assert on == cpu_share(worker_cpus, rank, 2), f"{mode} worker {rank}"
            results[mode, env_workers, worker_cpus] = [
                (samples.map(torch.clone), traj_infos)
                for samples, traj_infos in (sampler.sample(itr) for itr in range(3))
            ]
        finally:
            sampler.shutdown()
    for key in runs[1:]:
        assert_same_batches(results[runs[0]], results[key], "/".join(filter(None, key)), min_episodes=4)
    serial = [samples for samples, _ in results[runs[0]]]
    # Real frames, not untouched buffers, were compared; the agent explored; episodes were cut.
    assert float(serial[0].observation.float().std()) > 0
    assert len(torch.unique(serial[0].action)) > 1
    assert sum(int(samples.truncated.sum()) for samples in serial) >= 4


@pytest.mark.parametrize("mode", THREAD_MODES)
def test_thread_env_workers_refuse_a_synchronous_env(mode: str) -> None:
    """A sampler built without ``TrainConfig``'s check still refuses thread workers on an env that
    steps synchronously (they would serialise the steps they are meant to overlap)."""
    agent = registry.algo_module("dqn").build_agent(registry.config_class("dqn")(), *env_spaces(ENV))
    config = SamplerConfig(mode=mode, batch_T=2, batch_B=2, env_workers="threads")
    sampler = make_sampler(mode, ENV, agent, config, seed=0)
    with pytest.raises(ValueError, match="env_workers 'threads' needs an env that steps on its own threads"):
        sampler.initialize()
    sampler.shutdown()


def test_alternating_refuses_a_batch_too_small_for_two_groups() -> None:
    """Each of the alternating sampler's two groups needs an env: ``batch_B`` 1 is refused when the
    sampler is built (``BaseSampler.min_batch_B``), before any env or worker starts."""
    config = SamplerConfig(mode="alternating", batch_T=2, batch_B=1)
    with pytest.raises(
        ValueError, match=r"^SamplerConfig.batch_B must be >= 2 for mode 'alternating', got 1$"
    ):
        make_sampler("alternating", ENV, CartPoleAgentFactory()(), config, seed=0)
