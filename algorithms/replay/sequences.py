"""Sequence storage for recurrent agents (R2D2: Kapturowski et al. 2019, Sec. 3 and Table 2).

Items are fixed-length sequences of one env: ``sequence_length`` steps (the caller's burn-in +
trained steps + whatever extra steps its n-step targets need) starting every ``stride`` steps,
so consecutive sequences overlap by ``sequence_length - stride`` steps (R2D2: 80 trained steps,
40 burn-in, adjacent sequences overlapping by 40). The recurrent state is stored once per
possible start, i.e. every ``stride`` steps: the agent's ``agent_info.prev_state`` of that step
(the state *before* it, Contract 3), the "stored state" of R2D2's stored-state strategy. A start
is valid once all its steps are written and while none is overwritten.

Sequences are cut from the continuous stream of each env and may cross episode ends; they never
mix episodes silently:

* a stored state is zeroed on write where its step begins an episode (so a sequence starting at
  an episode start begins from the initial state even if the agent's state was not reset);
* ``episode_start`` [L, n] marks steps inside the sequence that begin a new episode, where the
  learner must reset the recurrent state;
* ``valid`` [L, n] is True from the first step up to and including the first episode end: the
  mask for the loss (and for ``functional.priorities.sequence_priority``).

Truncation: each step keeps ``terminated`` and ``truncated``; with ``FullObservations`` the batch
also has ``final_observation`` [L, n], the true last observation of a time-limit step, to
bootstrap from. ``FrameObservations`` keeps no final frame: learners then bootstrap a time-limit
window from the step before it (as ``transitions.py`` does).

``extract(items)`` returns torch tensors: ``observation``, ``action``, ``reward``, ``terminated``,
``truncated``, ``prev_action``, ``prev_reward``, ``episode_start``, ``valid`` ([L, n, ...]),
``final_observation`` ([L, n, ...], full observations only) and ``init_state`` (the stored state,
[n, ...], as laid out in ``agent_info.prev_state``; None when the example has no state).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.arrays import NamedArrays, buffer_from_example, to_numpy
from algorithms.replay.ring import Observations, RingStorage


def sequence_rows(
    capacity_steps: int, num_envs: int, observations: Observations, sequence_length: int, stride: int
) -> int:
    """Rows per env a ``SequenceStorage`` of these arguments holds; ``ValueError`` when that is too few
    to draw a sequence. Allocates nothing, so a plan can check a replay before any job runs."""
    if sequence_length < 1 or stride < 1:
        raise ValueError(
            f"SequenceStorage: sequence_length={sequence_length} and stride={stride} must be positive"
        )
    if num_envs < 1:
        raise ValueError(f"SequenceStorage: num_envs={num_envs} must be positive")
    rows = (capacity_steps // num_envs) // stride * stride
    if rows < 2 * (sequence_length + stride + observations.lookback):
        raise ValueError(
            f"SequenceStorage: capacity_steps={capacity_steps} gives {rows} rows per env, too few for "
            f"sequences of {sequence_length} with stride {stride}"
        )
    return rows


class SequenceStorage(RingStorage):
    """Sequences of ``sequence_length`` steps starting every ``stride`` steps, with stored states.

    Args: ``RingStorage``'s (rows per env rounded down to a multiple of ``stride``; ``example`` with
    ``prev_action``, ``prev_reward`` and, for recurrent agents, ``agent_info.prev_state``), and
        sequence_length: L, steps per sampled sequence.
        stride: steps between sequence starts (and between stored states); overlap = L - stride.
    """

    def __init__(self, *args: Any, sequence_length: int, stride: int, **kwargs: Any) -> None:
        self.sequence_length = int(sequence_length)
        self.stride = int(stride)
        super().__init__(*args, **kwargs)

    def ring_rows(self, capacity_steps: int, num_envs: int, observations: Observations) -> int:
        return sequence_rows(capacity_steps, num_envs, observations, self.sequence_length, self.stride)

    def extra_fields(self, example: NamedArrays) -> dict[str, np.ndarray]:
        for name in ("prev_action", "prev_reward"):
            if name not in example or example[name] is None:
                raise ValueError(f"SequenceStorage: example step lacks {name!r}; it has {example.fields}")
        return dict(prev_action=to_numpy(example.prev_action), prev_reward=np.zeros((), dtype=np.float32))

    def allocate(self, example: NamedArrays, shared: bool) -> None:
        """The sequence slots, and a stored recurrent state for each where the agent has one."""
        num_envs = self.ring.num_envs
        self.slots = self.ring.rows // self.stride
        self.num_items = self.slots * num_envs
        state = None
        if "agent_info" in example and example.agent_info is not None and "prev_state" in example.agent_info:
            state = example.agent_info.prev_state
        self._states = None
        if state is not None:
            states = buffer_from_example(
                NamedArrays(s=state).map(to_numpy), (self.slots, num_envs), shared=shared
            )
            self._states = (states.numpy() if shared else states).s

    @property
    def nbytes(self) -> int:
        states = 0 if self._states is None else sum(leaf.nbytes for leaf in _leaves(self._states))
        return self.ring.nbytes + states

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The ring's arrays and the stored recurrent states (``StepRing.state_arrays``)."""
        arrays = self.ring.state_arrays()
        if isinstance(self._states, NamedArrays):
            arrays.update({f"states.{name}": leaf for name, leaf in self._states.flat_items()})
        elif self._states is not None:
            arrays["states"] = self._states
        return arrays

    def sequence_starts(self, first_row: int, stop_row: int) -> np.ndarray:
        """Absolute rows in [first_row, stop_row) where sequences start (multiples of ``stride``, >= 0)."""
        first = max(first_row, 0)
        first += -first % self.stride
        return np.arange(first, max(stop_row, first), self.stride, dtype=np.int64)

    def items_of_starts(self, starts: np.ndarray) -> np.ndarray:
        """Items of the sequences of every env starting at absolute rows ``starts`` [k], [k * B] flat.

        Item numbering: the sequence of env b starting at absolute row s is item
        ``(s % rows) // stride * B + b``; the result is ordered by start, then env.
        """
        slots = (np.asarray(starts, dtype=np.int64) % self.ring.rows) // self.stride
        B = self.ring.num_envs
        return (slots[:, None] * B + np.arange(B)).ravel()

    def items_starting_in(self, first_row: int, stop_row: int) -> np.ndarray:
        """Items of the sequences starting in absolute rows [first_row, stop_row), [starts * B] flat."""
        return self.items_of_starts(self.sequence_starts(first_row, stop_row))

    def append(self, samples: NamedArrays) -> tuple[np.ndarray, np.ndarray]:
        """Write a [T, B] batch; returns (sequence items starting in it, items whose validity may change)."""
        ring, L = self.ring, self.sequence_length
        max_rows = ring.rows - L - self.stride - ring.observations.lookback
        t0, positions = ring.write(samples, max_rows=max_rows)
        f = ring.fields
        f.prev_action[positions] = to_numpy(samples.prev_action)
        f.prev_reward[positions] = to_numpy(samples.prev_reward)
        t = ring.t
        at_start = np.flatnonzero((t0 + np.arange(t - t0)) % self.stride == 0)
        if self._states is not None and at_start.size:
            if "agent_info" not in samples or "prev_state" not in samples.agent_info:
                raise ValueError("SequenceStorage.append: samples lack agent_info.prev_state")
            slots = positions[at_start] // self.stride
            keep = ~f.episode_start[positions[at_start]]  # [k, B]: zero the state at episode starts
            _assign(self._states, slots, _to_numpy_tree(samples.agent_info.prev_state), at_start, keep)
        written = self.items_starting_in(t0, t)
        lost = t - ring.rows
        changed = np.concatenate(
            [
                self.items_starting_in(t0 - L, t),
                self.items_starting_in(lost - self.stride, lost + ring.observations.lookback + self.stride),
            ]
        )
        return written, changed

    def valid(self, items: np.ndarray) -> np.ndarray:
        ring = self.ring
        start = ring.absolute((items // ring.num_envs) * self.stride)
        t = ring.t
        oldest = 0 if t <= ring.rows else t - ring.rows + ring.observations.lookback
        return (start >= oldest) & (start + self.sequence_length <= t)

    def extract(self, items: np.ndarray) -> NamedArrays:
        """Sequences of ``items`` [n] as torch tensors (fields in the module docstring)."""
        ring, f, L, B = self.ring, self.ring.flat, self.sequence_length, self.ring.num_envs
        slot, env = items // B, items % B
        positions = (slot * self.stride + np.arange(L)[:, None]) % ring.rows  # [L, n]
        index = positions * B + env  # flat indices [L, n]
        obs = ring.observations

        def steps(field: np.ndarray) -> np.ndarray:
            return field.take(index, axis=0)

        observation = obs.gather(index.ravel(), f.episode_start)
        terminated, truncated = steps(f.terminated), steps(f.truncated)
        ended_before = np.cumsum(terminated | truncated, axis=0) - (terminated | truncated)
        batch = dict(
            observation=observation.reshape(L, len(items), *observation.shape[1:]),
            action=steps(f.action),
            reward=steps(f.reward),
            terminated=terminated,
            truncated=truncated,
            prev_action=steps(f.prev_action),
            prev_reward=steps(f.prev_reward),
            episode_start=steps(f.episode_start),
            valid=ended_before == 0,
        )
        if obs.keeps_final_observation:
            final = obs.gather_final(index.ravel())
            batch["final_observation"] = final.reshape(L, len(items), *final.shape[1:])
        out = NamedArrays(batch)
        init_state = None
        if self._states is not None:
            init_state = _index(self._states, slot, env)
        return out.replace(init_state=init_state).to_torch()


def _to_numpy_tree(state):
    """A state leaf or NamedArrays of leaves, as numpy."""
    return state.numpy() if isinstance(state, NamedArrays) else to_numpy(state)


def _leaves(state):
    return state.leaves() if isinstance(state, NamedArrays) else iter([state])


def _index(state, slot: np.ndarray, env: np.ndarray):
    if isinstance(state, NamedArrays):
        return state.map(lambda leaf: leaf[slot, env])
    return state[slot, env]


def _assign(store, slots: np.ndarray, source, rows: np.ndarray, keep: np.ndarray) -> None:
    """store[slots] = source[rows] * keep, leaf by leaf (``keep`` [k, B] broadcast over state dims)."""
    if isinstance(store, NamedArrays):
        for name, leaf in store.items():
            _assign(leaf, slots, source[name], rows, keep)
        return
    values = np.asarray(source[rows])
    mask = keep.reshape(keep.shape + (1,) * (values.ndim - keep.ndim))
    store[slots] = np.where(mask, values, np.zeros((), dtype=values.dtype))
