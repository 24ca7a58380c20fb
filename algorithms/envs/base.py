"""The vectorized-environment interface (docs/ARCHITECTURE.md, Contract 1) and its shared bookkeeping.

Every backend steps B environments with **same-step autoreset**: where an episode ends, the
returned ``observation`` is already the first observation of the next episode and the true last
observation is in ``final_observation``. ``terminated`` (MDP terminal, no bootstrap) and
``truncated`` (time limit, bootstrap from ``final_observation``) stay separate.

Backends implement ``_reset`` and ``_step``, which return raw per-env arrays; this base class clips
rewards, tracks episode returns and lengths, and packs the step into a ``NamedArrays``. A backend
that steps its envs in the background (ale-py's threaded vector env) implements ``_send`` and
``_receive`` instead, and ``send_step`` / ``receive_step`` let the caller work while the envs step.

Output lifetime: every backend here returns new arrays from each step (``fresh_outputs``), so a
caller may keep them without copying; in any case ``send_step`` never modifies the arrays an earlier
step returned, so the caller may read them while the envs step (the samplers write the previous
step's record into their batch then).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from algorithms.arrays import NamedArrays


@dataclass
class RawStep:
    """One backend step over B envs, before reward clipping and episode bookkeeping.

    ``observation`` is already the next episode's first observation where ``terminated |
    truncated``; ``final_observation`` is the ended episode's last one there (equal elsewhere).
    """

    observation: np.ndarray  # [B, *obs]
    reward: np.ndarray  # [B] raw game reward, any real dtype (ale-py: int32)
    terminated: np.ndarray  # [B] bool
    truncated: np.ndarray  # [B] bool
    final_observation: np.ndarray  # [B, *obs]
    life_loss: np.ndarray  # [B] bool


def compact_space(space: gym.Space) -> gym.Space | tuple:
    """``space`` in a form that pickles small: a ``Box`` with one low and one high bound for every
    element as ``("box", shape, dtype, low, high)`` (``expand_space`` rebuilds an equal ``Box``),
    anything else unchanged. A 4x84x84 frame ``Box`` pickles to about 114 kB (its bounds in full);
    sent to ``spawn`` workers, that alone overflowed a pipe buffer (64 kB) in CPython's
    ``Process.start``, which then blocked for good when the child died while starting."""
    if isinstance(space, gym.spaces.Box):
        low, high = np.unique(space.low), np.unique(space.high)
        if low.size == 1 and high.size == 1:
            return ("box", space.shape, space.dtype.str, low.item(), high.item())
    return space


def expand_space(space: gym.Space | tuple) -> gym.Space:
    """The space ``compact_space`` made ``space`` from."""
    if isinstance(space, tuple):
        _, shape, dtype, low, high = space
        return gym.spaces.Box(low=low, high=high, shape=shape, dtype=np.dtype(dtype))
    return space


class VecEnv(ABC):
    """B environments stepped together; see the module docstring and Contract 1."""

    # Each step's output arrays are new, never modified later (see the module docstring).
    fresh_outputs = True
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
        self._sent: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        """Reset every env; returns observations [B, *obs]. Seeds were fixed by ``make_vec_env``."""
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        return self._reset()

    def step(self, actions: np.ndarray) -> NamedArrays:
        """Step every env with ``actions`` [B, *act]; returns the Contract 1 ``NamedArrays``."""
        self.send_step(actions)
        return self.receive_step()

    def send_step(self, actions: np.ndarray) -> None:
        """Start stepping every env with ``actions`` [B, *act]; ``receive_step`` returns the result."""
        actions = np.asarray(actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(
                f"VecEnv.step: actions have shape {actions.shape}, expected ({self.num_envs}, ...)"
            )
        if self._sent is not None:
            raise RuntimeError("VecEnv.send_step: the previous step was not received")
        self._sent = actions
        self._send(actions)

    def receive_step(self) -> NamedArrays:
        """Wait for the step ``send_step`` started; returns the Contract 1 ``NamedArrays``."""
        if self._sent is None:
            raise RuntimeError("VecEnv.receive_step without send_step")
        actions, self._sent = self._sent, None
        raw = self._receive(actions)
        # Episodes (and their statistics) end where the backend reset the game; with episodic_life a
        # life loss is terminal for the learner while the game itself goes on.
        game_over = raw.terminated | raw.truncated
        terminated = (raw.terminated | raw.life_loss) if self._episodic_life else raw.terminated

        raw_reward = raw.reward.astype(np.float32)  # a new array (fresh_outputs), whatever the dtype
        self._episode_return += raw_reward
        self._episode_length += 1
        # This runs between the env threads' steps, on the sampler's critical path: the common case,
        # no game over, takes a few cheap ops (count_nonzero is faster than .any() on [B] bool:
        # docs/results/core_measurements.md, envs/base.py).
        if np.count_nonzero(game_over):
            episode_return = np.where(game_over, self._episode_return, 0.0).astype(np.float32)
            episode_length = np.where(game_over, self._episode_length, 0)
            self._episode_return[game_over] = 0.0
            self._episode_length[game_over] = 0
        else:
            episode_return = np.zeros(self.num_envs, dtype=np.float32)
            episode_length = np.zeros(self.num_envs, dtype=np.int64)

        # Mnih et al. 2015 clip rewards to [-1, 1]; Atari rewards are integers, so this is their sign.
        # (minimum/maximum: the same values as np.clip at a third of its call overhead.)
        reward = np.minimum(np.maximum(raw_reward, -1.0), 1.0) if self._clip_rewards else raw_reward.copy()
        return NamedArrays(
            observation=raw.observation,
            reward=reward,
            terminated=terminated,
            truncated=raw.truncated,
            final_observation=raw.final_observation,
            env_info=NamedArrays(
                life_loss=raw.life_loss,
                raw_reward=raw_reward,
                episode_return=episode_return,
                episode_length=episode_length,
            ),
        )

    def state_dict(self) -> dict[str, Any] | None:
        """The envs' state between steps, for a checkpoint (``algorithms.resume``), or None where the
        backend cannot save it (ALE's emulators). Objects come back pickled (``resume.pickle_objects``)."""
        backend = self._backend_state()
        if backend is None:
            return None
        return {
            "episode_return": torch.from_numpy(self._episode_return.copy()),
            "episode_length": torch.from_numpy(self._episode_length.copy()),
            "backend": backend,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict``'s state, its objects already unpickled (``resume.unpickle_tree``)."""
        self._episode_return[:] = state["episode_return"].numpy()
        self._episode_length[:] = state["episode_length"].numpy()
        self._load_backend_state(state["backend"])

    def _backend_state(self) -> dict[str, Any] | None:
        """The backend's own part of ``state_dict``; None: it cannot be saved."""
        return None

    def _load_backend_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} saves no state")

    @abstractmethod
    def close(self) -> None:
        """Release the backend's resources."""

    @abstractmethod
    def _reset(self) -> np.ndarray: ...

    def _step(self, actions: np.ndarray) -> RawStep:
        """One synchronous step; backends implement this or ``_send`` and ``_receive``."""
        raise NotImplementedError(f"{type(self).__name__} implements neither _step nor _send/_receive")

    def _send(self, actions: np.ndarray) -> None:  # noqa: B027 (optional hook, not abstract)
        """Start the step (a synchronous backend does all its work in ``_receive``)."""

    def _receive(self, actions: np.ndarray) -> RawStep:
        """Finish the step started with ``actions``."""
        return self._step(actions)

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
