"""The ring of steps that every replay storage keeps: R rows (time) x B columns (environments).

Sampler batches arrive as [T, B] (Contract 3 in docs/ARCHITECTURE.md), all B environments stepping
together, so storage is a ring of rows with one cursor, as in rlpyt's replay buffers: absolute row
r (the r-th time step ever written) lives at ring row r % R until row r + R overwrites it. Each row
keeps ``action``, ``reward``, ``terminated``, ``truncated``, ``episode_start`` (the previous step of
that env ended its episode; the first row ever written counts as a start, as a fresh sampler resets
every env) and any extra fields a storage asks for; observations go to an observation part
(``observations.py``). Allocation goes through ``buffer_from_example``, so with ``shared=True``
every array (cursor included) is a numpy view of a torch tensor in shared memory.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from algorithms.arrays import NamedArrays, buffer_from_example, to_numpy
from algorithms.replay.observations import FrameObservations, FullObservations

Observations = FullObservations | FrameObservations


class StepRing:
    """Per-step fields of R rows x B envs, the write cursor, and episode-start flags.

    Args:
        rows: R, time rows kept per env.
        num_envs: B.
        example: one step of a sample batch (``samples.replace(bootstrap=None)[0, 0]``, as the
            [B]-shaped ``bootstrap`` field cannot be indexed [0, 0]): ``observation``, ``action``,
            ``reward`` leaves with their per-step shapes and dtypes.
        observations: the observation part.
        extra: name -> one-step example of further per-step fields the storage fills itself.
        shared: allocate in shared memory.
    """

    def __init__(
        self,
        rows: int,
        num_envs: int,
        example: NamedArrays,
        observations: Observations,
        extra: dict[str, np.ndarray] | None = None,
        shared: bool = False,
    ) -> None:
        for name in ("observation", "action", "reward"):
            if name not in example or example[name] is None:
                raise ValueError(f"replay example step lacks the field {name!r}; it has {example.fields}")
        self.rows = int(rows)
        self.num_envs = int(num_envs)
        self.observations = observations
        flag = np.zeros((), dtype=bool)
        step = NamedArrays(
            action=to_numpy(example.action),
            reward=np.zeros((), dtype=np.float32),
            terminated=flag,
            truncated=flag,
            episode_start=flag,
            **(extra or {}),
        )
        buffers = buffer_from_example(step, (self.rows, self.num_envs), shared=shared)
        self.fields: NamedArrays = buffers.numpy() if shared else buffers
        # Flat [R * B, ...] views: element row * B + env, read with one ``take`` per field.
        self.flat: NamedArrays = self.fields.map(lambda a: a.reshape(self.rows * self.num_envs, *a.shape[2:]))
        observations.allocate(to_numpy(example.observation), self.rows, self.num_envs, shared)
        cursor = buffer_from_example(np.zeros((), dtype=np.int64), 1, shared=shared)
        self._cursor = cursor.numpy() if shared else cursor
        last_done = buffer_from_example(np.ones((), dtype=bool), self.num_envs, shared=shared, fill=1)
        self._last_done = last_done.numpy() if shared else last_done

    @property
    def t(self) -> int:
        """Rows ever written (the absolute index of the next row)."""
        return int(self._cursor[0])

    @property
    def nbytes(self) -> int:
        return sum(leaf.nbytes for leaf in self.fields.leaves()) + self.observations.nbytes

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The arrays that hold the ring's contents and cursor (a checkpoint saves and restores them
        in place: ``algorithms.resume``)."""
        return {
            **{f"fields.{name}": leaf for name, leaf in self.fields.flat_items()},
            "cursor": self._cursor,
            "last_done": self._last_done,
            **{f"observations.{name}": a for name, a in self.observations.state_arrays().items()},
        }

    def absolute(self, positions: np.ndarray) -> np.ndarray:
        """Absolute row of each ring row in ``positions``; negative where never written."""
        base = self.t - self.rows
        return base + (positions - base) % self.rows

    def row_index(self, first: int, count: int) -> slice | np.ndarray:
        """Index of the ring rows holding absolute rows [first, first + count): a slice where they do
        not wrap around (a view, cheaper than fancy indexing for the one-row writes of DDPG, TD3
        and SAC: docs/results/core_measurements.md, replay/ring.py), the row numbers otherwise."""
        start = first % self.rows
        if start + count <= self.rows:
            return slice(start, start + count)
        return (first + np.arange(count)) % self.rows

    def write(self, samples: NamedArrays, max_rows: int) -> tuple[int, np.ndarray]:
        """Write a [T, B] batch (Contract 3) after the newest row; returns (first absolute row, positions).

        ``max_rows`` bounds T so that rows a storage still needs are not overwritten by this write.
        """
        reward = to_numpy(samples.reward)
        if reward.ndim != 2 or reward.shape[1] != self.num_envs:
            raise ValueError(
                f"replay append: reward must be [T, B={self.num_envs}], got shape {reward.shape}"
            )
        T = reward.shape[0]
        if T > max_rows:
            raise ValueError(
                f"replay append: T={T} rows is more than this storage can take at once ({max_rows})"
            )
        observed = ["observation"]
        if self.observations.keeps_final_observation:
            observed.append("final_observation")
        for name in ("action", "terminated", "truncated", *observed):
            if name not in samples or samples[name] is None:
                raise ValueError(
                    f"replay append: samples lack the field {name!r}; they have {samples.fields}"
                )
        terminated = to_numpy(samples.terminated).astype(bool, copy=False)
        truncated = to_numpy(samples.truncated).astype(bool, copy=False)
        t0 = self.t
        rows = self.row_index(t0, T)
        f = self.fields
        f.action[rows] = to_numpy(samples.action)
        f.reward[rows] = reward
        f.terminated[rows] = terminated
        f.truncated[rows] = truncated
        done = terminated | truncated
        f.episode_start[rows] = np.concatenate([self._last_done[None], done[:-1]])
        # Only the observation fields: converting the whole batch (agent_info, env_info, bootstrap)
        # to numpy cost more than the rest of this write for SAC's one-step batches.
        self.observations.write(rows, NamedArrays({name: to_numpy(samples[name]) for name in observed}))
        self._last_done[:] = done[-1]
        self._cursor[0] = t0 + T
        return t0, (t0 + np.arange(T)) % self.rows


class RingStorage(ABC):
    """A replay storage over one ``StepRing`` (``ring``), sized from a capacity in env steps.

    Args:
        capacity_steps: steps kept across all envs (``ring_rows`` turns them into rows per env).
        num_envs: B, the sampler's batch width.
        example: one step of a sample batch (``samples.replace(bootstrap=None)[0, 0]``).
        observations: ``FullObservations()`` or ``FrameObservations(frame_stack)``.
        shared: allocate every array in shared memory.

    A subclass takes these and its own keyword arguments, and sets those before calling this
    constructor: ``ring_rows`` and ``extra_fields`` read them.
    """

    def __init__(
        self,
        capacity_steps: int,
        num_envs: int,
        example: NamedArrays,
        observations: Observations,
        shared: bool = False,
    ) -> None:
        rows = self.ring_rows(capacity_steps, num_envs, observations)
        extra = self.extra_fields(example)
        self.ring = StepRing(rows, num_envs, example, observations, extra=extra, shared=shared)
        self.allocate(example, shared)

    @abstractmethod
    def ring_rows(self, capacity_steps: int, num_envs: int, observations: Observations) -> int:
        """Rows per env; ``ValueError`` when they are too few for this storage."""

    @abstractmethod
    def extra_fields(self, example: NamedArrays) -> dict[str, np.ndarray]:
        """``StepRing``'s ``extra``: the per-step fields this storage fills itself."""

    @abstractmethod
    def allocate(self, example: NamedArrays, shared: bool) -> None:
        """Once the ring is built: set ``num_items`` (what a selector draws from) and allocate what
        this storage keeps beside the ring."""
