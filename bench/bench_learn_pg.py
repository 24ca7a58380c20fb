"""Learning checks for policy gradients (A2C, PPO, recurrent PPO) and Q-value policy gradients
(DDPG, TD3, SAC), run through ``algorithms.train.train``.

Arms (issue 4, item 5), each over several seeds, scored by the mean return of the final evaluation
(``SamplerConfig.eval_episodes`` eval-mode episodes after the last training step: the most likely
action for PPO/A2C, the policy mean for SAC, mu(s) for DDPG/TD3):

| arm | env | budget (env steps) | pass |
|---|---|---|---|
| ``ppo_cartpole`` | CartPole-v1 | 100k | median seed >= 475 |
| ``a2c_cartpole`` | CartPole-v1 | 100k | median seed >= 475 |
| ``ppo_masked`` (feed-forward) | CartPole-v1, velocities masked | 100k | reported |
| ``rppo_masked`` (LSTM) | CartPole-v1, velocities masked | 100k | median above ``ppo_masked``'s CI |
| ``sac_pendulum``, ``td3_pendulum``, ``ddpg_pendulum`` | Pendulum-v1 | 20k | median seed >= -200 |
| ``sac_halfcheetah``, ``td3_halfcheetah`` | HalfCheetah-v5 | 100k | reported |

Settings: the ``PRESETS`` of each algorithm module (``cartpole`` from rl-baselines3-zoo,
``pendulum``, and the published MuJoCo settings), with learning-rate annealing stretched over the
arm's budget. ``--budget-scale`` shrinks every budget to fit a machine; the summary says which
scale ran. Results: one CSV row per (arm, seed) and a Markdown summary with the median, the mean and
a 95% bootstrap CI over seeds (scipy).

    python -m bench.bench_learn_pg --out runs/bench/learn_pg.csv [--arms ppo_cartpole,sac_pendulum]
        [--seeds 5] [--budget-scale 1.0] [--jobs 1]
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

from algorithms.algos import a2c, ddpg, ppo, sac, td3
from algorithms.envs.config import EnvConfig
from algorithms.rundir import read_run
from algorithms.train import RunnerConfig, SamplerConfig, TrainConfig, train

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")
MASKED = EnvConfig(id="CartPole-v1", kind="gym", mask_velocity=True)
PENDULUM = EnvConfig(id="Pendulum-v1", kind="gym")
HALFCHEETAH = EnvConfig(id="HalfCheetah-v5", kind="gym")


@dataclass(frozen=True)
class Arm:
    algo: str
    env: EnvConfig
    budget_steps: int
    # What the median seed's final return must satisfy: ">= x", "> x", "reported", or
    # "above <arm>": above the upper end of that arm's 95% CI.
    pass_mark: str
    make_config: Callable[[int], Any]
    batch_T: int
    batch_B: int
    eval_episodes: int = 10


def _ppo_cartpole(budget: int) -> ppo.Config:
    return ppo.Config.preset("cartpole", anneal_env_steps=budget)


def _a2c_cartpole(budget: int) -> a2c.Config:
    return a2c.Config.preset("cartpole", anneal_env_steps=budget)


def _ppo_masked(budget: int) -> ppo.Config:
    return ppo.Config.preset("cartpole", anneal_env_steps=budget)


def _rppo_masked(budget: int) -> ppo.Config:
    # rl-baselines3-zoo's RecurrentPPO CartPoleNoVel-v1 (hyperparams/ppo_lstm.yml): the PPO CartPole
    # settings with a 64-unit LSTM on a 64-unit layer; minibatches of 2 whole env columns of 32 steps.
    return ppo.Config.preset(
        "cartpole",
        anneal_env_steps=budget,
        recurrent=True,
        lstm_size=64,
        hidden_sizes=(64,),
        minibatch_size_steps=64,
    )


def _warmup(budget: int, steps: int) -> dict[str, int]:
    n = max(min(steps, budget // 10), 256)
    return {"random_steps": n, "learning_starts_steps": n}


ARMS: dict[str, Arm] = {
    "ppo_cartpole": Arm("ppo", CARTPOLE, 100_000, ">= 475", _ppo_cartpole, 32, 8),
    "a2c_cartpole": Arm("a2c", CARTPOLE, 100_000, ">= 475", _a2c_cartpole, 5, 8),
    "ppo_masked": Arm("ppo", MASKED, 100_000, "reported", _ppo_masked, 32, 8),
    "rppo_masked": Arm("ppo", MASKED, 100_000, "above ppo_masked", _rppo_masked, 32, 8),
    "sac_pendulum": Arm(
        "sac", PENDULUM, 20_000, ">= -200", lambda b: sac.Config.preset("pendulum", **_warmup(b, 1_000)), 1, 1
    ),
    "td3_pendulum": Arm(
        "td3", PENDULUM, 20_000, ">= -200", lambda b: td3.Config.preset("pendulum", **_warmup(b, 1_000)), 1, 1
    ),
    "ddpg_pendulum": Arm(
        "ddpg",
        PENDULUM,
        20_000,
        ">= -200",
        lambda b: ddpg.Config.preset("pendulum", **_warmup(b, 1_000)),
        1,
        1,
    ),
    "sac_halfcheetah": Arm(
        "sac", HALFCHEETAH, 100_000, "reported", lambda b: sac.Config(**_warmup(b, 10_000)), 1, 1, 5
    ),
    "td3_halfcheetah": Arm(
        "td3", HALFCHEETAH, 100_000, "reported", lambda b: td3.Config(**_warmup(b, 10_000)), 1, 1, 5
    ),
}


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
    returns = data.progress.return_mean.dropna()
    return {
        "arm": arm_name,
        "algo": arm.algo,
        "env": arm.env.id + ("-masked" if arm.env.mask_velocity else ""),
        "seed": seed,
        "budget_steps": budget,
        "final_eval_return": float(final["return"].mean()),
        "eval_episodes": len(final),
        "last_train_return_mean": float(returns.iloc[-1]) if len(returns) else np.nan,
        "updates": counters.updates,
        "steps_per_second": counters.steps_per_second,
        "wall_s": wall,
        "run_dir": str(run_dir),
    }


def bootstrap_ci(values: list[float]) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean over seeds (scipy); NaN with fewer than 2 distinct values."""
    if len(set(values)) == 1:
        return values[0], values[0]
    if len(values) < 2:
        return np.nan, np.nan
    from scipy.stats import bootstrap

    res = bootstrap(
        (np.asarray(values),), np.mean, confidence_level=0.95, method="percentile", random_state=0
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def verdict(mark: str, median: float, cis: dict[str, tuple[float, float]]) -> str:
    if mark == "reported":
        return "-"
    op, reference = mark.split()
    if op == "above":
        if reference not in cis:
            return f"({reference} not run)"
        return "yes" if median > cis[reference][1] else "no"
    ok = median >= float(reference) if op == ">=" else median > float(reference)
    return "yes" if ok else "no"


def summarize(rows: list[dict[str, Any]], budget_scale: float) -> str:
    lines = [
        f"# Policy-gradient learning checks (budget scale {budget_scale:g})",
        "",
        "| arm | env | budget (steps) | seeds | median final return | mean [95% bootstrap CI] | pass mark "
        "| pass | mean wall (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    stats = {}
    for arm_name in ARMS:
        finals = [r["final_eval_return"] for r in rows if r["arm"] == arm_name]
        if finals:
            stats[arm_name] = (statistics.median(finals), bootstrap_ci(finals), finals)
    cis = {name: s[1] for name, s in stats.items()}
    for arm_name, (median, (low, high), finals) in stats.items():
        mine = [r for r in rows if r["arm"] == arm_name]
        mark = ARMS[arm_name].pass_mark
        lines.append(
            f"| {arm_name} | {mine[0]['env']} | {mine[0]['budget_steps']} | {len(mine)} | {median:.1f} | "
            f"{np.mean(finals):.1f} [{low:.1f}, {high:.1f}] | {mark} | {verdict(mark, median, cis)} | "
            f"{np.mean([r['wall_s'] for r in mine]):.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV, one row per (arm, seed)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--budget-scale", type=float, default=1.0, help="fraction of each arm's env-step budget"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one torch thread each)")
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm {unknown[0]!r}; known: {', '.join(ARMS)}")
    if not 0 < args.budget_scale <= 1.0 or args.seeds < 1 or args.jobs < 1:
        parser.error("--budget-scale must be in (0, 1], --seeds and --jobs >= 1")
    root = args.out.parent / (args.out.stem + "_runs")
    jobs = [(arm, seed) for arm in arms for seed in range(args.seeds)]
    for arm, seed in jobs:
        if (root / arm / f"seed{seed}").exists():
            parser.error(f"{root / arm / f'seed{seed}'} exists; remove it or choose another --out")
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, arm, seed, args.budget_scale, root) for arm, seed in jobs]
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
