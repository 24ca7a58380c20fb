"""Run a plan's jobs on this machine: one subprocess per job, as many at once as there are slots.

* **Slots.** With GPUs (``torch.cuda.device_count()``) every job gets a GPU slot: the child sees only
  its GPU through ``CUDA_VISIBLE_DEVICES`` and runs with device ``cuda``; ``jobs`` above the GPU count
  shares GPUs round-robin. Without GPUs every job gets a CPU slot (``CUDA_VISIBLE_DEVICES`` empty,
  ``OMP_NUM_THREADS`` = the job's torch threads), ``cores // threads`` of them by default. A machine
  keeps its slot kind from one invocation to the next, so a resumed run keeps its device.
* **Logs.** Each attempt appends a header line and the child's stdout/stderr to ``<run>/log.txt``.
* **Skip, resume, retry.** A run whose ``status.json`` says complete is skipped; any other run is
  started with ``resume`` (``train`` continues from ``checkpoints/latest.pt`` if there is one). A job
  that exits non-zero, or exits 0 without status complete, is retried up to ``retries`` more times,
  then marked failed in its ``status.json``; the other jobs go on.
* **Ctrl-C.** Children run in their own sessions so the terminal's SIGINT reaches only this process,
  which forwards SIGINT to every child, waits ``grace_s`` for them to stop, kills what is left, and
  returns 130. Rerunning the same command continues where it stopped.

Progress is one tqdm bar in env steps over all jobs (finished ones included), read from the last
row of each running job's ``progress.csv``; its ETA is what is left at the rate seen so far.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from algorithms.rundir import LOG_FILE, PROGRESS_FILE, RunDir, is_complete


@dataclass(frozen=True)
class Task:
    """One job as the scheduler sees it: a command that runs it, appended with ``--device <d>``."""

    key: str
    run_dir: Path
    argv: tuple[str, ...]
    steps: int  # env steps budget, for progress
    threads: int = 1  # CPU threads the job uses (its torch threads)


@dataclass(frozen=True)
class Slot:
    name: str
    device: str  # "cpu" or "cuda"
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    key: str
    state: str  # complete | skipped | failed | interrupted
    attempts: int
    wall_s: float
    error: str | None = None


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()


def detect_slots(
    jobs: int | None, threads: int, n_gpus: int | None = None, cores: int | None = None
) -> list[Slot]:
    """Slots for this machine: one per GPU (or ``jobs`` spread over the GPUs), else CPU slots."""
    n_gpus = gpu_count() if n_gpus is None else n_gpus
    cores = cpu_cores() if cores is None else cores
    thread_env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if n_gpus > 0:
        count = jobs or n_gpus
        return [
            Slot(
                f"gpu{i % n_gpus}.{i // n_gpus}",
                "cuda",
                {"CUDA_VISIBLE_DEVICES": str(i % n_gpus), **thread_env},
            )
            for i in range(count)
        ]
    count = jobs or max(1, cores // max(1, threads))
    return [Slot(f"cpu{i}", "cpu", {"CUDA_VISIBLE_DEVICES": "", **thread_env}) for i in range(count)]


def last_env_steps(run_dir: Path) -> int:
    """``env_steps`` of the last complete row of ``progress.csv`` (0 if none); cheap, tail only."""
    path = Path(run_dir) / PROGRESS_FILE
    try:
        with open(path, "rb") as f:
            header = f.readline().decode()
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(len(header), size - 65536))
            tail = f.read().decode(errors="replace")
    except OSError:
        return 0
    lines = [ln for ln in tail.split("\n")[:-1] if ln]  # drop a torn last line
    if not lines or not header:
        return 0
    row = next(csv.DictReader(io.StringIO(header + lines[-1] + "\n")), None)
    try:
        return int(float(row["env_steps"])) if row else 0
    except (KeyError, ValueError, TypeError):
        return 0


def mark_failed(task: Task, error: str) -> None:
    if task.run_dir.exists():
        RunDir(task.run_dir).set_status("failed", error)


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


class Progress:
    """tqdm bar over env steps of all tasks; done tasks count in full."""

    def __init__(self, tasks: Sequence[Task], enabled: bool) -> None:
        from tqdm import tqdm

        self.total = sum(t.steps for t in tasks)
        self.bar = tqdm(
            total=self.total, unit="step", unit_scale=True, disable=not enabled, dynamic_ncols=True
        )
        self.done_steps = 0
        self.shown = 0

    def update(self, running_steps: int, postfix: str) -> None:
        n = min(self.total, self.done_steps + running_steps)
        if n > self.shown:
            self.bar.update(n - self.shown)
            self.shown = n
        self.bar.set_postfix_str(postfix, refresh=False)

    def close(self) -> None:
        self.bar.close()


class Attempts:
    """Retry bookkeeping shared by the local and Ray backends."""

    def __init__(self, retries: int) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.retries = retries
        self.count: dict[str, int] = {}
        self.started: dict[str, float] = {}

    def start(self, task: Task) -> int:
        self.count[task.key] = self.count.get(task.key, 0) + 1
        self.started.setdefault(task.key, time.monotonic())
        return self.count[task.key]

    def finished(self, task: Task, returncode: int) -> Outcome | None:
        """Outcome when the task is done for good; ``None`` when it should be retried."""
        wall = time.monotonic() - self.started[task.key]
        attempts = self.count[task.key]
        if returncode == 0 and is_complete(task.run_dir):
            return Outcome(task.key, "complete", attempts, wall)
        why = f"exit code {returncode}" if returncode != 0 else "exited 0 without status complete"
        if attempts <= self.retries:
            return None
        error = f"{why} after {attempts} attempt(s); see {task.run_dir / LOG_FILE}"
        mark_failed(task, error)
        return Outcome(task.key, "failed", attempts, wall, error)


def open_log(task: Task, attempt: int, where: str, argv: Sequence[str]) -> IO[bytes]:
    task.run_dir.mkdir(parents=True, exist_ok=True)
    log = open(task.run_dir / LOG_FILE, "ab")
    log.write(f"=== attempt {attempt} on {where} at {_now()}: {shlex.join(argv)}\n".encode())
    log.flush()
    return log


def run_local(
    tasks: Sequence[Task],
    slots: Sequence[Slot],
    retries: int = 2,
    progress: bool = True,
    grace_s: float = 30.0,
    poll_s: float = 0.5,
    on_event: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Run ``tasks`` on ``slots``; returns one outcome per task (see the module docstring)."""
    say = on_event or (lambda msg: print(msg, file=sys.stderr, flush=True))
    outcomes: dict[str, Outcome] = {}
    pending: list[Task] = []
    for task in tasks:
        if is_complete(task.run_dir):
            outcomes[task.key] = Outcome(task.key, "skipped", 0, 0.0)
        else:
            pending.append(task)
    if outcomes:
        say(f"skipping {len(outcomes)} finished run(s); {len(pending)} to run on {len(slots)} slot(s)")
    bar = Progress(tasks, progress)
    bar.done_steps = sum(t.steps for t in tasks if t.key in outcomes)
    attempts = Attempts(retries)
    free = list(slots)
    running: dict[str, tuple[Task, Slot, subprocess.Popen, IO[bytes]]] = {}
    try:
        while pending or running:
            while pending and free:
                task, slot = pending.pop(0), free.pop(0)
                attempt = attempts.start(task)
                argv = [*task.argv, "--device", slot.device]
                log = open_log(task, attempt, slot.name, argv)
                proc = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env={**os.environ, **slot.env}, start_new_session=True,
                )  # fmt: skip
                running[task.key] = (task, slot, proc, log)
            time.sleep(poll_s)
            for key, (task, slot, proc, log) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                log.close()
                del running[key]
                free.append(slot)
                outcome = attempts.finished(task, code)
                if outcome is None:
                    say(
                        f"{task.key}: exit code {code}, "
                        f"retrying ({attempts.count[key]}/{retries + 1} attempts)"
                    )
                    pending.append(task)
                else:
                    outcomes[key] = outcome
                    bar.done_steps += task.steps
                    if outcome.state == "failed":
                        say(f"{task.key}: FAILED ({outcome.error})")
            n_failed = sum(o.state == "failed" for o in outcomes.values())
            running_steps = sum(min(t.steps, last_env_steps(t.run_dir)) for t, *_ in running.values())
            bar.update(
                running_steps, f"done {len(outcomes)}/{len(tasks)} running {len(running)} failed {n_failed}"
            )
    except KeyboardInterrupt:
        say(f"interrupted: stopping {len(running)} job(s) (SIGINT, then SIGKILL after {grace_s:.0f} s)")
        for _, _, proc, _ in running.values():
            _signal_group(proc, signal.SIGINT)
        deadline = time.monotonic() + grace_s
        for _, _, proc, _ in running.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        for task, _, _, log in running.values():
            log.close()
            outcomes[task.key] = Outcome(task.key, "interrupted", attempts.count[task.key], 0.0)
        for task in pending:
            outcomes[task.key] = Outcome(task.key, "interrupted", attempts.count.get(task.key, 0), 0.0)
    finally:
        bar.close()
    return [outcomes[t.key] for t in tasks]


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
