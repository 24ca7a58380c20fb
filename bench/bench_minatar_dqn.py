"""DQN on MinAtar: this code base against MinAtar's own reference DQN, same machine, same run.

This code base runs the setting ``dqn_minatar`` (Young & Tian 2019's DQN, loaded by name through
``repro.plans.resolve_job_setting`` with the ``paper`` profile, which changes nothing, and the
game set per run) through its synchronous runner (``SyncRunner.iteration``, the training loop of
``python -m repro``, with no run directory: no progress rows, checkpoints or evaluation). The
reference is MinAtar's ``examples/dqn.py`` (kenjyoung/MinAtar, GPL-3.0), run unmodified from a
scratch copy that is not part of this repository::

    mkdir -p /tmp/minatar_ref
    git --git-dir=<clone of github.com/kenjyoung/MinAtar>/.git show HEAD:examples/dqn.py \\
        > /tmp/minatar_ref/dqn.py

The script has no option to cap its run (``NUM_FRAMES`` is a constant, 5 million) and logs only
every 1,000 episodes, so it is driven by a harness process instead of its command line: a fresh
Python process (``reference_rate``) imports the file as it is, and calls its own ``dqn(env, ...)``
function (what its ``main`` calls for ``-g <game>``, with replay and target network on and its
default step size), handing it ``minatar.Environment(game)`` (the object its ``main`` builds, at the
package's defaults: sticky actions 0.1, difficulty ramping) whose ``act`` also counts calls, reads
the clocks and, after the timed frames, raises an exception that ends the run. Counting adds one
Python call per frame (well under 1 us) to the reference.

What is timed, for both, is ``--steps`` env steps (frames: MinAtar has no frame skip) right after
the replay start, every step one env step, one epsilon-greedy action and one update of a batch of
32 (each side's own replay start: ``REPLAY_START_SIZE`` frames for the reference, which trains
from frame ``REPLAY_START_SIZE + 1``; the setting's ``min_steps_learn`` for this code base, timed
from its first update on). Both run on the CPU with ``--threads`` torch threads (1). Exploration:
the reference anneals epsilon over the ``FIRST_N_FRAMES`` after its replay start, this code base
from step 0 (the setting's ``eps_decay_steps`` keep the reference's end point), so the reference
enters the timed window at epsilon 1.0 and this code base a few hundredths lower (0.957 with the
setting of this writing); both fall by under 0.01 per 1,000 steps. This code base thus acts
greedily, one forward pass on one observation (~0.16 ms on the 2-core dev machine, against ~6 ms
per step), on about 4% more of the timed steps: under 0.2% of its time, and against it.

The two are timed interleaved, the order alternating from repeat to repeat, so drifts of a shared
machine's load hit both alike; the CPU-second figures are the steadier ones on a shared machine,
where wall-clock time also counts the time other jobs hold the cores. Reported: every repeat in
the CSV (env steps per wall-clock second and per CPU second of the process, all its threads), the
medians, the ratio of the medians and the median of the repeats' ratios with its 95% bootstrap CI
in a Markdown summary next to the CSV. Without the scratch copy (``--reference`` absent) only
this code base is timed.

    python -m bench.bench_minatar_dqn --out runs/bench/minatar_dqn.csv [--game breakout]
        [--steps 1000] [--repeats 5] [--reference /tmp/minatar_ref/dqn.py] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from algorithms.envs.minatar import MINATAR_GAMES
from algorithms.runners.sync import SyncRunner
from algorithms.train import TrainConfig
from bench.bench_env import cpu_model
from bench.learning import paired_ratio
from repro.plans import resolve_job_setting
from repro.profiles import load_profile
from repro.settings import train_config

SETTING = "dqn_minatar"
DEFAULT_REFERENCE = Path("/tmp/minatar_ref/dqn.py")
COLUMNS = (
    "impl",
    "game",
    "repeat",
    "env_steps",
    "updates",
    "seconds",
    "cpu_seconds",
    "steps_per_second",
    "steps_per_cpu_second",
)


def clocks() -> np.ndarray:
    """(wall-clock, CPU) time now in seconds; CPU time of this process, all its threads."""
    return np.array([time.perf_counter(), time.process_time()])


def setting_config(game: str, seed: int, setting: str = SETTING) -> TrainConfig:
    """The setting's ``TrainConfig`` for MinAtar game ``game`` (``breakout``) and run seed ``seed``."""
    resolved, classes = resolve_job_setting(setting, load_profile("paper"), env=f"minatar_{game}", seed=seed)
    return train_config(resolved, classes)


def time_ours(config: TrainConfig, steps: int) -> dict[str, float]:
    """``steps`` env steps of the synchronous runner's loop from its first update on (build, the
    replay start and the first update not timed)."""
    runner = SyncRunner.build(config, None, None)
    counters, algo = runner.counters, runner.algo

    def iteration() -> None:
        runner.iteration(counters.sampler_itrs)
        runner.cross_boundaries()

    runner.sampler.initialize()
    try:
        while algo.updates == 0:
            iteration()
        steps0, updates0 = counters.env_steps, algo.updates
        start = clocks()
        while counters.env_steps < steps0 + steps:
            iteration()
        seconds, cpu_seconds = clocks() - start
    finally:
        runner.sampler.shutdown()
    env_steps, updates = counters.env_steps - steps0, algo.updates - updates0
    if updates < env_steps // config.algo_config.train_every_steps:
        raise RuntimeError(f"ours: {updates} updates in {env_steps} timed env steps")
    return {"env_steps": env_steps, "updates": updates, "seconds": seconds, "cpu_seconds": cpu_seconds}


class StopReference(Exception):
    """Raised from the reference's env once the timed frames are done: ends its ``dqn`` loop."""


def reference_rate(dqn_py: str, game: str, steps: int, seed: int, threads: int) -> dict[str, float]:
    """In a fresh process: ``steps`` frames of the unmodified reference script's ``dqn`` from its
    first training frame (see the module docstring)."""
    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    spec = importlib.util.spec_from_file_location("minatar_reference_dqn", dqn_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # The env.act call of frame t is call t + 1; the script trains from frame REPLAY_START_SIZE + 1.
    first_call = module.REPLAY_START_SIZE + 2
    marks: dict[str, np.ndarray] = {}

    class TimedEnvironment(module.Environment):
        calls = 0

        def act(self, a):
            self.calls += 1
            if self.calls == first_call:
                marks["start"] = clocks()
            elif self.calls == first_call + steps:
                marks["stop"] = clocks()
                raise StopReference
            return super().act(a)

    env = TimedEnvironment(game)
    env.seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            module.dqn(env, False, False, os.path.join(tmp, game))
        except StopReference:
            pass
    if "stop" not in marks:
        raise RuntimeError(f"reference: {dqn_py} ended before frame {first_call + steps - 1}")
    seconds, cpu_seconds = marks["stop"] - marks["start"]
    return {"env_steps": steps, "updates": steps, "seconds": seconds, "cpu_seconds": cpu_seconds}


def time_reference(dqn_py: Path, game: str, steps: int, seed: int, threads: int) -> dict[str, float]:
    """``reference_rate`` in a child Python process (its own torch, fresh module state)."""
    call = f"reference_rate({str(dqn_py)!r}, {game!r}, {steps}, {seed}, {threads})"
    code = f"import json; from bench.bench_minatar_dqn import reference_rate; print(json.dumps({call}))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if out.returncode != 0:
        raise RuntimeError(f"reference run failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(
    rows: list[dict], args: argparse.Namespace, config: TrainConfig, loads: tuple[float, float]
) -> str:
    """The Markdown summary: medians per implementation and, with the reference, the ratios."""
    columns = ("steps_per_second", "steps_per_cpu_second")
    impls = [impl for impl in ("ours", "reference") if any(r["impl"] == impl for r in rows)]
    runs = {impl: [r for r in rows if r["impl"] == impl] for impl in impls}  # in repeat order
    medians = {impl: [statistics.median(r[c] for r in runs[impl]) for c in columns] for impl in impls}
    algo = config.algo_config
    lines = [
        f"# DQN on MinAtar {args.game}: training throughput (env steps/s)",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs, torch threads {args.threads}. "
        f"Setting {args.setting}: batch {algo.batch_size}, one update per {algo.train_every_steps} "
        f"env step(s), replay {algo.replay_size_steps}; {args.steps} timed steps after each side's "
        f"replay start, median of {args.repeats}. 1-minute load average {loads[0]:.2f} at the start, "
        f"{loads[1]:.2f} at the end.",
        "",
        "| quantity | per wall-clock second | per CPU second |",
        "|---|---:|---:|",
    ]
    names = {"ours": "this code base (median)", "reference": "MinAtar examples/dqn.py (median)"}
    lines += [f"| {names[impl]} | {medians[impl][0]:.1f} | {medians[impl][1]:.1f} |" for impl in impls]
    if "reference" in runs:
        ratio = [a / b for a, b in zip(medians["ours"], medians["reference"])]
        paired = [
            paired_ratio([r[c] for r in runs["ours"]], [r[c] for r in runs["reference"]]) for c in columns
        ]
        lines += [
            f"| ours / reference (ratio of the medians) | {ratio[0]:.2f} | {ratio[1]:.2f} |",
            f"| ours / reference (median of the repeats' ratios) | {paired[0][0]:.2f} | {paired[1][0]:.2f} |",
            f"| that median's 95% bootstrap CI over the repeats | [{paired[0][1]:.2f}, {paired[0][2]:.2f}] "
            f"| [{paired[1][1]:.2f}, {paired[1][2]:.2f}] |",
        ]
    else:
        lines += [
            "",
            f"Reference not timed: no scratch copy at {args.reference} (see the bench's docstring).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="CSV file, one row per implementation and repeat"
    )
    parser.add_argument("--game", default="breakout", choices=sorted(MINATAR_GAMES.values()))
    parser.add_argument("--steps", type=int, default=1000, help="timed env steps per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both implementations")
    parser.add_argument("--setting", default=SETTING, help="this code base's setting (name or .toml path)")
    parser.add_argument(
        "--reference", type=Path, default=DEFAULT_REFERENCE, help="scratch copy of MinAtar's examples/dqn.py"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 steps, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 200, 1
    if min(args.steps, args.repeats, args.threads) < 1:
        parser.error("--steps, --repeats and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    config = setting_config(args.game, 0, args.setting)
    impls = ["ours", "reference"] if args.reference.is_file() else ["ours"]
    if len(impls) == 1:
        print(f"no reference at {args.reference}: timing this code base only", flush=True)
    loads = [os.getloadavg()[0]]
    rows = []
    for repeat in range(args.repeats):
        for impl in impls if repeat % 2 == 0 else impls[::-1]:
            if impl == "ours":
                result = time_ours(setting_config(args.game, repeat, args.setting), args.steps)
            else:
                result = time_reference(args.reference, args.game, args.steps, repeat, args.threads)
            row = {"impl": impl, "game": args.game, "repeat": repeat, **result}
            row["steps_per_second"] = round(row["env_steps"] / row["seconds"], 2)
            row["steps_per_cpu_second"] = round(row["env_steps"] / row["cpu_seconds"], 2)
            row["seconds"], row["cpu_seconds"] = round(row["seconds"], 4), round(row["cpu_seconds"], 4)
            rows.append(row)
            print(
                f"{impl:>9} repeat {repeat}: {row['steps_per_second']:7.1f} steps/s, "
                f"{row['steps_per_cpu_second']:7.1f} steps/CPU-s",
                flush=True,
            )
    loads.append(os.getloadavg()[0])
    rows.sort(key=lambda r: (r["impl"], r["repeat"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    summary = summarize(rows, args, config, (loads[0], loads[1]))
    args.out.with_suffix(".md").write_text(summary)
    print()
    print(summary)


if __name__ == "__main__":
    main()
