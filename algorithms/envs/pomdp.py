"""Partially observed variants: velocities dropped from the observation, positions kept.

A memoryless policy cannot act well without velocities, so these tasks test whether a recurrent
agent integrates information over time (the position-only control tasks of Heess et al. 2015,
"Memory-based control with recurrent neural networks"). Velocity entries are dropped rather than
zeroed, so the observation shape itself says which variant is running.

Only ids with a known observation layout are supported; each rule below states it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

# id -> indices of the position-like entries to keep, from each env's documented observation.
VELOCITY_MASKS: dict[str, tuple[int, ...]] = {
    # [cart position, cart velocity, pole angle, pole angular velocity]
    "CartPole-v0": (0, 2),
    "CartPole-v1": (0, 2),
    # [cos(theta), sin(theta), angular velocity]
    "Pendulum-v1": (0, 1),
    # [position, velocity]
    "MountainCar-v0": (0,),
    "MountainCarContinuous-v0": (0,),
    # [cos(t1), sin(t1), cos(t2), sin(t2), t1 velocity, t2 velocity]
    "Acrobot-v1": (0, 1, 2, 3),
    # MuJoCo v5 defaults: qpos without the root x (and y for Swimmer), then qvel.
    "HalfCheetah-v5": tuple(range(8)),
    "Hopper-v5": tuple(range(5)),
    "Walker2d-v5": tuple(range(8)),
    "Swimmer-v5": tuple(range(3)),
    "InvertedPendulum-v5": tuple(range(2)),
}


class VelocityMask(gym.ObservationWrapper):
    """Keeps only the position entries of a flat ``Box`` observation (see ``VELOCITY_MASKS``)."""

    def __init__(self, env: gym.Env, env_id: str) -> None:
        if env_id not in VELOCITY_MASKS:
            known = sorted(VELOCITY_MASKS)
            raise ValueError(f"EnvConfig.mask_velocity: no velocity-mask rule for {env_id!r}; known: {known}")
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape is None or len(space.shape) != 1:
            raise ValueError(f"EnvConfig.mask_velocity: {env_id!r} has a non-flat observation space {space}")
        self._keep = np.asarray(VELOCITY_MASKS[env_id], dtype=np.intp)
        self.observation_space = gym.spaces.Box(
            space.low[self._keep], space.high[self._keep], dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self._keep]
