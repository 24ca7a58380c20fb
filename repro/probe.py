"""Estimate how long a plan takes from a short training run of one job per arm on this machine.

The probe trains the job's own config (profile applied, on the scheduler's slot device) for 16 sampler
batches or 4,000 env steps, whichever is more (never more than the job itself), with learning from a
quarter of the way in where the config allows it, logging in ``PROBE_SEGMENTS`` segments and
evaluating once at the end (at most ``PROBE_EVAL_EPISODES`` of the job's episodes, each cut at the
probe's own length), so that the measured cost per env step includes updates at the arm's replay
ratio. Replay-ratio algorithms with long sequences need many
batches before their first update (R2D1: the first 125-step sequence, then 6,400 to 7,680 env steps
per update); a probe that saw no update says so, and its estimate then leaves learning out. From the
probe's counters come the cost per env step (sampling + optimizing time / env steps; the estimate
takes it over the segments after learning started, as a job learns over almost all of its steps),
its spread (the cheapest and the dearest of those segments), the time of one of the job's
evaluations (the probe's cost per evaluation step times the job's episodes, each as long as the
probe's episodes, or the job's cap where the probe's were cut: an untrained policy's episode
lengths stand in for the job's),
and the fixed cost of a job (the rest of the wall time: env and model build), plus the start-up of a
fresh interpreter importing the training stack. The estimate for the plan (``estimate_range``) is

    sum over jobs not yet complete (steps left * cost per step + evaluations left * evaluation time
                                    + fixed cost + start-up) / slots,

with a range: its low end at the cheapest segment's cost per step; its high end at the dearest one's
plus (1 - 1/slots) * the longest job, Graham's bound on the time a greedy scheduler can leave slots
idle at the end (Graham 1969, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17).
Measured against the committed case of docs/results/r2d1_minatar.md (estimate 77 min before the
evaluation time and the range; 91 min measured): ``tests/test_repro_estimate.py`` and
docs/results/estimate_r2d1_minatar.md. It runs in a temporary directory: no run directory is created.

**Packed plans** (``run --pack``): a pack of k seeds is one process, costed like a job from a
probe of the same config trained as a pack of k (``probe_pack``: ``train_packed`` on k seeds), so a
packed estimate is measured too, never a speed factor; its cost per env step is per member env step,
and the pack pays one fixed cost and start-up. Pack probes are cached like the others, their key
including k.

**What a probe costs, and when it runs.** Measured on the project's 2-core CPU machine (2026-11-30,
shared with a long experiment, load average 5 to 7, the probe at nice 19): the R2D1 ``smoke`` probe is
a whole smoke job (9,600 env steps, 16 envs, one update; about 36 s of CPU, repro/README.md) and had
not finished after 81 s of wall time; a ``paper`` probe (163,840 env steps) had not even built its
256 Atari envs after 50 s, so it takes many minutes per arm there. That is too much to spend before
every run, so every measurement is kept in this machine's user cache
(``$XDG_CACHE_HOME/rlrepro/probe_cache.json``, by default under ``~/.cache``; not in ``runs/``, where a
dry run writes nothing), keyed by the probed config (seed aside), the host and its CPU count, so
every command that runs the same arm on the same env and profile reuses it: ``--dry-run`` measures the
arms the cache lacks (``--reprobe`` measures every arm afresh); ``run`` estimates from the cache at no
cost, and probes an arm the cache lacks only while the probes are at most ``MAX_PROBE_SHARE`` of the
env steps the plan still has to run (``paper`` and ``mini``: far below; a 42-job ``smoke`` plan: 4.8%,
so not), else it says the estimate was not measured and how to measure it. So on a small machine the
first ``paper`` run waits minutes for its probes before it prints an estimate of years and the hint at
smaller runs; Ctrl-C there stops it before any job has started.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from algorithms.rundir import atomic_write_json, is_complete, read_table
from repro.plans import Job
from repro.scheduler import cpu_cores
from repro.tasks import last_env_steps

if TYPE_CHECKING:
    from algorithms.counters import Counters

CACHE_FILE = "probe_cache.json"
# `run` probes arms without a cached measurement only while the probes stay this small a share of the
# env steps left to run, so that measuring costs the run about 1% at most (module docstring).
MAX_PROBE_SHARE = 0.01
PROBE_BATCHES = 16
# Progress rows of a probe: the segments whose costs per env step give the estimate's spread.
PROBE_SEGMENTS = 8
# Evaluation episodes a probe plays (R2D2's 30 Atari episodes of up to 27,000 steps would cost more
# than the probe's training); the job's evaluation time is scaled from them (module docstring).
PROBE_EVAL_EPISODES = 2

LEARN_START_FIELDS = ("learning_starts_steps", "learning_starts_steps")


@dataclass(frozen=True)
class ProbeResult:
    arm: str
    env: str
    env_steps: int
    updates: int
    seconds_per_step: float
    fixed_s: float
    startup_s: float
    measured_at: str  # ISO time, shown with an estimate from the cache
    # over the segments after learning started (module docstring): the cheapest, all of them, the
    # dearest; NaN with fewer than two such segments (then ``seconds_per_step`` stands in)
    seconds_per_step_low: float = math.nan
    seconds_per_step_learning: float = math.nan
    seconds_per_step_high: float = math.nan
    eval_s: float = 0.0  # one evaluation of the job (its episodes; module docstring)

    def per_step(self, end: str) -> float:
        """Cost per env step at the ``low``, ``mid`` or ``high`` end of the range."""
        value = {
            "low": self.seconds_per_step_low, "mid": self.seconds_per_step_learning,
            "high": self.seconds_per_step_high,
        }[end]  # fmt: skip
        return self.seconds_per_step if math.isnan(value) else value


def probe_config(config, batches: int, min_steps: int = 4_000):
    """``config`` shortened to ``batches`` sampler batches or ``min_steps`` env steps, whichever is more
    (at most its own budget), learning from a quarter of the way in, ``PROBE_SEGMENTS`` progress rows
    and one evaluation at the end."""
    batch = config.sampler.batch_T * config.sampler.batch_B
    n_steps = min(config.runner.n_steps, max(batches * batch, min_steps))
    algo_config = config.algo_config
    for name in LEARN_START_FIELDS:
        if hasattr(algo_config, name) and getattr(algo_config, name) > n_steps // 4:
            try:
                algo_config = dataclasses.replace(algo_config, **{name: n_steps // 4})
            except ValueError:  # the Config refuses it (e.g. below the minibatch size): keep its value
                pass
    episodes = min(config.sampler.eval_episodes, PROBE_EVAL_EPISODES)
    return dataclasses.replace(
        config,
        algo_config=algo_config,
        sampler=dataclasses.replace(
            config.sampler,
            eval_episodes=episodes,
            eval_n_envs=max(1, min(config.sampler.eval_n_envs, episodes)),
            eval_max_steps=min(config.sampler.eval_max_steps, n_steps),
        ),
        runner=dataclasses.replace(
            config.runner,
            n_steps=n_steps,
            log_interval_steps=max(1, n_steps // PROBE_SEGMENTS),
            eval_interval_steps=0,
            tensorboard=False,
        ),
    )


def on_device(config, device: str):
    """``config`` as the scheduler runs it on a ``device`` slot (``run-job --device``)."""
    return dataclasses.replace(config, runner=dataclasses.replace(config.runner, device=device))


def probe_steps(job: Job) -> int:
    """Env steps a probe of ``job`` trains."""
    return probe_config(job.config, PROBE_BATCHES).runner.n_steps


def probe_job(job: Job, device: str) -> ProbeResult:
    """Train the probe of ``job`` (module docstring) alone and measure it."""
    from algorithms.train import train

    config = probe_config(on_device(job.config, device), PROBE_BATCHES)
    return _measure(job, lambda tmp: [train(config, tmp / "probe", resume=False)], config)


def probe_pack(job: Job, device: str, members: int) -> ProbeResult:
    """Train the probe of ``job`` as a pack of ``members`` seeds (``run --pack``: one process,
    ``algorithms.packed.pack.train_packed``) and measure it: its cost per env step is per member env step
    of the pack, its fixed cost the pack's, so ``estimate_range`` costs a pack as it does a job."""
    from algorithms.packed.pack import train_packed

    config = probe_config(on_device(job.config, device), PROBE_BATCHES)
    configs = [
        dataclasses.replace(config, runner=dataclasses.replace(config.runner, seed=k)) for k in range(members)
    ]
    return _measure(
        job,
        lambda tmp: train_packed(configs, [tmp / f"seed{k}" for k in range(members)], resume=False),
        config,
    )


def _measure(job: Job, train: Callable[[Path], list[Counters]], config) -> ProbeResult:
    """Time ``train`` in a temporary directory. Every member of a pack counts the whole time of each
    phase (algorithms/packed/runner.py), so the training and evaluation times are the largest
    member's, and the segments' costs are read from the first member's progress rows."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="repro-probe-") as tmp:
        counters = train(Path(tmp))
        progress = next(Path(tmp).glob("*/progress.csv"), None)
        low, learning, high = segment_costs(progress, _learning_start(config), len(counters))
        probe_eval_s = max(c.time_evaluating_s for c in counters)
        eval_s = job_evaluation_seconds(
            next(Path(tmp).glob("*/eval.csv"), None), probe_eval_s, config.sampler, job.config.sampler
        )
    wall = time.perf_counter() - t0
    train_s = max(c.time_sampling_s + c.time_optimizing_s for c in counters)
    steps = sum(c.env_steps for c in counters)
    return ProbeResult(
        job.arm,
        job.env,
        steps,
        sum(c.updates for c in counters),
        train_s / max(1, steps),
        max(0.0, wall - train_s - probe_eval_s),
        startup_seconds(),
        dt.datetime.now().astimezone().isoformat(timespec="minutes"),
        low,
        learning,
        high,
        eval_s,
    )


def job_evaluation_seconds(eval_csv: Path | None, probe_s: float, probed, job) -> float:
    """One evaluation of the job (sampler config ``job``) from the probe's (``probed``, its episodes in
    ``eval_csv``, ``probe_s`` seconds): the probe's seconds per evaluation step times the job's
    episodes x the probe's mean episode length, or the job's cap where every probe episode was cut."""
    if not job.eval_episodes or eval_csv is None or not eval_csv.is_file():
        return 0.0
    lengths = _table(eval_csv).get("length")
    if lengths is None or not len(lengths) or lengths.sum() <= 0:
        return 0.0
    cut = bool((lengths >= probed.eval_max_steps).all()) and job.eval_max_steps > probed.eval_max_steps
    length = job.eval_max_steps if cut else min(float(lengths.mean()), job.eval_max_steps)
    return probe_s / float(lengths.sum()) * job.eval_episodes * length


def _table(path: Path) -> pd.DataFrame:
    """A probe's table as the run directory's reader reads it (a torn last line dropped); empty when
    the table is damaged, so that the estimate goes without that figure instead of failing."""
    try:
        return read_table(path)[0]
    except ValueError:
        return pd.DataFrame()


def _learning_start(config) -> int:
    return max([getattr(config.algo_config, name, 0) for name in LEARN_START_FIELDS] + [0])


def segment_costs(progress: Path | None, learning_start: int, members: int = 1) -> tuple[float, float, float]:
    """Over the probe's progress segments that start at or after ``learning_start``, the cheapest
    cost per env step, the cost of all of them together and the dearest (of ``members`` packed
    members: per member env step); NaNs with fewer than two such segments."""
    nan = (math.nan, math.nan, math.nan)
    if progress is None or not progress.is_file():
        return nan
    rows = _table(progress)
    if not {"env_steps", "time_sampling_s", "time_optimizing_s"} <= set(rows) or len(rows) < 3:
        return nan
    steps = rows.env_steps.to_numpy(float)
    seconds = (rows.time_sampling_s + rows.time_optimizing_s).to_numpy(float)
    segments = [
        (seconds[i + 1] - seconds[i], (steps[i + 1] - steps[i]) * members)
        for i in range(len(rows) - 1)
        if steps[i] >= learning_start and steps[i + 1] > steps[i]
    ]
    if len(segments) < 2:
        return nan
    costs = [s / n for s, n in segments]
    return min(costs), sum(s for s, _ in segments) / sum(n for _, n in segments), max(costs)


@cache
def startup_seconds() -> float:
    """Wall time of a fresh interpreter importing the training stack, as every job's process does
    (measured once per process)."""
    t0 = time.perf_counter()
    code = "import torch, algorithms.train, algorithms.envs.factory"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def steps_left(job: Job) -> int:
    """Env steps ``job`` still has to run: none when complete, else from its last progress row on."""
    if is_complete(job.run_dir, job.n_steps):
        return 0
    return job.n_steps - min(job.n_steps, last_env_steps(job.run_dir))


def probe_key(arm: str, members: int = 1) -> str | tuple[str, int]:
    """A probe's key in ``estimate_range``'s ``probes``: the arm alone, ``(arm, k)`` packed by k."""
    return arm if members == 1 else (arm, members)


def evaluations_left(job: Job) -> int:
    """Evaluations ``job`` still makes: one per ``runner.eval_interval_steps`` crossed in the steps
    left and one at the end (``algorithms.runners.sync``); none when complete."""
    left = steps_left(job)
    if not left:
        return 0
    interval = job.config.runner.eval_interval_steps
    if not interval:
        return 1
    done = job.n_steps - left
    return job.n_steps // interval - done // interval + (1 if job.n_steps % interval else 0)


@dataclass(frozen=True)
class Estimate:
    """A plan's remaining wall time in seconds: ``seconds`` (the point) within ``low`` to ``high``."""

    low: float
    seconds: float
    high: float


def estimate_range(
    jobs: Sequence[Job],
    probes: Mapping[str | tuple[str, int], ProbeResult],
    n_slots: int,
    packs: Sequence[Sequence[Job]] | None = None,
) -> Estimate:
    """The plan's remaining wall time on ``n_slots`` slots with its range (module docstring); complete
    jobs cost nothing. ``packs``: the plan's processes (``run --pack``; default each job alone), each
    costed with the probe of its arm at its size (``probe_key``): its env steps left at the probe's
    cost per env step, its evaluations left at the probe's time of one (for a pack, of all its
    members), plus one fixed cost and start-up. A pack some of whose members are complete is costed
    at its full size."""
    totals = {"low": 0.0, "mid": 0.0, "high": 0.0}
    longest = 0.0
    for pack in packs or [(job,) for job in jobs]:
        left = sum(steps_left(job) for job in pack)
        if not left:
            continue
        probe = probes[probe_key(pack[0].arm, len(pack))]
        evals = max(evaluations_left(job) for job in pack)
        for end in totals:
            task = left * probe.per_step(end) + evals * probe.eval_s + probe.fixed_s + probe.startup_s
            totals[end] += task
            if end == "high":
                longest = max(longest, task)
    slots = max(1, n_slots)
    idle = (1 - 1 / slots) * longest
    return Estimate(totals["low"] / slots, totals["mid"] / slots, totals["high"] / slots + idle)


def cache_path() -> Path:
    """``$XDG_CACHE_HOME/rlrepro/probe_cache.json`` (XDG base directory spec; ``~/.cache`` by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlrepro" / CACHE_FILE


class ProbeCache:
    """Probe results of this machine (module docstring), read from and written to ``path``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        try:
            data = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            data = {}
        fields = {f.name for f in dataclasses.fields(ProbeResult)}
        self.results = {
            key: ProbeResult(**value)
            for key, value in (data.items() if isinstance(data, dict) else ())
            if isinstance(value, dict) and set(value) == fields
        }

    @staticmethod
    def key(job: Job, device: str, members: int = 1) -> str:
        """What the measurement depends on: the probed config (seed aside), the host and its CPUs, and
        the members of a pack (``probe_pack``)."""
        from algorithms.run_config import config_to_dict

        config = config_to_dict(probe_config(on_device(job.config, device), PROBE_BATCHES))
        config["runner"].pop("seed")
        what = {"config": config, "machine": {"host": socket.gethostname(), "cpus": cpu_cores()}}
        if members > 1:
            what["members"] = members
        text = json.dumps(what, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def get(self, job: Job, device: str, members: int = 1) -> ProbeResult | None:
        return self.results.get(self.key(job, device, members))

    def put(self, job: Job, device: str, result: ProbeResult, members: int = 1) -> None:
        self.results[self.key(job, device, members)] = result
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, {k: dataclasses.asdict(v) for k, v in self.results.items()})
