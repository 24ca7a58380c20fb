"""Epsilon schedules for epsilon-greedy exploration, per environment.

Two published rules, combinable:

* a linear anneal from ``start`` to a final value over ``decay_steps`` env steps (Mnih et al. 2015,
  Extended Data Table 1: 1.0 -> 0.1 over the first million frames, i.e. 250k agent steps);
* per-environment final values ``eps_i = base ** (1 + alpha * i / (N - 1))`` for env ``i`` of ``N``
  (Horgan et al. 2018, "Distributed Prioritized Experience Replay" (Ape-X), Sec. 4.1: base 0.4,
  alpha 7). R2D2 inherits it from Ape-X through its Table 2 caption; the R2D2 paper itself does not
  state it (repro/configs/reference/r2d2_hyperparameters.csv, other_params; repro/configs/README.md,
  The R2D1 arms).
* per-environment final values log-spaced from ``final_min`` (env 0) to ``final`` (env N - 1):
  rlpyt's vector epsilon (``eps_final_min``, rlpyt/agents/dqn/epsilon_greedy.py ``make_vec_eps``,
  ``torch.logspace(log10(eps_final_min), log10(eps_final), global_B)[env_ranks]``), which its R2D1
  runs used with 0.0005 and 0.1 (rlpyt atari_r2d1.py ``r2d1_long``).

``decay_steps = 0`` means the final values hold from the first step (Ape-X's fixed actor epsilons).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

PerEnvRule = Literal["same", "apex", "log_spaced"]


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


def log_spaced_epsilons(env_ranks: np.ndarray, n_envs: int, final_min: float, final: float) -> np.ndarray:
    """rlpyt's vector epsilon: ``final_min * (final / final_min) ** (i / (N - 1))`` for ranks ``i`` [B]
    of ``N`` envs (one env: ``final``)."""
    ranks = np.asarray(env_ranks, dtype=np.float64)
    if n_envs < 1 or np.any(ranks < 0) or np.any(ranks >= n_envs):
        raise ValueError(f"log_spaced_epsilons: ranks {ranks.tolist()} must lie in [0, n_envs={n_envs})")
    if n_envs == 1:
        return np.full(ranks.shape, final)
    return final_min * (final / final_min) ** (ranks / (n_envs - 1))


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
    ``start -> apex_base ** (1 + apex_alpha * i / (N - 1))`` (``final`` is then unused);
    ``"log_spaced"``: env ``i`` anneals to the i-th of N values log-spaced from ``final_min`` to
    ``final`` (rlpyt).
    """

    start: float = 1.0
    final: float = 0.1
    decay_steps: int = 250_000
    per_env: PerEnvRule = "same"
    apex_base: float = 0.4
    apex_alpha: float = 7.0
    final_min: float = 0.0005
    eval: float = 0.05

    @classmethod
    def from_config(cls, config: Any) -> EpsilonSchedule:
        """The schedule an algorithm Config states in its ``eps_<field>`` fields (DQN's, R2D1's);
        fields it does not have keep this class's defaults."""
        names = [f.name for f in dataclasses.fields(cls) if hasattr(config, f"eps_{f.name}")]
        return cls(**{name: getattr(config, f"eps_{name}") for name in names})

    def __post_init__(self) -> None:
        for name in ("start", "final", "apex_base", "eval"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"EpsilonSchedule.{name} must be in [0, 1], got {value!r}")
        if self.decay_steps < 0:
            raise ValueError(f"EpsilonSchedule.decay_steps must be >= 0, got {self.decay_steps!r}")
        if self.per_env not in ("same", "apex", "log_spaced"):
            raise ValueError(
                f"EpsilonSchedule.per_env must be 'same', 'apex' or 'log_spaced', got {self.per_env!r}"
            )
        if not 0.0 < self.final_min <= 1.0:
            raise ValueError(f"EpsilonSchedule.final_min must be in (0, 1], got {self.final_min!r}")
        if self.per_env == "log_spaced" and self.final <= 0.0:
            raise ValueError(f"EpsilonSchedule.final must be > 0 for 'log_spaced', got {self.final!r}")
        if self.apex_alpha < 0:
            raise ValueError(f"EpsilonSchedule.apex_alpha must be >= 0, got {self.apex_alpha!r}")

    def final_epsilons(self, env_ranks: np.ndarray, n_envs: int) -> np.ndarray:
        """The epsilons [B] the envs ``env_ranks`` (of ``n_envs``) anneal to, float64."""
        ranks = np.asarray(env_ranks)
        if self.per_env == "apex":
            return apex_epsilons(ranks, n_envs, self.apex_base, self.apex_alpha)
        if self.per_env == "log_spaced":
            return log_spaced_epsilons(ranks, n_envs, self.final_min, self.final)
        return np.full(ranks.shape, self.final)

    def sample_epsilons(
        self, env_steps: int, env_ranks: np.ndarray, n_envs: int, final: np.ndarray | None = None
    ) -> np.ndarray:
        """Exploration epsilons [B] for the envs ``env_ranks`` (of ``n_envs`` in the whole sampler);
        ``final``: their ``final_epsilons`` if the caller keeps them (agents anneal on every step)."""
        if final is None:
            final = self.final_epsilons(env_ranks, n_envs)
        return linear_anneal(self.start, final, self.decay_steps, env_steps) * np.ones(final.shape)
