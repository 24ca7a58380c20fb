"""The record side of ``bench.sb3_ppo_atari``: an SB3 PPO run written as a run directory of this
harness (docs/ARCHITECTURE.md, Contract 5), so that ``analysis`` reads it as it reads ours.

Nothing here imports Stable-Baselines3: the driver hands over what SB3 reported (the step infos of
each vector step, the ``train/`` values of its logger after each update, its ``model.save`` bytes),
and this module turns them into the harness's files with the harness's own writers
(``algorithms.rundir.RunDir``, ``algorithms.counters.Counters``, ``algorithms.logger.episode_stats``);
the zoo's settings it records and the driver's argument checks are ``bench.sb3_zoo``'s:

* **progress.csv**: one row at the first rollout boundary at or past each multiple of the log
  interval, and one at the end of the budget: the ``Counters`` columns (``frames`` = 4 x env steps:
  frames as Atari publications count them), the return statistics of the games finished since the
  previous row (``return_mean`` ... ``episodes_logged``: from the ``episode`` entries that SB3's
  ``Monitor`` puts in the step infos, the same entries ``ep_info_buffer`` reads; the Monitor sits
  beneath ``AtariWrapper``, so a return is a whole game's unclipped score), ``length_mean`` (agent
  steps of those games, counted here per env), ``length_frames_mean`` (the Monitor's own length:
  emulator frames, no-op starts included), ``cpu_time_s`` (``time.process_time`` of training, summed
  over starts), ``steps_per_cpu_second``, and SB3's ``train/`` values as ``sb3_<name>``, the mean
  over the window's updates.
* **checkpoints/latest.pt**: the harness's checkpoint (written to a temporary file, verified,
  renamed; ``previous.pt`` kept) holding SB3's ``model.save`` zip as a uint8 tensor, the counters,
  the open log window, the RNG states. ``RunDir.recover`` cuts progress.csv back to it on a restart.
  A finished run also leaves ``checkpoints/sb3_model.zip``, loadable with ``PPO.load``.
* **metadata.json**: ``collect_metadata`` at the first start (its ``start_time`` kept), plus
  ``resumes``: one entry per later start (``RunDir.note_resume``: its time, the env steps it continued
  from, its code, host and command), as the harness's own runs record theirs. SB3
  does not save its envs: a resumed run restarts every env (the games in progress are lost), which
  the entry says (``envs_restarted``).

Budget rule, as this harness's runners: training goes on in whole rollouts (8 envs x 128 steps)
until the env steps reach ``steps``; the rollout started past that point is stopped at its first
step and not counted. A stop signal rolls back to the last rollout boundary the same way: every env
step counted was trained on.
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.counters import Counters
from algorithms.logger import episode_stats
from algorithms.rundir import (
    CHECKPOINT_DIR,
    RESUMES_KEY,
    RunDir,
    atomic_write_bytes,
    completion,
    config_differences,
    run_path,
)
from algorithms.rundir.atomic import _json_default
from bench.sb3_zoo import (
    ATARI_ENV,
    FRAMESKIP,
    LINEAR_KEYS,
    N_ENVS,
    N_STACK,
    ZOO_PPO,
    ZOO_SOURCE,
    gym_id,
)

ARM = "sb3_ppo_atari_zoo"
ALGO = "sb3_ppo"
CHECKPOINT_FORMAT = "sb3_ppo_atari/1"
CHECKPOINT_INTERVAL_S = 600.0
SB3_ZIP = "sb3_model.zip"
# SB3's train/ logger values recorded (their mean over a progress row's updates), as sb3_<name>.
DIAGNOSTICS = (
    "approx_kl", "clip_fraction", "clip_range", "entropy_loss", "explained_variance", "learning_rate",
    "loss", "policy_gradient_loss", "value_loss",
)  # fmt: skip
INTERRUPTED = "stopped by a stop signal (SIGTERM, SIGINT, SIGHUP); rerun the same command to continue"


class ZooLinear:
    """The zoo's ``lin_X`` schedule: X times SB3's ``progress_remaining`` (1 at the start of
    ``learn``'s total_timesteps, 0 at its end). A module-level class, so that SB3's ``model.save``
    pickles it by reference and ``PPO.load`` finds it again."""

    def __init__(self, start: float) -> None:
        self.start = float(start)

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.start

    def __repr__(self) -> str:
        return f"ZooLinear({self.start})"


# --- config.json -------------------------------------------------------------------------------


def ppo_kwargs(seed: int, anneal_steps: int) -> dict[str, Any]:
    """The PPO keyword arguments of the run (for ``PPO(env=..., **kwargs)``), schedules as ZooLinear."""
    kwargs = {k: (ZooLinear(v) if k in LINEAR_KEYS else v) for k, v in ZOO_PPO.items()}
    return {**kwargs, "seed": seed, "device": "cpu", "verbose": 0}


def run_config(
    env: str,
    seed: int,
    steps: int,
    anneal_steps: int,
    threads: int,
    log_interval: int,
    sb3_version: str,
    sb3_defaults: Mapping[str, Any],
) -> dict[str, Any]:
    """config.json: what runs, keyed as this harness's configs where a key means the same
    (``runner.n_steps``, ``env.id``, ``sampler.batch_B``, ``algo_config.anneal_env_steps``, ...),
    with SB3's own arguments verbatim under ``sb3``. ``sb3_defaults``: the PPO arguments left at SB3's
    defaults (read from the installed SB3 by the driver), so the file names every value in effect."""
    algo_config: dict[str, Any] = {}
    for key, value in ZOO_PPO.items():
        if key in LINEAR_KEYS:
            algo_config[key] = {"schedule": "linear", "start": value, "end": 0.0}
        else:
            algo_config[key] = value
    algo_config["anneal_env_steps"] = anneal_steps
    return {
        "algo": ALGO,
        "source": ZOO_SOURCE,
        "algo_config": algo_config,
        "env": {"id": env, **ATARI_ENV},
        "sampler": {"batch_T": ZOO_PPO["n_steps"], "batch_B": N_ENVS},
        "runner": {
            "n_steps": steps,
            "log_interval_steps": log_interval,
            "seed": seed,
            "torch_threads": threads,
            "device": "cpu",
        },
        "sb3": {
            "version": sb3_version,
            "gym_id": gym_id(env),
            "env": (
                f"VecFrameStack(make_atari_env({gym_id(env)!r}, n_envs={N_ENVS}, seed={seed}), "
                f"n_stack={N_STACK})"
            ),
            "ppo_kwargs": {
                k: (repr(v) if isinstance(v, ZooLinear) else v)
                for k, v in ppo_kwargs(seed, anneal_steps).items()
            },  # fmt: skip
            "ppo_defaults": dict(sorted(sb3_defaults.items())),
            "learn_total_timesteps": anneal_steps,
            "n_envs": N_ENVS,
        },
    }


def stored_config_differs(path: Path, config: dict[str, Any]) -> str | None:
    """The first key at which ``path``'s stored config.json differs from ``config`` (None when it
    has none, or agrees)."""
    file = Path(path) / "config.json"
    if not file.exists():
        return None
    fresh = json.loads(json.dumps(config, default=_json_default))
    diff = next(config_differences(json.loads(file.read_text()), fresh), None)
    return None if diff is None else f"{file}: config differs at {diff}"


# --- progress rows -----------------------------------------------------------------------------


def updates_per_rollout() -> tuple[int, int]:
    """``(gradient steps, samples trained)`` of one PPO update on a rollout: every epoch passes over
    the rollout in minibatches (SB3's ``RolloutBuffer.get``; the last one short when the batch does
    not divide the rollout); no early stop (target_kl unset)."""
    size = ZOO_PPO["n_steps"] * N_ENVS
    minibatches = math.ceil(size / ZOO_PPO["batch_size"])
    return ZOO_PPO["n_epochs"] * minibatches, ZOO_PPO["n_epochs"] * size


class Recorder:
    """Turns what SB3 reports into progress rows, and holds what a checkpoint needs to continue them.

    The driver calls ``step`` after every vector step (the new env-step count and the step's infos),
    ``rollout_end`` when a rollout is collected, and ``boundary`` when the next one is about to
    start (SB3 has trained on the last one by then): ``boundary`` closes the rollout (env steps,
    updates, diagnostics, times) and returns the row due there, or None. ``finish_row`` returns the
    budget's last row when the last boundary was not a log boundary. Clocks are injectable for tests.
    """

    def __init__(
        self,
        log_interval: int,
        n_envs: int = N_ENVS,
        state: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.log_interval = log_interval
        self.n_envs = n_envs
        self.clock, self.cpu_clock = clock, cpu_clock
        state = dict(state or {})
        self.counters = (
            Counters.from_state_dict(dict(state["counters"])) if "counters" in state else Counters(FRAMESKIP)
        )
        self.cpu_before_s = float(state.get("cpu_time_s", 0.0))
        self.cpu_start = cpu_clock()
        window = state.get("window", {})
        self.returns: list[float] = [float(x) for x in window.get("returns", [])]
        self.lengths: list[int] = [int(x) for x in window.get("lengths", [])]
        self.frames: list[int] = [int(x) for x in window.get("frames", [])]
        self.diag_sums = {k: float(window.get("diag_sums", {}).get(k, 0.0)) for k in DIAGNOSTICS}
        self.diag_counts = {k: int(window.get("diag_counts", {}).get(k, 0)) for k in DIAGNOSTICS}
        self.last_log_steps = int(state.get("last_log_steps", -1))
        self.next_log = int(state.get("next_log", log_interval))
        # Per env: agent steps of the game in progress (envs restart on a resume: not saved).
        self.game_steps = np.zeros(n_envs, dtype=np.int64)
        self.in_rollout = False
        self.rollout_started = self.rollout_ended = None
        self.rollout_episodes = 0
        self.kept = len(self.returns)  # window episodes up to the last boundary

    # the driver's calls
    def rollout_start(self) -> None:
        self.rollout_started = self.clock()
        self.in_rollout = True
        self.rollout_episodes = 0
        self.kept = len(self.returns)

    def step(self, infos: Sequence[Mapping[str, Any]]) -> None:
        """One vector step's infos: every env's game gets one agent step longer; a finished game (a
        Monitor ``episode`` entry: ``r`` return, ``l`` frames) joins the window."""
        self.game_steps += 1
        for i, info in enumerate(infos):
            episode = info.get("episode")
            if episode is None:
                continue
            self.returns.append(float(episode["r"]))
            self.lengths.append(int(self.game_steps[i]))
            self.frames.append(int(episode["l"]))
            self.game_steps[i] = 0
            self.rollout_episodes += 1

    def rollout_end(self) -> None:
        self.rollout_ended = self.clock()
        if self.rollout_started is not None:
            self.counters.add_time("sampling", self.rollout_ended - self.rollout_started)

    def boundary(self, env_steps: int, diagnostics: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A rollout boundary at ``env_steps`` (SB3's ``num_timesteps``), SB3's ``train/`` values of the
        update just made (None when none was made since the last boundary: a start). Returns the row
        due here, if any."""
        if self.in_rollout:
            self.close_rollout(diagnostics)
        if env_steps != self.counters.env_steps:
            raise RuntimeError(
                f"SB3 is at {env_steps:,} env steps, the record at {self.counters.env_steps:,}: "
                "the driver missed a rollout"
            )
        if env_steps >= self.next_log:
            return self.row()
        return None

    def close_rollout(self, diagnostics: Mapping[str, Any] | None) -> None:
        now = self.clock()
        if self.rollout_ended is not None:
            self.counters.add_time("optimizing", now - self.rollout_ended)
        self.counters.add_env_steps(ZOO_PPO["n_steps"] * self.n_envs, episodes=self.rollout_episodes)
        if diagnostics is not None:
            updates, trained = updates_per_rollout()
            self.counters.add_updates(updates, trained)
            for key in DIAGNOSTICS:
                value = diagnostics.get(f"train/{key}")
                if value is not None and math.isfinite(float(value)):
                    self.diag_sums[key] += float(value)
                    self.diag_counts[key] += 1
        self.in_rollout = False
        self.rollout_started = self.rollout_ended = None
        self.kept = len(self.returns)

    def rollback(self) -> None:
        """Forget the rollout in progress (a stop mid-rollout): its finished games leave the window."""
        del self.returns[self.kept :], self.lengths[self.kept :], self.frames[self.kept :]
        self.in_rollout = False
        self.rollout_started = self.rollout_ended = None

    def finish_row(self) -> dict[str, Any] | None:
        """The budget's last row, unless the last boundary logged one."""
        return None if self.last_log_steps == self.counters.env_steps else self.row()

    @property
    def cpu_time_s(self) -> float:
        return self.cpu_before_s + (self.cpu_clock() - self.cpu_start)

    def row(self) -> dict[str, Any]:
        """The progress row at the current env steps; the window starts afresh."""
        c = self.counters
        row: dict[str, Any] = c.snapshot()
        cpu = self.cpu_time_s
        row["cpu_time_s"] = cpu
        row["steps_per_cpu_second"] = c.env_steps / cpu if cpu > 0 else 0.0
        row.update(episode_stats([{"return": r, "length": n} for r, n in zip(self.returns, self.lengths)]))
        row["length_frames_mean"] = float(np.mean(self.frames)) if self.frames else math.nan
        for key in DIAGNOSTICS:
            n = self.diag_counts[key]
            row[f"sb3_{key}"] = self.diag_sums[key] / n if n else math.nan
        self.returns, self.lengths, self.frames = [], [], []
        self.diag_sums = dict.fromkeys(DIAGNOSTICS, 0.0)
        self.diag_counts = dict.fromkeys(DIAGNOSTICS, 0)
        self.kept = 0
        self.last_log_steps = c.env_steps
        self.next_log = (c.env_steps // self.log_interval + 1) * self.log_interval
        return row

    def state_dict(self) -> dict[str, Any]:
        """Plain values for a checkpoint (``torch.load(weights_only=True)`` reads them), taken at a
        boundary (after ``rollback`` when a stop came mid-rollout)."""
        return {
            "counters": self.counters.state_dict(),
            "cpu_time_s": self.cpu_time_s,
            "window": {
                "returns": list(self.returns),
                "lengths": list(self.lengths),
                "frames": list(self.frames),
                "diag_sums": dict(self.diag_sums),
                "diag_counts": dict(self.diag_counts),
            },
            "last_log_steps": self.last_log_steps,
            "next_log": self.next_log,
        }


# --- the run directory -------------------------------------------------------------------------


def sb3_run_path(root: Path, experiment: str, env: str, seed: int) -> Path:
    return run_path(Path(root), experiment, ARM, env, seed)


def open_record(
    path: Path, config: dict[str, Any], seed: int, extra_metadata: Mapping[str, Any] | None = None
) -> tuple[RunDir, dict[str, Any] | None]:
    """Open (create or reopen) the run directory under its lock, cut it back to its latest checkpoint
    (``RunDir.recover``) and, when this is not its first start, add a ``resumes`` entry to its
    metadata.json (the first start's ``start_time`` stays). Returns the run and the checkpoint
    (None: from the start). ``ValueError`` (one line) when the stored config differs."""
    path = Path(path)
    metadata = {RESUMES_KEY: [], **(extra_metadata or {})}
    run = RunDir.open(path, config, {"seed": seed}, resume=True, effective_values={}, extra_metadata=metadata)
    try:
        checkpoint, repaired = run.recover()
        if checkpoint is not None and checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(
                f"{run.checkpoint_path}: format {checkpoint.get('format')!r}, expected {CHECKPOINT_FORMAT}"
            )
        if repaired is not None:
            print(f"{path}: {repaired}", file=sys.stderr, flush=True)
        if run.reopened:
            steps = int(checkpoint["counters"]["env_steps"]) if checkpoint is not None else 0
            note_resume(run, steps, repaired)
    except KeyboardInterrupt:
        run.set_status("interrupted", INTERRUPTED)
        run.close()
        raise
    except BaseException as error:
        run.set_status("failed", f"{type(error).__name__}: {error}")
        run.close()
        raise
    return run, checkpoint


def note_resume(run: RunDir, env_steps: int, repaired: str | None = None) -> dict[str, Any]:
    """Add a start that continues the run from ``env_steps`` (0: from the start, no checkpoint) to
    metadata.json's ``resumes`` (``RunDir.note_resume``), saying that SB3 restarted its envs; returns
    the entry."""
    return run.note_resume(env_steps, frames=env_steps * FRAMESKIP, envs_restarted=True, repaired=repaired)


def checkpoint_state(sb3_zip: bytes, recorder: Recorder, rng: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint ``RunDir.save_checkpoint`` writes: SB3's zip as a uint8 tensor, the record's
    state at the last boundary (``runner.last_log_steps`` for ``RunDir.recover``'s check)."""
    import torch

    state = recorder.state_dict()
    return {
        "format": CHECKPOINT_FORMAT,
        "sb3_zip": torch.frombuffer(bytearray(sb3_zip), dtype=torch.uint8),
        "counters": state.pop("counters"),
        "recorder": state,
        "runner": {"last_log_steps": state["last_log_steps"]},
        "rng": dict(rng),
    }


def recorder_state(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    return {**checkpoint["recorder"], "counters": checkpoint["counters"]}


def sb3_zip_of(checkpoint: Mapping[str, Any]) -> io.BytesIO:
    """SB3's ``model.save`` zip inside a checkpoint, as a file object for ``PPO.load``."""
    return io.BytesIO(checkpoint["sb3_zip"].numpy().tobytes())


def write_sb3_zip(run: RunDir, sb3_zip: bytes) -> Path:
    path = run.path / CHECKPOINT_DIR / SB3_ZIP
    atomic_write_bytes(path, sb3_zip)
    return path


def is_finished(path: Path) -> bool:
    return completion(Path(path))[0]


def write_rows(run: RunDir, rows: Iterable[dict[str, Any] | None]) -> None:
    for row in rows:
        if row is not None:
            run.append_progress(row)
