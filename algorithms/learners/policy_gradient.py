"""What the actor-critic policy gradients (A2C, PPO) share: the learning-rate schedule, the config
checks and the learner's optimizer and checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from algorithms.agents.base import Agent
from algorithms.configs import check_field, check_ranges
from algorithms.models.torsos import CONV_TORSOS


def anneal_fraction(env_steps: int, anneal_env_steps: int) -> float:
    """1 at the start of training, falling linearly to 0 at ``anneal_env_steps`` (1 if that is 0).

    ``env_steps`` is the run's count (``agent.env_steps``, set by the runner before ``optimize``),
    not one process's iterations x batch: under data-parallel training every rank then anneals on
    the global count.
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

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
