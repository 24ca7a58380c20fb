"""Run a plan's jobs on this machine: one subprocess per job, as many at once as there are slots.

The scheduling (skipping finished runs, waiting for held ones, retries, failure marking, progress,
Ctrl-C) is ``repro.loop``'s, shared with the Ray backend; this module is the local backend.

* **Slots.** With GPUs (``torch.cuda.device_count()``) every job gets a GPU slot: the child sees only
  its GPU through ``CUDA_VISIBLE_DEVICES`` and runs with device ``cuda``; ``jobs`` above the GPU count
  shares GPUs round-robin. Without GPUs every job gets a CPU slot (``CUDA_VISIBLE_DEVICES`` empty,
  ``OMP_NUM_THREADS`` = the job's torch threads), ``cores // threads`` of them by default. A machine
  keeps its slot kind from one invocation to the next, so a resumed run keeps its device.
* **Logs.** Each attempt appends a header line and the child's stdout/stderr to ``<run>/log.txt``.
* **Resume.** A run not complete is started with ``resume`` (``train`` continues from
  ``checkpoints/latest.pt`` if there is one); which runs are skipped, retried or marked failed is
  the loop's (``repro.loop``).
* **Ctrl-C.** Children run in their own sessions so the terminal's SIGINT reaches only this process,
  which forwards SIGINT to every child, waits ``grace_s`` for them to stop (a second Ctrl-C: at
  once), kills what is left, and returns 130. SIGTERM and SIGHUP are handled the same way. Rerunning
  the same command continues where it stopped.
* **Jobs die with their scheduler** (``repro.job_side.follow_scheduler``): a ``kill -9`` of the
  scheduler leaves no job running on.
* **One writer per run.** The scheduler takes a run directory's lock (``algorithms.rundir``) before
  it writes the attempt's header into the run's ``log.txt`` and hands it to the job it starts, which
  holds it for its whole life: no second scheduler starts a job there in between. A run whose lock
  is taken (a job of a scheduler killed a moment ago, still stopping, or of
  another scheduler) is not started: the scheduler waits up to ``busy_wait_s`` for the lock, then
  skips the run with one line (state ``busy``), having written nothing into it.
* **Packed tasks** (``run --pack``): one process trains several runs (``Task.members``) on
  one slot. All the above holds per task: it is skipped when all its runs are complete, runs the
  others when some are, waits while any of its runs is held, counts as done when all are complete,
  and on its last failure (or an interrupt) only its runs not complete are marked failed
  (interrupted). Its output goes to the ``log.txt`` of its first run not complete; the other runs'
  ``log.txt`` get each attempt's header and a line naming that log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from algorithms.configs import ConfigError
from algorithms.rundir import LOCK_FDS_ENV, RunUnreadable, take_lock
from repro.job_side import SCHEDULER_PID_ENV, STOP_SIGNALS
from repro.loop import BUSY_WAIT_S, Ended, Policy, run_tasks, say_stderr
from repro.tasks import Outcome, Task, open_log


@dataclass(frozen=True)
class Slot:
    name: str
    device: str  # "cpu" or "cuda"
    env: dict[str, str] = field(default_factory=dict)


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


def check_devices(devices: Iterable[str]) -> None:
    """``ConfigError`` for a ``runner.device`` (``--set runner.device=cuda:1``) that names a CUDA
    device this machine does not have: the local scheduler would run the job on its slot's device
    instead, a CPU slot under an arm named ``..._device-cuda``."""
    n_gpus = None
    for device in sorted(set(devices) - {"cpu"}):
        n_gpus = gpu_count() if n_gpus is None else n_gpus
        if int(device.partition(":")[2] or 0) >= n_gpus:
            have = f"CUDA devices 0-{n_gpus - 1}" if n_gpus else "no CUDA device"
            raise ConfigError(f"runner.device={device}: this machine has {have}")


def detect_slots(
    jobs: int | None,
    threads: int,
    n_gpus: int | None = None,
    cores: int | None = None,
    gpus_per_job: float | None = None,
) -> list[Slot]:
    """Slots for this machine: one per GPU (or ``jobs`` spread over the GPUs), else CPU slots.

    ``gpus_per_job`` (``GPUS_PER_JOB``): 0 gives CPU slots on a GPU machine; a fraction ``f`` puts
    ``1 // f`` jobs on each GPU (0.25: four); a whole number ``k`` gives each job ``k`` GPUs."""
    n_gpus = gpu_count() if n_gpus is None else n_gpus
    cores = cpu_cores() if cores is None else cores
    thread_env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if gpus_per_job is not None and gpus_per_job > n_gpus:
        raise ConfigError(f"GPUS_PER_JOB={gpus_per_job:g} but this machine has {n_gpus} GPU(s)")
    if n_gpus > 0 and gpus_per_job != 0:
        per_job = gpus_per_job or 1.0
        if per_job >= 1:  # groups of whole GPUs
            k = int(per_job)
            groups = [",".join(str(g) for g in range(i * k, i * k + k)) for i in range(n_gpus // k)]
        else:  # each GPU shared by 1 // per_job jobs
            groups = [str(g) for g in range(n_gpus)] * int(1 / per_job + 1e-9)
        count = jobs or len(groups)
        return [
            Slot(
                f"gpu{groups[i % len(groups)]}.{i // len(set(groups))}",
                "cuda",
                {"CUDA_VISIBLE_DEVICES": groups[i % len(groups)], **thread_env},
            )
            for i in range(count)
        ]
    count = jobs or max(1, cores // max(1, threads))
    return [Slot(f"cpu{i}", "cpu", {"CUDA_VISIBLE_DEVICES": "", **thread_env}) for i in range(count)]


def take_locks(run_dirs: Sequence[Path]) -> dict[str, int]:
    """The locks of ``run_dirs`` (created if needed), for the job about to start on them
    (``algorithms.rundir.LOCK_FDS_ENV``: resolved path -> descriptor); ``RunBusy`` (none kept) when
    another process holds one."""
    locks: dict[str, int] = {}
    try:
        for run_dir in run_dirs:
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
            except PermissionError as error:
                raise RunUnreadable.from_error(error, run_dir) from None
            locks[str(run_dir.resolve())] = take_lock(run_dir)
    except BaseException:
        for fd in locks.values():
            os.close(fd)
        raise
    return locks


class LocalBackend:
    """Attempts as subprocesses of this process, one per free slot (``repro.loop.Backend``)."""

    who = "scheduler"

    def __init__(self, slots: Sequence[Slot], say: Callable[[str], None]) -> None:
        self.idle = list(slots)
        self.say = say
        self.jobs: dict[str, tuple[Task, Slot, subprocess.Popen, IO[bytes]]] = {}
        self.env = {**os.environ, SCHEDULER_PID_ENV: str(os.getpid())}

    def free(self) -> bool:
        return bool(self.idle)

    def running(self) -> list[Task]:
        return [task for task, *_ in self.jobs.values()]

    def start(self, task: Task, attempt: int) -> None:
        locks = take_locks(task.run_dirs)
        slot = self.idle.pop(0)
        argv = [*task.argv, "--device", slot.device]
        try:
            log = open_log(task.run_dirs, attempt, slot.name, argv)
            proc = spawn_job(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**self.env, **slot.env, LOCK_FDS_ENV: json.dumps(locks)},
                pass_fds=tuple(locks.values()),
            )  # fmt: skip
        except OSError:
            self.idle.append(slot)
            raise
        finally:
            for fd in locks.values():  # the job holds them now (or, not started, nobody)
                os.close(fd)
        self.jobs[task.key] = (task, slot, proc, log)

    def wait(self, timeout_s: float) -> list[Ended]:
        time.sleep(timeout_s)
        ended = []
        for key, (task, slot, proc, log) in list(self.jobs.items()):
            code = proc.poll()
            if code is None:
                continue
            log.close()
            del self.jobs[key]
            self.idle.append(slot)
            ended.append(Ended(task, code))
        return ended

    def stop(self, grace_s: float) -> list[Task]:
        self.say(
            f"interrupted: stopping {len(self.jobs)} job(s) (SIGINT, then SIGKILL after {grace_s:.0f} s)"
        )
        _stop_jobs([proc for _, _, proc, _ in self.jobs.values()], grace_s, self.say)
        for *_, log in self.jobs.values():
            log.close()
        return self.running()


def spawn_job(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """Start a job in a session of its own. A ``python -m repro`` job starts with the stop signals
    blocked: one sent before its handler is in place (``repro.job_side.stop_on_signals``, the first
    thing ``python -m repro`` does, unblocking them) waits for it, instead of killing the
    interpreter mid-start-up or being lost in its imports. Any other command (a test's toy job)
    would never unblock them, and starts as it is."""
    if list(argv[1:3]) != ["-m", "repro"]:
        return subprocess.Popen(argv, start_new_session=True, **popen)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return subprocess.Popen(argv, start_new_session=True, **popen)
    finally:  # the scheduler's own stop signals, held meanwhile, are taken now
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def run_local(
    tasks: Sequence[Task],
    slots: Sequence[Slot],
    retries: int = 2,
    progress: bool = True,
    grace_s: float = 30.0,
    poll_s: float = 0.5,
    on_event: Callable[[str], None] | None = None,
    busy_wait_s: float = BUSY_WAIT_S,
) -> list[Outcome]:
    """Run ``tasks`` on ``slots``; returns one outcome per task (see the module docstring)."""
    say = on_event or say_stderr
    policy = Policy(retries, progress, grace_s, poll_s, busy_wait_s)
    return run_tasks(tasks, LocalBackend(slots, say), policy, say, f"{len(slots)} slot(s)")


def _stop_jobs(procs: list[subprocess.Popen], grace_s: float, say: Callable[[str], None]) -> None:
    """SIGINT to every job's process group, SIGKILL to what is left after ``grace_s`` or at once on a
    second interrupt; returns when all have exited."""
    for proc in procs:
        _signal_group(proc, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    try:
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
    except KeyboardInterrupt:
        say("interrupted again: killing the jobs now")
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
        proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
