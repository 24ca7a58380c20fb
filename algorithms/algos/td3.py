"""Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods", Algorithm 1).

``optimize`` appends each sampler batch to a uniform replay and, once ``learning_starts_steps``
transitions are stored, makes one update per ``env_steps_per_update`` new env steps. One update:

    a~ = clip(mu'(s') + clip(N(0, sigma), -c, c), low, high)         target policy smoothing (Sec. 5.3)
    y  = r + discount_t * min(Q1'(s', a~), Q2'(s', a~))               clipped double Q (Sec. 4.2)
    critics: minimise (Q1(s, a) - y)^2 + (Q2(s, a) - y)^2
    every policy_delay_updates updates (Sec. 5.2):
        actor: maximise Q1(s, mu(s)); Polyak-average actor and critic targets with tau

``discount_t`` is gamma, or 0 where the transition ended in a terminal state; a truncated episode
still bootstraps from its true final observation (the replay stores ``final_observation`` as s').
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

from algorithms.agents.qpg_agents import DeterministicAgent
from algorithms.algos import ddpg
from algorithms.arrays import NamedArrays
from algorithms.functional.policy_losses import clipped_double_q_target, smoothed_target_action
from algorithms.learners.qpg import Diagnostics, Noise, QpgAlgo, QpgMode, QpgModels


@dataclass(frozen=True)
class Config(ddpg.Config):
    """TD3 hyperparameters: Fujimoto et al. 2018, Table 3 ("Ours") and Sec. 6.1: Adam 1e-3 for actor
    and critics, tau 0.005, batch 100, one update per env step, gamma 0.99, exploration N(0, 0.1),
    target smoothing N(0, 0.2) clipped to 0.5, policy delay 2, 400-300 ReLU networks, replay 1M,
    10,000 uniform-random steps for HalfCheetah and Ant (1,000 for the other tasks: the setting
    ``td3_1k_start``). Noise scales are in units of the action box's half-width (the paper's actions
    are in [-1, 1]). The defaults are ``repro/configs/settings/td3.toml``'s values
    (tests/test_config_defaults.py).
    """

    target_noise_std: float = 0.2
    target_noise_clip: float = 0.5
    policy_delay_updates: int = 2

    POSITIVE_INTS = ("policy_delay_updates",)
    NON_NEGATIVE = ("exploration_std", "target_noise_std", "target_noise_clip")


# TD3 acts as DDPG does (Fujimoto et al. 2018, Algorithm 1: a deterministic policy plus Gaussian
# exploration noise) and logs the same diagnostics.
build_agent = ddpg.build_agent


def draw_noise(batch: NamedArrays) -> Noise:
    """Target policy smoothing's standard normals, in half-widths of the action box."""
    return {"target": torch.randn_like(batch.action)}


def critic_loss(
    config: Config, models: QpgModels, batch: NamedArrays, noise: Noise, mode: QpgMode
) -> tuple[torch.Tensor, Diagnostics]:
    """Both critics' squared errors to the clipped double-Q target of the smoothed target action."""
    c = config
    half_width = (mode.high - mode.low) / 2
    with torch.no_grad():
        target_action = models.actor_target(batch.next_observation)
        next_action = smoothed_target_action(
            target_action,
            noise["target"] * c.target_noise_std * half_width,
            c.target_noise_clip * half_width,
            mode.low,
            mode.high,
        )
        next_q = models.critic_target(batch.next_observation, next_action)  # [2, N]
        y = clipped_double_q_target(batch.return_n, batch.discount_n, next_q[0], next_q[1])
    q = models.critic(batch.observation, batch.action)  # [2, N]
    # (Q1 - y)^2 + (Q2 - y)^2, each a mean over the batch.
    loss = 2.0 * F.mse_loss(q, y.expand_as(q))
    return loss, {"critic_loss": loss.detach(), "q_mean": q[0].detach().mean()}


def actor_loss(
    config: Config, models: QpgModels, batch: NamedArrays, noise: Noise, mode: QpgMode
) -> tuple[torch.Tensor, Diagnostics]:
    """-Q1(s, mu(s)), trained into the actor only."""
    q1_pi = models.critic(batch.observation, models.actor(batch.observation), n_members=1)
    loss = -q1_pi.mean()
    return loss, {"actor_loss": loss.detach()}


class Algo(
    QpgAlgo,
    diagnostics=ddpg.Algo.DIAGNOSTICS,
    critics=2,
    actor_target=True,
    losses=(critic_loss, actor_loss),
    noise=draw_noise,
):
    """TD3 learner: twin critics, target networks, replay (see the module docstring); it counts its
    updates for the delayed policy update."""

    def __init__(
        self, config: Config, agent: DeterministicAgent, counters_frameskip: int, batch_spec
    ) -> None:
        super().__init__(config, agent, counters_frameskip, batch_spec)
        self.updates = 0

    def count_update(self) -> bool:
        self.updates += 1
        return self.updates % self.config.policy_delay_updates == 0

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.updates = int(state["updates"])
