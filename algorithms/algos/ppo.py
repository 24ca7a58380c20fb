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
   ``anneal_env_steps`` (Schulman et al. 2017, Table 5, "alpha linearly annealed from 1 to 0"):
   ``schedule``, a function of the env step ``optimize`` is given.

The minibatch loss is ``loss(config, model, minibatch, now)``, a function of its arguments alone;
a packed run maps the same function over its members' stacked parameters.

Published settings, with their sampler shapes (horizon T, actors B), are data:
``repro/configs/settings/ppo_*.toml`` (``ppo_mujoco``: Table 3, which ``Config()``'s defaults follow;
``ppo_atari``: Table 5).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import torch

from algorithms.agents.pg_agents import PgAgent, RecurrentPgAgent, actor_critic_agent, evaluate_actions
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


class Schedule(NamedTuple):
    """The annealed values at one env step of the run."""

    learning_rate: float
    clip_epsilon: float


def schedule(config: Config, env_steps: int) -> Schedule:
    """The learning rate and clip range at env step ``env_steps`` of the run (``anneal_env_steps``)."""
    fraction = anneal_fraction(env_steps, config.anneal_env_steps)
    clip_fraction = fraction if config.anneal_clip else 1.0
    return Schedule(config.learning_rate * fraction, config.clip_epsilon * clip_fraction)


def loss(
    config: Config, model: Any, minibatch: NamedArrays, now: Schedule
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped surrogate, value and entropy loss of a minibatch under ``model`` at the schedule's
    values ``now``, and its diagnostics as tensors (no float conversion, so that it also runs under
    ``torch.func`` transforms)."""
    c, clip_epsilon = config, now.clip_epsilon
    log_prob, entropy, value = evaluate_actions(model, minibatch, c.recurrent)
    kl = approx_kl(log_prob, minibatch.agent_info.log_prob)
    adv = standardize_advantage(minibatch.advantage) if c.normalize_advantage else minibatch.advantage
    pi_loss, clip_fraction = ppo_clipped_surrogate(log_prob, minibatch.agent_info.log_prob, adv, clip_epsilon)
    v_loss = value_loss(
        value,
        minibatch.value_target,
        old_value=minibatch.agent_info.value if c.clip_value_loss else None,
        clip_epsilon=clip_epsilon if c.clip_value_loss else None,
    )
    entropy_mean = entropy_bonus(entropy)
    total = pi_loss + c.value_coef * v_loss - c.entropy_coef * entropy_mean
    values = {
        "pi_loss": pi_loss,
        "value_loss": v_loss,
        "entropy": entropy_mean,
        "approx_kl": kl,
        "clip_fraction": clip_fraction,
    }
    return total, values


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

    def optimize(self, env_steps: int, samples: NamedArrays) -> OptInfo:
        """The epochs of minibatch steps on the batch, at env step ``env_steps`` of the run."""
        batch, n_items = self.training_batch(samples)
        now = schedule(self.config, env_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = now.learning_rate
        # Each epoch's permutation drawn as the epoch starts: none after a KL stop.
        orders = (minibatch_indices(n_items, self.n_minibatches) for _ in range(self.config.epochs))
        grad_step = Minibatches(self, batch, now)
        totals, updates, stopped_early = minibatch_epochs(
            grad_step, orders, MINIBATCH_DIAGNOSTICS, self.config.target_kl
        )
        means = {key: float(total) / updates if updates else float("nan") for key, total in totals.items()}
        return self.opt_info(batch, updates, means, stopped_early, now)

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

    def opt_info(
        self, batch: NamedArrays, updates: int, means: dict[str, float], stopped_early: bool, now: Schedule
    ) -> OptInfo:
        """What ``updates`` minibatch steps did at the schedule's values ``now``, with their mean
        diagnostics ``means`` and the batch's."""
        diagnostics = {
            **means,
            "explained_variance": explained_variance(batch.agent_info.value, batch.value_target),
            "learning_rate": now.learning_rate,
            "clip_epsilon": now.clip_epsilon,
            "stopped_early": float(stopped_early),
        }
        trained = updates * self.config.minibatch_size_steps
        return OptInfo(
            updates=updates, samples_trained=trained, samples_replayed=trained, diagnostics=diagnostics
        )


class Minibatches:
    """A single run's ``MinibatchGradStep``: the minibatches of ``batch``, each ``loss`` backpropagated
    and one clipped optimizer step (``PgLearner.clipped_step``)."""

    def __init__(self, algo: Algo, batch: NamedArrays, now: Schedule) -> None:
        self.algo, self.batch, self.now = algo, batch, now
        self.model = algo.agent.model
        self.device = algo.agent.device

    def minibatch_gradients(self, indices: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        minibatch = self.algo.minibatch(self.batch, indices.to(self.device))
        return loss(self.algo.config, self.model, minibatch, self.now)

    def apply_gradients(self, total: torch.Tensor) -> torch.Tensor:
        return self.algo.clipped_step(total)
