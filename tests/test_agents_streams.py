"""Per-env random streams (``agents.base.RankStreams``): an env's exploration draws do not depend on
which other envs the agent acts for in the same call, and they change with the seed.

Every agent that draws at acting time is checked: epsilon-greedy DQN, categorical and Gaussian
actor-critics (feed-forward and recurrent), TD3's Gaussian action noise and uniform warm-up, and
SAC's tanh-Gaussian sample. "Whole" acts for env ranks 0..5 in one call, "split" for ranks 0..2
and 3..5 in two calls (as two parallel-CPU workers or the alternating sampler's two groups do).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch

from algorithms.agents.base import Agent, RankStreams
from algorithms.agents.dqn_agents import EpsilonGreedyAgent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.agents.pg_agents import PgAgent, RecurrentPgAgent, categorical_inverse_cdf
from algorithms.agents.qpg_agents import DeterministicAgent, SquashedGaussianAgent
from algorithms.models.dqn_model import QNetwork
from algorithms.models.policies import (
    ActorCritic,
    DeterministicPolicy,
    RecurrentActorCritic,
    TanhGaussianPolicy,
)
from algorithms.samplers.seeding import exploration_streams

torch.set_num_threads(1)

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DISCRETE = gym.spaces.Discrete(4)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
B, STEPS = 6, 4


def dqn() -> Agent:
    schedule = EpsilonSchedule(start=0.5, final=0.5, decay_steps=0)
    return EpsilonGreedyAgent(QNetwork((3,), 4, mlp_hidden_sizes=(8,)), OBS, DISCRETE, schedule)


def ppo_categorical() -> Agent:
    return PgAgent(ActorCritic(OBS, DISCRETE, (8,)), OBS, DISCRETE)


def ppo_gaussian() -> Agent:
    return PgAgent(ActorCritic(OBS, BOX, (8,)), OBS, BOX)


def ppo_recurrent() -> Agent:
    return RecurrentPgAgent(RecurrentActorCritic(OBS, BOX, (8,), lstm_size=8), OBS, BOX)


def td3_noise() -> Agent:
    return DeterministicAgent(
        DeterministicPolicy(3, BOX, (8,)), OBS, BOX, exploration_std=0.5, random_steps=0
    )


def td3_warm_up() -> Agent:
    return DeterministicAgent(
        DeterministicPolicy(3, BOX, (8,)), OBS, BOX, exploration_std=0.5, random_steps=10
    )


def sac() -> Agent:
    return SquashedGaussianAgent(TanhGaussianPolicy(3, BOX, (8,)), OBS, BOX, random_steps=0)


AGENTS = [dqn, ppo_categorical, ppo_gaussian, ppo_recurrent, td3_noise, td3_warm_up, sac]


def act(
    make: Callable[[], Agent], seed: int, slices: list[slice], observations: torch.Tensor
) -> torch.Tensor:
    """Actions [STEPS, B] (or [STEPS, B, A]) of agents acting for the env ranks in ``slices``."""
    streams = RankStreams(seed)
    agents = []
    for ranks in slices:
        torch.manual_seed(0)  # the same parameters in every copy
        agent = make()
        agent.set_env_ranks(np.arange(B)[ranks], B, streams)
        agent.set_mode("sample", 0)
        agents.append(agent)
    actions = []
    for t in range(STEPS):
        torch.manual_seed(100 + t)  # a global RNG that differs per call must not matter
        parts = []
        for ranks, agent in zip(slices, agents):
            obs = observations[t, ranks]
            n = obs.shape[0]
            prev_action = torch.zeros((n, *agent.action_space.shape), dtype=torch.float32)
            state = agent.initial_state(n)
            parts.append(agent.step(obs, prev_action, torch.zeros(n), state)[0])
        actions.append(torch.cat(parts))
    return torch.stack(actions)


@pytest.mark.parametrize("make", AGENTS, ids=[f.__name__ for f in AGENTS])
def test_draws_follow_env_ranks_not_batch_slices(make: Callable[[], Agent]) -> None:
    observations = torch.rand(STEPS, B, 3, generator=torch.Generator().manual_seed(1)) * 2 - 1
    whole = act(make, 7, [slice(0, B)], observations)
    split = act(make, 7, [slice(0, 3), slice(3, B)], observations)
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)
    other_seed = act(make, 8, [slice(0, B)], observations)
    assert not torch.equal(other_seed, whole), "a different seed must change the draws"


def test_streams_are_seeded_per_role_and_resume_point() -> None:
    ranks = np.arange(4)
    train = exploration_streams(3).uniform(ranks, (5,))
    assert torch.equal(exploration_streams(3).uniform(ranks, (5,)), train)
    for other in (
        exploration_streams(4),
        exploration_streams(3, "eval"),
        exploration_streams(3, "train", 100),
    ):
        assert not torch.equal(other.uniform(ranks, (5,)), train)
    # A rank's stream is the same whichever ranks are drawn alongside it, and in whatever order.
    torch.testing.assert_close(exploration_streams(3).uniform(ranks[::-1].copy(), (5,)), train.flip(0))
    with pytest.raises(ValueError, match="role"):
        exploration_streams(3, "test")


def test_agent_rejects_a_batch_that_does_not_match_its_ranks() -> None:
    agent = dqn()
    agent.set_env_ranks([0, 1], 2, RankStreams(0))
    with pytest.raises(ValueError, match=r"acting for 3 envs with streams for env ranks \[0, 1\]"):
        agent.step(torch.zeros(3, 3), torch.zeros(3), torch.zeros(3), None)


def test_categorical_inverse_cdf_matches_the_distribution() -> None:
    probs = torch.tensor([[0.2, 0.0, 0.5, 0.3]])
    u = torch.tensor([0.0, 0.1999, 0.2, 0.6999, 0.71, 0.9999999]).view(6, 1)
    actions = categorical_inverse_cdf(probs.expand(6, 1, 4), u)
    assert actions.view(-1).tolist() == [0, 0, 2, 2, 3, 3]  # never the zero-probability action 1
    u = torch.rand(20_000, generator=torch.Generator().manual_seed(0))
    draws = categorical_inverse_cdf(probs.expand(20_000, 4), u)
    frequencies = torch.bincount(draws, minlength=4).float() / 20_000
    torch.testing.assert_close(frequencies, probs[0], atol=0.015, rtol=0)
    with pytest.raises(ValueError, match="categorical_inverse_cdf"):
        categorical_inverse_cdf(probs, torch.rand(2))
