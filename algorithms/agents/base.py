"""The agent interface every sampler drives and every algorithm trains.

An agent wraps a model and turns observations into actions: epsilon-greedy for Q-learning,
sampling from a distribution for policy gradients, a deterministic policy plus noise for DDPG/TD3.
Samplers call ``step`` on a batch of B environments; recurrent agents carry a state that samplers
reset where an episode ended. Modes follow rlpyt's agents (rlpyt/agents/base.py): ``sample``
(exploration), ``eval`` (greedy or deterministic) and ``train`` (inside the loss).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from algorithms.arrays import NamedArrays

Mode = Literal["sample", "eval", "train"]


class Agent(ABC):
    """Base class: holds ``model`` and the env ranks it acts for.

    Subclasses implement ``step``; recurrent ones also ``initial_state``.
    """

    recurrent: bool = False

    def __init__(self, model: nn.Module, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.model = model
        self.observation_space = observation_space
        self.action_space = action_space
        self.mode: Mode = "sample"
        self.env_steps = 0
        # Global indices of the environments this copy acts for (per-env epsilons depend on them)
        # and how many environments the whole sampler runs.
        self.env_ranks: np.ndarray = np.zeros(0, dtype=np.int64)
        self.global_batch = 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def set_env_ranks(self, env_ranks: np.ndarray | list[int], global_batch: int) -> None:
        self.env_ranks = np.asarray(env_ranks, dtype=np.int64)
        self.global_batch = int(global_batch)

    def set_mode(self, mode: Mode, env_steps: int = 0) -> None:
        """Switch between sampling, evaluation and training behaviour at ``env_steps`` of the run."""
        if mode not in ("sample", "eval", "train"):
            raise ValueError(f"unknown agent mode {mode!r}")
        self.mode = mode
        self.env_steps = int(env_steps)
        self.model.train(mode == "train")

    def initial_state(self, batch_size: int) -> NamedArrays | None:
        """Recurrent state for ``batch_size`` fresh episodes (None for feed-forward agents)."""
        return None

    def reset_state(self, state: NamedArrays | None, done: torch.Tensor) -> NamedArrays | None:
        """Zero the state rows where ``done`` [B] is true (the episode there has ended)."""
        if state is None:
            return None
        keep = (~done).to(torch.float32)
        return state.map(lambda s: s * keep.view(-1, *([1] * (s.dim() - 1))).to(s.dtype))

    @abstractmethod
    @torch.no_grad()
    def step(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        state: NamedArrays | None,
    ) -> tuple[torch.Tensor, NamedArrays, NamedArrays | None]:
        """Act for B environments.

        Args: ``observation`` [B, *obs], ``prev_action`` [B, *act], ``prev_reward`` [B], ``state`` the
        recurrent state [B, ...] or None.
        Returns ``(action [B, *act], agent_info, next_state)``; ``agent_info`` is a ``NamedArrays``
        of [B, ...] tensors the algorithm needs later (values, log-probs, the state before the
        step for stored-state replay). Its fields are the same on every call.
        """

    def state_dict(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)
