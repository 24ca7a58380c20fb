"""Epsilon schedules for epsilon-greedy exploration, per environment.

Two published rules, combinable:

* a linear anneal from ``start`` to a final value over ``decay_steps`` env steps (Mnih et al. 2015,
  Extended Data Table 1: 1.0 -> 0.1 over the first million frames, i.e. 250k agent steps);
* per-environment final values ``eps_i = base ** (1 + alpha * i / (N - 1))`` for env ``i`` of ``N``
  (Horgan et al. 2018, "Distributed Prioritized Experience Replay" (Ape-X), Sec. 4.1: base 0.4,
  alpha 7). R2D2 inherits it from Ape-X through its Table 2 caption; the R2D2 paper itself does not
  state it (see docs/ and the reference SOURCES).

``decay_steps = 0`` means the final values hold from the first step (Ape-X's fixed actor epsilons).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

PerEnvRule = Literal["same", "apex"]


def apex_epsilons(env_ranks: np.ndarray, n_envs: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X per-actor epsilons ``base ** (1 + alpha * i / (N - 1))`` for ranks ``i`` [B] of ``N`` envs.

    With a single environment the rule is undefined (N - 1 = 0); that env gets ``base``.
    """
    ranks = np.asarray(env_ranks, dtype=np.float64)
    if n_envs < 1 or np.any(ranks < 0) or np.any(ranks >= n_envs):
        raise ValueError(f"apex_epsilons: ranks {ranks.tolist()} must lie in [0, n_envs={n_envs})")
    if n_envs == 1:
        return np.full(ranks.shape, base)
    return base ** (1.0 + alpha * ranks / (n_envs - 1))


def linear_anneal(
    start: float | np.ndarray, final: float | np.ndarray, decay_steps: int, step: int
) -> np.ndarray:
    """``start`` at step 0, moving linearly to ``final`` at ``decay_steps`` and staying there."""
    if decay_steps <= 0:
        return np.asarray(final, dtype=np.float64)
    frac = min(max(step, 0) / decay_steps, 1.0)
    return np.asarray(start + frac * (np.asarray(final) - start), dtype=np.float64)


@dataclass(frozen=True)
class EpsilonSchedule:
    """Which epsilon each env uses at a given env step, and in evaluation.

    ``per_env = "same"``: every env anneals ``start -> final``; ``"apex"``: env ``i`` anneals
    ``start -> apex_base ** (1 + apex_alpha * i / (N - 1))`` (``final`` is then unused).
    """

    start: float = 1.0
    final: float = 0.1
    decay_steps: int = 250_000
    per_env: PerEnvRule = "same"
    apex_base: float = 0.4
    apex_alpha: float = 7.0
    eval: float = 0.05

    def __post_init__(self) -> None:
        for name in ("start", "final", "apex_base", "eval"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"EpsilonSchedule.{name} must be in [0, 1], got {value!r}")
        if self.decay_steps < 0:
            raise ValueError(f"EpsilonSchedule.decay_steps must be >= 0, got {self.decay_steps!r}")
        if self.per_env not in ("same", "apex"):
            raise ValueError(f"EpsilonSchedule.per_env must be 'same' or 'apex', got {self.per_env!r}")
        if self.apex_alpha < 0:
            raise ValueError(f"EpsilonSchedule.apex_alpha must be >= 0, got {self.apex_alpha!r}")

    def sample_epsilons(self, env_steps: int, env_ranks: np.ndarray, n_envs: int) -> np.ndarray:
        """Exploration epsilons [B] for the envs ``env_ranks`` (of ``n_envs`` in the whole sampler)."""
        ranks = np.asarray(env_ranks)
        if self.per_env == "apex":
            final = apex_epsilons(ranks, n_envs, self.apex_base, self.apex_alpha)
        else:
            final = np.full(ranks.shape, self.final)
        return linear_anneal(self.start, final, self.decay_steps, env_steps) * np.ones(ranks.shape)
