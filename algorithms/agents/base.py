"""The agent interface every sampler drives and every algorithm trains.

An agent wraps a model and turns observations into actions: epsilon-greedy for Q-learning,
sampling from a distribution for policy gradients, a deterministic policy plus noise for DDPG/TD3.
Samplers call ``step`` on a batch of B environments; recurrent agents carry a state that samplers
reset where an episode ended. Modes follow rlpyt's agents (rlpyt/agents/base.py): ``sample``
(exploration), ``eval`` (greedy or deterministic) and ``train`` (inside the loss).

Random draws at acting time (exploration coins, random actions, policy samples, action noise) go
through ``Agent.uniform`` / ``Agent.normal``: row i comes from the random stream of env rank
``env_ranks[i]`` (``RankStreams``), so the draws an env sees at its k-th step are the same whichever
process or batch slice acts for it (serial, parallel CPU workers, the alternating sampler's
groups). Without streams (an agent used outside a sampler) they come from the global torch RNG.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from algorithms.arrays import NamedArrays
from algorithms.resume import generator_state, set_generator_state

Mode = Literal["sample", "eval", "train"]


class RankStreams:
    """Independent random streams, one per env rank, all derived from one ``seed``.

    The stream of rank r is a numpy ``PCG64`` generator seeded with ``SeedSequence(seed,
    spawn_key=(r,))`` (the r-th child ``SeedSequence(seed).spawn`` would give), created on first
    use, so a worker holding ranks ``[lo, hi)`` builds exactly those ranks' streams from the seed
    alone. numpy rather than ``torch.Generator``: one small draw per row is the hot path, and
    numpy's is the faster one there (docs/results/core_measurements.md, agents/base.py).
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._generators: dict[int, np.random.Generator] = {}

    def _generator(self, rank: int) -> np.random.Generator:
        generator = self._generators.get(rank)
        if generator is None:
            sequence = np.random.SeedSequence(self.seed, spawn_key=(rank,))
            generator = self._generators[rank] = np.random.Generator(np.random.PCG64(sequence))
        return generator

    def state_dict(self) -> dict[str, Any]:
        """The seed and each stream's position (JSON text of its ``PCG64`` state), for a checkpoint."""
        positions = {rank: generator_state(g) for rank, g in self._generators.items()}
        return {"seed": self.seed, "positions": positions}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue every stream from where ``state_dict`` saw it; streams not used then start afresh."""
        self.seed = int(state["seed"])
        self._generators = {}
        for rank, position in state["positions"].items():
            set_generator_state(self._generator(int(rank)), position)

    def uniform(self, ranks: np.ndarray, shape: tuple[int, ...] = ()) -> torch.Tensor:
        """float32 [len(ranks), *shape], uniform on [0, 1); row i from rank ``ranks[i]``'s stream."""
        out = np.empty((len(ranks), *shape), dtype=np.float32)
        for row, rank in enumerate(ranks.tolist()):
            self._generator(rank).random(dtype=np.float32, out=out[row : row + 1])
        return torch.from_numpy(out)

    def normal(self, ranks: np.ndarray, shape: tuple[int, ...] = ()) -> torch.Tensor:
        """float32 [len(ranks), *shape], standard normal; row i from rank ``ranks[i]``'s stream."""
        out = np.empty((len(ranks), *shape), dtype=np.float32)
        for row, rank in enumerate(ranks.tolist()):
            self._generator(rank).standard_normal(dtype=np.float32, out=out[row : row + 1])
        return torch.from_numpy(out)


# Modules whose forward reads ``training``: dropout and batch statistics (no model here has one today).
_MODE_SENSITIVE = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)


def mode_sensitive(model: nn.Module) -> bool:
    """Whether ``model`` computes differently in train and eval mode: it holds a dropout or
    normalisation module, or a recurrent one with dropout between layers."""
    return any(
        isinstance(m, _MODE_SENSITIVE) or (isinstance(m, nn.RNNBase) and m.dropout > 0)
        for m in model.modules()
    )


class Agent(ABC):
    """Base class: holds ``model``, the env ranks it acts for and their random streams.

    Subclasses implement ``step``; recurrent ones also ``initial_state``.
    """

    recurrent: bool = False

    def __init__(self, model: nn.Module, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.model = model
        self._mode_sensitive = mode_sensitive(model)
        self.observation_space = observation_space
        self.action_space = action_space
        self.mode: Mode = "sample"
        self.env_steps = 0
        # Global indices of the environments this copy acts for (per-env epsilons depend on them)
        # and how many environments the whole sampler runs.
        self.env_ranks: np.ndarray = np.zeros(0, dtype=np.int64)
        self.global_batch = 0
        # The exploration streams of those ranks (None: draw from the global torch RNG).
        self.streams: RankStreams | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def set_env_ranks(
        self, env_ranks: np.ndarray | list[int], global_batch: int, streams: RankStreams | None = None
    ) -> None:
        """Act for envs ``env_ranks`` [B] of ``global_batch``, drawing from ``streams`` (None: the
        global torch RNG)."""
        self.env_ranks = np.asarray(env_ranks, dtype=np.int64)
        self.global_batch = int(global_batch)
        self.streams = streams

    def uniform(self, batch_size: int, *shape: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Uniform [0, 1) draws [batch_size, *shape] on ``device`` (the model's by default), row i
        from env ``env_ranks[i]``'s stream."""
        device = self.device if device is None else device
        if self.streams is None:
            return torch.rand((batch_size, *shape), device=device)
        return self.streams.uniform(self._stream_ranks(batch_size), shape).to(device)

    def normal(self, batch_size: int, *shape: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Standard-normal draws [batch_size, *shape] on ``device``, row i from ``env_ranks[i]``'s stream."""
        device = self.device if device is None else device
        if self.streams is None:
            return torch.randn((batch_size, *shape), device=device)
        return self.streams.normal(self._stream_ranks(batch_size), shape).to(device)

    def _stream_ranks(self, batch_size: int) -> np.ndarray:
        if len(self.env_ranks) != batch_size:
            raise ValueError(
                f"{type(self).__name__}: acting for {batch_size} envs with streams for env ranks "
                f"{self.env_ranks.tolist()}; call set_env_ranks with this batch's ranks"
            )
        return self.env_ranks

    def set_mode(self, mode: Mode, env_steps: int = 0) -> None:
        """Switch between sampling, evaluation and training behaviour at ``env_steps`` of the run."""
        if mode not in ("sample", "eval", "train"):
            raise ValueError(f"unknown agent mode {mode!r}")
        self.mode = mode
        self.env_steps = int(env_steps)
        # train() walks every module (docs/results/core_measurements.md, agents/base.py), and the
        # runners switch between sampling and training every iteration: only a model whose output
        # depends on the mode is switched.
        if self._mode_sensitive and self.model.training != (mode == "train"):
            self.model.train(mode == "train")

    def initial_state(self, batch_size: int) -> NamedArrays | None:
        """Recurrent state for ``batch_size`` fresh episodes (None for feed-forward agents)."""
        return None

    def reset_state(self, state: NamedArrays | None, done: torch.Tensor) -> NamedArrays | None:
        """Zero the state rows where ``done`` [B] is true (the episode there has ended)."""
        if state is None:
            return None
        keep = (~done).to(torch.float32)
        # Each leaf where it lives: the R2D1 agent keeps its acting state on the CPU whatever the
        # model's device, so ``done`` comes from the sampler's CPU arrays.
        return state.map(lambda s: s * keep.view(-1, *([1] * (s.dim() - 1))).to(s.device, s.dtype))

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
