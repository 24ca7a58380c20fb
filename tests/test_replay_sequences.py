"""Sequence storage: sequences, stored states and masks line up with the steps written (incl. wrap-around)."""

import numpy as np
import pytest
import torch
from replay_streams import make_stream

from algorithms.arrays import NamedArrays
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import FrameObservations, FullObservations
from algorithms.replay.selectors import PrioritizedSelector
from algorithms.replay.sequences import SequenceStorage

torch.set_num_threads(1)


def recurrent_stream(T, B, seed):
    """``make_stream`` plus an ``agent_info.prev_state`` that names its step: h = 1000 b + t + 1.

    The state is deliberately *not* reset at episode starts, so the test sees the storage do it.
    """
    stream = make_stream(T, B, seed=seed, p_term=0.05, p_trunc=0.03)
    t, b = np.meshgrid(np.arange(T), np.arange(B), indexing="ij")
    h = (1000 * b + t + 1).astype(np.float32)[..., None]
    state = NamedArrays(h=h, c=np.repeat(-h, 2, axis=2))
    return stream.replace(agent_info=NamedArrays(prev_state=state))


@pytest.mark.parametrize("observations", [FullObservations(), FrameObservations(4)], ids=["full", "frames"])
def test_sequences_and_states_line_up_with_steps(observations):
    B, T, chunk, L, stride = 3, 300, 10, 12, 6
    stream = recurrent_stream(T, B, seed=1)
    done = stream.terminated | stream.truncated
    episode_start = np.vstack([np.ones((1, B), bool), done[:-1]])
    storage = SequenceStorage(60 * B, B, stream[0, 0], observations, sequence_length=L, stride=stride)
    ring = storage.ring
    checked = mid_episode_starts = 0
    for start in range(0, T, chunk):
        written, _ = storage.append(stream[start : start + chunk])
        t = start + chunk
        assert written.size == len(range(-start % stride, chunk, stride)) * B
        items = np.arange(storage.num_items)
        starts = ring.absolute((items // B) * stride)
        oldest = 0 if t <= ring.rows else t - ring.rows + ring.observations.lookback
        expected_valid = (starts >= oldest) & (starts + L <= t)
        np.testing.assert_array_equal(storage.valid(items), expected_valid)
        if start // chunk % 4 != 3:
            continue
        items = items[expected_valid]
        batch = storage.extract(items)
        for i, (s, b) in enumerate(zip(starts[expected_valid], items % B)):
            steps = slice(s, s + L)
            for name in (
                "observation",
                "action",
                "reward",
                "terminated",
                "truncated",
                "prev_action",
                "prev_reward",
            ):
                np.testing.assert_array_equal(batch[name][:, i].numpy(), stream[name][steps, b], err_msg=name)
            if observations.keeps_final_observation:
                np.testing.assert_array_equal(
                    batch.final_observation[:, i].numpy(), stream.final_observation[steps, b]
                )
            np.testing.assert_array_equal(batch.episode_start[:, i].numpy(), episode_start[steps, b])
            # valid: up to and including the first episode end of the sequence.
            ends = np.flatnonzero(done[steps, b])
            last = ends[0] if ends.size else L - 1
            np.testing.assert_array_equal(batch.valid[:, i].numpy(), np.arange(L) <= last)
            # Stored state: the state before step s, zeroed where s begins an episode.
            h = 0.0 if episode_start[s, b] else stream.agent_info.prev_state.h[s, b, 0]
            assert float(batch.init_state.h[i, 0]) == h
            np.testing.assert_array_equal(batch.init_state.c[i].numpy(), [-h, -h])
            checked += 1
            mid_episode_starts += int(episode_start[s + 1 : s + L, b].any())
    assert ring.t > 3 * ring.rows and checked > 150 and mid_episode_starts > 0.3 * checked, mid_episode_starts


def test_sequence_priorities_set_before_completion_apply_when_valid():
    B, L, stride, alpha = 2, 8, 4, 0.9
    stream = recurrent_stream(40, B, seed=2)
    storage = SequenceStorage(40 * B, B, stream[0, 0], FullObservations(), sequence_length=L, stride=stride)
    replay = ReplayBuffer(storage, PrioritizedSelector(storage.num_items, alpha=alpha, seed=0))
    new = replay.append(stream[:4])  # one start per env, not complete yet
    assert new.size == B and len(replay) == 0
    replay.update_priorities(new, np.array([2.0, 3.0]))
    replay.append(stream[4:8])
    assert len(replay) == B
    np.testing.assert_allclose(replay.selector.tree.get(new), np.array([2.0, 3.0]) ** alpha)
    batch, indices, weights = replay.sample(4)
    assert batch.observation.shape[:2] == (L, 4) and set(indices) <= set(new)


def test_storage_without_recurrent_state_and_errors():
    B = 2
    stream = make_stream(30, B, seed=0)
    storage = SequenceStorage(30 * B, B, stream[0, 0], FullObservations(), sequence_length=5, stride=5)
    storage.append(stream[:10])
    assert storage.extract(np.array([0, 1])).init_state is None
    with pytest.raises(ValueError, match="prev_action"):
        SequenceStorage(
            30 * B, B, stream[0, 0].replace(prev_action=None), FullObservations(), sequence_length=5, stride=5
        )
    with pytest.raises(ValueError, match="too few"):
        SequenceStorage(10 * B, B, stream[0, 0], FullObservations(), sequence_length=8, stride=4)
    recurrent = recurrent_stream(20, B, seed=0)
    storage = SequenceStorage(40 * B, B, recurrent[0, 0], FullObservations(), sequence_length=4, stride=4)
    with pytest.raises(ValueError, match="agent_info.prev_state"):
        storage.append(make_stream(8, B, seed=0))
