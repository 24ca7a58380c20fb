"""Same seed, same samples: serial vs parallel CPU vs parallel GPU (CPU fallback) vs alternating.

A real agent (an MLP Q-network, or the recurrent R2D1 model, behind the epsilon-greedy agent) acts
on CartPole with 5 envs split unevenly over 2 workers, over several batches so that episodes end
inside batches and across batch boundaries. Every field of every batch, the bootstrap entry (with
the recurrent state) and the finished-episode list must equal the serial sampler's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from algorithms.agents.dqn_agents import EpsilonGreedyAgent, R2D1Agent
from algorithms.agents.epsilon import EpsilonSchedule
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
    """``n_batches`` (samples, traj_infos) pairs from a fresh sampler of ``mode``; samples are copied."""
    torch.manual_seed(0)
    agent = factory()  # same parameters in every mode: seeded construction
    config = SamplerConfig(mode=mode, batch_T=9, batch_B=5, n_workers=2)
    sampler = make_sampler(mode, ENV, agent, config, seed, agent_factory=factory)
    out = []
    try:
        sampler.initialize()
        torch.manual_seed(1)  # exploration noise, where the mode draws it in this process
        for itr in range(n_batches):
            agent.set_mode("sample", itr * config.batch_size)
            samples, traj_infos = sampler.sample(itr)
            out.append((samples.map(torch.clone), traj_infos))
    finally:
        sampler.shutdown()
    return out


def assert_same_batches(expected: list, got: list, mode: str) -> None:
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
    episodes = sum(len(t) for _, t in expected)
    assert episodes >= 2, "the comparison should span episode ends"


@pytest.mark.slow
@pytest.mark.parametrize(
    "recurrent, modes",
    # The GPU mode runs the serial EnvStepper itself over remote envs; the recurrent case checks the
    # modes that keep recurrent state per worker (cpu) or per group (alternating).
    [(False, ("cpu", "gpu", "alternating")), (True, ("cpu", "alternating"))],
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
    actions = torch.cat([s.action.flatten() for s, _ in serial])
    assert 0 < int(actions.sum()) < len(actions)  # exploration really happened: both actions taken


def test_split_ranks_cover_all_envs() -> None:
    from algorithms.samplers.workers import split_ranks

    assert split_ranks(5, 2) == [(0, 3), (3, 2)]
    assert split_ranks(4, 4) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    with pytest.raises(ValueError, match="n_workers"):
        split_ranks(2, 3)
    firsts = np.array([f for f, _ in split_ranks(17, 5)])
    assert firsts[0] == 0 and np.all(np.diff(firsts) >= 3)
