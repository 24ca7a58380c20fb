"""A replay buffer is a storage composed with a selector; no class hierarchy of replay kinds.

The storage (``TransitionStorage`` or ``SequenceStorage``, each with ``FullObservations`` or
``FrameObservations``) owns the data; the selector (``UniformSelector`` or ``PrioritizedSelector``)
owns which item is drawn. rlpyt built every combination as a class
(``AsyncPrioritizedSequenceReplayFrameBuffer``); here each is a constructor call::

    from algorithms.replay.buffer import ReplayBuffer
    from algorithms.replay.observations import FrameObservations
    from algorithms.replay.selectors import PrioritizedSelector
    from algorithms.replay.transitions import TransitionStorage

    example = samples.replace(bootstrap=None)[0, 0]  # one step ([B]-shaped ``bootstrap`` dropped)
    storage = TransitionStorage(1_000_000, num_envs=B, example=example,
                                observations=FrameObservations(4), n_step=3, gamma=0.99)
    replay = ReplayBuffer(storage, PrioritizedSelector(storage.num_items, alpha=0.5, beta=0.4,
                                                      beta_anneal_draws=total_updates))

    replay.append(samples)                        # [T, B] batch of Contract 3 (docs/ARCHITECTURE.md)
    batch, indices, is_weights = replay.sample(32)
    ...                                           # loss weighted by is_weights
    replay.update_priorities(indices, td_error.abs())

``append(samples, priorities=None)`` returns the items it wrote ([T * B] steps for transitions,
[starts * B] sequences for sequence storage). ``priorities`` (same length) sets their initial
priorities instead of the running maximum; ``update_priorities`` also accepts items that are not
valid yet (a sequence still being written): the priority waits and applies once the item becomes
valid. That is how R2D2-style initial priorities computed by the actor for a whole sequence enter.
``sample`` returns torch tensors (CPU): the storage's batch, the item indices (numpy int64, for
``update_priorities``) and the importance-sampling weights [batch] (float32; ones when uniform).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from algorithms.arrays import NamedArrays, to_numpy
from algorithms.replay.selectors import PrioritizedSelector, UniformSelector
from algorithms.resume import arrays_state, generator_state, load_arrays, prefixed, set_generator_state


class Storage(Protocol):
    num_items: int

    def append(self, samples: NamedArrays) -> tuple[np.ndarray, np.ndarray]: ...

    def valid(self, items: np.ndarray) -> np.ndarray: ...

    def extract(self, items: np.ndarray) -> NamedArrays: ...

    def state_arrays(self) -> dict[str, np.ndarray]: ...


class ReplayBuffer:
    """``storage`` x ``selector``: append [T, B] batches, sample items, update their priorities."""

    def __init__(self, storage: Storage, selector: UniformSelector | PrioritizedSelector) -> None:
        if selector.num_items != storage.num_items:
            raise ValueError(
                f"ReplayBuffer: selector has {selector.num_items} items, the storage {storage.num_items}"
            )
        self.storage = storage
        self.selector = selector

    def __len__(self) -> int:
        """Items that can be sampled now."""
        return self.selector.num_valid

    def append(self, samples: NamedArrays, priorities: np.ndarray | torch.Tensor | None = None) -> np.ndarray:
        written, changed = self.storage.append(samples)
        if priorities is not None:
            priorities = np.asarray(to_numpy(priorities), dtype=np.float64).reshape(-1)
            if priorities.size != written.size:
                raise ValueError(f"replay append: {priorities.size} priorities for {written.size} new items")
        self.selector.on_write(written, priorities)
        self.selector.set_valid(changed, self.storage.valid(changed))
        return written

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The storage's and the selector's arrays, restored in place on resume."""
        return {
            **prefixed("storage", self.storage.state_arrays()),
            **prefixed("selector", self.selector.state_arrays()),
        }

    def state_dict(self) -> dict[str, Any]:
        """Contents, cursor, priorities and random generators as tensors and strings (what
        ``torch.load(weights_only=True)`` reads back); the tensors share the replay's memory."""
        generators = {name: generator_state(rng) for name, rng in self.selector.generators().items()}
        return {"arrays": arrays_state(self.state_arrays()), "generators": generators}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``'s contents into this replay (built with the same layout) in place."""
        load_arrays(self.state_arrays(), state["arrays"], "replay")
        for name, rng in self.selector.generators().items():
            set_generator_state(rng, state["generators"][name])

    def sample(self, batch_size: int) -> tuple[NamedArrays, np.ndarray, torch.Tensor]:
        if batch_size < 1:
            raise ValueError(f"replay sample: batch_size={batch_size} must be positive")
        items, weights = self.selector.sample(batch_size)
        return self.storage.extract(items), items, torch.from_numpy(weights)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray | torch.Tensor) -> None:
        priorities = np.asarray(to_numpy(priorities), dtype=np.float64).reshape(-1)
        self.selector.update_priorities(np.asarray(indices, dtype=np.int64), priorities)

    def set_input_priorities(self, items: np.ndarray, priorities: np.ndarray | torch.Tensor) -> None:
        """Initial priorities of items already written (R2D1's, computed once their sequence is
        complete); the selector applies its priority exponent to them or not (``input_priorities_alpha``)."""
        priorities = np.asarray(to_numpy(priorities), dtype=np.float64).reshape(-1)
        self.selector.set_input_priorities(np.asarray(items, dtype=np.int64), priorities)
