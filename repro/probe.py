"""Estimate how long a plan takes from a short training run of one job per arm on this machine.

The probe trains the job's own config (profile applied) for 16 sampler batches or 4,000 env steps,
whichever is more (never more than the job itself), with learning from a quarter of the way in
where the config allows it, and without evaluation, so that the measured cost per env step includes
updates at the arm's replay ratio. Replay-ratio algorithms with long sequences need many batches
before their first update (R2D1: the first 125-step sequence, then 6,400 to 7,680 env steps per
update); a probe that saw no update says so, and its estimate then leaves learning out. From the
probe's counters come the cost per env step (sampling + optimizing time / env steps) and the fixed
cost of a job (the rest of the wall time: env and model build), plus the start-up of a fresh
interpreter importing the training stack. The estimate for the plan is

    sum over jobs (n_steps * cost per step + fixed cost + start-up) / number of slots,

which overestimates runs that spend a long time before learning starts (those steps are cheaper)
and ignores evaluation time. It runs in a temporary directory: no run directory is created.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from repro.plans import Job

LEARN_START_FIELDS = ("min_steps_learn", "learning_starts_steps")


@dataclass(frozen=True)
class ProbeResult:
    arm: str
    env_steps: int
    updates: int
    seconds_per_step: float
    fixed_s: float


def probe_config(config, batches: int, min_steps: int = 4_000):
    """``config`` shortened to ``batches`` sampler batches or ``min_steps`` env steps, whichever is more
    (at most its own budget), learning from a quarter of the way in, no evaluation."""
    batch = config.sampler.batch_T * config.sampler.batch_B
    n_steps = min(config.runner.n_steps, max(batches * batch, min_steps))
    algo_config = config.algo_config
    for name in LEARN_START_FIELDS:
        if hasattr(algo_config, name) and getattr(algo_config, name) > n_steps // 4:
            try:
                algo_config = dataclasses.replace(algo_config, **{name: n_steps // 4})
            except ValueError:  # the Config refuses it (e.g. below the minibatch size): keep its value
                pass
    return dataclasses.replace(
        config,
        algo_config=algo_config,
        sampler=dataclasses.replace(config.sampler, eval_episodes=0),
        runner=dataclasses.replace(
            config.runner, n_steps=n_steps, log_interval_steps=n_steps, eval_interval_steps=0
        ),
    )


def probe_job(job: Job, batches: int = 16) -> ProbeResult:
    from algorithms.train import train

    config = probe_config(job.config, batches)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="repro-probe-") as tmp:
        counters = train(config, Path(tmp) / "probe", resume=False)
    wall = time.perf_counter() - t0
    train_s = counters.time_sampling_s + counters.time_optimizing_s
    steps = max(1, counters.env_steps)
    return ProbeResult(
        job.arm, counters.env_steps, counters.updates, train_s / steps, max(0.0, wall - train_s)
    )


def startup_seconds() -> float:
    """Wall time of a fresh interpreter importing the training stack, as every job's process does."""
    t0 = time.perf_counter()
    code = "import torch, algorithms.train, algorithms.envs.factory"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def estimate_seconds(
    jobs: list[Job], probes: dict[str, ProbeResult], n_slots: int, startup_s: float
) -> float:
    per_job = [j.n_steps * probes[j.arm].seconds_per_step + probes[j.arm].fixed_s + startup_s for j in jobs]
    return sum(per_job) / max(1, n_slots)
