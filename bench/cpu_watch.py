"""CPU time of the jobs running in an experiment, sampled from outside: env steps per CPU second of
each run, from the runs themselves, whatever else shares the machine.

Why: a job's wall-clock steps per second counts the time other processes held its core; on a shared
2-core machine that is most of the spread between two implementations run side by side. The CPU
seconds a job's process used are what its own code cost. Our runner logs wall time only, so this
sampler reads each running job's CPU time from Linux's ``/proc/<pid>/stat`` (user + system time of
the process and its waited-for children, in clock ticks), the pid from the run's lock file
(``algorithms.rundir``: the holder writes its pid there), and the env steps of the run's last
progress row, and appends one row per running job per ``--interval`` seconds to a CSV. A run
resumed in another process starts a new ``(pid, started)`` instance; each instance's steps per CPU
second is its env steps logged over its CPU seconds between its first and last progress rows seen
(``rates``), so a piece's start-up and the steps after its last row are left out of both.

    python -m bench.cpu_watch runs/atari_ppo --out runs/atari_ppo/cpu_watch.csv [--interval 15]
    python -m bench.cpu_watch runs/atari_ppo --out runs/atari_ppo/cpu_watch.csv --rates
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import pandas as pd

from algorithms.process import process_times

COLUMNS = ["time", "run", "pid", "started", "cpu_s", "env_steps"]


def last_env_steps(run_dir: Path) -> int | None:
    """The env steps of the run's last complete progress row; None before its first row."""
    path = run_dir / "progress.csv"
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return int(float(rows[-1]["env_steps"])) if rows else None


def sample(experiment: Path, proc: Path = Path("/proc")) -> list[dict]:
    """One row per run of ``experiment`` whose lock names a running process."""
    rows = []
    for lock in sorted(experiment.glob("*/*/seed*/.lock")):
        text = lock.read_text().strip()
        if not text.isdigit():
            continue
        found = process_times(int(text), proc)
        if found is None:
            continue
        run = lock.parent
        rows.append({
            "time": round(time.time(), 1), "run": str(run.relative_to(experiment)), "pid": int(text),
            "started": found[0], "cpu_s": round(found[1], 2), "env_steps": last_env_steps(run),
        })  # fmt: skip
    return rows


def rates(samples: pd.DataFrame) -> pd.DataFrame:
    """Per run and process instance: env steps and CPU seconds between the first and last sample at
    which a new progress row was seen, and their ratio (``steps_per_cpu_s``)."""
    out = []
    for (run, pid, started), g in samples.dropna(subset=["env_steps"]).groupby(["run", "pid", "started"]):
        g = g.sort_values("time")
        firsts = g.groupby("env_steps", as_index=False).first().sort_values("env_steps")
        if len(firsts) < 2:
            continue
        steps = firsts.env_steps.iloc[-1] - firsts.env_steps.iloc[0]
        cpu = firsts.cpu_s.iloc[-1] - firsts.cpu_s.iloc[0]
        out.append({"run": run, "pid": pid, "started": started, "env_steps": steps, "cpu_s": cpu,
                    "steps_per_cpu_s": steps / cpu if cpu > 0 else float("nan")})  # fmt: skip
    return pd.DataFrame(out, columns=["run", "pid", "started", "env_steps", "cpu_s", "steps_per_cpu_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_watch", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="CSV the samples are appended to")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--rates", action="store_true", help="print each run's steps per CPU second")
    args = parser.parse_args(argv)
    if not args.experiment.is_dir():
        print(f"cpu_watch: {args.experiment} is not an experiment directory", file=sys.stderr)
        return 2
    if args.rates:
        print(rates(pd.read_csv(args.out)).to_string(index=False))
        return 0
    if not args.interval > 0:
        print(f"cpu_watch: --interval must be above 0, got {args.interval}", file=sys.stderr)
        return 2
    new = not args.out.exists()
    with args.out.open("a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        if new:
            writer.writeheader()
        try:
            while True:
                writer.writerows(sample(args.experiment))
                f.flush()
                time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
