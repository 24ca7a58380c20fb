"""B single gymnasium envs stepped in a Python loop behind Contract 1.

The reference path for Atari (one ``AtariProtocol`` env per batch entry) and the only path for
other gymnasium ids (classic control, MuJoCo). Simple on purpose: it is what the native Atari
backend is checked against, and classic-control / MuJoCo steps are cheap next to the learner.
"""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from algorithms.envs.base import RawStep, VecEnv
from algorithms.resume import PICKLED, pickle_objects


class GymnasiumVecEnv(VecEnv):
    """Steps ``envs`` one after another with same-step autoreset.

    ``seeds[i]`` seeds env i at the first reset; later resets continue its random stream. Life
    loss is read from ``info["lives"]`` where the env reports it (ALE) and is False otherwise.
    ``saveable``: the envs pickle with their whole state (MinAtar games, classic control), so a
    checkpoint can hold them (``state_dict``); False for ALE, whose emulator state does not.
    """

    def __init__(
        self,
        envs: list[gym.Env],
        seeds: np.ndarray,
        frameskip: int,
        clip_rewards: bool,
        episodic_life: bool,
        saveable: bool = True,
    ) -> None:
        super().__init__(len(envs), frameskip, clip_rewards, episodic_life)
        self.saveable = saveable
        self._envs = envs
        self._seeds = [int(s) for s in seeds]
        self._seeded = False
        self._lives = np.zeros(len(envs), dtype=np.int64)
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)

    def _reset(self) -> np.ndarray:
        observations = []
        for i, env in enumerate(self._envs):
            obs, info = env.reset(seed=None if self._seeded else self._seeds[i])
            self._lives[i] = info.get("lives", 0)
            observations.append(obs)
        self._seeded = True
        return np.stack(observations)

    def _step(self, actions: np.ndarray) -> RawStep:
        B = self.num_envs
        observations, final_observations = [], []
        reward = np.zeros(B, dtype=np.float32)
        terminated = np.zeros(B, dtype=bool)
        truncated = np.zeros(B, dtype=bool)
        life_loss = np.zeros(B, dtype=bool)
        for i, env in enumerate(self._envs):
            action = int(actions[i]) if self._discrete else actions[i]
            obs, r, term, trunc, info = env.step(action)
            reward[i] = r
            terminated[i], truncated[i] = term, trunc
            lives = info.get("lives", 0)
            life_loss[i] = lives < self._lives[i]
            self._lives[i] = lives
            final_observations.append(obs)
            if term or trunc:
                obs, info = env.reset()
                self._lives[i] = info.get("lives", 0)
            observations.append(obs)
        return RawStep(
            observation=np.stack(observations),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_observation=np.stack(final_observations),
            life_loss=life_loss,
        )

    def _backend_state(self) -> dict[str, Any] | None:
        if not self.saveable:
            return None
        try:
            envs = pickle_objects(self._envs)
        except (pickle.PicklingError, TypeError, AttributeError):  # an env holding a handle
            return None
        return {
            "envs": {PICKLED: envs},
            "lives": torch.from_numpy(self._lives.copy()),
            "seeded": self._seeded,
        }

    def _load_backend_state(self, state: dict[str, Any]) -> None:
        envs = state["envs"]
        if not isinstance(envs, list) or len(envs) != self.num_envs:
            raise ValueError(f"env state: {self.num_envs} envs expected, the checkpoint has another count")
        self.close()
        self._envs = envs
        self._lives[:] = state["lives"].numpy()
        self._seeded = bool(state["seeded"])

    def close(self) -> None:
        for env in self._envs:
            env.close()
