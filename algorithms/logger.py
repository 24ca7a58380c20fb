"""Logging of a run: the progress table, a console bar with steps/s and ETA, optional TensorBoard and
an optional experiment tracker.

The progress table is the record (analysis reads it); the console bar, TensorBoard and the tracker are
views of the same rows. Each row holds every ``Counters.snapshot()`` column, episode-return statistics
of the episodes finished since the last row, and the algorithm's diagnostics.

The tracker is Weights & Biases in offline mode (``wandb.init(mode="offline")``: files under the run
directory's ``wandb/``, nothing sent; ``wandb sync`` uploads them later), on when the environment
variable ``RLREPRO_TRACKER`` is ``wandb`` (``python -m repro run --track`` sets it for its jobs) and
the package is installed (``pip install wandb``; not a dependency). It gets the run's config.json as
its config, one W&B run per run directory (id from the directory, so a resumed run continues it),
grouped by arm, and every numeric progress column at the row's env step.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from algorithms.counters import Counters
from algorithms.rundir import RunDir

TRACKER_ENV = "RLREPRO_TRACKER"


def tracker_available() -> bool:
    """Whether the tracker's package (wandb) is installed."""
    return importlib.util.find_spec("wandb") is not None


def _numeric(row: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in row.items() if isinstance(v, int | float) and math.isfinite(v)}


class WandbTracker:
    """One offline W&B run for a run directory (module docstring)."""

    def __init__(self, run: RunDir) -> None:
        import wandb

        path = run.path.resolve()
        config = json.loads((path / "config.json").read_text())
        arm, env, seed = path.parts[-3:]
        self.run = wandb.init(
            mode="offline",
            dir=str(path),
            project=path.parts[-4],
            group=arm,
            name=f"{arm}/{env}/{seed}",
            id=hashlib.sha256(str(path).encode()).hexdigest()[:16],
            resume="allow",
            config=config,
        )

    def log(self, row: dict[str, Any], env_steps: int) -> None:
        self.run.log(_numeric(row), step=env_steps)

    def close(self) -> None:
        self.run.finish()


RETURN_COLUMNS = ("return_mean", "return_std", "return_min", "return_max", "length_mean", "episodes_logged")


def episode_stats(traj_infos: list[dict[str, Any]]) -> dict[str, float]:
    """Return / length statistics of finished episodes (NaN when none finished)."""
    returns = np.array([t["return"] for t in traj_infos], dtype=np.float64)
    lengths = np.array([t["length"] for t in traj_infos], dtype=np.float64)
    if returns.size == 0:
        nan = math.nan
        return dict(zip(RETURN_COLUMNS, (nan, nan, nan, nan, nan, 0)))
    return {
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "length_mean": float(lengths.mean()),
        "episodes_logged": int(returns.size),
    }


class RunLogger:
    """Writes progress rows for one run and drives the console bar.

    ``total_steps`` is the run's env-step budget (for the ETA); ``initial_steps`` is where a resumed
    run starts. ``console=False`` silences the bar (scheduler jobs log to a file instead).
    ``diagnostic_keys``: the algorithm's diagnostics columns where it declares them; otherwise the
    first row's diagnostics fix them (a row written before the algorithm's first call, which the
    asynchronous runner can write, would then fix none).
    """

    def __init__(
        self,
        run: RunDir,
        total_steps: int,
        *,
        initial_steps: int = 0,
        tensorboard: bool = False,
        console: bool = True,
        description: str = "train",
        diagnostic_keys: Sequence[str] | None = None,
    ) -> None:
        self.run = run
        self.tensorboard = run.tensorboard_writer() if tensorboard else None
        track = os.environ.get(TRACKER_ENV) == "wandb" and tracker_available()
        self.tracker = WandbTracker(run) if track else None
        self.bar = tqdm(
            total=total_steps,
            initial=initial_steps,
            desc=description,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=not console,
            mininterval=1.0,
        )
        self._last_steps = initial_steps
        self._diagnostic_keys = None if diagnostic_keys is None else sorted(diagnostic_keys)

    def advance(self, env_steps: int) -> None:
        """Move the console bar to ``env_steps`` (tqdm shows rate and ETA)."""
        self.bar.update(env_steps - self._last_steps)
        self._last_steps = env_steps

    def log(
        self, counters: Counters, traj_infos: list[dict[str, Any]], diagnostics: dict[str, float]
    ) -> dict[str, Any]:
        """Append one progress row and return it."""
        with counters.timer("logging"):
            row: dict[str, Any] = counters.snapshot()
            row.update(episode_stats(traj_infos))
            if self._diagnostic_keys is None:
                self._diagnostic_keys = sorted(diagnostics)
            new = set(diagnostics) - set(self._diagnostic_keys)
            if new:
                raise KeyError(
                    f"diagnostics {sorted(new)} appeared after the first progress row; an algorithm must "
                    "report the same diagnostics keys on every call (NaN before learning starts)"
                )
            row.update({k: float(diagnostics.get(k, math.nan)) for k in self._diagnostic_keys})
            self.run.append_progress(row)
            if self.tensorboard is not None:
                for key, value in _numeric(row).items():
                    self.tensorboard.add_scalar(key, value, counters.env_steps)
            if self.tracker is not None:
                self.tracker.log(row, counters.env_steps)
            self.bar.set_postfix(
                ret=f"{row['return_mean']:.1f}", sps=f"{row['steps_per_second']:.0f}", refresh=False
            )
        return row

    def close(self) -> None:
        self.bar.close()
        if self.tensorboard is not None:
            self.tensorboard.flush()
        if self.tracker is not None:
            self.tracker.close()
