"""Env throughput: ale-py's native Atari vector env against gymnasium single envs in a Python loop;
MinAtar's envs in this process against the same envs in worker processes.

Section ``atari``: both backends run the same protocol (``EnvConfig`` defaults: frameskip 4 with
max-pool, 84x84 gray, 4-frame stack, 30 no-op starts) on the same number of envs with uniformly
random actions. Each repeat builds and resets a fresh ``VecEnv`` (not timed), then times
``--steps`` batched steps; the figure is env steps per second (each step is ``frameskip`` emulator
frames) over the batch.

Section ``minatar``: for each MinAtar game (Young & Tian 2019's settings: sticky actions 0.1, all 6
actions), ``--minatar-envs`` envs stepped three ways with uniformly random actions: the vector env
``make_vec_env`` builds (in this process) stepped alone (``vec_env``); the serial sampler on it
(``serial``); and the parallel CPU sampler (``SamplerConfig(mode="cpu")``) with the envs split over
``--minatar-workers`` worker processes (``cpu_<n>w``), both samplers acting with
``bench.sampler_parts``' trivial random policy. The three are built once per game and timed
interleaved batch by batch in each repeat (``bench.sampler_parts.time_interleaved``: batches of
``--minatar-batch-t`` steps, one warm-up batch not timed, ``--steps`` batched steps in all), so
drifts of a shared machine's load hit them alike; CPU seconds count this process and the worker
processes, every thread.

Reported: every repeat in the CSV, the median of the repeats in the printed summary and in a
Markdown summary next to the CSV (for MinAtar also the median of each repeat's ratio of the
worker-process sampler to the in-process one).

    python -m bench.bench_env --out runs/bench/env.csv [--sections atari,minatar] [--game pong]
        [--num-envs 8] [--steps 1000] [--repeats 3] [--minatar-games minatar_breakout,minatar_freeway]
        [--minatar-envs 16] [--minatar-workers 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.envs.minatar import MINATAR_GAMES
from algorithms.run_config import SamplerConfig
from algorithms.samplers.modes import make_sampler
from bench.outputs import check_outputs, write_rows, write_summary
from bench.sampler_parts import AgentFactory, raw_batches, time_interleaved
from bench.speed import cpu_model

BACKENDS = ("native", "gymnasium")
SECTIONS = ("atari", "minatar")


def time_backend(config: EnvConfig, num_envs: int, steps: int, seed: int) -> tuple[float, float]:
    """(wall, CPU) seconds for ``steps`` batched steps of a freshly built and reset env (build and
    reset not timed; CPU: this process, every thread, the native env's included)."""
    with make_vec_env(config, num_envs, seed) as env:
        rng = np.random.default_rng(seed)
        actions = rng.integers(0, env.action_space.n, size=(steps, num_envs))
        env.reset()
        start, cpu = time.perf_counter(), time.process_time()
        for a in actions:
            env.step(a)
        return time.perf_counter() - start, time.process_time() - cpu


def minatar_config(env_id: str) -> EnvConfig:
    """Young & Tian 2019's MinAtar protocol: sticky actions 0.1, all 6 actions."""
    return EnvConfig(id=env_id, kind="minatar", repeat_action_probability=0.1, full_action_space=True)


def minatar_modes(workers: int) -> tuple[str, str, str]:
    return ("vec_env", "serial", f"cpu_{workers}w")


def time_minatar(
    env_id: str, num_envs: int, workers: int, batch_t: int, batches: int, repeats: int
) -> list[dict[str, tuple[float, float]]]:
    """Per repeat, (wall, CPU) seconds of ``batches`` batches of ``batch_t`` steps of ``num_envs`` envs
    for each of ``minatar_modes``, timed interleaved batch by batch after one warm-up batch. The
    envs and worker processes are built once for all the repeats (starting workers on a loaded
    2-core machine takes minutes); each repeat draws its own actions."""
    config = minatar_config(env_id)
    factory = AgentFactory("random", config)
    samplers = []
    vec_env = make_vec_env(config, num_envs, 0)
    try:
        for mode, n_workers in (("serial", 1), ("cpu", workers)):
            agent = factory()
            sampler_config = SamplerConfig(mode=mode, batch_T=batch_t, batch_B=num_envs, n_workers=n_workers)
            samplers.append(make_sampler(mode, config, agent, sampler_config, 0, agent_factory=factory))
            samplers[-1].initialize()
            agent.set_mode("sample", 0)
        vec_env.reset()
        runs = [raw_batches(vec_env), *(lambda _, s=s: s.sample(0) for s in samplers)]
        pids = [[], *(s.worker_pids for s in samplers)]
        timed = []
        for repeat in range(repeats):
            shape = (batches + 1, batch_t, num_envs)
            actions = np.random.default_rng(repeat).integers(0, vec_env.action_space.n, size=shape)
            times, cpus = time_interleaved(runs, pids, actions)
            timed.append(dict(zip(minatar_modes(workers), zip(times.tolist(), cpus.tolist()))))
        return timed
    finally:
        for sampler in samplers:
            sampler.shutdown()
        vec_env.close()


def row(
    backend: str,
    game: str,
    num_envs: int,
    repeat: int,
    env_steps: int,
    frameskip: int,
    seconds: float,
    cpu: float,
):
    return {
        "backend": backend,
        "game": game,
        "num_envs": num_envs,
        "repeat": repeat,
        "env_steps": env_steps,
        "frames": env_steps * frameskip,
        "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu, 4),
        "env_steps_per_s": round(env_steps / seconds, 1),
        "env_steps_per_cpu_s": round(env_steps / cpu, 1),
    }


def atari_rows(args: argparse.Namespace) -> list[dict]:
    rows = []
    for backend in BACKENDS:
        config = EnvConfig(args.game, backend=backend, num_threads=args.num_threads)
        for repeat in range(args.repeats):
            seconds, cpu = time_backend(config, args.num_envs, args.steps, seed=repeat)
            env_steps = args.steps * args.num_envs
            rows.append(
                row(backend, args.game, args.num_envs, repeat, env_steps, config.frameskip, seconds, cpu)
            )
            print(f"{backend:>9} repeat {repeat}: {env_steps / seconds:10.0f} env steps/s", flush=True)
    return rows


def minatar_rows(args: argparse.Namespace) -> list[dict]:
    rows = []
    batches = max(1, args.steps // args.minatar_batch_t)
    env_steps = batches * args.minatar_batch_t * args.minatar_envs
    for env_id in args.minatar_games:
        per_repeat = time_minatar(
            env_id, args.minatar_envs, args.minatar_workers, args.minatar_batch_t, batches, args.repeats
        )
        for repeat, timed in enumerate(per_repeat):
            for mode, (seconds, cpu) in timed.items():
                rows.append(row(mode, env_id, args.minatar_envs, repeat, env_steps, 1, seconds, cpu))
            rates = "  ".join(f"{mode} {env_steps / s:8.0f}" for mode, (s, _) in timed.items())
            print(f"{env_id:>22} repeat {repeat}: env steps/s {rates}", flush=True)
    return rows


def atari_summary(rows: list[dict], args: argparse.Namespace) -> list[str]:
    medians = {
        b: statistics.median(r["env_steps_per_s"] for r in rows if r["backend"] == b) for b in BACKENDS
    }
    frameskip = EnvConfig(args.game).frameskip
    lines = [
        f"## Atari: {args.game}, {args.num_envs} envs, random actions, median of {args.repeats} repeats",
        "",
        "| backend | env steps/s | frames/s |",
        "|---|---:|---:|",
    ]
    lines += [f"| {b} | {medians[b]:.0f} | {medians[b] * frameskip:.0f} |" for b in BACKENDS]
    lines += ["", f"native / gymnasium: {medians['native'] / medians['gymnasium']:.1f}x"]
    return lines


def minatar_summary(rows: list[dict], args: argparse.Namespace) -> list[str]:
    vec_env, serial, workers = minatar_modes(args.minatar_workers)
    lines = [
        f"## MinAtar: {args.minatar_envs} envs in this process or over {args.minatar_workers} worker "
        f"processes, random actions, batches of {args.minatar_batch_t} steps, "
        f"median of {args.repeats} repeats",
        "",
        f"env steps/s (per CPU second in parentheses); `{vec_env}`: make_vec_env alone; `{serial}`: "
        f"the serial sampler; `{workers}`: the parallel CPU sampler over {args.minatar_workers} worker "
        "processes; ratios: median of the repeats' ratios.",
        "",
        f"| game | {vec_env} | {serial} | {workers} | {workers} / {serial} | {workers} / {vec_env} |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for env_id in args.minatar_games:
        runs = {
            mode: sorted(
                (r for r in rows if r["game"] == env_id and r["backend"] == mode), key=lambda r: r["repeat"]
            )
            for mode in (vec_env, serial, workers)
        }
        cells = []
        for mode in (vec_env, serial, workers):
            rate = statistics.median(r["env_steps_per_s"] for r in runs[mode])
            per_cpu = statistics.median(r["env_steps_per_cpu_s"] for r in runs[mode])
            cells.append(f"{rate:.0f} ({per_cpu:.0f})")
        for reference in (serial, vec_env):
            pairs = zip(runs[workers], runs[reference], strict=True)
            cells.append(
                f"{statistics.median(a['env_steps_per_s'] / b['env_steps_per_s'] for a, b in pairs):.2f}"
            )
        lines.append(f"| {env_id} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV file, one row per backend and repeat")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {SECTIONS}")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000, help="batched steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--num-threads", type=int, default=0, help="native backend threads; 0: ale-py's default"
    )
    parser.add_argument("--minatar-games", default=",".join(MINATAR_GAMES), help="comma-separated env ids")
    parser.add_argument("--minatar-envs", type=int, default=16)
    parser.add_argument("--minatar-workers", type=int, default=2, help="worker processes of the cpu sampler")
    parser.add_argument("--minatar-batch-t", type=int, default=10, help="steps per sampler batch")
    args = parser.parse_args()
    check_outputs(args.out)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    args.minatar_games = [g.strip() for g in args.minatar_games.split(",") if g.strip()]
    if not sections or not set(sections) <= set(SECTIONS):
        parser.error(f"--sections: a comma-separated subset of {SECTIONS}, got {args.sections!r}")
    if not set(args.minatar_games) <= set(MINATAR_GAMES):
        parser.error(f"--minatar-games: ids of {sorted(MINATAR_GAMES)}, got {args.minatar_games}")
    if min(args.steps, args.repeats, args.num_envs, args.minatar_envs, args.minatar_batch_t) < 1:
        parser.error("--steps, --repeats, --num-envs, --minatar-envs and --minatar-batch-t must be >= 1")
    if not 1 <= args.minatar_workers <= args.minatar_envs:
        parser.error("--minatar-workers must be between 1 and --minatar-envs")

    rows = []
    lines = [
        "# Env throughput",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs "
        "(possibly shared with other jobs: treat the figures as indicative).",
    ]
    if "atari" in sections:
        atari = atari_rows(args)
        rows += atari
        lines += ["", *atari_summary(atari, args)]
    if "minatar" in sections:
        minatar = minatar_rows(args)
        rows += minatar
        lines += ["", *minatar_summary(minatar, args)]

    print()
    write_rows(args.out, rows, list(rows[0]))
    write_summary(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
