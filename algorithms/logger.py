"""Logging of a run: the progress table, a console bar with steps/s and ETA, optional TensorBoard and
an optional experiment tracker.

The progress table is the record (analysis reads it); the console bar, TensorBoard and the tracker are
views of the same rows. Each row holds every ``Counters.snapshot()`` column, episode-return statistics
of the episodes finished since the last row, and the algorithm's diagnostics.

TensorBoard and the tracker get the rows as grouped tags at the row's env step (``view_rows``):
``train/`` (episode returns and lengths, update counts, the algorithm's diagnostics), ``time/``
(rates and time splits) and ``eval/`` (each evaluation's return and length statistics); the env-step
axis itself and the counters that never change within a run (``frameskip``, an algorithm without
replay's replay ratios) or only restate another (``frames``, ``frames_per_second``) are left out.

The tracker is Weights & Biases, on when the environment variable ``RLREPRO_TRACKER`` is ``wandb``
(``python -m repro run --track`` sets it for its jobs) and the package is installed (the ``track``
extra: ``pip install -c constraints.txt -e '.[track]'``). It runs online when the user is logged in
(``wandb login`` or ``WANDB_API_KEY``: ``wandb.login(prompt=False, verify=False)`` finds them without
asking), else offline (files under the run directory's ``wandb/``, nothing sent; ``wandb sync``
uploads them later). It gets the run's config.json as its config, one W&B run per run directory (id
from the directory, so a resumed run continues it), grouped by arm.
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


# Progress columns the views leave out: the x-axis, and counters constant within a run or equal to
# another column times a constant (frames = env steps x frameskip, frames_per_second = steps_per_second
# x frameskip). Evaluating time changes only when an evaluation runs, and a progress row at an
# evaluation's step is written before it: the evaluation's view carries it (``RunLogger.log_eval``).
NOT_VIEWED = frozenset({"env_steps", "frameskip", "frames", "frames_per_second", "time_evaluating_s"})
# Replay ratios of an algorithm without replay (A2C, PPO) are its epochs and minibatches: constant.
REPLAY_COLUMNS = frozenset({"replay_ratio_trained", "replay_ratio_with_burnin"})


def view_rows(row: dict[str, Any], group: str = "train", replays: bool = True) -> dict[str, float]:
    """A progress row's (or ``group="eval"``: an evaluation's) numeric values as TensorBoard and W&B
    tags: ``time/`` for rates and time splits (``time_*``, ``*_per_second``, ``wall_time_s``),
    ``group/`` for the rest, less ``NOT_VIEWED`` (and ``REPLAY_COLUMNS`` unless ``replays``)."""
    out = {}
    for key, value in _numeric(row).items():
        if key in NOT_VIEWED or (not replays and key in REPLAY_COLUMNS):
            continue
        timing = key.startswith("time_") or key.endswith("_per_second") or key == "wall_time_s"
        out[f"{'time' if timing else group}/{key}"] = value
    return out


def wandb_mode(wandb: Any) -> str:
    """``online`` when the user is logged in to W&B (credentials found without a prompt), else
    ``offline``."""
    return "online" if wandb.login(prompt=False, verify=False) else "offline"


class WandbTracker:
    """One offline W&B run for a run directory (module docstring)."""

    def __init__(self, run: RunDir) -> None:
        import wandb

        path = run.path.resolve()
        config = json.loads((path / "config.json").read_text())
        arm, env, seed = path.parts[-3:]
        self.run = wandb.init(
            mode=wandb_mode(wandb),
            dir=str(path),
            project=path.parts[-4],
            group=arm,
            name=f"{arm}/{env}/{seed}",
            id=hashlib.sha256(str(path).encode()).hexdigest()[:16],
            resume="allow",
            config=config,
        )

    def log(self, tags: dict[str, float], env_steps: int) -> None:
        self.run.log(tags, step=env_steps)

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
        replays: bool = True,
    ) -> None:
        self.run = run
        self.replays = replays
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
        self._postfix: dict[str, str] = {}  # the console bar's latest training and evaluation returns
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
            self._view(view_rows(row, replays=self.replays), counters.env_steps)
            self._postfix.update(ret=f"{row['return_mean']:.1f}", sps=f"{row['steps_per_second']:.0f}")
            self.bar.set_postfix(self._postfix, refresh=False)
        return row

    def log_eval(self, episodes: list[dict[str, Any]], counters: Counters) -> None:
        """An evaluation's episodes (``return``, ``length``) as ``eval/`` tags of the views, with the
        run's evaluating time so far, this evaluation's included, as ``time/time_evaluating_s``; the
        run directory's eval.csv is written by the runner."""
        stats = episode_stats(episodes)
        stats["episodes"] = stats.pop("episodes_logged")
        tags = {**view_rows(stats, "eval"), "time/time_evaluating_s": counters.time_evaluating_s}
        self._view(tags, counters.env_steps)
        if stats["episodes"]:
            self._postfix["eval"] = f"{stats['return_mean']:.1f}"
            self.bar.set_postfix(self._postfix, refresh=False)

    def _view(self, tags: dict[str, float], env_steps: int) -> None:
        """``tags`` to TensorBoard and the tracker, where on."""
        if self.tensorboard is not None:
            for key, value in tags.items():
                self.tensorboard.add_scalar(key, value, env_steps)
        if self.tracker is not None and tags:
            self.tracker.log(tags, env_steps)

    def close(self) -> None:
        self.bar.close()
        if self.tensorboard is not None:
            self.tensorboard.flush()
        if self.tracker is not None:
            self.tracker.close()
