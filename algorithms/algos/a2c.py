"""Advantage actor-critic, the synchronous variant of A3C (Mnih et al. 2016, "Asynchronous Methods
for Deep Reinforcement Learning"), feed-forward and recurrent.

One ``optimize`` call per sampler batch of T steps x B envs, one gradient step:

1. n-step discounted returns to the end of the batch (Algorithm S3), bootstrapped from V of the
   state after the batch, or of the true final observation where an episode was truncated, and
   from nothing after a terminal (``agent.next_values`` and ``discounted_returns``); with
   ``gae_lambda < 1`` the advantage is GAE(lambda) instead and the value target the lambda-return
   (Schulman et al. 2016; SB3's A2C option of the same name), optionally standardized over the batch;
2. loss ``-log pi(a|s) A + value_coef * 0.5 (R - V)^2 - entropy_coef * H`` over the whole batch
   (``a2c_loss``), with ``A = R - V(s)``; the recurrent agent runs its LSTM over each env column
   from the state it sampled with, reset at episode ends;
3. RMSProp step after clipping the gradient norm, learning rate annealed linearly to 0 over
   ``anneal_env_steps`` (Mnih et al. 2016, Sec. 8: "learning rates ... annealed to 0 over the
   course of training").

Published settings: ``Config()`` is Atari (Mnih et al. 2016 with the synchronous-A2C choices of
OpenAI Baselines ``a2c``, which the PPO paper's A2C baseline used); ``PRESETS`` lists the sampler
shape and the MuJoCo and CartPole variants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from algorithms.agents.pg_agents import PgAgent, RecurrentPgAgent, actor_critic_agent
from algorithms.algos.base import OptInfo, from_preset
from algorithms.configs import check_field
from algorithms.functional.advantages import (
    discounted_returns,
    explained_variance,
    generalized_advantage_estimation,
    standardize_advantage,
)
from algorithms.functional.policy_losses import a2c_loss
from algorithms.models.torsos import CONV_TORSOS


@dataclass(frozen=True)
class Config:
    """A2C hyperparameters. Defaults are the Atari setting: Mnih et al. 2016, Sec. 8 and Supplementary
    Sec. 8 (t_max = 5 steps per update, 16 actors, gamma 0.99, entropy weight 0.01, RMSProp with
    decay 0.99, learning rate annealed to 0). Not fixed by the paper (learning rates were sampled per
    run) and taken from OpenAI Baselines ``a2c``: learning rate 7e-4, RMSProp epsilon 1e-5, value
    coefficient 0.5 on mean((R - V)^2) (``value_coef`` 1 here, see below), gradient-norm clip 0.5.
    Deviation: the network is the Nature torso with its
    512-unit layer (Baselines' ``cnn``, also PPO's Atari network), not A3C's smaller 2013 torso.
    """

    discount: float = 0.99
    learning_rate: float = 7e-4
    rmsprop_alpha: float = 0.99
    optimizer_eps: float = 1e-5
    # Baselines' vf_coef 0.5 (and SB3's) multiplies mean((R - V)^2); ``a2c_loss`` takes half the
    # square, so the same weight is value_coef 1.
    value_coef: float = 1.0
    entropy_coef: float = 0.01
    clip_grad_norm: float = 0.5  # 0: no clipping
    # Options of SB3's A2C, off here as in A3C: lambda 1 is the n-step return of Algorithm S3.
    gae_lambda: float = 1.0
    normalize_advantage: bool = False
    # Linear learning-rate annealing from 1 at env step 0 to 0 at this env step; 0: constant.
    anneal_env_steps: int = 10_000_000
    # Model (hidden_sizes: the MLP for vector observations; frames use the Nature torso).
    hidden_sizes: tuple[int, ...] = (64, 64)
    # The torso for (C, H, W) observations (``models.torsos.CONV_TORSOS``; ``models.policies``).
    conv_torso: str = "nature"
    recurrent: bool = False
    lstm_size: int = 128

    def __post_init__(self) -> None:
        for name in ("discount", "gae_lambda"):
            check_field(self, 0.0 <= getattr(self, name) <= 1.0, name, "in [0, 1]")
        check_field(self, 0.0 <= self.rmsprop_alpha < 1.0, "rmsprop_alpha", "in [0, 1)")
        for name in ("learning_rate", "optimizer_eps"):
            check_field(self, getattr(self, name) > 0, name, "> 0")
        for name in ("value_coef", "entropy_coef", "clip_grad_norm"):
            check_field(self, getattr(self, name) >= 0, name, ">= 0")
        check_field(self, self.anneal_env_steps >= 0, "anneal_env_steps", ">= 0")
        check_field(self, self.conv_torso in CONV_TORSOS, "conv_torso", f"one of {CONV_TORSOS}")
        check_field(self, self.lstm_size >= 1, "lstm_size", ">= 1")
        check_field(
            self,
            isinstance(self.hidden_sizes, tuple) and all(h >= 1 for h in self.hidden_sizes),
            "hidden_sizes",
            "a tuple of positive ints",
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Config:
        """The setting ``name`` (a key of ``PRESETS``) with ``overrides`` applied."""
        return from_preset(cls, "A2C", PRESETS, name, overrides, key="algo")


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # Mnih et al. 2016: 16 actor-learners, t_max = 5, annealed over 40M frames (10M env steps).
    "atari": {"algo": {}, "sampler": {"batch_T": 5, "batch_B": 16}},
    # MuJoCo: neither paper tabulates A2C here (Schulman et al. 2017, Fig. 3, compares against an
    # A2C without listing its settings). Ours: the Baselines a2c defaults above on PPO's 64-64 tanh
    # networks, no entropy bonus for the Gaussian policy, constant learning rate.
    "mujoco": {
        "algo": {"entropy_coef": 0.0, "anneal_env_steps": 0},
        "sampler": {"batch_T": 5, "batch_B": 16},
    },
    # CartPole-v1 (not in a paper): rl-baselines3-zoo hyperparams/a2c.yml, "CartPole-v1": 8 envs,
    # ent_coef 0, the rest SB3's A2C defaults (n_steps 5, constant lr 7e-4, RMSprop alpha 0.99 eps
    # 1e-5, gae_lambda 1 = these n-step returns, clip_grad_norm 0.5, no advantage or observation
    # normalization, vf_coef 0.5 = value_coef 1 here).
    "cartpole": {
        "algo": {"entropy_coef": 0.0, "anneal_env_steps": 0},
        "sampler": {"batch_T": 5, "batch_B": 8},
    },
}


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> PgAgent:
    """An actor-critic agent: recurrent (LSTM) when ``config.recurrent``."""
    return actor_critic_agent(config, observation_space, action_space)


class Algo:
    """A2C on [T, B] batches from the synchronous runner (Contract 4)."""

    def __init__(
        self, config: Config, agent: PgAgent | RecurrentPgAgent, counters_frameskip: int, batch_spec
    ) -> None:
        self.config = config
        self.agent = agent
        self.batch_size = int(batch_spec.T) * int(batch_spec.B)
        self.optimizer = torch.optim.RMSprop(
            agent.model.parameters(),
            lr=config.learning_rate,
            alpha=config.rmsprop_alpha,
            eps=config.optimizer_eps,
        )

    def anneal_fraction(self, env_steps: int) -> float:
        """1 at the start of training, falling linearly to 0 at ``anneal_env_steps`` (1 if disabled).

        ``env_steps`` is the run's count (``agent.env_steps``, set by the runner before ``optimize``),
        not this process's iterations x batch: under data-parallel training every rank then anneals
        on the global count.
        """
        if self.config.anneal_env_steps == 0:
            return 1.0
        return max(0.0, 1.0 - env_steps / self.config.anneal_env_steps)

    def optimize(self, itr: int, samples) -> OptInfo:
        c, agent = self.config, self.agent
        device = agent.device
        samples = samples.map(lambda x: x.to(device))
        with torch.no_grad():
            next_value = agent.next_values(samples)
            value = samples.agent_info.value
            if c.gae_lambda == 1.0:
                target = discounted_returns(
                    samples.reward, next_value, samples.terminated, samples.truncated, c.discount
                )
                advantage = target - value
            else:
                advantage, target = generalized_advantage_estimation(
                    samples.reward,
                    value,
                    next_value,
                    samples.terminated,
                    samples.truncated,
                    c.discount,
                    c.gae_lambda,
                )
            if c.normalize_advantage:
                advantage = standardize_advantage(advantage)
        learning_rate = c.learning_rate * self.anneal_fraction(agent.env_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

        log_prob, entropy, value = agent.evaluate(samples)  # [T, B]; both agents take whole columns here
        loss, parts = a2c_loss(log_prob, advantage, value, target, entropy, c.value_coef, c.entropy_coef)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(agent.model.parameters(), c.clip_grad_norm or float("inf"))
        self.optimizer.step()

        diagnostics = {key: float(val) for key, val in parts.items()}
        diagnostics.update(
            grad_norm=float(grad_norm),
            explained_variance=explained_variance(samples.agent_info.value, target),
            learning_rate=learning_rate,
        )
        return OptInfo(
            updates=1,
            samples_trained=self.batch_size,
            samples_replayed=self.batch_size,
            diagnostics=diagnostics,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
