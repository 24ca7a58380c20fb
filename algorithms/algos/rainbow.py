"""Rainbow without noisy networks (Hessel et al. 2018, "Rainbow: Combining Improvements in Deep
Reinforcement Learning"): C51 with 3-step returns, double Q-learning, the dueling architecture and
prioritized replay. It is a configuration of ``c51.py`` (same agent and learner); exploration is
epsilon-greedy, because the noisy-net component is left out.

Defaults are Hessel et al. 2018, Table 1, converted to env steps (4 frames) and updates (one per 4
steps); the epsilon schedule, which Rainbow does not have, is Dopamine's Rainbow setting
(``rainbow_aaai.gin``: 0.01 after 250k agent steps, 0.001 in evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.algos import c51
from algorithms.algos.c51 import Algo, build_agent

__all__ = ["Algo", "Config", "build_agent"]


@dataclass(frozen=True)
class Config(c51.Config):
    """Rainbow-minus-noisy settings (Hessel et al. 2018, Table 1): the defaults are
    ``repro/configs/settings/rainbow_no_noisy.toml``'s values (tests/test_config_defaults.py)."""

    n_step: int = 3
    double: bool = True
    dueling: bool = True
    prioritized: bool = True
    priority_alpha: float = 0.5
    priority_beta_start: float = 0.4  # annealed to 1 over the run (200M frames)
    priority_beta_anneal_updates: int = 12_500_000  # 200M frames = 12.5M updates at one per 4 steps
    learning_starts_steps: int = 20_000  # 80k frames
    target_update_period_updates: int = 2_000  # 32k frames = 8k steps = 2k updates
    learning_rate: float = 6.25e-5
    optimizer_eps: float = 1.5e-4
