"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016, "Continuous control with deep
reinforcement learning", Algorithm 1), in the "Our DDPG" form of Fujimoto et al. 2018 (Sec. 6.1 and
Table 3), the re-tuned baseline TD3 is compared against.

``optimize`` appends each sampler batch to a uniform replay and, once ``learning_starts_steps``
transitions are stored, makes one update per ``env_steps_per_update`` new env steps. One update:

    y = r + discount_t * Q'(s', mu'(s'))
    critic: minimise (Q(s, a) - y)^2
    actor:  maximise Q(s, mu(s))  (the deterministic policy gradient, Silver et al. 2014)
    targets: Polyak averaging with tau after every update

``discount_t`` is gamma, or 0 where the transition ended in a terminal state; a truncated episode
still bootstraps from its true final observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import torch
from torch.nn import functional as F

from algorithms.agents.qpg_agents import DeterministicAgent
from algorithms.arrays import NamedArrays
from algorithms.functional.policy_losses import q_target
from algorithms.learners.common import require_action_space
from algorithms.learners.qpg import Diagnostics, Noise, QpgAlgo, QpgConfig, QpgMode, QpgModels
from algorithms.models.policies import DeterministicPolicy


@dataclass(frozen=True)
class Config(QpgConfig):
    """ "Our DDPG" of Fujimoto et al. 2018 (Sec. 6.1, Table 3): 400-300 ReLU actor and critic (the
    action enters the critic's first layer, unlike Lillicrap et al.'s second), Adam 1e-3 for both
    (Lillicrap: 1e-4 actor, 1e-3 critic with 1e-2 L2), tau 0.005 (Lillicrap: 0.001), batch 100
    (Lillicrap: 64), Gaussian exploration N(0, 0.1) (Lillicrap: Ornstein-Uhlenbeck, theta 0.15,
    sigma 0.2), no observation normalisation, gamma 0.99, replay 1M, one update per env step, and
    the same uniform-random warm-up as TD3 (10,000 steps for HalfCheetah and Ant, 1,000 otherwise).
    The defaults are ``repro/configs/settings/ddpg.toml``'s values (tests/test_config_defaults.py).
    """

    exploration_std: float = 0.1

    NON_NEGATIVE = ("exploration_std",)


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> DeterministicAgent:
    require_action_space(action_space, gym.spaces.Box, "DDPG and TD3 each")
    model = DeterministicPolicy(int(observation_space.shape[0]), action_space, config.hidden_sizes)
    return DeterministicAgent(
        model, observation_space, action_space, config.exploration_std, config.random_steps
    )


def critic_loss(
    config: Config, models: QpgModels, batch: NamedArrays, noise: Noise, mode: QpgMode
) -> tuple[torch.Tensor, Diagnostics]:
    """(Q(s, a) - y)^2 with y = r + discount_t Q'(s', mu'(s')), and its diagnostics."""
    with torch.no_grad():
        next_action = models.actor_target(batch.next_observation)
        next_q = models.critic_target(batch.next_observation, next_action)[0]
        y = q_target(batch.return_n, batch.discount_n, next_q)
    q = models.critic(batch.observation, batch.action)[0]
    loss = F.mse_loss(q, y)
    return loss, {"critic_loss": loss.detach(), "q_mean": q.detach().mean()}


def actor_loss(
    config: Config, models: QpgModels, batch: NamedArrays, noise: Noise, mode: QpgMode
) -> tuple[torch.Tensor, Diagnostics]:
    """-Q(s, mu(s)), trained into the actor only (module docstring of ``learners.qpg``)."""
    loss = -models.critic(batch.observation, models.actor(batch.observation))[0].mean()
    return loss, {"actor_loss": loss.detach()}


class Algo(
    QpgAlgo,
    diagnostics=("critic_loss", "actor_loss", "q_mean"),
    critics=1,
    actor_target=True,
    losses=(critic_loss, actor_loss),
):
    """DDPG learner: one critic, target networks, replay (see the module docstring)."""
