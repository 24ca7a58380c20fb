"""Random kills over a real plan (docs/results/run_integrity.md): the scheduler and its jobs are killed at
random moments, the scheduler command is rerun at once after each of its deaths, and at the end
every run's rows are checked against its config, and the machine's processes and ``/dev/shm``
entries are counted before and after.

    .venv/bin/python -m bench.run_integrity_demo --kills 20 [--plan dqn_family_minatar --profile smoke
        --seeds 1 --games minatar_breakout,minatar_asterix --jobs 2 --seed 0]

A kill is, at random (``--seed``), once the scheduler has jobs running: SIGKILL or SIGTERM to the
scheduler (``python -m repro run``), or SIGKILL to one of its running jobs. The scheduler retries
a killed job (``--retries`` is set high, so the kills do not exhaust it) and resumes killed plans
from their checkpoints. Checked per run: status complete, ``read_run`` finds nothing damaged,
progress rows at exactly every log boundary up to the budget, once each, and the final evaluation
once. Exits 1 when a check fails.
This is a demonstration of minutes, not a test; its measured outcome is in
``docs/results/run_integrity.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from algorithms.rundir import find_runs, read_run

REPO = Path(__file__).resolve().parents[1]


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process on the machine."""
    out = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(proc.name)] = (int(fields[1]), cmdline)
    return out


def jobs_of(scheduler: int) -> list[int]:
    return [pid for pid, (ppid, cmd) in processes().items() if ppid == scheduler and "run-job" in cmd]


def ours(experiment: Path) -> list[int]:
    """Schedulers (``--exp <name>``) and jobs (``--run-dir`` in it) of this demo's experiment,
    whoever their parent is (orphans included)."""
    marks = (f"--exp {experiment.name}", str(experiment))
    return [
        pid
        for pid, (_, cmd) in processes().items()
        if "-m repro run" in cmd and any(mark in cmd for mark in marks)
    ]


def shm_entries() -> int:
    try:
        return len(os.listdir("/dev/shm"))
    except OSError:
        return -1


def check_run(path: Path) -> str | None:
    """Why the run's tables are wrong, or ``None``."""
    data = read_run(path)
    if data.status != "complete":
        return f"status {data.status}: {'; '.join(data.problems)}"
    runner = data.config["runner"]
    n_steps, every = runner["n_steps"], runner["log_interval_steps"]
    steps = data.progress["env_steps"].astype(int).tolist()
    batch = data.config["sampler"]["batch_T"] * data.config["sampler"]["batch_B"]
    # A boundary is logged at the first sampler batch that reaches it (RunnerConfig's docstring).
    expected = sorted({-(-b // batch) * batch for b in range(every, n_steps + 1, every)} | {n_steps})
    if steps != expected:
        return f"progress env_steps {steps}, expected {expected}"
    evals = data.eval["env_steps"].astype(int).tolist()
    if set(evals) != {n_steps} or data.eval["episode"].duplicated().any():
        episodes = data.eval["episode"].tolist()
        return f"eval env_steps {evals} (episodes {episodes}), expected one evaluation at {n_steps}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--plan", default="dqn_family_minatar")
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--games", default="")
    parser.add_argument("--jobs", default="2")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    parser.add_argument("--gap-s", type=float, nargs=2, default=(2.0, 9.0), help="seconds between kills")
    parser.add_argument("--root", default="runs")
    parser.add_argument("--exp", default="integrity-demo")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    experiment = Path(args.root) / args.exp
    if experiment.exists():
        parser.error(f"{experiment} exists; remove it or pass another --exp")
    command = [sys.executable, "-m", "repro", "run", args.plan, "--seeds", args.seeds,
               "--profile", args.profile, "--games", args.games, "--jobs", args.jobs, "--root", args.root,
               "--exp", args.exp, "--retries", "100", "--no-estimate", "--no-progress"]  # fmt: skip
    before_procs, before_shm = len(processes()), shm_entries()
    before_ours = len(ours(experiment))
    print(
        f"before: {before_procs} processes ({before_ours} of this experiment), {before_shm} /dev/shm entries"
    )
    print("command:", " ".join(command[1:]), flush=True)
    start = time.monotonic()
    experiment.parent.mkdir(parents=True, exist_ok=True)
    # Every scheduler's stderr, for the traceback check at the end (a pipe could fill and block it).
    scheduler_log = experiment.parent / f"{args.exp}.scheduler.log"
    log = open(scheduler_log, "ab")

    def start_scheduler() -> subprocess.Popen:
        return subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)

    kills: list[str] = []
    scheduler = start_scheduler()
    restarts = 0
    while True:
        if len(kills) < args.kills:
            deadline = time.monotonic() + rng.uniform(*args.gap_s)
            while time.monotonic() < deadline and scheduler.poll() is None:
                time.sleep(0.05)
        else:
            scheduler.wait()
        if scheduler.poll() is not None:
            if scheduler.returncode == 0:
                if len(kills) >= args.kills:
                    break
                print(f"plan finished after {len(kills)} kills: cannot place more", flush=True)
                break
            print(f"scheduler ended with exit code {scheduler.returncode}; rerunning", flush=True)
            scheduler = start_scheduler()
            restarts += 1
            continue
        # Kill while jobs run, so that every scheduler death leaves jobs behind it that must stop.
        wait_until = time.monotonic() + 60
        running = jobs_of(scheduler.pid)
        while not running and scheduler.poll() is None and time.monotonic() < wait_until:
            time.sleep(0.05)
            running = jobs_of(scheduler.pid)
        if scheduler.poll() is not None:
            continue
        target = (
            rng.choice(["scheduler-kill", "scheduler-term", "job", "job"]) if running else "scheduler-kill"
        )
        t = time.monotonic() - start
        if target == "job":
            pid = rng.choice(running)
            os.kill(pid, signal.SIGKILL)
            kills.append(f"{t:6.1f} s  SIGKILL job pid {pid}")
        else:
            sig = signal.SIGKILL if target == "scheduler-kill" else signal.SIGTERM
            scheduler.send_signal(sig)
            scheduler.wait()
            kills.append(f"{t:6.1f} s  {sig.name} scheduler pid {scheduler.pid} with {len(running)} job(s)")
            # The same command at once, as a user would: the old jobs may still be stopping.
            scheduler = start_scheduler()
            restarts += 1
        print(kills[-1], flush=True)
    log.close()
    wall = time.monotonic() - start
    time.sleep(3)  # let the last job processes be reaped
    after_procs, after_shm = len(processes()), shm_entries()
    leftover = ours(experiment)
    runs = find_runs(experiment)
    bad = {str(path.relative_to(experiment)): why for path in runs if (why := check_run(path))}
    rows = sum(len(read_run(path).progress) + len(read_run(path).eval) for path in runs)
    tracebacks = scheduler_log.read_text(errors="replace").count("Traceback")
    summary = {
        "kills": len(kills),
        "scheduler_starts": restarts + 1,
        "wall_s": round(wall),
        "runs": len(runs),
        "runs_bad": bad,
        "table_rows_checked": rows,
        "scheduler_tracebacks": tracebacks,
        "processes_before": before_procs,
        "processes_after": after_procs,
        "dev_shm_before": before_shm,
        "dev_shm_after": after_shm,
        "experiment_processes_before": before_ours,
        "experiment_processes_left": leftover,
    }
    print(json.dumps(summary, indent=2), flush=True)
    return 1 if bad or leftover or tracebacks or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
