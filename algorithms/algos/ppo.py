"""Proximal Policy Optimization (Schulman et al. 2017, "Proximal Policy Optimization Algorithms"),
feed-forward and recurrent.

One ``optimize`` call per sampler batch of T steps x B envs:

1. values after every step (bootstrap and truncation included, ``agent.next_values``) and GAE
   advantages and lambda-returns (Schulman et al. 2016);
2. ``epochs`` passes over the batch in minibatches of ``minibatch_size_steps`` steps: random rows
   for a feed-forward agent, whole env columns (all T steps of ``minibatch_size_steps / T`` envs)
   for a recurrent agent, so its LSTM runs over the sequences it sampled;
3. per minibatch: clipped surrogate (eq. 7) + ``value_coef`` x value loss (clipped as in Baselines
   ``ppo2`` when ``clip_value_loss``) - ``entropy_coef`` x entropy (eq. 9), advantages normalised
   per minibatch, gradients clipped to ``clip_grad_norm``, one Adam step; optionally stop the
   update early once the approximate KL to the sampling policy exceeds 1.5 x ``target_kl``
   (Spinning Up's PPO; Stable-Baselines3's ``target_kl``);
4. learning rate (and, for Atari, the clip range) annealed linearly to 0 over
   ``anneal_env_steps`` (Schulman et al. 2017, Table 5, "alpha linearly annealed from 1 to 0").

Published settings, with their sampler shapes (horizon T, actors B), are data:
``repro/configs/settings/ppo_*.toml`` (``ppo_mujoco``: Table 3, which ``Config()``'s defaults follow;
``ppo_atari``: Table 5).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from algorithms.agents.pg_agents import PgAgent, RecurrentPgAgent, actor_critic_agent
from algorithms.arrays import NamedArrays
from algorithms.functional.advantages import (
    explained_variance,
    generalized_advantage_estimation,
    standardize_advantage,
)
from algorithms.functional.policy_losses import approx_kl, entropy_bonus, ppo_clipped_surrogate, value_loss
from algorithms.learners.common import OptInfo, adam
from algorithms.learners.policy_gradient import (
    PgLearner,
    anneal_fraction,
    minibatch_epochs,
    validate_pg_config,
)


@dataclass(frozen=True)
class Config:
    """PPO hyperparameters. Defaults: Schulman et al. 2017, Table 3 (MuJoCo, 1M steps): horizon 2048
    (``SamplerConfig.batch_T``, 1 actor), Adam 3e-4, 10 epochs, minibatch 64, gamma 0.99, lambda 0.95,
    clip 0.2 (Sec. 6.1, best of the compared epsilons), 64-64 tanh MLPs not shared (Sec. 6.1).
    The paper does not state: the value and entropy coefficients for MuJoCo, gradient clipping,
    value clipping, Adam's epsilon and per-minibatch advantage normalisation; these follow OpenAI
    Baselines ``ppo2`` (``vf_coef=0.5``, ``max_grad_norm=0.5``, ``cliprange_vf=cliprange``,
    ``eps=1e-5``), the code behind the paper's results. Deviation: Baselines also normalised MuJoCo
    observations and rewards with running statistics (``VecNormalize``); that is not done here.
    The defaults are ``repro/configs/settings/ppo_mujoco.toml``'s values (tests/test_config_defaults.py).
    """

    discount: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 3e-4
    optimizer_eps: float = 1e-5
    epochs: int = 10
    minibatch_size_steps: int = 64
    clip_epsilon: float = 0.2
    clip_value_loss: bool = True
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    normalize_advantage: bool = True
    clip_grad_norm: float = 0.5  # 0: no clipping
    # Linear annealing of the learning rate (and of the clip range with anneal_clip) from 1 at env
    # step 0 to 0 at this env step; 0 keeps them constant.
    anneal_env_steps: int = 0
    anneal_clip: bool = False
    target_kl: float = 0.0  # 0: never stop early
    # Model.
    hidden_sizes: tuple[int, ...] = (64, 64)
    # The torso for (C, H, W) observations (``models.torsos.CONV_TORSOS``; ``models.policies``).
    conv_torso: str = "nature"
    recurrent: bool = False
    lstm_size: int = 128

    def __post_init__(self) -> None:
        validate_pg_config(
            self,
            positive=("clip_epsilon",),
            positive_ints=("epochs", "minibatch_size_steps"),
            non_negative=("target_kl",),
        )


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> PgAgent:
    """An actor-critic agent: recurrent (LSTM) when ``config.recurrent``."""
    return actor_critic_agent(config, observation_space, action_space)


def minibatch_indices(n_items: int, n_minibatches: int) -> tuple[torch.Tensor, ...]:
    """A random permutation of ``range(n_items)`` split into ``n_minibatches`` equal index tensors."""
    return torch.randperm(n_items).chunk(n_minibatches)


# Per-minibatch diagnostics, averaged over the call's updates (NaN if the KL stop preceded any).
MINIBATCH_DIAGNOSTICS = ("pi_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")


class Algo(PgLearner):
    """PPO on [T, B] batches from the synchronous runner (Contract 4)."""

    def __init__(
        self, config: Config, agent: PgAgent | RecurrentPgAgent, counters_frameskip: int, batch_spec
    ) -> None:
        super().__init__(config, agent, counters_frameskip, batch_spec)
        batch_size = self.T * self.B
        if batch_size % config.minibatch_size_steps:
            raise ValueError(
                f"ppo.Config.minibatch_size_steps={config.minibatch_size_steps} must divide the batch "
                f"T x B = {self.T} x {self.B} = {batch_size}"
            )
        self.n_minibatches = batch_size // config.minibatch_size_steps
        if agent.recurrent and self.B % self.n_minibatches:
            raise ValueError(
                f"ppo.Config.minibatch_size_steps={config.minibatch_size_steps}: a recurrent minibatch is "
                f"whole env columns, so it must be a multiple of T={self.T} that splits B={self.B} evenly"
            )

    def make_optimizer(self, params: Iterable[Any]) -> torch.optim.Optimizer:
        return adam(params, self.config.learning_rate, self.config.optimizer_eps)

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        batch, n_items = self.training_batch(samples)
        learning_rate, clip_epsilon = self.schedule()
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        # Each epoch's permutation drawn as the epoch starts: none after a KL stop.
        orders = (minibatch_indices(n_items, self.n_minibatches) for _ in range(self.config.epochs))
        grad_step = Minibatches(self, batch, clip_epsilon)
        totals, updates, stopped_early = minibatch_epochs(
            grad_step, orders, MINIBATCH_DIAGNOSTICS, self.config.target_kl
        )
        means = {key: float(total) / updates if updates else float("nan") for key, total in totals.items()}
        return self.opt_info(batch, updates, means, stopped_early)

    def training_batch(self, samples: NamedArrays) -> tuple[NamedArrays, int]:
        """What the minibatch losses read (advantages and value targets added), flattened to steps for a
        feed-forward agent, and the number of items minibatches are drawn from (steps, or env columns
        for a recurrent agent)."""
        c, agent = self.config, self.agent
        samples = samples.map(lambda x: x.to(agent.device))
        with torch.no_grad():
            next_value = agent.next_values(samples)
            advantage, value_target = generalized_advantage_estimation(
                samples.reward,
                samples.agent_info.value,
                next_value,
                samples.terminated,
                samples.truncated,
                c.discount,
                c.gae_lambda,
            )
        # Only what the minibatch losses read, so minibatch indexing copies nothing else.
        kept = (
            "observation",
            "action",
            "prev_action",
            "prev_reward",
            "terminated",
            "truncated",
            "agent_info",
        )
        batch = NamedArrays(
            {name: samples[name] for name in kept}, advantage=advantage, value_target=value_target
        )
        if agent.recurrent:  # minibatches of whole env columns
            return batch, self.B
        return batch.map(lambda x: x.reshape(self.T * self.B, *x.shape[2:])), self.T * self.B

    def minibatch(self, batch: NamedArrays, idx: torch.Tensor) -> NamedArrays:
        return batch[:, idx] if self.agent.recurrent else batch[idx]

    def schedule(self) -> tuple[float, float]:
        """(learning rate, clip range) at the run's env step (``anneal_env_steps``)."""
        c = self.config
        fraction = anneal_fraction(self.agent.env_steps, c.anneal_env_steps)
        return c.learning_rate * fraction, c.clip_epsilon * (fraction if c.anneal_clip else 1.0)

    def minibatch_loss(
        self, mb: NamedArrays, clip_epsilon: float
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate, value and entropy loss of a minibatch, and its diagnostics as tensors
        (no float conversion, so that it also runs under ``torch.func`` transforms)."""
        c = self.config
        log_prob, entropy, value = self.agent.evaluate(mb)
        kl = approx_kl(log_prob, mb.agent_info.log_prob)
        adv = standardize_advantage(mb.advantage) if c.normalize_advantage else mb.advantage
        pi_loss, clip_fraction = ppo_clipped_surrogate(log_prob, mb.agent_info.log_prob, adv, clip_epsilon)
        v_loss = value_loss(
            value,
            mb.value_target,
            old_value=mb.agent_info.value if c.clip_value_loss else None,
            clip_epsilon=clip_epsilon if c.clip_value_loss else None,
        )
        entropy_mean = entropy_bonus(entropy)
        loss = pi_loss + c.value_coef * v_loss - c.entropy_coef * entropy_mean
        values = {
            "pi_loss": pi_loss,
            "value_loss": v_loss,
            "entropy": entropy_mean,
            "approx_kl": kl,
            "clip_fraction": clip_fraction,
        }
        return loss, values

    def opt_info(
        self, batch: NamedArrays, updates: int, means: dict[str, float], stopped_early: bool
    ) -> OptInfo:
        """What ``updates`` minibatch steps did, with their mean diagnostics ``means`` and the batch's."""
        learning_rate, clip_epsilon = self.schedule()
        diagnostics = {
            **means,
            "explained_variance": explained_variance(batch.agent_info.value, batch.value_target),
            "learning_rate": learning_rate,
            "clip_epsilon": clip_epsilon,
            "stopped_early": float(stopped_early),
        }
        trained = updates * self.config.minibatch_size_steps
        return OptInfo(
            updates=updates, samples_trained=trained, samples_replayed=trained, diagnostics=diagnostics
        )


class Minibatches:
    """A single run's ``MinibatchGradStep``: the minibatches of ``batch``, each loss backpropagated and
    one clipped optimizer step (``PgLearner.clipped_step``)."""

    def __init__(self, algo: Algo, batch: NamedArrays, clip_epsilon: float) -> None:
        self.algo, self.batch, self.clip_epsilon = algo, batch, clip_epsilon
        self.device = algo.agent.device

    def loss(self, indices: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        minibatch = self.algo.minibatch(self.batch, indices.to(self.device))
        return self.algo.minibatch_loss(minibatch, self.clip_epsilon)

    def step(self, loss: torch.Tensor) -> torch.Tensor:
        return self.algo.clipped_step(loss)
