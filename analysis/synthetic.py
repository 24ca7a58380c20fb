"""Synthetic experiments in the run-directory format, for tests and for trying the report.

Each run's learning curve is ``final * (1 - exp(-steps / (0.3 * n_steps)))`` plus Gaussian noise, in
units of the env's score scale (human - random for Atari-57 games, so ``skill`` 1.0 ends at human
level; DQN at 5M frames - random for MinAtar games, from the MinAtar reference table). Runs are
written through ``algorithms.rundir.RunDir``, the same writer training uses, so the files are
exactly what a real run leaves.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from algorithms.rundir import RunDir, run_path
from analysis.scores import atari_game, human_random_table, is_minatar, minatar_reference_table


@dataclass(frozen=True)
class SyntheticArm:
    """``skill``: final score as a fraction of the env's scale; ``config``: the arm's settings."""

    skill: float
    config: dict


def _scale(env: str) -> tuple[float, float]:
    if is_minatar(env):
        random, dqn = minatar_reference_table().scores.loc[env, ["random", "dqn_5m"]]
        return float(random), float(dqn - random)
    game = atari_game(env)
    if game is None:
        return 0.0, 500.0  # CartPole-v1's return range
    random, human = human_random_table("r2d2").scores.loc[game, ["random", "human"]]
    return float(random), float(human - random)


def write_run(
    path: Path,
    *,
    config: dict,
    skill: float,
    env: str,
    n_steps: int = 10_000,
    n_logs: int = 10,
    eval_episodes: int = 5,
    seed: int,
    frameskip: int = 4,
    noise: float = 0.05,
    state: str = "complete",
    stream: int | list[int] | None = None,
) -> Path:
    """One synthetic run: ``n_logs`` progress rows (Counters.snapshot() columns + ``return_mean``)
    and an evaluation of ``eval_episodes`` episodes at every log point. ``stream`` seeds its noise
    (default ``seed``)."""
    rng = np.random.default_rng(seed if stream is None else stream)
    offset, scale = _scale(env)
    run = RunDir.open(path, config, seeds={"seed": seed}, resume=False)
    sps, ups = 500.0 + 50 * rng.random(), 20.0 + 5 * rng.random()
    for i in range(1, n_logs + 1):
        steps = i * n_steps // n_logs
        level = skill * (1 - np.exp(-steps / (0.3 * n_steps)))
        t_sample, t_opt = steps / sps * 0.6, steps / sps * 0.4
        run.append_progress(
            {
                "frameskip": frameskip,
                "env_steps": steps,
                "episodes": 3 * i,
                "sampler_itrs": 10 * i,
                "updates": int(steps / sps * ups),
                "samples_trained": 32 * steps // 40,
                "samples_replayed": 48 * steps // 40,
                "time_sampling_s": t_sample,
                "time_optimizing_s": t_opt,
                "time_evaluating_s": 0.1 * i,
                "time_logging_s": 0.01 * i,
                "frames": steps * frameskip,
                "replay_ratio_trained": 0.8,
                "replay_ratio_with_burnin": 1.2,
                "wall_time_s": t_sample + t_opt + 0.11 * i,
                "steps_per_second": sps,
                "frames_per_second": sps * frameskip,
                "updates_per_second": ups,
                "return_mean": offset + scale * (0.8 * level + noise * rng.standard_normal()),
                "episodes_logged": 3,
                "loss": float(rng.random()),
            }
        )
        returns = offset + scale * (level + noise * rng.standard_normal(eval_episodes))
        run.append_eval(
            [
                {
                    "env_steps": steps,
                    "frames": steps * frameskip,
                    "updates": int(steps / sps * ups),
                    "wall_time_s": t_sample + t_opt,
                    "episode": k,
                    "return": float(r),
                    "length": 100 + k,
                }
                for k, r in enumerate(returns)
            ]
        )
    if state != "running":
        run.set_status(state, None if state == "complete" else "synthetic failure")
    return path


def write_experiment(
    root: Path, name: str, arms: dict[str, SyntheticArm], envs: list[str], seeds: list[int], **run_kwargs
) -> Path:
    """``root/name/<arm>/<env>/seed<k>`` for every arm x env x seed; returns the experiment directory.

    Each run's noise comes from its own stream, keyed by the arm's and env's names and the seed: a
    run's values do not depend on which other arms or envs the experiment has, and runs on other
    seeds (a replication) are independent draws."""
    for arm, spec in sorted(arms.items()):
        for env in envs:
            for seed in seeds:
                config = {**spec.config, "env": {"id": env}, "runner": {"seed": seed}}
                write_run(
                    run_path(root, name, arm, env, seed),
                    config=config,
                    skill=spec.skill,
                    env=env,
                    seed=seed,
                    stream=[zlib.crc32(arm.encode()), zlib.crc32(env.encode()), seed],
                    **run_kwargs,
                )
    return Path(root) / name
