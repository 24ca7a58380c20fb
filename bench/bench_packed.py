"""Packed runs against single-seed processes: member env steps per second of K seeds of
one setting trained as

* ``single``: K single-seed processes, at most ``--slots`` at a time (one torch thread each): what
  ``python -m repro run`` does without ``--pack``;
* ``packed``: one process training the K members packed (``algorithms.packed``), with ``--slots``
  torch threads, so that it may use the same cores;
* ``packed_split``: the K members in ``--slots`` packed processes side by side (one thread each).

Every variant's rate is ``K * n_steps / wall time`` from launching its first process to the end of
its last: process start-up, env and model building and evaluation-free training, as a plan pays
them. The variants run in turn within each repeat (order rotating between repeats); the summary
gives the medians over repeats and each variant's ratio to ``single`` with its 95% bootstrap CI.

Settings are the repository's (``repro/configs/settings``) with only the budget changed: ``--steps``
env steps per member, learning from ``--learning-starts`` on (so that most of the timed steps
update), no evaluation and one progress row at the end. Run as ``make bench-packed``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.outputs import check_outputs, write_rows, write_summary
from bench.speed import paired_ratios, ratio_with_ci

VARIANTS = ("single", "packed", "packed_split")
SETTINGS = {
    # (setting, env steps per member, learning start): about a minute per member alone on this CPU.
    "dqn_minatar": (6_000, 1_000),
    "r2d1_minatar_corrected": (40_000, 5_000),
    "sac_pendulum": (10_000, 1_000),  # small MLPs: where per-operation overhead is largest
}


def configs(setting: str, seeds: list[int], steps: int, learning_starts: int, threads: int) -> list[Any]:
    """The ``TrainConfig`` of each seed: the setting with the bench's budget (module docstring)."""
    import dataclasses

    from algorithms.run_config import TrainConfig
    from repro.settings import load_setting, setting_configs

    built = setting_configs(
        setting,
        {
            "runner.n_steps": steps,
            "runner.log_interval_steps": steps,
            "runner.torch_threads": threads,
            "sampler.eval_episodes": 0,
            "algo.learning_starts_steps": learning_starts,
        },
    )
    algo = load_setting(setting).algo
    config = TrainConfig(algo, built["algo"], built["env"], built["sampler"], built["runner"])
    return [dataclasses.replace(config, runner=dataclasses.replace(config.runner, seed=s)) for s in seeds]


def worker(args: argparse.Namespace) -> None:
    """One process of a variant: train ``--seeds`` of ``--setting`` alone or packed into ``--root``."""
    from algorithms.packed.pack import train_packed
    from algorithms.train import train

    seeds = [int(s) for s in args.seeds.split(",")]
    steps, starts = SETTINGS[args.setting]
    members = configs(args.setting, seeds, args.steps or steps, starts, args.threads)
    dirs = [Path(args.root) / f"seed{s}" for s in seeds]
    if args.packed:
        train_packed(members, dirs, resume=False)
    else:
        train(members[0], dirs[0], resume=False)


def launch(
    setting: str, seeds: list[int], packed: bool, threads: int, root: Path, steps: int
) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    argv = [sys.executable, "-m", "bench.bench_packed", "worker", "--setting", setting, "--root", str(root)]
    argv += ["--seeds", ",".join(map(str, seeds)), "--threads", str(threads), "--steps", str(steps)]
    return subprocess.Popen([*argv, *(["--packed"] if packed else [])], env=env)


def run_variant(variant: str, setting: str, members: int, slots: int, steps: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of its processes) of ``variant`` training ``members`` seeds."""
    seeds = list(range(members))
    if variant == "single":
        groups, packed, threads, at_once = [[s] for s in seeds], False, 1, slots
    elif variant == "packed":
        groups, packed, threads, at_once = [seeds], True, slots, 1
    else:
        groups, packed, threads, at_once = [seeds[i::slots] for i in range(slots)], True, 1, slots
    with tempfile.TemporaryDirectory(prefix="bench_packed_") as root:
        start, cpu_start = time.perf_counter(), children_cpu_seconds()
        waiting, running = list(groups), []
        while waiting or running:
            while waiting and len(running) < at_once:
                running.append(launch(setting, waiting.pop(0), packed, threads, Path(root), steps))
            time.sleep(0.05)
            for proc in [p for p in running if p.poll() is not None]:
                if proc.returncode != 0:
                    raise RuntimeError(f"{variant} {setting}: a worker exited with {proc.returncode}")
                running.remove(proc)
        return time.perf_counter() - start, children_cpu_seconds() - cpu_start


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    work = sub.add_parser("worker")
    work.add_argument("--setting", required=True, choices=sorted(SETTINGS))
    work.add_argument("--seeds", required=True)
    work.add_argument("--root", required=True)
    work.add_argument("--threads", type=int, default=1)
    work.add_argument("--steps", type=int, default=0)
    work.add_argument("--packed", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/packed.csv"))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every setting's --steps")
    args = parser.parse_args()
    if args.command == "worker":
        worker(args)
        return
    check_outputs(args.out)
    settings = [s for s in args.settings.split(",") if s]
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"--settings: unknown {unknown[0]!r}; known: {sorted(SETTINGS)}")
    rows = []
    for setting in settings:
        steps = max(int(SETTINGS[setting][0] * args.scale), SETTINGS[setting][1] + 1)
        for repeat in range(args.repeats):
            order = VARIANTS[repeat % 3 :] + VARIANTS[: repeat % 3]
            for variant in order:
                wall, cpu = run_variant(variant, setting, args.members, args.slots, steps)
                rate = args.members * steps / wall
                rows.append(
                    {"setting": setting, "variant": variant, "repeat": repeat, "steps": steps, "wall_s": wall}
                    | {
                        "cpu_s": cpu,
                        "steps_per_second": rate,
                        "steps_per_cpu_second": args.members * steps / cpu,
                    }
                )
                print(
                    f"{setting} {variant} repeat {repeat}: {wall:.1f} s, {rate:.1f} member steps/s",
                    flush=True,
                )
                write_rows(args.out, rows, list(rows[0]))  # each finished measurement kept at once
    write_summary(args.out, summary(rows, args))


def summary(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    import statistics

    lines = [
        f"# Packed runs: {args.members} members against {args.members} single-seed processes "
        f"on {args.slots} slots",
        "",
        f"Command: `python -m bench.bench_packed --settings {args.settings} --members {args.members} "
        f"--slots {args.slots} --repeats {args.repeats} --scale {args.scale}`",
        "",
        "| setting | steps per member | variant | member steps/s (median) | ratio to single [95% CI] "
        "| per CPU second: ratio to single |",
        "|---|---:|---|---:|---|---|",
    ]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        of = {v: [r for r in rows if r["setting"] == setting and r["variant"] == v] for v in VARIANTS}
        for variant in VARIANTS:
            median = statistics.median(r["steps_per_second"] for r in of[variant])
            wall_ratio, cpu_ratio = (ratio_with_ci(r) for r in paired_ratios(of[variant], of["single"]))
            steps = of[variant][0]["steps"]
            lines.append(f"| {setting} | {steps} | {variant} | {median:.1f} | {wall_ratio} | {cpu_ratio} |")
    lines.append("")
    lines.append("Raw rows: " + json.dumps(str(args.out)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
