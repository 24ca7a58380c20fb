"""A vectorized sum tree for prioritized replay (Schaul et al. 2016, Sec. 3.3 and Appendix B.2.1).

Leaves hold non-negative priorities; every inner node holds the sum of its children, so drawing an
item with probability p_i / sum_j p_j is a descent by prefix sum. Unlike the binary tree walked one
item at a time in Python (rlpyt, OpenAI baselines), this one handles a whole batch with a few numpy
calls per level, and keeps the number of levels small:

* inner nodes have ``branching`` (K = 16) children stored next to each other (one or two cache
  lines: with random items, cache misses and not arithmetic dominate at 1M leaves), so a level is
  an [n, K] gather and one small matrix product gives the prefix sums over the children of a batch
  of nodes;
* the top level is a flat array of at most ``max_top`` (1024) nodes that is searched with one
  ``cumsum`` + ``searchsorted`` instead of more levels. At 1M leaves: 245 top nodes, then three
  levels of 16.

``set`` writes leaves and recomputes each touched ancestor from its children (not by adding deltas),
so sums carry the rounding of one summation per node and never drift over millions of updates;
duplicate indices are harmless. ``find`` never returns a zero-priority leaf.

The single flat float64 buffer may live in shared memory (``shared=True``: a torch tensor in shared
memory viewed as numpy), so another process can read the priorities.
"""

from __future__ import annotations

import numpy as np

from algorithms.arrays import buffer_from_example


class SumTree:
    """Sums over ``capacity`` leaves, with batched ``set``, ``get`` and ``find``.

    Layout: level 0 is the flat top, ``[M]``; level d = 1 .. depth is an [M K^(d-1), K] array whose
    row p holds the K children of node p of level d - 1, so gathering the children of a batch of
    nodes is one ``take`` of rows, and node j of level d is element j of the level's flat view.
    Level ``depth`` holds the leaves.
    """

    def __init__(self, capacity: int, branching: int = 16, max_top: int = 1024, shared: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree: capacity={capacity} must be positive")
        if branching < 2:
            raise ValueError(f"SumTree: branching={branching} must be at least 2")
        self.capacity = int(capacity)
        self.branching = K = int(branching)
        depth = 0
        while -(-capacity // K**depth) > max_top:
            depth += 1
        self.depth = depth
        top = -(-capacity // K**depth)
        sizes = [top * K**d for d in range(depth + 1)]
        flat = buffer_from_example(np.zeros((), dtype=np.float64), sum(sizes), shared=shared)
        flat = flat.numpy() if shared else flat
        self._flat = flat  # every level, one after another (``state_arrays``)
        offsets = np.cumsum([0, *sizes])
        self._top = flat[: sizes[0]]
        self._nodes = [flat[offsets[d] : offsets[d + 1]] for d in range(depth + 1)]  # flat, per level
        self._levels = [self._top] + [self._nodes[d].reshape(sizes[d - 1], K) for d in range(1, depth + 1)]
        self._rng = np.random.default_rng(capacity)  # only for the rare redraws in ``find``
        # Column j of this matrix sums children 0 .. j-1: children @ it is the mass left of each child.
        self._exclusive_prefix = np.triu(np.ones((K, K)), k=1)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The nodes of every level (one array) for a checkpoint (``algorithms.resume``)."""
        return {"nodes": self._flat}

    def generators(self) -> dict[str, np.random.Generator]:
        return {"redraw": self._rng}

    @property
    def total(self) -> float:
        return float(self._top.sum())

    def get(self, indices: np.ndarray) -> np.ndarray:
        """Leaf values at ``indices`` [n]."""
        return self._nodes[-1][np.asarray(indices, dtype=np.int64)]

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indices`` [n] to ``values`` [n] (>= 0) and update their ancestors."""
        indices = np.asarray(indices, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if indices.shape != values.shape or indices.ndim != 1:
            raise ValueError(
                f"SumTree.set: indices {indices.shape} and values {values.shape} must be equal [n]"
            )
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise IndexError(f"SumTree.set: indices must lie in [0, {self.capacity})")
        if not np.all(values >= 0):  # also rejects NaN
            raise ValueError("SumTree.set: priorities must be non-negative numbers")
        self._nodes[-1][indices] = values
        for d in range(self.depth, 0, -1):
            indices = indices // self.branching
            self._nodes[d - 1][indices] = np.take(self._levels[d], indices, axis=0).sum(axis=1)

    def find(self, fractions: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """Leaves hit by the targets ``fractions * total`` (fractions in [0, 1)), their values, and the total.

        Leaf i is hit by target x when prefix(i) <= x < prefix(i) + leaf(i). Rounding can send a
        target within an ulp of a node's upper edge into a zero-priority leaf; such draws are redone
        with fresh fractions, so a zero-priority leaf is never returned.
        """
        prefix = np.cumsum(self._top)
        total = float(prefix[-1])
        if not total > 0:
            raise ValueError("SumTree.find: all priorities are zero")
        fractions = np.asarray(fractions, dtype=np.float64)
        leaves, values = self._descend(prefix, fractions * total)
        bad = values <= 0
        while bad.any():
            leaves[bad], values[bad] = self._descend(prefix, self._rng.random(int(bad.sum())) * total)
            bad = values <= 0
        return leaves, values, total

    def _descend(self, prefix: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        targets = np.minimum(targets, np.nextafter(prefix[-1], 0.0))
        node = np.minimum(np.searchsorted(prefix, targets, side="right"), prefix.size - 1)
        targets = targets - (prefix[node] - self._top[node])
        rows = np.arange(targets.size)
        value = self._top[node]
        for d in range(1, self.depth + 1):
            children = np.take(self._levels[d], node, axis=0)  # [n, K]
            before = children @ self._exclusive_prefix  # [n, K]: mass left of each child
            # The last child starting at or before the target.
            child = (before <= targets[:, None]).sum(axis=1) - 1
            targets = targets - before[rows, child]
            value = children[rows, child]
            node = node * self.branching + child
        return node, value
