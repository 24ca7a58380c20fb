"""One update of two source trees side by side: CPU ms per update, alternated segment by segment.

A refactor that must not slow the update (docs/results/one_home_one_loop.md) is checked here: one child
process per tree (the tree first on ``sys.path``) builds the setting's job on ``--env`` (MinAtar
Breakout by default), trains until its learner is warm, then on each request runs ``--updates`` updates
and answers their CPU time per update (``time.process_time``, one torch thread). A replay learner's
update is one ``learn(1)``; an algorithm without ``learn`` (PPO, SAC) is timed per ``optimize`` call on
one held sampler batch instead: PPO's is its epochs of minibatch steps, SAC's (T = 1) one replay
append and one update. The parent asks the two in turn, ABBA (old, new, new,
old, ...), so a drift in the machine's load hits both alike, and prints each tree's median and the median
of the per-round ratios new / old. Both trees' learners start from the same seed; ``--calls`` also counts
Python function calls per update (cProfile), which does not depend on the load.

    python -m bench.bench_update_ab --old ../old-checkout --new . --setting dqn_minatar --updates 300
    python -m bench.bench_update_ab --old ../old-checkout --new . --setting sac_pendulum --env Pendulum-v1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def child(tree: str, setting: str, env: str, updates: int, calls: bool) -> None:
    sys.path.insert(0, tree)
    import torch

    from algorithms.runners.sync import SyncRunner
    from repro.plans import resolve_job_setting
    from repro.profiles import load_profile
    from repro.settings import train_config

    torch.set_num_threads(1)
    resolved, classes = resolve_job_setting(setting, load_profile("paper"), env=env, seed=0)
    runner = SyncRunner.build(train_config(resolved, classes), None, None)
    runner.sampler.initialize()
    algo, counters = runner.algo, runner.counters
    if hasattr(algo, "learn"):
        learn = algo.learn
        while algo.updates == 0:
            runner.iteration(counters.sampler_itrs)
    else:
        while True:  # until the batch's optimize call trains (SAC: the replay is warm)
            runner.agent.set_mode("sample", counters.env_steps)
            samples, _ = runner.sampler.sample(counters.sampler_itrs)
            runner.agent.set_mode("train", counters.env_steps)  # the old tree reads the count here
            if algo.optimize(counters.env_steps, samples).updates:
                break
            counters.add_env_steps(runner.sampler.batch_spec.size)

        def learn(n: int) -> None:
            for _ in range(n):
                algo.optimize(counters.env_steps, samples)

    learn(3)
    ready = {"parameters": sum(p.numel() for p in runner.agent.model.parameters())}
    if calls:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.enable()
        learn(updates)
        profile.disable()
        ready["calls_per_update"] = pstats.Stats(profile).total_calls / updates
    print(json.dumps(ready), flush=True)
    for _ in sys.stdin:
        start = time.process_time()
        learn(updates)
        print((time.process_time() - start) / updates * 1e3, flush=True)
    runner.sampler.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the first source tree (a checkout's root)")
    parser.add_argument("--new", required=True, help="the second source tree")
    parser.add_argument("--setting", default="r2d1_minatar_corrected")
    parser.add_argument("--env", default="minatar_breakout", help="the env the setting runs on")
    parser.add_argument("--updates", type=int, default=10, help="updates per timed segment")
    parser.add_argument("--rounds", type=int, default=8, help="segments per tree")
    parser.add_argument("--calls", action="store_true", help="also count Python calls per update")
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.setting, args.env, args.updates, args.calls)
        return 0
    trees = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    for name, tree in trees.items():
        if not (tree / "algorithms" / "runners" / "sync.py").is_file():
            parser.error(
                f"--{name} {tree}: not a source tree of this project (no algorithms/runners/sync.py)"
            )
    procs = {}
    for name, tree in trees.items():
        # This file run as a script (the old tree may not have it), the tree's own code on the path.
        command = [sys.executable, str(Path(__file__).resolve()), "--old", ".", "--new", ".", "--child",
                   str(tree), "--setting", args.setting, "--env", args.env,
                   "--updates", str(args.updates)]  # fmt: skip
        command += ["--calls"] if args.calls else []
        env = {**os.environ, "PYTHONPATH": str(tree)}
        procs[name] = subprocess.Popen(
            command, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    try:
        for name, proc in procs.items():
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"error: the {name} tree's learner did not start (its traceback is above)")
            print(name, trees[name], json.dumps(json.loads(line)))
        times: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
                procs[name].stdin.write("go\n")
                procs[name].stdin.flush()
                times[name].append(float(procs[name].stdout.readline()))
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    ratios = [new / old for new, old in zip(times["new"], times["old"])]
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.3f} CPU ms per update; segments",
              " ".join(f"{v:.2f}" for v in values))  # fmt: skip
    print(
        f"new / old: median {statistics.median(ratios):.3f} of rounds", " ".join(f"{r:.3f}" for r in ratios)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
