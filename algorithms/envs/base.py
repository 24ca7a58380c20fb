"""The vectorized-environment interface (docs/ARCHITECTURE.md, Contract 1) and its shared bookkeeping.

Every backend steps B environments with **same-step autoreset**: where an episode ends, the
returned ``observation`` is already the first observation of the next episode and the true last
observation is in ``final_observation``. ``terminated`` (MDP terminal, no bootstrap) and
``truncated`` (time limit, bootstrap from ``final_observation``) stay separate.

Backends implement ``_reset`` and ``_step``, which return raw per-env arrays; this base class clips
rewards, tracks episode returns and lengths, and packs the step into a ``NamedArrays``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from algorithms.arrays import NamedArrays


@dataclass
class RawStep:
    """One backend step over B envs, before reward clipping and episode bookkeeping.

    ``observation`` is already the next episode's first observation where ``terminated |
    truncated``; ``final_observation`` is the ended episode's last one there (equal elsewhere).
    """

    observation: np.ndarray  # [B, *obs]
    reward: np.ndarray  # [B] float32, raw game reward
    terminated: np.ndarray  # [B] bool
    truncated: np.ndarray  # [B] bool
    final_observation: np.ndarray  # [B, *obs]
    life_loss: np.ndarray  # [B] bool


class VecEnv(ABC):
    """B environments stepped together; see the module docstring and Contract 1."""

    num_envs: int
    frameskip: int
    observation_space: gym.Space
    action_space: gym.Space

    def __init__(self, num_envs: int, frameskip: int, clip_rewards: bool, episodic_life: bool) -> None:
        self.num_envs = num_envs
        self.frameskip = frameskip
        self._clip_rewards = clip_rewards
        self._episodic_life = episodic_life
        self._episode_return = np.zeros(num_envs, dtype=np.float64)
        self._episode_length = np.zeros(num_envs, dtype=np.int64)

    def reset(self) -> np.ndarray:
        """Reset every env; returns observations [B, *obs]. Seeds were fixed by ``make_vec_env``."""
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        return self._reset()

    def step(self, actions: np.ndarray) -> NamedArrays:
        """Step every env with ``actions`` [B, *act]; returns the Contract 1 ``NamedArrays``."""
        actions = np.asarray(actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(
                f"VecEnv.step: actions have shape {actions.shape}, expected ({self.num_envs}, ...)"
            )
        raw = self._step(actions)
        # Episodes (and their statistics) end where the backend reset the game; with episodic_life a
        # life loss is terminal for the learner while the game itself goes on.
        game_over = raw.terminated | raw.truncated
        terminated = (raw.terminated | raw.life_loss) if self._episodic_life else raw.terminated

        self._episode_return += raw.reward
        self._episode_length += 1
        episode_return = np.where(game_over, self._episode_return, 0.0).astype(np.float32)
        episode_length = np.where(game_over, self._episode_length, 0)
        self._episode_return[game_over] = 0.0
        self._episode_length[game_over] = 0

        # Mnih et al. 2015 clip rewards to [-1, 1]; Atari rewards are integers, so this is their sign.
        reward = np.clip(raw.reward, -1.0, 1.0) if self._clip_rewards else raw.reward
        return NamedArrays(
            observation=raw.observation,
            reward=reward.astype(np.float32),
            terminated=terminated,
            truncated=raw.truncated,
            final_observation=raw.final_observation,
            env_info=NamedArrays(
                life_loss=raw.life_loss,
                raw_reward=raw.reward.astype(np.float32),
                episode_return=episode_return,
                episode_length=episode_length,
            ),
        )

    @abstractmethod
    def close(self) -> None:
        """Release the backend's resources."""

    @abstractmethod
    def _reset(self) -> np.ndarray: ...

    @abstractmethod
    def _step(self, actions: np.ndarray) -> RawStep: ...

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
