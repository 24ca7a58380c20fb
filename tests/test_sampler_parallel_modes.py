"""Same seed, same samples: serial vs parallel CPU vs parallel GPU (CPU fallback) vs alternating;
and after ``shutdown`` no worker process is left.

A real agent (an MLP Q-network, or the recurrent R2D1 model, behind the epsilon-greedy agent) acts
on CartPole with 5 envs split unevenly over 2 workers, over several batches so that episodes end
inside batches and across batch boundaries. Every field of every batch, the bootstrap entry (with
the recurrent state) and the finished-episode list must equal the serial sampler's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from algorithms.agents.dqn_agents import EpsilonGreedyAgent, R2D1Agent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.arrays import NamedArrays
from algorithms.envs.config import EnvConfig
from algorithms.models.dqn_model import QNetwork
from algorithms.models.r2d1_model import R2D1Model
from algorithms.samplers.base import env_spaces, make_sampler
from algorithms.train import SamplerConfig

ENV = EnvConfig(id="CartPole-v1", kind="gym")


@dataclass(frozen=True)
class CartPoleAgentFactory:
    """Picklable recipe for a small real agent on CartPole, as ``registry.AgentFactory`` is for an algo."""

    recurrent: bool = False
    epsilon: float = 0.0

    def __call__(self) -> EpsilonGreedyAgent:
        observation_space, action_space = env_spaces(ENV)
        schedule = EpsilonSchedule(start=self.epsilon, final=self.epsilon, decay_steps=0, eval=0.0)
        if self.recurrent:
            model = R2D1Model((4,), 2, lstm_size=8, head_hidden_size=8, mlp_hidden_sizes=(8,))
            return R2D1Agent(model, observation_space, action_space, schedule)
        model = QNetwork((4,), 2, mlp_hidden_sizes=(16,))
        return EpsilonGreedyAgent(model, observation_space, action_space, schedule)


def collect(mode: str, factory: CartPoleAgentFactory, n_batches: int = 2, seed: int = 7) -> list:
    """``n_batches`` (samples, traj_infos) pairs from a fresh sampler of ``mode`` (samples copied),
    then (empty, evaluation episodes)."""
    torch.manual_seed(0)
    agent = factory()  # same parameters in every mode: seeded construction
    config = SamplerConfig(mode=mode, batch_T=9, batch_B=5, n_workers=2)
    sampler = make_sampler(mode, ENV, agent, config, seed, agent_factory=factory)
    out = []
    try:
        sampler.initialize()
        pids = getattr(sampler, "worker_pids", [])
        torch.manual_seed(1)  # exploration noise, where the mode draws it in this process
        for itr in range(n_batches):
            agent.set_mode("sample", itr * config.batch_size)
            samples, traj_infos = sampler.sample(itr)
            out.append((samples.map(torch.clone), traj_infos))
        # Evaluation works in every mode (eval-mode episodes on separate envs in this process).
        out.append((NamedArrays(), sampler.evaluate(2, n_batches * config.batch_size)))
    finally:
        sampler.shutdown()
    assert len(pids) == (0 if mode == "serial" else 2)
    for pid in pids:  # a normal close joins every worker: none is left running (or as a zombie)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    return out


def assert_same_batches(expected: list, got: list, mode: str, min_episodes: int = 2) -> None:
    for itr, ((s_exp, t_exp), (s_got, t_got)) in enumerate(zip(expected, got, strict=True)):
        assert s_exp.fields == s_got.fields, f"{mode}: fields differ"
        for (name, a), (_, b) in zip(s_exp.flat_items(), s_got.flat_items(), strict=True):
            assert a.shape == b.shape, (
                f"{mode}, batch {itr}: {name} shape {tuple(b.shape)} != {tuple(a.shape)}"
            )
            if name.startswith("agent_info.") or name.startswith("bootstrap.agent_state."):
                # Network outputs: a forward pass on a slice of the batch may round differently
                # (BLAS blocking depends on the batch size), so equal up to float rounding.
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{mode}, batch {itr}: {name}")
            else:
                assert torch.equal(a, b.to(a.dtype)), f"{mode}, batch {itr}: {name} differs from serial"
        assert t_got == t_exp, f"{mode}, batch {itr}: finished episodes differ from serial"
    episodes = sum(len(t) for s, t in expected if s.fields)  # training batches only
    assert episodes >= min_episodes, "the comparison should span episode ends"


@pytest.mark.slow
@pytest.mark.parametrize(
    "recurrent, modes",
    # The GPU mode (the serial EnvStepper over remote envs) is compared with exploration on below;
    # these are the modes that act on slices of the batch, keeping recurrent state per worker (cpu)
    # or per group (alternating).
    [(False, ("cpu", "alternating")), (True, ("cpu", "alternating"))],
    ids=["mlp", "r2d1"],
)
def test_parallel_modes_match_serial_greedy(recurrent: bool, modes: tuple[str, ...]) -> None:
    factory = CartPoleAgentFactory(recurrent=recurrent)
    serial = collect("serial", factory)
    for mode in modes:
        assert_same_batches(serial, collect(mode, factory), mode)


def test_gpu_mode_matches_serial_with_exploration() -> None:
    """One agent call on all B envs per step, as in the serial sampler: random actions match too."""
    factory = CartPoleAgentFactory(epsilon=0.5)
    serial = collect("serial", factory)
    assert_same_batches(serial, collect("gpu", factory), "gpu")
    actions = torch.cat([s.action.flatten() for s, _ in serial[:-1]])
    assert 0 < int(actions.sum()) < len(actions)  # exploration really happened: both actions taken


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


PONG = EnvConfig(id="pong", num_threads=1)


def test_native_atari_worker_slices_match_serial() -> None:
    """Workers holding slices of ale-py's native vector env see the serial sampler's episodes."""
    results = {}
    for mode in ("serial", "gpu"):
        torch.manual_seed(0)
        agent = PongAgentFactory()()
        config = SamplerConfig(mode=mode, batch_T=6, batch_B=4, n_workers=2)
        sampler = make_sampler(mode, PONG, agent, config, seed=5, agent_factory=PongAgentFactory())
        try:
            sampler.initialize()
            torch.manual_seed(1)
            agent.set_mode("sample", 0)
            samples, _ = sampler.sample(0)
            results[mode] = samples.map(torch.clone)
        finally:
            sampler.shutdown()
    assert_same_batches([(results["serial"], [])], [(results["gpu"], [])], "gpu", min_episodes=0)
    # Real frames, not untouched buffers, were compared; and the agent explored.
    assert float(results["gpu"].observation.float().std()) > 0
    assert len(torch.unique(results["serial"].action)) > 1
