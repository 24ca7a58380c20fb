"""Sequence starts and item ids owned by ``SequenceStorage``, and initial priorities given after the
write (``PrioritizedSelector.set_input_priorities``, with and without the priority exponent)."""

import numpy as np
import pytest
from replay_streams import make_stream

from algorithms.replay.observations import FullObservations
from algorithms.replay.selectors import PrioritizedSelector
from algorithms.replay.sequences import SequenceStorage


def test_sequence_starts_and_their_items_by_hand():
    B, L, stride = 2, 8, 4
    stream = make_stream(8, B, seed=0)
    storage = SequenceStorage(40 * B, B, stream[0, 0], FullObservations(), sequence_length=L, stride=stride)
    assert storage.ring.rows == 40  # 10 slots of 4 rows per env
    # Starts are the multiples of 4 inside [first, stop), never below row 0.
    np.testing.assert_array_equal(storage.sequence_starts(-5, 13), [0, 4, 8, 12])
    np.testing.assert_array_equal(storage.sequence_starts(5, 13), [8, 12])
    assert storage.sequence_starts(9, 8).size == 0
    # Start 8 is slot 2 (items 4, 5 for envs 0, 1); start 44 wraps to row 4, slot 1 (items 2, 3).
    np.testing.assert_array_equal(storage.items_of_starts(np.array([8, 44])), [4, 5, 2, 3])
    np.testing.assert_array_equal(storage.items_starting_in(5, 13), [4, 5, 6, 7])
    assert storage.items_starting_in(9, 8).size == 0


def _written(selector: PrioritizedSelector, n: int) -> None:
    selector.on_write(np.arange(n))  # at the running maximum, 1.0 at first
    selector.set_valid(np.arange(n), np.ones(n, dtype=bool))


def test_input_priorities_given_after_the_write():
    selector = PrioritizedSelector(4, alpha=0.5, seed=0)
    _written(selector, 4)
    selector.set_input_priorities(np.array([1, 2]), np.array([9.0, 4.0]))
    # Raised to alpha like updated priorities: 9^0.5 = 3 and 4^0.5 = 2; the others keep 1.
    np.testing.assert_allclose(selector.tree.get(np.arange(4)), [1.0, 3.0, 2.0, 1.0])
    assert selector.max_priority == pytest.approx(3.0)
    # rlpyt 2019 (initial_priority_no_alpha): stored as given, and the running maximum follows.
    raw = PrioritizedSelector(4, alpha=0.5, input_priorities_alpha=False, seed=0)
    _written(raw, 4)
    raw.set_input_priorities(np.array([1, 2]), np.array([9.0, 4.0]))
    np.testing.assert_allclose(raw.tree.get(np.arange(4)), [1.0, 9.0, 4.0, 1.0])
    assert raw.max_priority == pytest.approx(9.0)
    # Updated priorities get the exponent either way: 16^0.5 = 4.
    raw.update_priorities(np.array([1]), np.array([16.0]))
    assert raw.tree.get(np.array([1]))[0] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="differs from items"):
        selector.set_input_priorities(np.arange(2), np.ones(3))
