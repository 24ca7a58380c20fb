"""B single gymnasium envs stepped in a Python loop behind Contract 1.

The reference path for Atari (one ``AtariProtocol`` env per batch entry) and the only path for
other gymnasium ids (classic control, MuJoCo). Simple on purpose: it is what the native Atari
backend is checked against, and classic-control / MuJoCo steps are cheap next to the learner.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from algorithms.envs.base import RawStep, VecEnv


class GymnasiumVecEnv(VecEnv):
    """Steps ``envs`` one after another with same-step autoreset.

    ``seeds[i]`` seeds env i at the first reset; later resets continue its random stream. Life
    loss is read from ``info["lives"]`` where the env reports it (ALE) and is False otherwise.
    """

    def __init__(
        self,
        envs: list[gym.Env],
        seeds: np.ndarray,
        frameskip: int,
        clip_rewards: bool,
        episodic_life: bool,
    ) -> None:
        super().__init__(len(envs), frameskip, clip_rewards, episodic_life)
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

    def close(self) -> None:
        for env in self._envs:
            env.close()
