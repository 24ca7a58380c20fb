"""What the actor-critic policy gradients (A2C, PPO) share: the learning-rate schedule, the config
checks, the learner's optimizer and checkpoint, and PPO's epochs of minibatch steps
(``minibatch_epochs``), which single and packed runs share through a ``MinibatchGradStep``: a
single run's backpropagates through ``ppo.loss``, a packed run's (``algorithms.packed.learners``)
computes K members' gradients of the same function at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from algorithms.agents.base import Agent
from algorithms.configs import check_field, check_ranges
from algorithms.models.torsos import CONV_TORSOS


def anneal_fraction(env_steps: int, anneal_env_steps: int) -> float:
    """1 at the start of training, falling linearly to 0 at ``anneal_env_steps`` (1 if that is 0).

    ``env_steps`` is the run's count (the runner passes it to ``optimize``), not one process's
    iterations x batch: under data-parallel training every rank then anneals on the global count.
    """
    if anneal_env_steps == 0:
        return 1.0
    return max(0.0, 1.0 - env_steps / anneal_env_steps)


def validate_pg_config(
    config: Any,
    positive: tuple[str, ...] = (),
    positive_ints: tuple[str, ...] = (),
    non_negative: tuple[str, ...] = (),
) -> None:
    """The field checks of the A2C and PPO configs: the fields both have, plus the named extra ones.
    Raises ``ValueError`` naming ``<algo>.Config.<field>`` and its value."""
    check_ranges(
        config,
        unit=("discount", "gae_lambda"),
        positive=("learning_rate", "optimizer_eps", *positive),
        positive_ints=("lstm_size", *positive_ints),
        non_negative=("value_coef", "entropy_coef", "clip_grad_norm", "anneal_env_steps", *non_negative),
        sizes=("hidden_sizes",),
    )
    check_field(config, config.conv_torso in CONV_TORSOS, "conv_torso", f"one of {CONV_TORSOS}")


class PgLearner:
    """What the A2C and PPO learners share: the config, the agent, the [T, B] batch shape and one
    optimizer over the model (``make_optimizer``), checkpointed with ``state_dict``."""

    def __init__(self, config: Any, agent: Agent, counters_frameskip: int, batch_spec: Any) -> None:
        self.config = config
        self.agent = agent
        self.T, self.B = int(batch_spec.T), int(batch_spec.B)
        self.optimizer = self.make_optimizer(agent.model.parameters())

    def make_optimizer(self, params: Iterable[Any]) -> torch.optim.Optimizer:
        raise NotImplementedError

    def clipped_step(self, loss: torch.Tensor) -> torch.Tensor:
        """One optimizer step on ``loss``, the gradient clipped to 2-norm ``config.clip_grad_norm``
        (0: not clipped); returns the norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.agent.model.parameters(), self.config.clip_grad_norm or math.inf)
        self.optimizer.step()
        return norm

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


# What a minibatch's gradient step computes: a single run's loss (0-dim, backpropagated in
# ``apply_gradients``) or a packed run's gradients by parameter name.
Gradients = torch.Tensor | dict[str, torch.Tensor]


class MinibatchGradStep(Protocol):
    """The seam between ``minibatch_epochs`` and the run kind: one minibatch's gradient and the
    optimizer step on it."""

    def minibatch_gradients(self, indices: Any) -> tuple[Gradients, dict[str, torch.Tensor]]:
        """The loss of the minibatch at ``indices`` (a single run backpropagates it) or its gradients
        (a packed run's), and its diagnostics as tensors (``approx_kl`` among them)."""

    def apply_gradients(self, gradients: Gradients) -> torch.Tensor:
        """The optimizer step on what ``minibatch_gradients`` returned; returns the gradient norm
        before clipping."""


def minibatch_epochs(
    grad_step: MinibatchGradStep, orders: Iterable[Iterable[Any]], keys: Sequence[str], target_kl: float
) -> tuple[dict[str, Any], int, bool]:
    """One optimizer step per minibatch of each epoch (``orders``: per epoch, the minibatches'
    indices, drawn when the epoch starts), stopped before the step whose approximate KL to the
    sampling policy exceeds 1.5 x ``target_kl`` (0: never; Spinning Up's PPO, Stable-Baselines3's
    ``target_kl``). Returns the diagnostics ``keys`` summed over the steps (``grad_norm`` among
    them), the number of steps and whether the KL stopped them."""
    totals: dict[str, Any] = dict.fromkeys(keys, 0.0)
    updates = 0
    for order in orders:
        for indices in order:
            gradients, values = grad_step.minibatch_gradients(indices)
            if target_kl > 0 and values["approx_kl"].item() > 1.5 * target_kl:
                return totals, updates, True
            values["grad_norm"] = grad_step.apply_gradients(gradients)
            updates += 1
            for key in keys:
                totals[key] = totals[key] + values[key].detach()
    return totals, updates, False
