"""EnvConfig validation and make_vec_env argument errors: one-line messages naming the bad value."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import env_seeds, make_vec_env


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"id": "pongg"}, r"unknown Atari game 'pongg'.*close matches: \['pong'"),
        ({"id": "Pong"}, r"unknown Atari game 'Pong'.*'pong'"),
        ({"id": "ChopperCommand"}, r"close matches: \['chopper_command'\]"),
        (
            {"id": "CartPole-v9", "kind": "gym"},
            r"'CartPole-v9' is not a registered gymnasium id.*'CartPole-v1'",
        ),
        ({"id": "pong", "kind": "atari2600"}, r"EnvConfig.kind must be one of .* got 'atari2600'"),
        ({"id": "pong", "backend": "fast"}, r"EnvConfig.backend must be one of .* got 'fast'"),
        ({"id": "pong", "noop_max": -1}, r"EnvConfig.noop_max must be an integer >= 0, got -1"),
        ({"id": "pong", "frameskip": 0}, r"EnvConfig.frameskip must be an integer >= 1, got 0"),
        ({"id": "pong", "frame_stack": 2.0}, r"EnvConfig.frame_stack must be an integer >= 1, got 2.0"),
        ({"id": "pong", "max_episode_frames": 0}, r"EnvConfig.max_episode_frames must be"),
        ({"id": "pong", "frame_size": 200}, r"EnvConfig.frame_size must be <= 160"),
        (
            {"id": "pong", "repeat_action_probability": 1.5},
            r"repeat_action_probability must be a number in \[0, 1\]",
        ),
        ({"id": "pong", "repeat_action_probability": True}, r"repeat_action_probability must be a number"),
        ({"id": "pong", "clip_rewards": "yes"}, r"EnvConfig.clip_rewards must be a bool, got 'yes'"),
        ({"id": "pong", "mask_velocity": True}, r"mask_velocity applies to gymnasium ids"),
        ({"id": "pong", "max_episode_steps": 100}, r"max_episode_steps is for gymnasium ids"),
        (
            {"id": "CartPole-v1", "kind": "gym", "max_episode_steps": 0},
            r"max_episode_steps must be an integer >= 1",
        ),
        ({"id": "", "kind": "gym"}, r"EnvConfig.id must be a non-empty string"),
        (
            {"id": "CartPole-v1", "kind": "gym", "frameskip": 2},
            r"EnvConfig.frameskip applies to Atari games only",
        ),
        (
            {"id": "Pendulum-v1", "kind": "gym", "clip_rewards": True, "noop_max": 0},
            r"EnvConfig.noop_max applies",
        ),
    ],
)
def test_bad_config_is_a_one_line_error(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        EnvConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_config_is_frozen_and_carries_the_protocol_defaults():
    config = EnvConfig("pong")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.noop_max = 0  # type: ignore[misc]
    # Mnih et al. 2015 / R2D2 Table 3.
    assert (config.frameskip, config.frame_size, config.frame_stack, config.noop_max) == (4, 84, 4, 30)
    assert config.max_episode_frames == 108_000 and config.repeat_action_probability == 0.0
    assert not config.episodic_life and not config.clip_rewards
    assert config.env_frameskip == 4 and EnvConfig("CartPole-v1", kind="gym").env_frameskip == 1


def test_gymnasium_backend_needs_a_v5_id():
    # 'combat' ships as a ROM but has no ALE/*-v5 registration.
    with pytest.raises(ValueError, match="'combat' has no ALE/\\*-v5 gymnasium id; use backend='native'"):
        make_vec_env(EnvConfig("combat", backend="gymnasium"), 1, 0)


@pytest.mark.parametrize(
    "num_envs, seed, first_rank, message",
    [
        (0, 0, 0, "num_envs must be an integer >= 1, got 0"),
        (2, -1, 0, "seed must be a non-negative integer, got -1"),
        (2, 0, -1, "first_rank must be a non-negative integer, got -1"),
    ],
)
def test_make_vec_env_bad_arguments(num_envs, seed, first_rank, message):
    with pytest.raises(ValueError, match=message):
        make_vec_env(EnvConfig("CartPole-v1", kind="gym"), num_envs, seed, first_rank=first_rank)


def test_env_seeds_are_deterministic_distinct_and_fit_a_c_int():
    seeds = env_seeds(0, 64)
    np.testing.assert_array_equal(seeds, env_seeds(0, 64))
    assert len(set(seeds.tolist())) == 64
    assert seeds.min() >= 0 and seeds.max() < 2**31
    # A larger batch extends a smaller one: env i keeps its seed when more envs are added.
    np.testing.assert_array_equal(env_seeds(0, 8), seeds[:8])
    assert not np.array_equal(env_seeds(1, 8), seeds[:8])


class DictObservationEnv(gym.Env):
    """A gymnasium env with a Dict observation space, which Contract 1's arrays cannot hold."""

    observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})
    action_space = gym.spaces.Discrete(2)


def test_non_array_observation_space_is_an_error():
    gym.register(id="DictObservationProbe-v0", entry_point=DictObservationEnv)
    with pytest.raises(ValueError, match="'DictObservationProbe-v0' has a Dict observation space"):
        make_vec_env(EnvConfig("DictObservationProbe-v0", kind="gym"), 1, 0)
