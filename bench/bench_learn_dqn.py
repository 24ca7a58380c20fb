"""Learning checks for the DQN family and R2D1, run through ``algorithms.train.train``.

Arms (issue 3, item 5), each over several seeds, scored by the mean return of the final evaluation
(``SamplerConfig.eval_episodes`` greedy episodes after the last training step):

| arm | env | budget (env steps) | pass |
|---|---|---|---|
| ``dqn`` | CartPole-v1 | 100k | median seed >= 475 |
| ``c51`` | CartPole-v1 | 100k | median seed >= 475 |
| ``rainbow`` (minus noisy) | CartPole-v1 | 100k | median seed >= 475 |
| ``r2d1_masked`` | CartPole-v1, velocities masked | 300k | median seed >= 400 |
| ``dqn_masked`` (feed-forward) | CartPole-v1, velocities masked | 300k | reported (expected below R2D1) |
| ``dqn_pong`` | Pong (Atari protocol, clipped rewards) | 500k | median seed > -21 (the random score) |

The CartPole settings follow rl-baselines3-zoo's tuned DQN for CartPole-v1 (``hyperparams/dqn.yml``:
Adam 2.3e-3, batch 64, 256-unit layers, 128 updates per 256 steps, the target synced every 10
steps during collection, i.e. before each block of 128 updates, epsilon to 0.04 over 16% of 50k
steps); C51 and Rainbow reuse them with a [0, 100] support.
``--budget-scale`` shrinks every budget (and the exploration and learning-start counts with it) to
fit a machine; the summary says which scale ran. Results: one CSV row per (arm, seed) and a
Markdown summary per arm with the median, the mean and a 95% bootstrap CI over seeds (scipy).

    python -m bench.bench_learn_dqn --out runs/bench/learn_dqn.csv [--arms dqn,r2d1_masked]
        [--seeds 5] [--first-seed 0] [--budget-scale 1.0] [--jobs 1]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.algos import c51, dqn, r2d1, rainbow
from algorithms.envs.config import EnvConfig
from algorithms.rundir import read_run
from algorithms.train import RunnerConfig, SamplerConfig, TrainConfig, train

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")
MASKED = EnvConfig(id="CartPole-v1", kind="gym", mask_velocity=True)
# Nature DQN's training protocol: rewards clipped, a lost life terminal for the learner.
PONG = EnvConfig(id="pong", kind="atari", clip_rewards=True, episodic_life=True)


def zoo_cartpole(budget: int) -> dict[str, Any]:
    """rl-baselines3-zoo's DQN CartPole-v1 settings in this code base's units (module docstring)."""
    return dict(
        discount=0.99,
        batch_size=64,
        replay_size_steps=100_000,
        min_steps_learn=max(1_000 * budget // 100_000, 256),
        train_every_steps=2,  # 128 updates per 256 steps
        # SB3 syncs the target every 10 env steps while collecting, not between the 128 gradient steps
        # that follow a collection: once per 128 updates.
        target_update_period_updates=128,
        clip_grad_norm=10.0,  # SB3's max_grad_norm
        optimizer="adam",
        learning_rate=2.3e-3,
        eps_start=1.0,
        eps_final=0.04,
        eps_decay_steps=max(8_000 * budget // 100_000, 1),
        eps_eval=0.0,
        mlp_hidden_sizes=(256, 256),
    )


@dataclass(frozen=True)
class Arm:
    algo: str
    env: EnvConfig
    budget_steps: int
    pass_mark: str  # what the median seed's final return must satisfy: ">= x", "> x" or "reported"
    make_config: Callable[[int], Any]
    batch_T: int
    batch_B: int
    eval_episodes: int = 10


def _dqn(b: int) -> dqn.Config:
    return dqn.Config(**zoo_cartpole(b))


def _c51(b: int) -> c51.Config:
    return c51.Config(**zoo_cartpole(b), v_min=0.0, v_max=100.0, eps_per_env="same")


def _rainbow(b: int) -> rainbow.Config:
    return rainbow.Config(**zoo_cartpole(b), v_min=0.0, v_max=100.0, priority_beta_anneal_updates=b // 2)


def _r2d1_masked(b: int) -> r2d1.Config:
    return r2d1.Config(
        discount=0.99,
        n_step=5,
        sequence_length_steps=20,
        burn_in_steps=10,
        sequence_period_steps=10,
        batch_size_sequences=32,
        replay_size_steps=100_000,
        min_steps_learn=max(5_000 * b // 300_000, 500),
        replay_ratio=16.0,  # trained steps per env step: 4 updates of 32 x 20 per sampler batch of 160
        target_update_period_updates=250,
        learning_rate=1e-3,
        lstm_size=64,
        fc_size=64,
        head_hidden_size=64,
        mlp_hidden_sizes=(64,),
        eps_per_env="apex",
        eps_decay_steps=0,
        eps_eval=0.0,
    )


def _dqn_pong(b: int) -> dqn.Config:
    # Nature DQN with a CPU-sized schedule: replay 100k, learning after 10k steps, epsilon to 0.01
    # over the first 20% of the budget, target every 1k updates, Adam 1e-4 (as SB3's zoo for Pong).
    return dqn.Config(
        replay_size_steps=100_000,
        min_steps_learn=10_000,
        target_update_period_updates=1_000,
        optimizer="adam",
        learning_rate=1e-4,
        optimizer_eps=1.5e-4,
        eps_final=0.01,
        eps_decay_steps=max(b // 5, 1),
        eps_eval=0.01,
    )


ARMS: dict[str, Arm] = {
    "dqn": Arm("dqn", CARTPOLE, 100_000, ">= 475", _dqn, 256, 1),
    "c51": Arm("c51", CARTPOLE, 100_000, ">= 475", _c51, 256, 1),
    "rainbow": Arm("rainbow", CARTPOLE, 100_000, ">= 475", _rainbow, 256, 1),
    "r2d1_masked": Arm("r2d1", MASKED, 300_000, ">= 400", _r2d1_masked, 20, 8),
    "dqn_masked": Arm("dqn", MASKED, 300_000, "reported", _dqn, 256, 1),
    "dqn_pong": Arm("dqn", PONG, 500_000, "> -21", _dqn_pong, 4, 1, eval_episodes=3),
}


def passes(mark: str, value: float) -> str:
    if mark == "reported":
        return "-"
    op, threshold = mark.split()
    ok = value >= float(threshold) if op == ">=" else value > float(threshold)
    return "yes" if ok else "no"


def run_one(arm_name: str, seed: int, budget_scale: float, root: Path) -> dict[str, Any]:
    arm = ARMS[arm_name]
    budget = max(int(arm.budget_steps * budget_scale), arm.batch_T * arm.batch_B)
    config = TrainConfig(
        algo=arm.algo,
        algo_config=arm.make_config(budget),
        env=arm.env,
        sampler=SamplerConfig(batch_T=arm.batch_T, batch_B=arm.batch_B, eval_episodes=arm.eval_episodes),
        runner=RunnerConfig(
            n_steps=budget, log_interval_steps=max(budget // 10, 1), seed=seed, torch_threads=1
        ),
    )
    run_dir = root / arm_name / f"seed{seed}"
    start = time.perf_counter()
    counters = train(config, run_dir, resume=False)
    wall = time.perf_counter() - start
    data = read_run(run_dir)
    final = data.eval[data.eval.env_steps == data.eval.env_steps.max()]
    progress = data.progress
    return {
        "arm": arm_name,
        "algo": arm.algo,
        "env": arm.env.id + ("-masked" if arm.env.mask_velocity else ""),
        "seed": seed,
        "budget_steps": budget,
        "final_eval_return": float(final["return"].mean()),
        "eval_episodes": len(final),
        "last_train_return_mean": float(progress.return_mean.dropna().iloc[-1])
        if "return_mean" in progress
        else np.nan,
        "updates": counters.updates,
        "replay_ratio_trained": counters.replay_ratio_trained,
        "replay_ratio_with_burnin": counters.replay_ratio_with_burnin,
        "steps_per_second": counters.steps_per_second,
        "wall_s": wall,
        "run_dir": str(run_dir),
    }


def bootstrap_ci(values: list[float]) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean over seeds (scipy); NaN with fewer than 2 seeds."""
    if len(values) < 2 or len(set(values)) == 1:
        return (values[0], values[0]) if len(set(values)) == 1 else (np.nan, np.nan)
    from scipy.stats import bootstrap

    res = bootstrap(
        (np.asarray(values),), np.mean, confidence_level=0.95, method="percentile", random_state=0
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarize(rows: list[dict[str, Any]], budget_scale: float) -> str:
    lines = [
        f"# DQN-family learning checks (budget scale {budget_scale:g})",
        "",
        "| arm | env | budget (steps) | seeds | median final return | mean [95% bootstrap CI] | pass mark "
        "| pass |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm_name in ARMS:
        mine = [r for r in rows if r["arm"] == arm_name]
        if not mine:
            continue
        finals = [r["final_eval_return"] for r in mine]
        median = statistics.median(finals)
        low, high = bootstrap_ci(finals)
        mark = ARMS[arm_name].pass_mark
        lines.append(
            f"| {arm_name} | {mine[0]['env']} | {mine[0]['budget_steps']} | {len(mine)} | {median:.1f} | "
            f"{np.mean(finals):.1f} [{low:.1f}, {high:.1f}] | {mark} | {passes(mark, median)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV, one row per (arm, seed)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds run: first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument(
        "--budget-scale", type=float, default=1.0, help="fraction of each arm's env-step budget"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one torch thread each)")
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm {unknown[0]!r}; known: {', '.join(ARMS)}")
    if not 0 < args.budget_scale <= 1.0 or args.seeds < 1 or args.jobs < 1 or args.first_seed < 0:
        parser.error("--budget-scale must be in (0, 1], --seeds and --jobs >= 1, --first-seed >= 0")
    root = args.out.parent / (args.out.stem + "_runs")
    jobs = [(arm, seed) for arm in arms for seed in range(args.first_seed, args.first_seed + args.seeds)]
    for arm, seed in jobs:
        path = root / arm / f"seed{seed}"
        if path.exists():
            parser.error(f"{path} exists; remove it or choose another --out")
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, arm, seed, args.budget_scale, root) for arm, seed in jobs]
        rows = []
        for (arm, seed), future in zip(jobs, futures):
            row = future.result()
            rows.append(row)
            print(
                f"{arm} seed {seed}: final return {row['final_eval_return']:.1f} ({row['wall_s']:.0f} s)",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = summarize(rows, args.budget_scale)
    args.out.with_suffix(".md").write_text(summary)
    print(summary)


if __name__ == "__main__":
    main()
