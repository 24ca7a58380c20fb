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
from typing import Any

import gymnasium as gym
import torch

from algorithms.agents.dqn_agents import EpsilonGreedyAgent
from algorithms.algos import dqn
from algorithms.arrays import NamedArrays
from algorithms.configs import check_field
from algorithms.functional.td import categorical_cross_entropy, categorical_target
from algorithms.learners.q_replay import LossMode, LossOut
from algorithms.models.heads import expected_q


@dataclass(frozen=True)
class Config(dqn.Config):
    """C51 settings: Bellemare et al. 2017, Sec. 5 and Appendix, on top of Nature DQN's schedule
    (``dqn.Config``, Mnih et al. 2015, Extended Data Table 1): the distribution's support and the
    values C51 changes. ``loss`` is DQN's TD loss; C51's loss is the categorical cross-entropy, so
    the field must keep its default. The defaults are ``repro/configs/settings/c51.toml``'s values
    (tests/test_config_defaults.py)."""

    n_atoms: int = 51
    v_min: float = -10.0
    v_max: float = 10.0
    optimizer: str = "adam"  # Bellemare et al. 2017: Adam, lr 0.00025, eps 0.01 / 32
    optimizer_eps: float = 0.01 / 32
    eps_final: float = 0.01  # Bellemare et al. 2017, Sec. 5: epsilon 0.01 (training and evaluation)
    eps_eval: float = 0.001

    def __post_init__(self) -> None:
        super().__post_init__()
        check_field(self, self.n_atoms >= 2, "n_atoms", ">= 2")
        check_field(self, self.v_min < self.v_max, "v_min", f"< v_max ({self.v_max})")
        check_field(self, self.loss == "huber", "loss", "'huber' (unused: C51 minimizes a cross-entropy)")

    def support(self) -> torch.Tensor:
        """The atoms z_0 .. z_{N-1}, evenly spaced in [v_min, v_max]."""
        return torch.linspace(self.v_min, self.v_max, self.n_atoms)


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> EpsilonGreedyAgent:
    """A distributional (optionally dueling) Q-network, acting epsilon-greedily on the expected return."""
    return dqn.q_agent(config, observation_space, action_space, config.n_atoms, config.support())


def loss(config: Config, model: Any, target_model: Any, batch: NamedArrays, mode: LossMode) -> LossOut:
    """Weighted cross-entropy to the projected target -> (loss, per-sample CE, diagnostics)."""
    support = config.support().to(batch.return_n.device)
    logits = model(batch.observation)  # [N, A, K]
    index = torch.arange(logits.shape[0], device=logits.device)
    logits_taken = logits[index, batch.action.long()]  # [N, K]
    with torch.no_grad():
        target_logits = target_model(batch.next_observation)
        selector = model(batch.next_observation) if config.double else target_logits
        best = expected_q(selector, support).argmax(dim=-1)
        probs_next = torch.softmax(target_logits[index, best], dim=-1)
        target_probs = categorical_target(batch.return_n, batch.discount_n, probs_next, support)
    cross_entropy = categorical_cross_entropy(target_probs, logits_taken)
    weighted = (batch.is_weights * cross_entropy).mean()
    if not mode.measure:
        return LossOut(weighted, cross_entropy.detach(), {})
    q_taken = expected_q(logits_taken.detach().unsqueeze(-2), support).squeeze(-1)
    return LossOut(weighted, cross_entropy.detach(), {"q_mean": q_taken.mean()})


class Algo(dqn.Algo):
    """DQN's learner with the categorical loss."""

    diagnostic_keys = ("loss", "q_mean", "grad_norm")
    loss_fn = staticmethod(loss)
