"""Explicit step accounting, shared by every run.

Two replay-ratio countings coexist because the literature uses both (see docs/step_accounting.md):

* ``replay_ratio_trained`` = samples in the loss per env step. R2D2 (Kapturowski et al. 2019,
  Appendix) reports "about 0.8" replays per observation; this counts only the trained steps of a
  sequence, not its burn-in.
* ``replay_ratio_with_burnin`` = samples replayed, burn-in included, per env step. rlpyt's R2D1
  (rlpyt/algos/dqn/r2d1.py, ``replay_ratio``) counted (batch_T + warmup_T) x batch_B per update.

Example: 64 sequences x (80 trained + 40 burn-in) per update at 7,680 env steps per update gives
5,120 / 7,680 = 0.667 trained and 7,680 / 7,680 = 1.0 with burn-in.

Throughput (``steps_per_second``) counts sampling and optimizing time only; evaluation and logging
are excluded, and the counters say so in their field names.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

TIME_CATEGORIES = ("sampling", "optimizing", "evaluating", "logging")

# The derived properties a progress row carries after the fields, in this column order.
DERIVED = (
    "frames",
    "replay_ratio_trained",
    "replay_ratio_with_burnin",
    "wall_time_s",
    "steps_per_second",
    "frames_per_second",
    "updates_per_second",
)


@dataclass
class Counters:
    """Cumulative counters of one run. ``frameskip`` is the frames per env step of this run's env."""

    frameskip: int = 1
    env_steps: int = 0
    episodes: int = 0
    sampler_itrs: int = 0
    updates: int = 0
    samples_trained: int = 0
    samples_replayed: int = 0
    time_sampling_s: float = 0.0
    time_optimizing_s: float = 0.0
    time_evaluating_s: float = 0.0
    time_logging_s: float = 0.0
    # Wall time of earlier segments of a resumed run (the current segment adds time since start).
    wall_time_before_resume_s: float = 0.0

    def __post_init__(self) -> None:
        if self.frameskip < 1:
            raise ValueError(f"Counters.frameskip must be >= 1, got {self.frameskip}")
        self._segment_start = time.perf_counter()

    # --- updates ------------------------------------------------------------------------------
    def add_env_steps(self, n: int, episodes: int = 0) -> None:
        self.env_steps += int(n)
        self.episodes += int(episodes)
        self.sampler_itrs += 1

    def add_updates(self, n_updates: int, samples_trained: int, samples_replayed: int | None = None) -> None:
        """Record ``n_updates`` gradient steps that trained on ``samples_trained`` steps in total and
        replayed ``samples_replayed`` steps including burn-in (defaults to ``samples_trained``)."""
        if samples_replayed is None:
            samples_replayed = samples_trained
        if samples_replayed < samples_trained:
            raise ValueError("samples_replayed (with burn-in) cannot be below samples_trained")
        self.updates += int(n_updates)
        self.samples_trained += int(samples_trained)
        self.samples_replayed += int(samples_replayed)

    @contextmanager
    def timer(self, category: str) -> Iterator[None]:
        """``with counters.timer("sampling"): ...`` adds the block's wall time to that category."""
        if category not in TIME_CATEGORIES:
            raise ValueError(f"unknown time category {category!r}; expected one of {TIME_CATEGORIES}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add_time(category, time.perf_counter() - t0)

    def add_time(self, category: str, seconds: float) -> None:
        """Add ``seconds`` of wall time to ``category`` (a packed run times its members' phases once)."""
        if category not in TIME_CATEGORIES:
            raise ValueError(f"unknown time category {category!r}; expected one of {TIME_CATEGORIES}")
        attr = f"time_{category}_s"
        setattr(self, attr, getattr(self, attr) + seconds)

    # --- derived ------------------------------------------------------------------------------
    @property
    def frames(self) -> int:
        return self.env_steps * self.frameskip

    @property
    def replay_ratio_trained(self) -> float:
        return self.samples_trained / self.env_steps if self.env_steps else 0.0

    @property
    def replay_ratio_with_burnin(self) -> float:
        return self.samples_replayed / self.env_steps if self.env_steps else 0.0

    @property
    def wall_time_s(self) -> float:
        return self.wall_time_before_resume_s + (time.perf_counter() - self._segment_start)

    @property
    def train_time_s(self) -> float:
        """Sampling + optimizing time: the denominator of throughput (excludes eval and logging)."""
        return self.time_sampling_s + self.time_optimizing_s

    @property
    def steps_per_second(self) -> float:
        return self.env_steps / self.train_time_s if self.train_time_s > 0 else 0.0

    @property
    def frames_per_second(self) -> float:
        return self.steps_per_second * self.frameskip

    @property
    def updates_per_second(self) -> float:
        return self.updates / self.train_time_s if self.train_time_s > 0 else 0.0

    # --- serialisation --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, float | int]:
        """Plain values for a checkpoint; wall time so far is folded into ``wall_time_before_resume_s``."""
        state = asdict(self)
        state["wall_time_before_resume_s"] = self.wall_time_s
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, float | int]) -> Counters:
        names = {f.name for f in fields(cls)}
        unknown = set(state) - names
        if unknown:
            raise KeyError(f"Counters.from_state_dict: unknown keys {sorted(unknown)}")
        return cls(**state)

    def snapshot(self) -> dict[str, float | int]:
        """One progress-table row's worth of counters, derived values included."""
        row = asdict(self)
        row.pop("wall_time_before_resume_s")
        row.update({name: getattr(self, name) for name in DERIVED})
        return row
