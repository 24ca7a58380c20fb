"""Gymnasium ids (classic control, MuJoCo v5) and the velocity-masked POMDP wrapper."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import env_seeds, make_gym_env, make_vec_env

torch.set_num_threads(1)


def cartpole(**overrides) -> EnvConfig:
    return EnvConfig("CartPole-v1", kind="gym", **overrides)


def test_cartpole_terminated_is_not_truncated():
    """Pushing right always topples the pole long before the 500-step limit."""
    with make_vec_env(cartpole(), 2, seed=0) as env:
        assert env.frameskip == 1
        env.reset()
        length, step = 0, None
        while step is None or not step.terminated.any():
            step = env.step(np.ones(2, dtype=np.int64))
            length += 1
            assert length < 100
    assert not step.truncated.any()
    i = int(np.flatnonzero(step.terminated)[0])
    x, _, theta, _ = step.final_observation[i]
    assert abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360, "CartPole's termination thresholds"
    assert np.abs(step.observation[i]).max() <= 0.05, "next episode's first observation (same-step reset)"
    assert step.env_info.episode_length[i] == length
    assert step.env_info.episode_return[i] == length, "CartPole pays 1 per step"


def test_cartpole_truncated_matches_single_gymnasium_env():
    """With ``max_episode_steps=5`` the time limit ends the episode; the final observation is the
    one a plain gymnasium env reaches with the same per-env seed and actions."""
    actions = np.array([0, 1, 0, 1, 0])
    with make_vec_env(cartpole(max_episode_steps=5), 2, seed=7) as env:
        env.reset()
        steps = [env.step(np.full(2, a)) for a in actions]
    for step in steps[:4]:
        assert not (step.terminated | step.truncated).any()
    last = steps[4]
    assert last.truncated.all() and not last.terminated.any()
    assert not np.array_equal(last.final_observation, last.observation)
    for i, seed in enumerate(env_seeds(7, 2)):
        reference = gym.make("CartPole-v1", max_episode_steps=5)
        reference.reset(seed=int(seed))
        for a in actions:
            obs, _, terminated, truncated, _ = reference.step(int(a))
        assert truncated and not terminated
        np.testing.assert_array_equal(last.final_observation[i], obs)


def test_masked_cartpole_keeps_positions_only():
    actions = np.random.default_rng(0).integers(0, 2, size=(30, 3))
    with (
        make_vec_env(cartpole(), 3, seed=1) as full,
        make_vec_env(cartpole(mask_velocity=True), 3, 1) as masked,
    ):
        assert masked.observation_space.shape == (2,)
        np.testing.assert_array_equal(masked.observation_space.high, full.observation_space.high[[0, 2]])
        np.testing.assert_array_equal(masked.reset(), full.reset()[:, [0, 2]])
        for a in actions:
            s_full, s_masked = full.step(a), masked.step(a)
            np.testing.assert_array_equal(s_masked.observation, s_full.observation[:, [0, 2]])
            np.testing.assert_array_equal(s_masked.final_observation, s_full.final_observation[:, [0, 2]])
            np.testing.assert_array_equal(s_masked.terminated, s_full.terminated)


def test_masked_pendulum_keeps_cos_sin():
    env = make_gym_env(EnvConfig("Pendulum-v1", kind="gym", mask_velocity=True))
    obs, _ = env.reset(seed=0)
    theta = env.unwrapped.state[0]
    np.testing.assert_allclose(obs, [np.cos(theta), np.sin(theta)], rtol=1e-6)


@pytest.mark.parametrize(
    "env_id", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Swimmer-v5", "InvertedPendulum-v5"]
)
def test_masked_mujoco_keeps_joint_positions(env_id):
    """The kept entries are exactly the joint positions in the observation (qpos minus the
    excluded root coordinates); the velocities (qvel) are gone."""
    env = make_gym_env(EnvConfig(env_id, kind="gym", mask_velocity=True))
    obs, _ = env.reset(seed=0)
    data = env.unwrapped.data
    kept = obs.shape[0]
    assert kept == env.observation_space.shape[0] < gym.make(env_id).observation_space.shape[0]
    np.testing.assert_allclose(obs, data.qpos[-kept:])
    obs, *_ = env.step(env.action_space.sample())
    np.testing.assert_allclose(obs, data.qpos[-kept:])


def test_mask_velocity_without_rule_is_an_error():
    with pytest.raises(ValueError, match="no velocity-mask rule for 'Ant-v5'"):
        make_vec_env(EnvConfig("Ant-v5", kind="gym", mask_velocity=True), 1, 0)


def test_halfcheetah_step_shapes_and_truncation():
    with make_vec_env(EnvConfig("HalfCheetah-v5", kind="gym", max_episode_steps=4), 3, seed=0) as env:
        assert env.frameskip == 1
        assert env.observation_space.shape == (17,) and env.action_space.shape == (6,)
        obs = env.reset()
        assert obs.shape == (3, 17)
        actions = np.random.default_rng(0).uniform(-1, 1, size=(4, 3, 6)).astype(np.float32)
        steps = [env.step(a) for a in actions]
    for step in steps:
        assert step.observation.shape == step.final_observation.shape == (3, 17)
        assert step.reward.shape == (3,) and step.reward.dtype == np.float32
        assert not step.terminated.any(), "HalfCheetah never terminates"
    assert steps[3].truncated.all() and not steps[2].truncated.any()
    np.testing.assert_array_equal(steps[3].env_info.episode_length, [4, 4, 4])
    np.testing.assert_allclose(
        steps[3].env_info.episode_return, np.sum([s.reward for s in steps], axis=0), rtol=1e-5
    )
    assert not steps[3].env_info.life_loss.any()


@pytest.mark.parametrize("config", [cartpole(), EnvConfig("HalfCheetah-v5", kind="gym")], ids=lambda c: c.id)
def test_same_seed_same_observations(config):
    def run(seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(0)  # the same actions for every run
        with make_vec_env(config, 2, seed) as env:
            observations = [env.reset()]
            for _ in range(20):
                if isinstance(env.action_space, gym.spaces.Discrete):
                    action = rng.integers(0, env.action_space.n, size=2)
                else:
                    action = rng.uniform(
                        env.action_space.low, env.action_space.high, size=(2, *env.action_space.shape)
                    )
                observations.append(env.step(action).observation)
        return observations

    first, again, other = run(3), run(3), run(4)
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    assert not np.array_equal(first[0], other[0]), "another seed starts elsewhere"
    assert not np.array_equal(first[0][0], first[0][1]), "the envs of one batch get different seeds"


@pytest.mark.parametrize(
    "config", [cartpole(), EnvConfig("pong", noop_max=30, repeat_action_probability=0.25)], ids=lambda c: c.id
)
def test_rank_slice_matches_the_full_batch(config):
    """Envs 2..3 built on their own (``first_rank=2``) replay envs 2..3 of the batch of 4."""
    rng = np.random.default_rng(0)
    with make_vec_env(config, 4, seed=9) as full, make_vec_env(config, 2, seed=9, first_rank=2) as part:
        np.testing.assert_array_equal(part.reset(), full.reset()[2:])
        for _ in range(20):
            actions = rng.integers(0, 2, size=4)
            assert part.step(actions[2:]) == full.step(actions)[2:]
