"""Soft Actor-Critic with twin critics and automatic entropy tuning (Haarnoja et al. 2018b, "Soft
Actor-Critic Algorithms and Applications", Algorithm 1; the original method: Haarnoja et al. 2018,
"Soft Actor-Critic: Off-Policy Maximum Entropy Deep RL with a Stochastic Actor").

``optimize`` appends each sampler batch to a uniform replay and, once ``learning_starts_steps``
transitions are stored, makes ``updates_per_step`` updates per new env step. One update:

    a' ~ pi(.|s');  y = r + discount_t * (min(Q1'(s', a'), Q2'(s', a')) - alpha log pi(a'|s'))   (eqs. 3, 5)
    critics: minimise 0.5 (Qi(s, a) - y)^2, i = 1, 2                                            (eq. 5)
    actor:   minimise alpha log pi(a~|s) - min(Q1(s, a~), Q2(s, a~)),  a~ ~ pi(.|s) reparameterised (eq. 7)
    alpha:   minimise -alpha (log pi(a~|s) + target_entropy)                                     (eq. 18)
    targets: Polyak averaging with tau after every update

This is the version without a separate V network (2018b drops it); the tanh-squashed policy's
log-density carries the change-of-variables correction (``tanh_gaussian_log_prob``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch.nn import functional as F

from algorithms.agents.qpg_agents import SquashedGaussianAgent
from algorithms.algos.base import OptInfo
from algorithms.algos.ddpg import ReplayFeed, run_updates
from algorithms.arrays import NamedArrays
from algorithms.functional.policy_losses import polyak_update_, sac_temperature_loss, soft_q_target
from algorithms.models.policies import TanhGaussianPolicy, TwinQNetwork


@dataclass(frozen=True)
class Config:
    """SAC hyperparameters: Haarnoja et al. 2018b, Table 1 (the same as 2018, Table 1): Adam 3e-4 for
    actor, critics and temperature, gamma 0.99, replay 1M, two hidden layers of 256 ReLU units,
    batch 256, tau 0.005, one gradient step per env step, target update every step, target entropy
    -dim(A) (``target_entropy=None``). Not in the tables: the initial temperature (1.0, the authors'
    softlearning code) and the uniform-random warm-up, for which we use TD3's 10,000 steps
    (Fujimoto et al. 2018, Sec. 6.1) so the two methods start from the same data.
    """

    discount: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    alpha_learning_rate: float = 3e-4
    hidden_sizes: tuple[int, ...] = (256, 256)
    initial_alpha: float = 1.0
    autotune_alpha: bool = True  # False: alpha stays at initial_alpha (the 2018 paper's fixed temperature)
    target_entropy: float | None = None  # None: -dim(A)
    replay_size_steps: int = 1_000_000
    random_steps: int = 10_000
    learning_starts_steps: int = 10_000
    updates_per_step: float = 1.0

    def __post_init__(self) -> None:
        def require(condition: bool, field: str, what: str) -> None:
            if not condition:
                raise ValueError(f"sac.Config.{field} must be {what}, got {getattr(self, field)!r}")

        require(0.0 <= self.discount <= 1.0, "discount", "in [0, 1]")
        require(0.0 < self.tau <= 1.0, "tau", "in (0, 1]")
        for field in (
            "actor_learning_rate",
            "critic_learning_rate",
            "alpha_learning_rate",
            "initial_alpha",
            "updates_per_step",
        ):
            require(getattr(self, field) > 0, field, "> 0")
        for field in ("batch_size", "replay_size_steps"):
            require(isinstance(getattr(self, field), int) and getattr(self, field) >= 1, field, "an int >= 1")
        require(self.random_steps >= 0, "random_steps", ">= 0")
        require(self.learning_starts_steps >= self.batch_size, "learning_starts_steps", ">= batch_size")
        require(
            isinstance(self.hidden_sizes, tuple) and all(h >= 1 for h in self.hidden_sizes),
            "hidden_sizes",
            "a tuple of positive ints",
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Config:
        if name not in PRESETS:
            raise ValueError(f"unknown SAC preset {name!r}; known: {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict[str, Any]] = {
    "mujoco": {},
    # Pendulum-v1 (not in the paper): a 1,000-step warm-up (TD3's rule for short tasks).
    "pendulum": {"random_steps": 1_000, "learning_starts_steps": 1_000},
}

DIAGNOSTICS = ("critic_loss", "actor_loss", "q_mean", "entropy", "alpha", "alpha_loss")


def build_agent(
    config: Config, observation_space: gym.Space, action_space: gym.Space
) -> SquashedGaussianAgent:
    model = TanhGaussianPolicy(int(observation_space.shape[0]), action_space, config.hidden_sizes)
    return SquashedGaussianAgent(model, observation_space, action_space, config.random_steps)


class Algo:
    """SAC learner: twin critics and their targets, temperature, replay (see the module docstring)."""

    def __init__(
        self, config: Config, agent: SquashedGaussianAgent, counters_frameskip: int, batch_spec
    ) -> None:
        self.config = config
        self.agent = agent
        self.actor = agent.model
        device = agent.device
        observation_dim, action_dim = int(agent.observation_space.shape[0]), int(agent.action_space.shape[0])
        self.critic = TwinQNetwork(observation_dim, action_dim, config.hidden_sizes).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(config.initial_alpha), device=device).log().requires_grad_()
        self.target_entropy = (
            -float(action_dim) if config.target_entropy is None else float(config.target_entropy)
        )
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=config.actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.critic_learning_rate)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.alpha_learning_rate)
        self.replay = ReplayFeed(
            config.replay_size_steps, config.discount, config.learning_starts_steps, config.updates_per_step
        )

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        return run_updates(
            self.replay, samples, self.config.batch_size, self.update, self.agent.device, DIAGNOSTICS
        )

    def update(self, batch: NamedArrays) -> dict[str, torch.Tensor]:
        c = self.config
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = self.actor(batch.next_observation)
            next_q1, next_q2 = self.critic_target(batch.next_observation, next_action)
            y = soft_q_target(batch.return_n, batch.discount_n, next_q1, next_q2, next_log_prob, alpha)
        q1, q2 = self.critic(batch.observation, batch.action)
        critic_loss = 0.5 * (F.mse_loss(q1, y) + F.mse_loss(q2, y))
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        action, log_prob = self.actor(batch.observation)
        self.critic.requires_grad_(False)  # the actor loss trains the actor only: skip critic weight grads
        q1_pi, q2_pi = self.critic(batch.observation, action)
        actor_loss = (alpha * log_prob - torch.minimum(q1_pi, q2_pi)).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.critic.requires_grad_(True)
        self.actor_optimizer.step()

        info = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "q_mean": q1.detach().mean(),
            "entropy": -log_prob.detach().mean(),
            "alpha": alpha,
        }
        if c.autotune_alpha:
            alpha_loss = sac_temperature_loss(self.log_alpha, log_prob, self.target_entropy)
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
            info["alpha_loss"] = alpha_loss.detach()
        polyak_update_(self.critic_target, self.critic, c.tau)
        return info

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
