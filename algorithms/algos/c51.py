"""C51: distributional Q-learning on a fixed support (Bellemare et al. 2017, "A Distributional
Perspective on Reinforcement Learning"), with DQN's options (double, dueling, prioritized, n-step).

The network outputs, per action, logits over ``n_atoms`` returns z_i evenly spaced in [v_min, v_max].
One update (Alg. 1)::

    (s, a, G, discount, s') ~ replay
    a* = argmax_a' sum_i z_i p_i(s', a')       # target net; online net with ``double`` (Rainbow)
    m  = project(G + discount * z, p(s', a*))  # onto the support, target net's probabilities
    loss = mean_b w_b * CE(m, p(s, a))         # cross-entropy; equals the KL up to m's entropy
    priorities <- CE                           # Rainbow (Hessel et al. 2018, Sec. 3) uses the KL loss

The replay, target network and update schedule are DQN's (``dqn.Algo``); only the model, the loss
and the defaults differ. Rainbow minus noisy nets is a configuration of this algorithm
(``rainbow.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import torch

from algorithms.agents.dqn_agents import EpsilonGreedyAgent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.algos import dqn
from algorithms.arrays import NamedArrays
from algorithms.functional.td import categorical_cross_entropy, categorical_target
from algorithms.models.dqn_model import QNetwork
from algorithms.models.heads import expected_q


@dataclass(frozen=True)
class Config:
    """C51 settings: Bellemare et al. 2017, Sec. 5 and Appendix, on top of Nature DQN's schedule
    (Mnih et al. 2015, Extended Data Table 1); field meanings as in ``dqn.Config``."""

    n_atoms: int = 51
    v_min: float = -10.0
    v_max: float = 10.0
    discount: float = 0.99
    batch_size: int = 32
    replay_size_steps: int = 1_000_000
    min_steps_learn: int = 50_000
    train_every_steps: int = 4
    target_update_period_updates: int = 2_500
    optimizer: str = "adam"  # Bellemare et al. 2017: Adam, lr 0.00025, eps 0.01 / 32
    learning_rate: float = 2.5e-4
    rmsprop_alpha: float = 0.95
    optimizer_eps: float = 0.01 / 32
    clip_grad_norm: float = 0.0
    double: bool = False
    dueling: bool = False
    n_step: int = 1
    prioritized: bool = False
    priority_alpha: float = 0.6
    priority_beta_start: float = 0.4
    priority_beta_anneal_updates: int = 3_125_000
    eps_start: float = 1.0
    eps_final: float = 0.01  # Bellemare et al. 2017, Sec. 5: epsilon 0.01 (training and evaluation)
    eps_decay_steps: int = 250_000
    eps_per_env: Literal["same", "apex"] = "same"
    eps_eval: float = 0.001
    conv_torso: str = "nature"
    mlp_hidden_sizes: tuple[int, ...] = (64, 64)
    hidden_size: int = 512

    def __post_init__(self) -> None:
        dqn.check_common_fields(self)
        dqn.check_field(self.n_atoms >= 2, "n_atoms", self.n_atoms, ">= 2")
        dqn.check_field(self.v_min < self.v_max, "v_min", self.v_min, f"< v_max ({self.v_max})")

    @property
    def epsilon_schedule(self) -> EpsilonSchedule:
        return EpsilonSchedule(
            start=self.eps_start,
            final=self.eps_final,
            decay_steps=self.eps_decay_steps,
            per_env=self.eps_per_env,
            eval=self.eps_eval,
        )

    def support(self) -> torch.Tensor:
        """The atoms z_0 .. z_{N-1}, evenly spaced in [v_min, v_max]."""
        return torch.linspace(self.v_min, self.v_max, self.n_atoms)


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> EpsilonGreedyAgent:
    """A distributional (optionally dueling) Q-network, acting epsilon-greedily on the expected return."""
    model = QNetwork(
        observation_space.shape,
        action_space.n,
        dueling=config.dueling,
        n_atoms=config.n_atoms,
        hidden_size=config.hidden_size,
        mlp_hidden_sizes=config.mlp_hidden_sizes,
        conv_torso=config.conv_torso,
    )
    return EpsilonGreedyAgent(
        model, observation_space, action_space, config.epsilon_schedule, config.support()
    )


class Algo(dqn.Algo):
    """DQN's learner with the categorical loss."""

    diagnostic_keys = ("loss", "q_mean", "grad_norm")

    def loss(self, batch: NamedArrays) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Weighted cross-entropy to the projected target -> (loss, per-sample CE, diagnostics)."""
        support = self.agent.support.to(batch.return_n.device)
        logits = self.model(batch.observation)  # [N, A, K]
        index = torch.arange(logits.shape[0], device=logits.device)
        logits_taken = logits[index, batch.action.long()]  # [N, K]
        with torch.no_grad():
            target_logits = self.target_model(batch.next_observation)
            selector = self.model(batch.next_observation) if self.config.double else target_logits
            best = expected_q(selector, support).argmax(dim=-1)
            probs_next = torch.softmax(target_logits[index, best], dim=-1)
            target_probs = categorical_target(batch.return_n, batch.discount_n, probs_next, support)
        cross_entropy = categorical_cross_entropy(target_probs, logits_taken)
        loss = (batch.is_weights * cross_entropy).mean()
        q_taken = expected_q(logits_taken.detach().unsqueeze(-2), support).squeeze(-1)
        return (
            loss,
            cross_entropy.detach(),
            {"q_mean": float(q_taken.mean())},
        )
