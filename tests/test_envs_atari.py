"""Atari environments: the two backends agree, and the protocol's pieces do what they claim."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from algorithms.arrays import NamedArrays
from algorithms.envs.atari import area_resize, area_resize_taps
from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env

torch.set_num_threads(1)

BACKENDS = ("native", "gymnasium")


def rollout(config: EnvConfig, num_envs: int, seed: int, steps: int, action_seed: int = 0):
    """Reset, then ``steps`` uniformly random actions; returns (reset observation, list of steps)."""
    rng = np.random.default_rng(action_seed)
    with make_vec_env(config, num_envs, seed) as env:
        n_actions = env.action_space.n
        first = env.reset()
        return first, [env.step(rng.integers(0, n_actions, num_envs)) for _ in range(steps)]


def test_area_resize_taps_hand_values():
    # 5 -> 2: each output covers 2.5 source pixels; the middle pixel is split 0.5 / 0.5.
    index, weight = area_resize_taps(5, 2)
    np.testing.assert_array_equal(index, [[0, 1, 2], [2, 3, 4]])
    np.testing.assert_allclose(weight, [[0.4, 0.4, 0.2], [0.2, 0.4, 0.4]], rtol=1e-6)
    # Integer factor: plain 2-pixel averages.
    index, weight = area_resize_taps(4, 2)
    np.testing.assert_array_equal(index, [[0, 1], [2, 3]])
    np.testing.assert_allclose(weight, [[0.5, 0.5], [0.5, 0.5]])


def test_area_resize_hand_values_and_round_half_to_even():
    frame = np.tile(np.arange(5, dtype=np.uint8) * 10, (5, 1))  # columns 0, 10, 20, 30, 40
    # 0.4*0 + 0.4*10 + 0.2*20 = 8 and 0.2*20 + 0.4*30 + 0.4*40 = 32; rows are constant.
    np.testing.assert_array_equal(area_resize(frame, 2, 2), [[8, 32], [8, 32]])
    # OpenCV rounds with rint: 1.5 -> 2, 2.5 -> 2.
    assert area_resize(np.array([[1, 2]], dtype=np.uint8), 1, 1)[0, 0] == 2
    assert area_resize(np.array([[2, 3]], dtype=np.uint8), 1, 1)[0, 0] == 2
    with pytest.raises(ValueError, match="uint8"):
        area_resize(frame.astype(np.float32), 2, 2)


@pytest.mark.parametrize(
    "overrides, steps, expect_end",
    [
        ({"id": "pong"}, 150, False),
        # FIRE reset, sticky actions, life losses and two game overs within the rollout.
        ({"id": "breakout", "fire_reset": True, "repeat_action_probability": 0.25}, 400, True),
        # The frame cap falls inside a frame skip (42 = 10 steps + 2 frames).
        ({"id": "pong", "max_episode_frames": 42}, 25, True),
    ],
)
def test_backends_identical_without_noop_starts(overrides, steps, expect_end):
    """Same seed, same actions, ``noop_max=0``: every field of every step is identical.

    This covers the frame skip, the max over the last two frames, grayscale, the area resize,
    the frame stack, FIRE resets, sticky actions (both backends seed ALE with the env seed),
    terminal and truncated steps. With ``noop_max > 0`` the backends cannot agree: ale-py draws
    the no-op count from a C++ ``std::mt19937`` and the reference path from the env's numpy
    generator, so episodes start at different frames (``test_noop_starts_vary_between_envs``
    checks the no-op starts of each backend on its own).
    """
    config = dict(noop_max=0, **overrides)
    native_first, native = rollout(EnvConfig(backend="native", **config), 2, seed=3, steps=steps)
    gym_first, reference = rollout(EnvConfig(backend="gymnasium", **config), 2, seed=3, steps=steps)
    np.testing.assert_array_equal(native_first, gym_first)
    for t, (a, b) in enumerate(zip(native, reference)):
        assert a == b, f"backends differ at step {t}"
    ended = np.stack([s.terminated | s.truncated for s in native])
    assert ended.any() == expect_end


@pytest.mark.parametrize("backend", BACKENDS)
def test_frame_stack_is_oldest_first_and_zero_padded(backend):
    first, steps = rollout(EnvConfig("pong", backend=backend, max_episode_frames=40), 2, seed=0, steps=12)
    assert first.shape == (2, 4, 84, 84) and first.dtype == np.uint8
    assert (first[:, :3] == 0).all() and (first[:, 3] > 0).any()
    previous = first
    for step in steps:
        np.testing.assert_array_equal(step.final_observation[:, :3], previous[:, 1:])
        previous = step.observation
    # The first step after a reset still holds three zero frames behind two real ones.
    assert (steps[0].observation[:, :2] == 0).all() and (steps[0].observation[:, 2:] > 0).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_keeps_final_observation(backend):
    first, steps = rollout(EnvConfig("pong", backend=backend, max_episode_frames=40), 2, seed=0, steps=10)
    for step in steps[:9]:
        assert not step.truncated.any() and not step.terminated.any()
        np.testing.assert_array_equal(step.final_observation, step.observation)
        assert (step.env_info.episode_length == 0).all()
    last = steps[9]  # 10 steps x 4 frames = the cap
    assert last.truncated.all() and not last.terminated.any()
    np.testing.assert_array_equal(last.final_observation[:, :3], steps[8].observation[:, 1:])
    assert (last.observation[:, :3] == 0).all(), "observation is the next episode's first (same-step reset)"
    assert not np.array_equal(last.final_observation, last.observation)
    np.testing.assert_array_equal(last.env_info.episode_length, [10, 10])
    raw_return = np.sum([s.env_info.raw_reward for s in steps], axis=0)
    np.testing.assert_array_equal(last.env_info.episode_return, raw_return)


@pytest.mark.parametrize("backend", BACKENDS)
def test_life_loss_reported_not_terminal(backend):
    config = EnvConfig("breakout", backend=backend, fire_reset=True, noop_max=0)
    _, steps = rollout(config, 1, seed=0, steps=120)
    lost = [t for t, s in enumerate(steps) if s.env_info.life_loss[0]]
    assert lost, "random play in Breakout loses a life within 120 steps"
    for t in lost:
        assert not steps[t].terminated[0] and not steps[t].truncated[0]
        np.testing.assert_array_equal(steps[t].final_observation, steps[t].observation)

    # episodic_life: the same life losses become terminal for the learner; the game goes on.
    _, episodic = rollout(
        EnvConfig("breakout", backend=backend, fire_reset=True, noop_max=0, episodic_life=True), 1, 0, 120
    )
    for t, (plain, marked) in enumerate(zip(steps, episodic)):
        np.testing.assert_array_equal(plain.observation, marked.observation)
        assert marked.terminated[0] == (plain.terminated[0] or plain.env_info.life_loss[0]), t
        assert marked.env_info.episode_length[0] == plain.env_info.episode_length[0]


def test_reward_clipping_keeps_raw_reward():
    config = dict(id="space_invaders", noop_max=0)
    _, raw = rollout(EnvConfig(clip_rewards=False, **config), 2, seed=0, steps=150)
    _, clipped = rollout(EnvConfig(clip_rewards=True, **config), 2, seed=0, steps=150)
    raw_rewards = np.stack([s.env_info.raw_reward for s in raw])
    assert raw_rewards.max() > 1, "Space Invaders scores 5-30 points per invader"
    np.testing.assert_array_equal(np.stack([s.env_info.raw_reward for s in clipped]), raw_rewards)
    np.testing.assert_array_equal(np.stack([s.reward for s in raw]), raw_rewards)
    np.testing.assert_array_equal(np.stack([s.reward for s in clipped]), np.clip(raw_rewards, -1, 1))
    assert all(s.reward.dtype == np.float32 for s in clipped)


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_seed_same_observations(backend):
    config = EnvConfig("pong", backend=backend, repeat_action_probability=0.25)
    first_a, a = rollout(config, 2, seed=5, steps=60)
    first_b, b = rollout(config, 2, seed=5, steps=60)
    _, c = rollout(config, 2, seed=6, steps=60)
    np.testing.assert_array_equal(first_a, first_b)
    assert all(x == y for x, y in zip(a, b))
    assert not all(x == y for x, y in zip(a, c)), "another seed draws other sticky actions"


@pytest.mark.parametrize("backend", BACKENDS)
def test_noop_starts_vary_between_envs(backend):
    def distinct_starts(noop_max: int, num_envs: int) -> int:
        with make_vec_env(
            EnvConfig("space_invaders", backend=backend, noop_max=noop_max), num_envs, 0
        ) as env:
            obs = env.reset()
        return len({o.tobytes() for o in obs})

    # The invaders move from the first frame, so different no-op counts show different screens.
    assert distinct_starts(0, 3) == 1
    assert distinct_starts(30, 4) > 1


def test_step_fields_follow_contract():
    with make_vec_env(EnvConfig("pong"), 3, 0) as env:
        assert env.num_envs == 3 and env.frameskip == 4
        assert env.observation_space.shape == (4, 84, 84) and env.action_space.n == 6
        env.reset()
        step = env.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(ValueError, match="actions have shape"):
            env.step(np.zeros(2, dtype=np.int64))
    assert isinstance(step, NamedArrays) and isinstance(step.env_info, NamedArrays)
    expected = {
        "observation": ((3, 4, 84, 84), np.uint8),
        "reward": ((3,), np.float32),
        "terminated": ((3,), np.bool_),
        "truncated": ((3,), np.bool_),
        "final_observation": ((3, 4, 84, 84), np.uint8),
        "env_info.life_loss": ((3,), np.bool_),
        "env_info.raw_reward": ((3,), np.float32),
        "env_info.episode_return": ((3,), np.float32),
        "env_info.episode_length": ((3,), np.int64),
    }
    got = {name: (leaf.shape, leaf.dtype) for name, leaf in step.flat_items()}
    assert got == expected
