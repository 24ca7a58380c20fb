"""Transition storage: n-step fields vs a slow loop, frame stacks vs a naive stacked buffer, wrap-around,
episode starts, truncation, validity, memory, shared allocation, and the composed ReplayBuffer."""

import numpy as np
import pytest
import torch
from replay_streams import make_stream

from algorithms.arrays import NamedArrays
from algorithms.functional.returns import nstep_returns
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import FrameObservations, FullObservations
from algorithms.replay.selectors import PrioritizedSelector, UniformSelector
from algorithms.replay.transitions import TransitionStorage

torch.set_num_threads(1)


def reference_transition(stream, r, b, n, gamma, keeps_final):
    """Slow loop: the n-step fields of absolute step r of env b."""
    g, m, done = 0.0, 0, False
    for k in range(n):
        if not keeps_final and stream.truncated[r + k, b]:
            break  # frame storage: stop before a time-limit step, bootstrap from its observation
        g += gamma**k * float(stream.reward[r + k, b])
        m += 1
        if stream.terminated[r + k, b]:
            done = True
            break
        if stream.truncated[r + k, b]:
            break
    last = r + m - 1
    if keeps_final and stream.truncated[last, b]:
        nxt = stream.final_observation[last, b]
    else:
        nxt = stream.observation[r + m, b]
    return g, done, (0.0 if done else gamma**m), nxt


def _check_all_valid(storage, stream, t_written, n, gamma):
    ring = storage.ring
    items = np.arange(storage.num_items)
    valid = storage.valid(items)
    keeps_final = ring.observations.keeps_final_observation
    # The valid set, from first principles: complete windows, frame history not overwritten,
    # and (frames) not a time-limit step.
    rows = ring.absolute(items // ring.num_envs)
    env = items % ring.num_envs
    oldest = 0 if t_written <= ring.rows else t_written - ring.rows + ring.observations.lookback
    expected = (rows >= oldest) & (rows < t_written - n)
    if not keeps_final:
        expected &= ~stream.truncated[np.clip(rows, 0, None), env]
    np.testing.assert_array_equal(valid, expected)
    batch = storage.extract(items[valid])
    for i, (r, b) in enumerate(zip(rows[valid], env[valid])):
        g, done, discount, nxt = reference_transition(stream, r, b, n, gamma, keeps_final)
        np.testing.assert_array_equal(batch.observation[i].numpy(), stream.observation[r, b])
        assert int(batch.action[i]) == stream.action[r, b]
        assert float(batch.return_n[i]) == pytest.approx(g, rel=1e-5, abs=1e-5)
        assert bool(batch.done_n[i]) == done
        assert float(batch.discount_n[i]) == pytest.approx(discount, rel=1e-6)
        np.testing.assert_array_equal(batch.next_observation[i].numpy(), nxt)
    return valid.sum()


@pytest.mark.parametrize("observations", [FullObservations(), FrameObservations(4)], ids=["full", "frames"])
def test_transitions_match_reference_through_wraparound(observations):
    B, T, chunk, n, gamma = 3, 200, 7, 3, 0.9
    stream = make_stream(T, B, seed=0)
    storage = TransitionStorage(40 * B, B, stream[0, 0], observations, n_step=n, gamma=gamma)
    checked = 0
    for start in range(0, T - chunk + 1, chunk):
        storage.append(stream[start : start + chunk])
        if start // chunk % 3 == 2:
            checked += _check_all_valid(storage, stream, start + chunk, n, gamma)
    assert storage.ring.t > 4 * storage.ring.rows  # wrapped several times
    assert checked > 500


def test_frame_stacks_equal_naive_stacked_buffer_at_episode_starts():
    """Each rebuilt stack equals the stack the env gave, incl. the rows right after episode starts."""
    B, T = 2, 120
    stream = make_stream(T, B, seed=5, p_term=0.15, p_trunc=0.1)
    storage = TransitionStorage(50 * B, B, stream[0, 0], FrameObservations(4), n_step=1)
    for start in range(0, T, 40):
        storage.append(stream[start : start + 40])  # the last write wraps: rows 0..69 are overwritten
    ring = storage.ring
    rows = np.arange(T - ring.rows + ring.observations.lookback, T)  # history intact
    positions = np.repeat(rows % ring.rows, B)
    env = np.tile(np.arange(B), rows.size)
    stacks = ring.observations.gather(positions * B + env, ring.flat.episode_start)
    np.testing.assert_array_equal(stacks, stream.observation[np.repeat(rows, B), env])
    starts = ring.fields.episode_start[positions, env]
    assert starts.sum() > 10  # many episode starts inside the checked window


def test_nstep_done_bug_switch_changes_only_windows_crossing_an_end():
    B, T, n = 2, 60, 4
    stream = make_stream(T, B, seed=2, p_term=0.1, p_trunc=0.0)
    kwargs = dict(
        capacity_steps=100 * B, num_envs=B, example=stream[0, 0], observations=FullObservations(), n_step=n
    )
    correct, buggy = TransitionStorage(**kwargs), TransitionStorage(**kwargs, nstep_done_bug=True)
    correct.append(stream)
    buggy.append(stream)
    items = np.flatnonzero(correct.valid(np.arange(correct.num_items)))
    a, b = correct.extract(items), buggy.extract(items)
    torch.testing.assert_close(a.return_n, b.return_n)
    differs = (a.done_n != b.done_n).numpy()
    assert differs.any()
    # Where they differ, the buggy arm bootstraps gamma^n from s_{t+n}, across the episode end.
    assert (b.discount_n[differs] == pytest.approx(0.99**n)) and not b.done_n[differs].any()
    same = ~differs
    torch.testing.assert_close(a.next_observation[same], b.next_observation[same])


@pytest.mark.parametrize("observations", [FullObservations(), FrameObservations(4)], ids=["full", "frames"])
@pytest.mark.parametrize("nstep_done_bug", [False, True])
@pytest.mark.parametrize("chunk", [1, 6])
def test_one_step_returns_equal_the_general_nstep_path(observations, nstep_done_bug, chunk):
    """n = 1 fills its fields in closed form; they equal ``nstep_returns`` on the same steps exactly."""
    B, T, gamma = 2, 60, 0.97
    stream = make_stream(T, B, seed=4, p_term=0.1, p_trunc=0.1)
    storage = TransitionStorage(
        200 * B, B, stream[0, 0], observations, n_step=1, gamma=gamma, nstep_done_bug=nstep_done_bug
    )
    for start in range(0, T, chunk):
        storage.append(stream[start : start + chunk])
    truncated = stream.truncated.copy()
    if not observations.keeps_final_observation:
        truncated = np.vstack([truncated[1:], np.zeros((1, B), bool)])  # cut as for frame storage
    expected = nstep_returns(
        torch.from_numpy(stream.reward),
        torch.from_numpy(stream.terminated),
        torch.from_numpy(truncated),
        gamma,
        1,
        nstep_done_bug=nstep_done_bug,
    )
    f, rows = storage.ring.fields, T - 1  # the newest row's window is not complete yet
    assert stream.terminated[:rows].any() and stream.truncated[:rows].any()
    np.testing.assert_array_equal(f.return_n[:rows], expected.returns[:rows].numpy())
    np.testing.assert_array_equal(f.done_n[:rows], expected.done[:rows].numpy())
    np.testing.assert_array_equal(f.discount_n[:rows], expected.discount[:rows].numpy())
    np.testing.assert_array_equal(f.steps_n[:rows], expected.steps[:rows].numpy())


def test_frame_replay_memory_per_step():
    B, capacity = 4, 20_000
    example = NamedArrays(
        observation=np.zeros((4, 84, 84), np.uint8),
        action=np.zeros((), np.int64),
        reward=np.zeros((), np.float32),
    )
    storage = TransitionStorage(capacity, B, example, FrameObservations(4), n_step=3)
    per_step = storage.nbytes / capacity
    assert 84 * 84 <= per_step <= 1.05 * 84 * 84, per_step


@pytest.mark.parametrize("sampler_cls", [UniformSelector, PrioritizedSelector])
def test_replay_buffer_composes_storage_and_sampler(sampler_cls):
    B, T = 2, 80
    stream = make_stream(T, B, seed=3).map(torch.as_tensor)  # torch leaves, as samplers produce
    storage = TransitionStorage(30 * B, B, stream[0, 0], FrameObservations(4), n_step=2, shared=True)
    replay = ReplayBuffer(storage, sampler_cls(storage.num_items, seed=0, shared=True))
    for start in range(0, T, 10):
        written = replay.append(stream[start : start + 10])
        assert written.shape == (10 * B,)
    assert len(replay) == int(storage.valid(np.arange(storage.num_items)).sum())
    batch, indices, weights = replay.sample(16)
    assert batch.observation.shape == (16, 4, 2, 3) and batch.observation.dtype == torch.uint8
    assert weights.shape == (16,) and weights.dtype == torch.float32
    assert storage.valid(indices).all()
    replay.update_priorities(indices, torch.rand(16))
    with pytest.raises(ValueError, match="priorities for"):
        replay.append(stream[:10], priorities=np.ones(3))


def test_append_errors_name_the_problem():
    B = 2
    stream = make_stream(20, B, seed=0)
    storage = TransitionStorage(20 * B, B, stream[0, 0], FullObservations(), n_step=2)
    with pytest.raises(ValueError, match="final_observation"):
        storage.append(NamedArrays({k: v for k, v in stream[:5].items() if k != "final_observation"}))
    with pytest.raises(ValueError, match=r"\[T, B=2\]"):
        storage.append(stream[:5, :1])
    with pytest.raises(ValueError, match="more than this storage can take"):
        storage.append(make_stream(40, B, seed=1))
    with pytest.raises(ValueError, match="too few"):
        TransitionStorage(4, B, stream[0, 0], FullObservations(), n_step=2)


def test_frame_storage_rebuilds_real_atari_stacks():
    """Pong through the native vector env (episodes cut short by the frame cap): every rebuilt stack
    and every bootstrap observation equals what the env returned."""
    from algorithms.envs.config import EnvConfig
    from algorithms.envs.factory import make_vec_env

    B, T = 2, 240
    config = EnvConfig("pong", max_episode_frames=4 * 70)  # time limits every 70 steps
    rng = np.random.default_rng(0)
    with make_vec_env(config, B, seed=0) as env:
        obs = env.reset()
        observation, steps = [], []
        for _ in range(T):
            observation.append(obs)
            step = env.step(rng.integers(0, env.action_space.n, B))
            steps.append(step)
            obs = step.observation
    truncated = np.stack([s.truncated for s in steps])
    terminated = np.stack([s.terminated for s in steps])
    assert truncated.sum() >= 4
    stream = NamedArrays(
        observation=np.stack(observation),
        action=np.zeros((T, B), np.int64),
        reward=np.stack([s.reward for s in steps]),
        terminated=terminated,
        truncated=truncated,
        final_observation=np.stack([s.final_observation for s in steps]),
    )
    storage = TransitionStorage(100 * B, B, stream[0, 0], FrameObservations(4), n_step=3, gamma=0.99)
    for start in range(0, T, 20):
        storage.append(stream[start : start + 20])
        _check_all_valid(storage, stream, start + 20, n=3, gamma=0.99)
