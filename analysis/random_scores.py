"""Measure the random-play score of each gymnasium env of ``analysis/data/gym_reference_scores.csv``
and write it into the table's ``random`` columns (the reference columns are left as they are)::

    python -m analysis.random_scores                      # every env of the table, 100 episodes each
    python -m analysis.random_scores --envs CartPole-v1 --episodes 20 --out /tmp/t.csv

Random play: actions drawn uniformly from the env's action space (``action_space.sample()``, seeded
with the episode's seed), episode ``k`` reset with seed ``seed + k``, gymnasium's own time limit of
the registered env (CartPole-v1 500 steps, Acrobot-v1 and MountainCar-v0 200 ... HalfCheetah 1,000),
the return undiscounted and unclipped, as an evaluation episode of ``algorithms.train`` counts it.
The score is the mean return over the episodes; its standard deviation is kept beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.configs import ConfigError
from algorithms.rundir import NotARegularFile, atomic_write_bytes, check_output
from analysis.scores import GYM_REFERENCE_COLUMNS, GYM_REFERENCE_PATH
from protocol.limits import MAX_EPISODES, MAX_EPISODES_WHY, Limit, check_limit

EPISODES_LIMIT = Limit(
    "--episodes", MAX_EPISODES, MAX_EPISODES_WHY,
    lambda n: f"{n:,} episodes of every env are played before the table is written",
)  # fmt: skip


def random_returns(env_id: str, episodes: int, seed: int = 0) -> np.ndarray:
    """The undiscounted return of ``episodes`` episodes of uniform random play on ``env_id``."""
    import gymnasium

    env = gymnasium.make(env_id)
    returns = []
    try:
        for k in range(episodes):
            env.reset(seed=seed + k)
            env.action_space.seed(seed + k)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return np.array(returns)


def command(args: argparse.Namespace) -> str:
    parts = ["python -m analysis.random_scores", f"--episodes {args.episodes}", f"--seed {args.seed}"]
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.random_scores", description=__doc__)
    parser.add_argument("--table", type=Path, default=GYM_REFERENCE_PATH, help="the table to read")
    parser.add_argument("--out", type=Path, default=None, help="where to write it (default: --table)")
    parser.add_argument("--envs", default=None, help="comma-separated env ids (default: every row)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or args.table
    try:
        check_limit(EPISODES_LIMIT, args.episodes)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        check_output(out)
    except NotARegularFile as e:
        print(f"error: --out: {e}", file=sys.stderr)
        return 2
    table = pd.read_csv(args.table)
    envs = args.envs.split(",") if args.envs else list(table.env)
    unknown = sorted(set(envs) - set(table.env))
    if unknown:
        print(f"error: --envs: {unknown} not in {args.table}", file=sys.stderr)
        return 2
    import gymnasium

    table = table.astype({c: object for c in ("random_episodes", "random_source")})
    for env_id in envs:
        returns = random_returns(env_id, args.episodes, args.seed)
        row = table.env == env_id
        table.loc[row, "random"] = round(float(returns.mean()), 3)
        table.loc[row, "random_std"] = round(float(returns.std()), 3)
        table.loc[row, "random_episodes"] = args.episodes
        table.loc[row, "random_source"] = f"measured: {command(args)} (gymnasium {gymnasium.__version__})"
        print(f"{env_id}: {returns.mean():.3f} +- {returns.std():.3f} over {args.episodes} episodes")
    atomic_write_bytes(out, table[list(GYM_REFERENCE_COLUMNS)].to_csv(index=False).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
