"""Env throughput: ale-py's native Atari vector env against gymnasium single envs in a Python loop.

Both backends run the same protocol (``EnvConfig`` defaults: frameskip 4 with max-pool, 84x84
gray, 4-frame stack, 30 no-op starts) on the same number of envs with uniformly random actions.
Each repeat builds and resets a fresh ``VecEnv`` (not timed), then times ``--steps`` batched steps;
the figure is env steps per second (each step is ``frameskip`` emulator frames) over the batch.
Reported: every repeat in the CSV, the median of the repeats in the printed summary and in a
Markdown summary next to the CSV.

    python -m bench.bench_env --out runs/bench/env.csv [--game pong] [--num-envs 8] [--steps 1000]
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env

BACKENDS = ("native", "gymnasium")


def time_backend(config: EnvConfig, num_envs: int, steps: int, seed: int) -> float:
    """Seconds for ``steps`` batched steps of a freshly built and reset env (build and reset not timed)."""
    with make_vec_env(config, num_envs, seed) as env:
        rng = np.random.default_rng(seed)
        actions = rng.integers(0, env.action_space.n, size=(steps, num_envs))
        env.reset()
        start = time.perf_counter()
        for a in actions:
            env.step(a)
        return time.perf_counter() - start


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo where there is one (Linux), else the platform's guess."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV file, one row per backend and repeat")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000, help="batched steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--num-threads", type=int, default=0, help="native backend threads; 0: ale-py's default"
    )
    args = parser.parse_args()

    rows = []
    for backend in BACKENDS:
        config = EnvConfig(args.game, backend=backend, num_threads=args.num_threads)
        for repeat in range(args.repeats):
            seconds = time_backend(config, args.num_envs, args.steps, seed=repeat)
            env_steps = args.steps * args.num_envs
            rows.append(
                {
                    "backend": backend,
                    "game": args.game,
                    "num_envs": args.num_envs,
                    "repeat": repeat,
                    "env_steps": env_steps,
                    "frames": env_steps * config.frameskip,
                    "seconds": round(seconds, 4),
                    "env_steps_per_s": round(env_steps / seconds, 1),
                }
            )
            print(f"{backend:>9} repeat {repeat}: {env_steps / seconds:10.0f} env steps/s", flush=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    medians = {
        b: statistics.median(r["env_steps_per_s"] for r in rows if r["backend"] == b) for b in BACKENDS
    }
    title = f"{args.game}, {args.num_envs} envs, random actions, median of {args.repeats} repeats"
    lines = [
        f"# Env throughput: {title}",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs "
        "(possibly shared with other jobs: treat the figures as indicative).",
        "",
        "| backend | env steps/s | frames/s |",
        "|---|---:|---:|",
    ]
    frameskip = EnvConfig(args.game).frameskip
    lines += [f"| {b} | {medians[b]:.0f} | {medians[b] * frameskip:.0f} |" for b in BACKENDS]
    lines += ["", f"native / gymnasium: {medians['native'] / medians['gymnasium']:.1f}x"]
    summary = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(summary)
    print()
    print(summary)


if __name__ == "__main__":
    main()
