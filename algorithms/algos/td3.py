"""Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods", Algorithm 1).

``optimize`` appends each sampler batch to a uniform replay and, once ``learning_starts_steps``
transitions are stored, makes ``updates_per_step`` updates per new env step. One update:

    a~ = clip(mu'(s') + clip(N(0, sigma), -c, c), low, high)         target policy smoothing (Sec. 5.3)
    y  = r + discount_t * min(Q1'(s', a~), Q2'(s', a~))               clipped double Q (Sec. 4.2)
    critics: minimise (Q1(s, a) - y)^2 + (Q2(s, a) - y)^2
    every policy_delay_updates updates (Sec. 5.2):
        actor: maximise Q1(s, mu(s)); Polyak-average actor and critic targets with tau

``discount_t`` is gamma, or 0 where the transition ended in a terminal state; a truncated episode
still bootstraps from its true final observation (the replay stores ``final_observation`` as s').
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch.nn import functional as F

from algorithms.agents.qpg_agents import DeterministicAgent
from algorithms.algos.base import OptInfo
from algorithms.algos.ddpg import ReplayFeed, run_updates
from algorithms.arrays import NamedArrays
from algorithms.functional.policy_losses import (
    clipped_double_q_target,
    polyak_update_,
    smoothed_target_action,
)
from algorithms.models.policies import DeterministicPolicy, TwinQNetwork


@dataclass(frozen=True)
class Config:
    """TD3 hyperparameters: Fujimoto et al. 2018, Table 3 ("Ours") and Sec. 6.1: Adam 1e-3 for actor
    and critics, tau 0.005, batch 100, one update per env step, gamma 0.99, exploration N(0, 0.1),
    target smoothing N(0, 0.2) clipped to 0.5, policy delay 2, 400-300 ReLU networks, replay 1M,
    10,000 uniform-random steps for HalfCheetah and Ant (1,000 for the other tasks: ``PRESETS``).
    Noise scales are in units of the action box's half-width (the paper's actions are in [-1, 1]).
    """

    discount: float = 0.99
    tau: float = 0.005
    batch_size: int = 100
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    hidden_sizes: tuple[int, ...] = (400, 300)
    exploration_std: float = 0.1
    target_noise_std: float = 0.2
    target_noise_clip: float = 0.5
    policy_delay_updates: int = 2
    replay_size_steps: int = 1_000_000
    random_steps: int = 10_000  # uniform-random actions for this many env steps
    learning_starts_steps: int = 10_000  # transitions in replay before the first update
    updates_per_step: float = 1.0

    def __post_init__(self) -> None:
        _validate(self, "td3")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Config:
        if name not in PRESETS:
            raise ValueError(f"unknown TD3 preset {name!r}; known: {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict[str, Any]] = {
    "mujoco_halfcheetah_ant": {},  # Sec. 6.1: 10,000 exploratory steps for HalfCheetah and Ant
    "mujoco": {"random_steps": 1_000, "learning_starts_steps": 1_000},  # Sec. 6.1: 1,000 for the rest
    # Pendulum-v1 (not in the paper): the paper's settings with the 1,000-step start.
    "pendulum": {"random_steps": 1_000, "learning_starts_steps": 1_000},
}


def _validate(config: Any, name: str) -> None:
    """Shared field checks of the DDPG/TD3 configs; raises ``ValueError`` naming the field."""

    def require(condition: bool, field: str, what: str) -> None:
        if not condition:
            raise ValueError(f"{name}.Config.{field} must be {what}, got {getattr(config, field)!r}")

    require(0.0 <= config.discount <= 1.0, "discount", "in [0, 1]")
    require(0.0 < config.tau <= 1.0, "tau", "in (0, 1]")
    for field in ("actor_learning_rate", "critic_learning_rate", "updates_per_step"):
        require(getattr(config, field) > 0, field, "> 0")
    for field in ("batch_size", "replay_size_steps", "policy_delay_updates"):
        require(isinstance(getattr(config, field), int) and getattr(config, field) >= 1, field, "an int >= 1")
    for field in ("exploration_std", "target_noise_std", "target_noise_clip", "random_steps"):
        require(getattr(config, field) >= 0, field, ">= 0")
    require(config.learning_starts_steps >= config.batch_size, "learning_starts_steps", ">= batch_size")
    require(
        isinstance(config.hidden_sizes, tuple) and all(h >= 1 for h in config.hidden_sizes),
        "hidden_sizes",
        "a tuple of positive ints",
    )


DIAGNOSTICS = ("critic_loss", "actor_loss", "q_mean")


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> DeterministicAgent:
    model = DeterministicPolicy(int(observation_space.shape[0]), action_space, config.hidden_sizes)
    return DeterministicAgent(
        model, observation_space, action_space, config.exploration_std, config.random_steps
    )


class Algo:
    """TD3 learner: twin critics, target networks, replay (see the module docstring)."""

    def __init__(
        self, config: Config, agent: DeterministicAgent, counters_frameskip: int, batch_spec
    ) -> None:
        self.config = config
        self.agent = agent
        self.actor = agent.model
        observation_dim, action_dim = int(agent.observation_space.shape[0]), int(agent.action_space.shape[0])
        self.critic = TwinQNetwork(observation_dim, action_dim, config.hidden_sizes).to(agent.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=config.actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.critic_learning_rate)
        self.replay = ReplayFeed(
            config.replay_size_steps, config.discount, config.learning_starts_steps, config.updates_per_step
        )
        self.updates = 0
        self.half_width = (agent.high - agent.low).to(agent.device) / 2

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        return run_updates(
            self.replay, samples, self.config.batch_size, self.update, self.agent.device, DIAGNOSTICS
        )

    def update(self, batch: NamedArrays) -> dict[str, torch.Tensor]:
        c = self.config
        low, high = self.agent.low.to(self.half_width.device), self.agent.high.to(self.half_width.device)
        with torch.no_grad():
            target_action = self.actor_target(batch.next_observation)
            noise = torch.randn_like(target_action) * c.target_noise_std * self.half_width
            next_action = smoothed_target_action(
                target_action, noise, c.target_noise_clip * self.half_width, low, high
            )
            next_q1, next_q2 = self.critic_target(batch.next_observation, next_action)
            y = clipped_double_q_target(batch.return_n, batch.discount_n, next_q1, next_q2)
        q1, q2 = self.critic(batch.observation, batch.action)
        critic_loss = F.mse_loss(q1, y) + F.mse_loss(q2, y)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        self.updates += 1
        info = {"critic_loss": critic_loss.detach(), "q_mean": q1.detach().mean()}
        if self.updates % c.policy_delay_updates == 0:
            self.critic.requires_grad_(False)  # the actor loss trains the actor only
            actor_loss = -self.critic.q1(batch.observation, self.actor(batch.observation)).mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.critic.requires_grad_(True)
            self.actor_optimizer.step()
            polyak_update_(self.actor_target, self.actor, c.tau)
            polyak_update_(self.critic_target, self.critic, c.tau)
            info["actor_loss"] = actor_loss.detach()
        return info

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.updates = int(state["updates"])
