"""Transition storage with n-step returns: the data side of uniform, n-step and prioritized replay.

Items are single steps (ring row, env): item = position * B + env, ``num_items = R * B``. A step
is a sampling item once its n-step window is complete: n-step returns are computed **on write**,
by :func:`algorithms.functional.returns.nstep_returns`, for the rows whose window the newest write
completed (as rlpyt's ``NStepReturnBuffer``), so sampling is only gathers. The newest n rows are
not yet valid (their bootstrap observation is not written), nor are the oldest ``lookback`` rows
once the ring has wrapped (their frame history was overwritten).

``sample`` data (:meth:`TransitionStorage.extract`), all torch tensors with leading dim [n]:

| field | meaning |
|---|---|
| ``observation`` | the observation acted on at t |
| ``action`` | the action taken at t |
| ``return_n`` | sum_{k<m} gamma^k r_{t+k}, m <= n steps (cut at the first episode end) |
| ``done_n`` | the window reached a terminal: no bootstrap |
| ``discount_n`` | gamma^m, or 0 where ``done_n``: the weight of the bootstrap value |
| ``next_observation`` | the bootstrap observation: the next observation of step t+m-1 |

Episode ends and truncation (``terminated`` and ``truncated`` never merge):

* ``terminated`` at t+k: the window stops there, ``done_n``, no bootstrap.
* ``truncated`` (time limit) at t+k, with :class:`FullObservations`: the window stops there and
  bootstraps gamma^(k+1) from that step's stored ``final_observation``, the true last observation
  (Pardo et al. 2018).
* ``truncated`` with :class:`FrameObservations`, which keeps no final frame: windows that would
  reach the time-limit step stop one step before it and bootstrap from the observation *of* the
  time-limit step (stored, same episode, one step shorter window: still an unbiased n-step
  target), and the time-limit step itself is never sampled, as its own target would need the
  missing final observation. One transition per time-limited episode is lost (Atari: one in 27,000).

``nstep_done_bug=True`` reproduces rlpyt before PR #182 (see ``functional/returns.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from algorithms.arrays import NamedArrays
from algorithms.functional.returns import nstep_returns
from algorithms.replay.ring import Observations, RingStorage


def transition_rows(capacity_steps: int, num_envs: int, observations: Observations, n_step: int) -> int:
    """Rows per env a ``TransitionStorage`` of these arguments holds; ``ValueError`` when that is too
    few for one n-step transition. Allocates nothing, so a plan can check a replay before any job runs."""
    if num_envs < 1:
        raise ValueError(f"TransitionStorage: num_envs={num_envs} must be positive")
    if n_step < 1:
        raise ValueError(f"TransitionStorage: n_step={n_step} must be positive")
    rows = capacity_steps // num_envs
    if rows < 2 * (n_step + observations.lookback + 1):
        raise ValueError(
            f"TransitionStorage: capacity_steps={capacity_steps} gives {rows} rows per env, too few for "
            f"n_step={n_step} and a frame lookback of {observations.lookback}"
        )
    return rows


# The n-step fields each stored step carries beside the ring's own (``StepRing``'s ``extra``).
NSTEP_FIELDS = {"return_n": np.float32, "discount_n": np.float32, "done_n": np.bool_, "steps_n": np.int16}
NSTEP_STEP_BYTES = sum(np.dtype(dtype).itemsize for dtype in NSTEP_FIELDS.values())


class TransitionStorage(RingStorage):
    """n-step transitions of B envs in a ring of ``capacity_steps // B`` rows.

    Args: ``RingStorage``'s, and
        n_step: n of the returns (1 = plain DQN).
        gamma: discount.
        nstep_done_bug: rlpyt's pre-PR-#182 n-step done (for the as-published arm only).
    """

    def __init__(
        self, *args: Any, n_step: int = 1, gamma: float = 0.99, nstep_done_bug: bool = False, **kwargs: Any
    ) -> None:
        self.n_step = int(n_step)
        self.gamma = float(gamma)
        self.nstep_done_bug = bool(nstep_done_bug)
        super().__init__(*args, **kwargs)

    def ring_rows(self, capacity_steps: int, num_envs: int, observations: Observations) -> int:
        return transition_rows(capacity_steps, num_envs, observations, self.n_step)

    def extra_fields(self, example: NamedArrays) -> dict[str, np.ndarray]:
        return {name: np.zeros((), dtype=dtype) for name, dtype in NSTEP_FIELDS.items()}

    def allocate(self, example: NamedArrays, shared: bool) -> None:
        """One item per stored step; the n-step fields are ring fields."""
        self.num_items = self.ring.rows * self.ring.num_envs

    @property
    def nbytes(self) -> int:
        return self.ring.nbytes

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Everything stored (the n-step returns are ring fields): ``StepRing.state_arrays``."""
        return self.ring.state_arrays()

    def _items(self, first_row: int, stop_row: int) -> np.ndarray:
        """Items of absolute rows [first_row, stop_row) for all envs."""
        B = self.ring.num_envs
        if stop_row <= first_row:
            return np.zeros(0, dtype=np.int64)
        positions = np.arange(first_row, stop_row) % self.ring.rows
        return (positions[:, None] * B + np.arange(B)).ravel()

    def append(self, samples: NamedArrays) -> tuple[np.ndarray, np.ndarray]:
        """Write a [T, B] batch (Contract 3).

        Returns ``(written, changed)``: items [T * B] written now (row-major: [T, B] flattened) and
        the items whose validity may have changed (pass them to ``valid``).
        """
        ring, n = self.ring, self.n_step
        t0, _ = ring.write(samples, max_rows=ring.rows - n - ring.observations.lookback - 1)
        t = ring.t
        # Windows completed by this write: rows [t0 - n, t - n) (clipped to rows ever written).
        first, stop = max(t0 - n, 0), t - n
        if stop > first:
            self._write_returns(first, stop)
        written = self._items(t0, t)
        lost = t - ring.rows  # rows from here on lost their frame history to this write
        history_lost = self._items(max(lost, 0), max(lost + ring.observations.lookback, 0))
        changed = np.concatenate([self._items(first, stop), written, history_lost])
        return written, changed

    def _write_returns(self, first: int, stop: int) -> None:
        """Fill ``return_n``, ``discount_n``, ``done_n`` and ``steps_n`` of absolute rows [first, stop)."""
        if self.n_step == 1:
            self._write_one_step_returns(self.ring.row_index(first, stop - first))
            return
        ring, f = self.ring, self.ring.fields
        positions = np.arange(first, stop + self.n_step - 1) % ring.rows
        terminated = torch.from_numpy(f.terminated[positions])
        truncated = f.truncated[positions]
        if not ring.observations.keeps_final_observation:
            # No final frame: cut windows one step before a time limit and bootstrap from the
            # time-limit step's own observation (module docstring).
            cut = np.zeros_like(truncated)
            cut[:-1] = truncated[1:]
            truncated = cut
        out = nstep_returns(
            torch.from_numpy(f.reward[positions]),
            terminated,
            torch.from_numpy(truncated),
            self.gamma,
            self.n_step,
            nstep_done_bug=self.nstep_done_bug,
        )
        rows = positions[: stop - first]
        k = stop - first
        f.return_n[rows] = out.returns[:k].numpy()
        f.discount_n[rows] = out.discount[:k].numpy()
        f.done_n[rows] = out.done[:k].numpy()
        f.steps_n[rows] = out.steps[:k].numpy()

    def _write_one_step_returns(self, rows: slice | np.ndarray) -> None:
        """``nstep_returns`` for n = 1 in closed form: the window is the step itself (m = 1), so
        ``return_n = r_t``, ``done_n = terminated_t``, ``discount_n = 0 if done_n else gamma``, whatever
        the truncation handling or ``nstep_done_bug`` (both only move windows of two or more steps).
        The general path's fixed torch overhead per append was as much as the rest of a one-step
        append (SAC, DDPG, TD3 append every env step; docs/results/core_measurements.md,
        replay/transitions.py); tests check equality with it.
        """
        f = self.ring.fields
        terminated = f.terminated[rows]
        f.return_n[rows] = f.reward[rows]
        f.done_n[rows] = terminated
        f.discount_n[rows] = np.where(terminated, np.float32(0), np.float32(self.gamma))
        f.steps_n[rows] = 1

    def valid(self, items: np.ndarray) -> np.ndarray:
        """Whether each item may be sampled now."""
        ring = self.ring
        row = ring.absolute(items // ring.num_envs)
        t = ring.t
        oldest = 0 if t <= ring.rows else t - ring.rows + ring.observations.lookback
        ok = (row >= oldest) & (row < t - self.n_step)
        if not ring.observations.keeps_final_observation:
            ok &= ~ring.flat.truncated.take(items)
        return ok

    def extract(self, items: np.ndarray) -> NamedArrays:
        """The transitions of ``items`` [n] as torch tensors (table in the module docstring)."""
        ring, f, obs = self.ring, self.ring.flat, self.ring.observations
        size, B = ring.rows * ring.num_envs, ring.num_envs
        # Items are flat indices row * B + env; the step k rows later in the same env is item + k B.
        bootstrap = (items + f.steps_n.take(items).astype(np.int64) * B) % size
        next_observation = obs.gather(bootstrap, f.episode_start)
        if obs.keeps_final_observation:
            last = (bootstrap - B) % size
            final = np.flatnonzero(f.truncated.take(last))
            if final.size:
                next_observation[final] = obs.gather_final(last[final])
        return NamedArrays(
            observation=obs.gather(items, f.episode_start),
            action=f.action.take(items, axis=0),
            return_n=f.return_n.take(items),
            done_n=f.done_n.take(items),
            discount_n=f.discount_n.take(items),
            next_observation=next_observation,
        ).to_torch()
