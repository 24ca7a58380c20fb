"""Advantage actor-critic, the synchronous variant of A3C (Mnih et al. 2016, "Asynchronous Methods
for Deep Reinforcement Learning"), feed-forward and recurrent.

One ``optimize`` call per sampler batch of T steps x B envs, one gradient step:

1. n-step discounted returns to the end of the batch (Algorithm S3), bootstrapped from V of the
   state after the batch, or of the true final observation where an episode was truncated, and
   from nothing after a terminal (``agent.next_values`` and ``discounted_returns``); with
   ``gae_lambda < 1`` the advantage is GAE(lambda) instead and the value target the lambda-return
   (Schulman et al. 2016; SB3's A2C option of the same name), optionally standardized over the batch;
2. loss ``-log pi(a|s) A + value_coef * 0.5 (R - V)^2 - entropy_coef * H`` over the whole batch
   (``loss``, a function of the config, the model and the batch), with ``A = R - V(s)``; the
   recurrent agent runs its LSTM over each env column from the state it sampled with, reset at
   episode ends;
3. RMSProp step after clipping the gradient norm, learning rate annealed linearly to 0 over
   ``anneal_env_steps`` (``learning_rate``, a function of the env step ``optimize`` is given; Mnih
   et al. 2016, Sec. 8: "learning rates ... annealed to 0 over the course of training").

``Config()`` is the Atari setting (Mnih et al. 2016 with the synchronous-A2C choices of OpenAI
Baselines ``a2c``, which the PPO paper's A2C baseline used). Published settings, with their sampler
shapes, are data: ``repro/configs/settings/a2c_*.toml`` (``a2c_atari``, ``a2c_mujoco``, and
rl-baselines3-zoo's tuned ones such as ``a2c_cartpole``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from algorithms.agents.pg_agents import PgAgent, actor_critic_agent, evaluate_actions
from algorithms.arrays import NamedArrays
from algorithms.configs import check_field
from algorithms.functional.advantages import (
    discounted_returns,
    explained_variance,
    generalized_advantage_estimation,
    standardize_advantage,
)
from algorithms.functional.policy_losses import a2c_loss
from algorithms.learners.common import OptInfo, RMSprop
from algorithms.learners.policy_gradient import PgLearner, anneal_fraction, validate_pg_config


@dataclass(frozen=True)
class Config:
    """A2C hyperparameters. Defaults are the Atari setting: Mnih et al. 2016, Sec. 8 and Supplementary
    Sec. 8 (t_max = 5 steps per update, 16 actors, gamma 0.99, entropy weight 0.01, RMSProp with
    decay 0.99, learning rate annealed to 0). Not fixed by the paper (learning rates were sampled per
    run) and taken from OpenAI Baselines ``a2c``: learning rate 7e-4, RMSProp epsilon 1e-5, value
    coefficient 0.5 on mean((R - V)^2) (``value_coef`` 1 here, see below), gradient-norm clip 0.5.
    Deviation: the network is the Nature torso with its
    512-unit layer (Baselines' ``cnn``, also PPO's Atari network), not A3C's smaller 2013 torso.
    The defaults are ``repro/configs/settings/a2c_atari.toml``'s values (tests/test_config_defaults.py).
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
        validate_pg_config(self)
        check_field(self, 0.0 <= self.rmsprop_alpha < 1.0, "rmsprop_alpha", "in [0, 1)")


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> PgAgent:
    """An actor-critic agent: recurrent (LSTM) when ``config.recurrent``."""
    return actor_critic_agent(config, observation_space, action_space)


def learning_rate(config: Config, env_steps: int) -> float:
    """The learning rate at env step ``env_steps`` of the run (``anneal_env_steps``)."""
    return config.learning_rate * anneal_fraction(env_steps, config.anneal_env_steps)


def loss(config: Config, model: Any, batch: NamedArrays) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The A2C loss of a [T, B] batch with its ``advantage`` and ``value_target``, under ``model``
    (the recurrent one runs over whole env columns), and its parts as tensors (``a2c_loss``)."""
    log_prob, entropy, value = evaluate_actions(model, batch, config.recurrent)  # [T, B]
    return a2c_loss(
        log_prob, batch.advantage, value, batch.value_target, entropy, config.value_coef, config.entropy_coef
    )


class Algo(PgLearner):
    """A2C on [T, B] batches from the synchronous runner (Contract 4)."""

    def make_optimizer(self, params: Iterable[Any]) -> torch.optim.Optimizer:
        c = self.config
        return RMSprop(params, lr=c.learning_rate, alpha=c.rmsprop_alpha, eps=c.optimizer_eps)

    def optimize(self, env_steps: int, samples: NamedArrays) -> OptInfo:
        """One gradient step on the batch, at env step ``env_steps`` of the run (the schedule's)."""
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
        rate = learning_rate(c, env_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        batch = samples.replace(advantage=advantage, value_target=target)
        total, parts = loss(c, agent.model, batch)
        grad_norm = self.clipped_step(total)

        diagnostics = {key: float(val) for key, val in parts.items()}
        diagnostics.update(
            grad_norm=float(grad_norm),
            explained_variance=explained_variance(samples.agent_info.value, target),
            learning_rate=rate,
        )
        return OptInfo(
            updates=1,
            samples_trained=self.T * self.B,
            samples_replayed=self.T * self.B,
            diagnostics=diagnostics,
        )
