"""Soft Actor-Critic with twin critics and automatic entropy tuning (Haarnoja et al. 2018b, "Soft
Actor-Critic Algorithms and Applications", Algorithm 1; the original method: Haarnoja et al. 2018,
"Soft Actor-Critic: Off-Policy Maximum Entropy Deep RL with a Stochastic Actor").

``optimize`` appends each sampler batch to a uniform replay and, once ``learning_starts_steps``
transitions are stored, makes one update per ``env_steps_per_update`` new env steps. One update:

    a' ~ pi(.|s');  y = r + discount_t * (min(Q1'(s', a'), Q2'(s', a')) - alpha log pi(a'|s'))   (eqs. 3, 5)
    critics: minimise 0.5 (Qi(s, a) - y)^2, i = 1, 2                                            (eq. 5)
    actor:   minimise alpha log pi(a~|s) - min(Q1(s, a~), Q2(s, a~)),  a~ ~ pi(.|s) reparameterised (eq. 7)
    alpha:   minimise -alpha (log pi(a~|s) + target_entropy)                                     (eq. 18)
    targets: Polyak averaging with tau after every update

This is the version without a separate V network (2018b drops it); the tanh-squashed policy's
log-density carries the change-of-variables correction (``tanh_gaussian_log_prob``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from algorithms.agents.qpg_agents import SquashedGaussianAgent
from algorithms.arrays import NamedArrays
from algorithms.functional.policy_losses import sac_temperature_loss, soft_q_target
from algorithms.learners.common import require_action_space
from algorithms.learners.qpg import Diagnostics, Noise, QpgAlgo, QpgConfig, QpgMode, QpgModels
from algorithms.models.policies import TanhGaussianPolicy


@dataclass(frozen=True)
class Config(QpgConfig):
    """SAC hyperparameters: Haarnoja et al. 2018b, Table 1 (the same as 2018, Table 1): Adam 3e-4 for
    actor, critics and temperature, gamma 0.99, replay 1M, two hidden layers of 256 ReLU units,
    batch 256, tau 0.005, one gradient step per env step, target update every step, target entropy
    -dim(A) (``target_entropy=None``). Not in the tables: the initial temperature (1.0, the authors'
    softlearning code) and the uniform-random warm-up, for which we use TD3's 10,000 steps
    (Fujimoto et al. 2018, Sec. 6.1) so the two methods start from the same data. The defaults are
    ``repro/configs/settings/sac.toml``'s values (tests/test_config_defaults.py).
    """

    batch_size: int = 256
    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    alpha_learning_rate: float = 3e-4
    hidden_sizes: tuple[int, ...] = (256, 256)
    initial_alpha: float = 1.0
    autotune_alpha: bool = True  # False: alpha stays at initial_alpha (the 2018 paper's fixed temperature)
    target_entropy: float | None = None  # None: -dim(A)

    POSITIVE = ("alpha_learning_rate", "initial_alpha")


def build_agent(
    config: Config, observation_space: gym.Space, action_space: gym.Space
) -> SquashedGaussianAgent:
    require_action_space(action_space, gym.spaces.Box, "SAC")
    model = TanhGaussianPolicy(int(observation_space.shape[0]), action_space, config.hidden_sizes)
    return SquashedGaussianAgent(model, observation_space, action_space, config.random_steps)


class Temperature(nn.Module):
    """SAC's entropy temperature as one trained parameter, ``log_alpha`` (0-dim): alpha = exp(log_alpha)
    stays positive (Haarnoja et al. 2018b, Sec. 5)."""

    def __init__(self, initial_alpha: float, device: torch.device) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(initial_alpha), device=device).log())


def draw_noise(batch: NamedArrays) -> Noise:
    """The policy's reparameterisation noise: for a' ~ pi(.|s') and for a~ ~ pi(.|s), in that order."""
    return {"next": torch.randn_like(batch.action), "current": torch.randn_like(batch.action)}


def critic_loss(
    config: Config, models: QpgModels, batch: NamedArrays, noise: Noise, mode: QpgMode
) -> tuple[torch.Tensor, Diagnostics]:
    """0.5 (Qi(s, a) - y)^2 for both critics to the soft target of eq. 5, and its diagnostics."""
    alpha = models.log_alpha.detach().exp()
    with torch.no_grad():
        next_action, next_log_prob = models.actor(batch.next_observation, noise=noise["next"])
        next_q = models.critic_target(batch.next_observation, next_action)  # [2, N]
        y = soft_q_target(batch.return_n, batch.discount_n, next_q[0], next_q[1], next_log_prob, alpha)
    q = models.critic(batch.observation, batch.action)  # [2, N]
    # 0.5 (Q1 - y)^2 + 0.5 (Q2 - y)^2, each a mean over the batch: the mean over both critics.
    loss = F.mse_loss(q, y.expand_as(q))
    return loss, {"critic_loss": loss.detach(), "q_mean": q[0].detach().mean()}


def actor_loss(
    config: Config, models: QpgModels, batch: NamedArrays, noise: Noise, mode: QpgMode
) -> tuple[torch.Tensor, Diagnostics]:
    """The actor's loss of eq. 7 (trained into the actor only) plus, with ``autotune_alpha``, the
    temperature's of eq. 18."""
    alpha = models.log_alpha.detach().exp()
    action, log_prob = models.actor(batch.observation, noise=noise["current"])
    q_pi = models.critic(batch.observation, action)
    loss = (alpha * log_prob - q_pi.amin(dim=0)).mean()  # min over the two critics
    info = {"actor_loss": loss.detach(), "entropy": -log_prob.detach().mean(), "alpha": alpha}
    if config.autotune_alpha:
        # The actor loss sees alpha detached and the temperature loss log_prob detached: the sum's
        # gradient is each loss's gradient on its own parameters, as two separate steps would be.
        alpha_loss = sac_temperature_loss(models.log_alpha, log_prob, mode.target_entropy)
        info["alpha_loss"] = alpha_loss.detach()
        loss = loss + alpha_loss
    return loss, info


class Algo(
    QpgAlgo,
    diagnostics=("critic_loss", "actor_loss", "q_mean", "entropy", "alpha", "alpha_loss"),
    critics=2,
    actor_target=False,
    losses=(critic_loss, actor_loss),
    noise=draw_noise,
):
    """SAC learner: twin critics and their targets, temperature, replay (see the module docstring)."""

    def __init__(
        self, config: Config, agent: SquashedGaussianAgent, counters_frameskip: int, batch_spec
    ) -> None:
        super().__init__(config, agent, counters_frameskip, batch_spec)
        self.temperature = Temperature(config.initial_alpha, agent.device)
        if config.target_entropy is not None:
            self.mode = self.mode._replace(target_entropy=float(config.target_entropy))
        if config.autotune_alpha:
            # The temperature's own Adam, as a second group of the actor's: one backward and one
            # optimizer step for both (their losses share no trained parameter, see ``actor_loss``).
            alpha_group = {"params": [self.temperature.log_alpha], "lr": config.alpha_learning_rate}
            self.actor_optimizer.add_param_group(alpha_group)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "log_alpha": self.temperature.log_alpha.detach().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.temperature.log_alpha.copy_(state["log_alpha"])
