"""Structured arrays: indexing, assignment, allocation, numpy<->torch, pickling, spawn + shared memory."""

import multiprocessing as mp
import pickle

import numpy as np
import pytest
import torch

from algorithms.arrays import NamedArrays, buffer_from_example, concatenate, to_numpy, to_torch


def example_step():
    return NamedArrays(
        observation=np.zeros((2, 3), dtype=np.uint8),
        reward=np.float32(0),
        done=False,
        agent_info=NamedArrays(q=np.zeros(4, dtype=np.float32), state=None),
    )


def test_buffer_from_example_shapes_and_dtypes():
    buf = buffer_from_example(example_step(), (5, 3))
    assert buf.observation.shape == (5, 3, 2, 3) and buf.observation.dtype == np.uint8
    assert buf.reward.shape == (5, 3) and buf.reward.dtype == np.float32
    assert buf.done.dtype == np.bool_
    assert buf.agent_info.q.shape == (5, 3, 4)
    assert buf.agent_info.state is None
    assert buffer_from_example(example_step(), 7).reward.shape == (7,)


def test_index_and_slice_apply_to_every_field_nested():
    buf = buffer_from_example(example_step(), (4, 2))
    buf.reward[:] = np.arange(8, dtype=np.float32).reshape(4, 2)
    buf.agent_info.q[...] = np.arange(32, dtype=np.float32).reshape(4, 2, 4)
    t1 = buf[1]
    assert t1.reward.tolist() == [2.0, 3.0]
    assert t1.agent_info.q[1].tolist() == [12.0, 13.0, 14.0, 15.0]
    sl = buf[1:3, 0]
    assert sl.reward.tolist() == [2.0, 4.0]
    assert sl.agent_info.q[:, 0].tolist() == [8.0, 16.0]
    # Views, not copies: writing through the slice changes the buffer.
    sl.reward[0] = -1
    assert buf.reward[1, 0] == -1


def test_assign_from_structure_and_broadcast_scalar():
    buf = buffer_from_example(example_step(), (3, 2))
    step = NamedArrays(
        observation=np.full((2, 3), 9, np.uint8),
        reward=np.float32(1.5),
        done=True,
        agent_info=NamedArrays(q=np.array([1, 2, 3, 4], np.float32), state=None),
    )
    buf[2, 1] = step
    assert buf.observation[2, 1].sum() == 9 * 6
    assert buf.reward[2, 1] == 1.5 and buf.done[2, 1]
    assert buf.agent_info.q[2, 1].tolist() == [1, 2, 3, 4]
    assert buf.reward[2, 0] == 0 and buf.observation[0].sum() == 0
    buf[0] = 7
    assert (buf.observation[0] == 7).all() and (buf.agent_info.q[0] == 7).all()


def test_assign_rejects_mismatched_fields():
    buf = buffer_from_example(example_step(), (2,))
    with pytest.raises(KeyError, match="extra"):
        buf[0] = NamedArrays(extra=np.zeros(1))
    with pytest.raises(AttributeError, match="no field"):
        _ = buf.nonexistent
    with pytest.raises(ValueError, match="identifier"):
        NamedArrays(**{"_private": 1})


def test_numpy_torch_round_trip_shares_memory():
    buf = buffer_from_example(example_step(), (2, 2))
    t = buf.to_torch()
    assert isinstance(t.reward, torch.Tensor)
    t.reward[0, 0] = 4.0
    assert buf.reward[0, 0] == 4.0  # same memory
    back = t.numpy()
    back.agent_info.q[1, 1, 2] = 3.0
    assert buf.agent_info.q[1, 1, 2] == 3.0
    assert to_numpy(to_torch(np.arange(3))).tolist() == [0, 1, 2]


def test_mixed_torch_assignment_into_numpy_and_back():
    buf = buffer_from_example(example_step(), (2,))
    buf[1] = NamedArrays(
        observation=torch.ones(2, 3, dtype=torch.uint8),
        reward=torch.tensor(2.0),
        done=torch.tensor(True),
        agent_info=NamedArrays(q=torch.arange(4.0), state=None),
    )
    assert buf.reward[1] == 2.0 and buf.agent_info.q[1, 3] == 3.0
    tbuf = buffer_from_example(example_step(), (2,), shared=True)
    tbuf[0] = buf[1]
    assert tbuf.reward[0].item() == 2.0


def test_pickle_round_trip_and_equality():
    buf = buffer_from_example(example_step(), (3,))
    buf.reward[:] = [1, 2, 3]
    again = pickle.loads(pickle.dumps(buf))
    assert again == buf
    again.reward[0] = 10
    assert again != buf


def test_concatenate_along_batch():
    a = buffer_from_example(example_step(), (2, 1))
    b = buffer_from_example(example_step(), (2, 2))
    b.reward[:] = 1
    c = concatenate([a, b], axis=1)
    assert c.reward.shape == (2, 3) and c.reward[:, 1:].sum() == 4
    assert c.agent_info.state is None


def _child_writes(buf, value):
    view = buf.numpy()
    view.reward[:] = value
    view.observation[1, 0] = value
    view.agent_info.q[0, 1, 2] = value


@pytest.mark.timeout(120)
def test_spawn_child_writes_into_shared_memory():
    buf = buffer_from_example(example_step(), (3, 2), shared=True)
    assert all(leaf.is_shared() for leaf in buf.leaves())
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_child_writes, args=(buf, 5))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    view = buf.numpy()
    assert (view.reward == 5).all()
    assert (view.observation[1, 0] == 5).all() and view.observation[0].sum() == 0
    assert view.agent_info.q[0, 1, 2] == 5
