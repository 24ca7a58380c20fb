"""What the runners share around the training loop: seeding, the run's agent, and the progress
window a row's means are taken over."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from algorithms import registry
from algorithms.learners.common import OptInfo
from algorithms.samplers.base import env_spaces

if TYPE_CHECKING:
    from algorithms.agents.base import Agent
    from algorithms.run_config import TrainConfig


def rank_seed(seed: int, rank: int) -> int:
    """Global-RNG seed of data-parallel rank ``rank``: the run seed on rank 0, an independent
    ``SeedSequence`` draw elsewhere (``seed + rank`` would equal rank 0 of the run seeded ``seed + 1``)."""
    if rank == 0:
        return seed
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global RNGs (the rule in ``algorithms.train``)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_run_agent(config: TrainConfig, device: torch.device) -> Agent:
    """The algorithm's agent for ``config.env``'s spaces, on ``device``."""
    observation_space, action_space = env_spaces(config.env)
    agent = registry.build_agent(config.algo, config.algo_config, observation_space, action_space)
    agent.model.to(device)
    return agent


def finite_mean(values: list[float]) -> float:
    """Mean of the finite values (NaN if there are none): diagnostics are NaN before learning starts."""
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def next_boundary(env_steps: int, interval: int) -> int:
    """The first multiple of ``interval`` strictly above ``env_steps``."""
    return (env_steps // interval + 1) * interval


@dataclass
class LogWindow:
    """What happened since the last progress row: finished episodes and each diagnostic's values."""

    traj_infos: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: dict[str, list[float]] = field(default_factory=dict)

    def add(self, traj_infos: list[dict[str, Any]], opt_info: OptInfo) -> None:
        self.traj_infos.extend(traj_infos)
        for key, value in opt_info.diagnostics.items():
            self.diagnostics.setdefault(key, []).append(float(value))

    def mean_diagnostics(self) -> dict[str, float]:
        """Mean of each diagnostic over the window's finite values (NaN where none was finite)."""
        return {key: finite_mean(values) for key, values in self.diagnostics.items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "returns": [t["return"] for t in self.traj_infos],
            "lengths": [t["length"] for t in self.traj_infos],
            "env_ranks": [t["env_rank"] for t in self.traj_infos],
            "diagnostics": {k: list(v) for k, v in self.diagnostics.items()},
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> LogWindow:
        trajs = [
            {"return": r, "length": n, "env_rank": k}
            for r, n, k in zip(state["returns"], state["lengths"], state["env_ranks"])
        ]
        return cls(trajs, {k: list(v) for k, v in state["diagnostics"].items()})
