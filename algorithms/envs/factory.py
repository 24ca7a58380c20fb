"""``make_vec_env``: the one way the training core builds environments (Contract 1)."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from algorithms.envs.base import VecEnv
from algorithms.envs.config import EnvConfig
from algorithms.envs.gym_vec import GymnasiumVecEnv
from algorithms.envs.minatar import MINATAR_GAMES, MinAtarEnv
from algorithms.envs.pomdp import VelocityMask

# Observation spaces whose samples stack into one [B, *obs] array.
ARRAY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)


def env_seeds(seed: int, num_envs: int) -> np.ndarray:
    """Per-env seeds derived from one run seed: independent streams via ``numpy.random.SeedSequence``.

    Prefix-stable: env i gets the same seed for every ``num_envs > i``, so a slice of a batch can
    be rebuilt on its own (``make_vec_env(..., first_rank=...)``). Kept below 2**31 because ale-py
    takes C ``int`` seeds.
    """
    return (
        np.random.SeedSequence(seed).generate_state(num_envs, dtype=np.uint32).astype(np.int64) & 0x7FFFFFFF
    )


def make_gym_env(config: EnvConfig) -> gym.Env:
    """One single-env gymnasium env for a ``kind="gym"`` config (time limit and POMDP mask applied)."""
    kwargs = {} if config.max_episode_steps is None else {"max_episode_steps": config.max_episode_steps}
    env = gym.make(config.id, disable_env_checker=True, **kwargs)
    if config.mask_velocity:
        env = VelocityMask(env, config.id)
    return env


def make_minatar_env(config: EnvConfig) -> MinAtarEnv:
    """One MinAtar game for a ``kind="minatar"`` config."""
    return MinAtarEnv(
        MINATAR_GAMES[config.id],
        sticky_action_prob=config.repeat_action_probability,
        full_action_space=config.full_action_space,
        difficulty_ramping=config.difficulty_ramping,
        max_episode_steps=config.max_episode_steps,
    )


def make_vec_env(
    config: EnvConfig,
    num_envs: int,
    seed: int,
    *,
    first_rank: int = 0,
    wrap: Callable[[gym.Env], gym.Env] | None = None,
) -> VecEnv:
    """Build ``num_envs`` environments of ``config``, seeded deterministically from ``seed``.

    Atari with ``backend="native"`` uses ale-py's vector env; Atari with ``backend="gymnasium"``,
    MinAtar and every other gymnasium id step single envs in a Python loop. With ``first_rank=k`` the
    envs are ranks ``k .. k + num_envs - 1`` of the batch ``make_vec_env(config, k + num_envs,
    seed)`` would build (same seeds, same episodes): what a parallel sampler's worker holds.
    ``wrap`` wraps each single env (a viewer's frame recorder, ``repro.evaluate``); ale-py's native
    vector env has no single envs to wrap, so it is refused there.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"make_vec_env: num_envs must be an integer >= 1, got {num_envs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"make_vec_env: seed must be a non-negative integer, got {seed!r}")
    if isinstance(first_rank, bool) or not isinstance(first_rank, int) or first_rank < 0:
        raise ValueError(f"make_vec_env: first_rank must be a non-negative integer, got {first_rank!r}")
    seeds = env_seeds(int(seed), first_rank + num_envs)[first_rank:]
    if config.native_atari or config.kind == "atari":
        # Imported here, not at the top: importing ale-py loads its emulator (0.1-0.3 s of a job's
        # start) that MinAtar and classic-control jobs never use, and a machine without ale-py runs
        # them (docs/results/gpu_tier.md: every MinAtar job there failed on this import).
        from algorithms.envs.atari import NativeAtariVecEnv, make_gymnasium_atari

        if config.native_atari:
            if wrap is not None:
                raise ValueError("make_vec_env: wrap needs single envs; use EnvConfig.backend='gymnasium'")
            return NativeAtariVecEnv(config, num_envs, seeds)
        envs = [make_gymnasium_atari(config) for _ in range(num_envs)]
    elif config.kind == "minatar":
        # In-process: a MinAtar step costs far less than a process hand-off
        # (docs/results/core_measurements.md, envs/factory.py; docs/results/bench_minatar.md).
        envs = [make_minatar_env(config) for _ in range(num_envs)]
    else:
        envs = [make_gym_env(config) for _ in range(num_envs)]
        if not isinstance(envs[0].observation_space, ARRAY_SPACES):
            space = type(envs[0].observation_space).__name__
            raise ValueError(
                f"EnvConfig.id: {config.id!r} has a {space} observation space; Contract 1 needs arrays"
            )
    return GymnasiumVecEnv(
        envs if wrap is None else [wrap(env) for env in envs],
        seeds,
        config.env_frameskip,
        config.clip_rewards,
        config.episodic_life,
        saveable=config.kind != "atari",  # an ALE env pickles without its emulator state
    )
