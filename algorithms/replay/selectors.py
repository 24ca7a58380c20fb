"""Replay selection: which stored items a replay draws, uniformly or by priority. Selectors know
item indices, not data (collecting experience is ``algorithms/samplers``, a different word).

A storage (``transitions.py``, ``sequences.py``) owns the data and numbers its items 0 .. N-1;
``ReplayBuffer`` (``buffer.py``) tells the selector which items were written and which are valid
(complete and not partly overwritten). Both selectors share one interface::

    selector.on_write(items, priorities=None)     # items [n] were (re)written
    selector.set_valid(items, valid)              # items [n] may / may not be drawn
    items, is_weights = selector.sample(batch_size)
    selector.update_priorities(items, priorities)

Prioritized replay (Schaul et al. 2016, "Prioritized Experience Replay", Sec. 3.3-3.4): item i is
drawn with probability P(i) = p_i^alpha / sum_k p_k^alpha; new items enter at the largest priority
seen so far (Alg. 1 line 6) or at priorities given on write, or later with
``set_input_priorities`` (R2D2's actor-computed priorities of sequences that span several sampler
batches); importance-sampling weights
(N P(i))^-beta are normalised by the batch maximum, with beta annealed linearly from ``beta``
to ``beta_final`` over ``beta_anneal_draws`` calls to ``sample``. Draws are stratified: the total
mass is cut into ``batch_size`` equal segments and one item is drawn from each (Appendix B.2.1).

Arrays (the sum tree, priorities, validity flags, counters) can be allocated in shared memory
(``shared=True``) so another process can use the same selector state.
"""

from __future__ import annotations

import numpy as np

from algorithms.arrays import buffer_from_example
from algorithms.functional.priorities import importance_weights
from algorithms.replay.sum_tree import SumTree


def _alloc(example: np.ndarray, n: int, shared: bool) -> np.ndarray:
    buf = buffer_from_example(example, n, shared=shared)
    return buf.numpy() if shared else buf


class UniformSelector:
    """Every valid item equally likely; importance weights are all ones.

    Draws uniformly below the highest item ever written and redraws the few that are not valid
    (the newest steps whose n-step window is incomplete, the oldest whose history was overwritten);
    when valid items are rare (a replay just started), it draws from the list of valid items.
    """

    redraw_rounds = 4
    ITEM_BYTES = 1  # the valid flag (``registry.replay_bytes``)

    def __init__(self, num_items: int, seed: int | None = None, shared: bool = False) -> None:
        if num_items < 1:
            raise ValueError(f"UniformSelector: num_items={num_items} must be positive")
        self.num_items = int(num_items)
        self._valid = _alloc(np.zeros((), dtype=bool), self.num_items, shared)
        # [highest item written + 1, number of valid items]
        self._counts = _alloc(np.zeros((), dtype=np.int64), 2, shared)
        self._rng = np.random.default_rng(seed)

    @property
    def num_valid(self) -> int:
        return int(self._counts[1])

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The arrays of the selector's state, for a checkpoint (``algorithms.resume``)."""
        return {"valid": self._valid, "counts": self._counts}

    def generators(self) -> dict[str, np.random.Generator]:
        return {"draws": self._rng}

    def on_write(self, items: np.ndarray, priorities: np.ndarray | None = None) -> None:
        if priorities is not None:
            raise ValueError("UniformSelector: priorities given on write, but this selector is uniform")
        if len(items):
            self._counts[0] = max(int(self._counts[0]), int(items.max()) + 1)

    def set_valid(self, items: np.ndarray, valid: np.ndarray) -> None:
        items, valid = _first_of_each(items, valid)
        self._counts[1] += int(valid.sum()) - int(self._valid[items].sum())
        self._valid[items] = valid

    def sample(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        if self.num_valid == 0:
            raise ValueError("UniformSelector.sample: no valid items stored yet")
        high = int(self._counts[0])
        items = self._rng.integers(0, high, size=batch_size)
        invalid = ~self._valid[items]
        for _ in range(self.redraw_rounds):
            if not invalid.any():
                break
            items[invalid] = self._rng.integers(0, high, size=int(invalid.sum()))
            invalid = ~self._valid[items]
        if invalid.any():
            items[invalid] = self._rng.choice(np.flatnonzero(self._valid[:high]), size=int(invalid.sum()))
        return items, np.ones(batch_size, dtype=np.float32)

    def update_priorities(self, items: np.ndarray, priorities: np.ndarray) -> None:
        """Uniform sampling has no priorities; accepted and ignored so algorithms need no branch."""


class PrioritizedSelector:
    """Proportional prioritization over a :class:`SumTree` (Schaul et al. 2016, Sec. 3.3).

    Args:
        num_items: item slots of the storage.
        alpha: priority exponent (0 = uniform). Schaul et al. Table 3: 0.6; R2D2 Table 2: 0.9.
        beta: initial importance-sampling exponent (Schaul et al. 0.4; R2D2 0.6).
        beta_final: exponent reached after ``beta_anneal_draws`` samples (1.0 in Schaul et al.).
        beta_anneal_draws: length of the linear annealing in ``sample`` calls; 0 keeps ``beta``.
        default_priority: the running maximum's starting value (priority of the first items).
        input_priorities_alpha: raise priorities given on write to ``alpha`` like updated ones.
            False reproduces rlpyt's 2019 R2D1, which stored input priorities unexponentiated
            (rlpyt ``PrioritizedReplay.append_samples``; deviation 2 of the R2D1 reproduction).
    """

    # p^alpha (float64), the valid flag and at least the sum tree's leaf (float64): ``registry.replay_bytes``
    ITEM_BYTES = 8 + 1 + 8

    def __init__(
        self,
        num_items: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_anneal_draws: int = 0,
        default_priority: float = 1.0,
        input_priorities_alpha: bool = True,
        seed: int | None = None,
        shared: bool = False,
    ) -> None:
        if num_items < 1:
            raise ValueError(f"PrioritizedSelector: num_items={num_items} must be positive")
        if alpha < 0:
            raise ValueError(f"PrioritizedSelector: alpha={alpha} must be >= 0")
        for name, value in (("beta", beta), ("beta_final", beta_final)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PrioritizedSelector: {name}={value} must be in [0, 1]")
        if beta_anneal_draws < 0:
            raise ValueError(f"PrioritizedSelector: beta_anneal_draws={beta_anneal_draws} must be >= 0")
        if default_priority <= 0:
            raise ValueError(f"PrioritizedSelector: default_priority={default_priority} must be positive")
        self.num_items = int(num_items)
        self.alpha = float(alpha)
        self.beta_initial = float(beta)
        self.beta_final = float(beta_final)
        self.beta_anneal_draws = int(beta_anneal_draws)
        self.input_priorities_alpha = bool(input_priorities_alpha)
        self.tree = SumTree(self.num_items, shared=shared)
        # p_i^alpha of every item, valid or not: an item not yet valid keeps the priority it was
        # given and enters the tree when it becomes valid.
        self._priority = _alloc(np.zeros((), dtype=np.float64), self.num_items, shared)
        self._valid = _alloc(np.zeros((), dtype=bool), self.num_items, shared)
        self._state = _alloc(np.zeros((), dtype=np.float64), 3, shared)  # [max p^alpha, draws, valid count]
        self._state[0] = default_priority**self.alpha
        self._rng = np.random.default_rng(seed)

    @property
    def num_valid(self) -> int:
        return int(self._state[2])

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The selector's arrays (sum tree included), for a checkpoint (``algorithms.resume``)."""
        tree = {f"tree.{name}": array for name, array in self.tree.state_arrays().items()}
        return {"priority": self._priority, "valid": self._valid, "state": self._state, **tree}

    def generators(self) -> dict[str, np.random.Generator]:
        tree = {f"tree.{name}": rng for name, rng in self.tree.generators().items()}
        return {"draws": self._rng, **tree}

    @property
    def beta(self) -> float:
        if self.beta_anneal_draws == 0:
            return self.beta_initial
        progress = min(1.0, self._state[1] / self.beta_anneal_draws)
        return self.beta_initial + progress * (self.beta_final - self.beta_initial)

    @property
    def max_priority(self) -> float:
        """The largest p^alpha seen so far (new items enter with it)."""
        return float(self._state[0])

    def on_write(self, items: np.ndarray, priorities: np.ndarray | None = None) -> None:
        """(Re)written items enter at the running maximum, or at ``priorities`` [n] when given."""
        if priorities is None:
            self._set(items, np.full(len(items), self._state[0]))
        else:
            self.set_input_priorities(items, priorities)

    def set_input_priorities(self, items: np.ndarray, priorities: np.ndarray) -> None:
        """Initial priorities [n] of written items, computed by whoever collected them (R2D2 Sec. 2.3:
        the actors), possibly once the items are complete: raised to ``alpha`` unless
        ``input_priorities_alpha`` is False. Items not valid yet keep them until they become valid."""
        priorities = np.asarray(priorities, dtype=np.float64)
        if priorities.shape != np.shape(items):
            raise ValueError(
                f"priorities shape {priorities.shape} differs from items shape {np.shape(items)}"
            )
        values = priorities**self.alpha if self.input_priorities_alpha else priorities
        self._state[0] = max(self._state[0], float(values.max(initial=0.0)))
        self._set(items, values)

    def set_valid(self, items: np.ndarray, valid: np.ndarray) -> None:
        items, valid = _first_of_each(items, valid)
        self._state[2] += int(valid.sum()) - int(self._valid[items].sum())
        self._valid[items] = valid
        self.tree.set(items, self._priority[items] * valid)

    def update_priorities(self, items: np.ndarray, priorities: np.ndarray) -> None:
        """Set p_i^alpha from new raw priorities (e.g. |TD error|) of sampled items [n]."""
        priorities = np.asarray(priorities, dtype=np.float64)
        if priorities.shape != np.shape(items):
            raise ValueError(
                f"priorities shape {priorities.shape} differs from items shape {np.shape(items)}"
            )
        values = priorities**self.alpha
        self._state[0] = max(self._state[0], float(values.max(initial=0.0)))
        self._set(items, values)

    def _set(self, items: np.ndarray, values: np.ndarray) -> None:
        if not np.all(values >= 0):
            raise ValueError("PrioritizedSelector: priorities must be non-negative numbers")
        self._priority[items] = values
        self.tree.set(items, values * self._valid[items])

    def sample(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``batch_size`` items by stratified proportional sampling, and their IS weights (float32)."""
        if self.num_valid == 0:
            raise ValueError("PrioritizedSelector.sample: no valid items stored yet")
        fractions = (np.arange(batch_size) + self._rng.random(batch_size)) / batch_size
        items, values, total = self.tree.find(fractions)
        weights = importance_weights(values / total, self.beta).astype(np.float32)
        self._state[1] += 1
        return items, weights


def _first_of_each(items: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``items`` sorted without repeats, each with its first value: ``np.unique``'s work, skipped
    for the strictly increasing items that appends write (one or two per step for a one-env run)."""
    items, values = np.asarray(items), np.asarray(values, dtype=bool)
    if items.size < 2 or bool((items[1:] > items[:-1]).all()):
        return items, values
    items, first = np.unique(items, return_index=True)
    return items, values[first]
