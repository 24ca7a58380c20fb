"""Run a plan's jobs on this machine: one subprocess per job, as many at once as there are slots.

* **Slots.** With GPUs (``torch.cuda.device_count()``) every job gets a GPU slot: the child sees only
  its GPU through ``CUDA_VISIBLE_DEVICES`` and runs with device ``cuda``; ``jobs`` above the GPU count
  shares GPUs round-robin. Without GPUs every job gets a CPU slot (``CUDA_VISIBLE_DEVICES`` empty,
  ``OMP_NUM_THREADS`` = the job's torch threads), ``cores // threads`` of them by default. A machine
  keeps its slot kind from one invocation to the next, so a resumed run keeps its device.
* **Logs.** Each attempt appends a header line and the child's stdout/stderr to ``<run>/log.txt``.
* **Skip, resume, retry.** A run whose ``status.json`` says complete (and whose ``progress.csv``
  ends in a whole row at its budget: ``algorithms.rundir.completion``) is skipped; any other run is
  started with ``resume`` (``train`` continues from ``checkpoints/latest.pt`` if there is one), with
  one line first when its files need repair (a damaged ``status.json``, a torn last row). A job
  that exits non-zero, or exits 0 without status complete, is retried up to ``retries`` more times,
  then marked failed in its ``status.json``; the other jobs go on. A full disk
  (``NO_SPACE_EXIT_CODE``) fails the job at once, and a run directory that may not be read fails
  its task with one line.
* **Ctrl-C.** Children run in their own sessions so the terminal's SIGINT reaches only this process,
  which forwards SIGINT to every child, waits ``grace_s`` for them to stop (a second Ctrl-C: at
  once), kills what is left, and returns 130. SIGTERM and SIGHUP are handled the same way. Rerunning
  the same command continues where it stopped.
* **Jobs die with their scheduler.** A job learns its scheduler's pid (``SCHEDULER_PID_ENV``) and
  calls ``follow_scheduler``: the kernel sends it SIGINT when the scheduler dies (Linux
  ``PR_SET_PDEATHSIG``; elsewhere a thread watches the parent pid), and it stops as on Ctrl-C, so a
  ``kill -9`` of the scheduler leaves no job running on.
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

Progress is one tqdm bar in env steps over all jobs (finished ones included, every run of a packed
task), read from the last row of each running run's ``progress.csv``; its ETA is what is left at the
rate seen so far.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from algorithms.configs import ConfigError
from algorithms.rundir import (
    LOCK_FDS_ENV,
    LOG_FILE,
    PROGRESS_FILE,
    RunBusy,
    RunUnreadable,
    completion,
    is_complete,
    lock_holder,
    set_status_if_free,
    take_lock,
)

# The scheduler's pid, in every job's environment: the job stops when that process dies.
SCHEDULER_PID_ENV = "REPRO_SCHEDULER_PID"
# Exit code of a job that found its run directory locked by another process (sysexits EX_TEMPFAIL).
BUSY_EXIT_CODE = 75
# Exit code of a job stopped by a full disk (ENOSPC; sysexits EX_IOERR): not retried, since another
# attempt on the same disk fails the same way, and said in the scheduler's line.
NO_SPACE_EXIT_CODE = 74
# How long a run whose lock is taken is waited for before it is skipped: a job whose scheduler was
# killed gets SIGINT at once and stops like on Ctrl-C, well within the scheduler's 30 s grace.
BUSY_WAIT_S = 60.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class Member:
    """One run of a task: its key (``arm/env/seed<k>``), run directory and env-step budget."""

    key: str
    run_dir: Path
    steps: int


@dataclass(frozen=True)
class Task:
    """One job as the scheduler sees it: a command that runs it, appended with ``--device <d>``.

    A packed task (``run --pack``) trains several runs of one setting in one process:
    ``members`` lists them, ``run_dir`` is the first one's and ``steps`` their total. A single run's
    task has no ``members``: it is its own one run (``runs``)."""

    key: str
    run_dir: Path
    argv: tuple[str, ...]
    steps: int  # env steps budget, for progress
    threads: int = 1  # CPU threads the job uses (its torch threads)
    members: tuple[Member, ...] = ()

    @classmethod
    def packed(cls, key: str, members: Sequence[Member], argv: Sequence[str], threads: int = 1) -> Task:
        return cls(
            key, members[0].run_dir, tuple(argv), sum(m.steps for m in members), threads, tuple(members)
        )

    @property
    def runs(self) -> tuple[Member, ...]:
        return self.members or (Member(self.key, self.run_dir, self.steps),)

    @property
    def run_dirs(self) -> list[Path]:
        return [m.run_dir for m in self.runs]

    def unfinished(self) -> list[Path]:
        """The run directories not finished: ``status.json`` does not say complete, or the last row
        of ``progress.csv`` is torn or short of the run's budget (``completion``)."""
        return [m.run_dir for m in self.runs if not is_complete(m.run_dir, m.steps)]

    def damage(self) -> list[str]:
        """What its runs' files say that needs repair before it runs (``completion``): one phrase each."""
        return [f"{m.key}: {why}" for m in self.runs if (why := completion(m.run_dir, m.steps)[1])]

    def complete(self) -> bool:
        return not self.unfinished()

    def steps_done(self) -> int:
        """Env steps its runs have logged (``progress.csv``), each at most its budget."""
        return sum(min(m.steps, last_env_steps(m.run_dir)) for m in self.runs)

    def holder(self) -> tuple[int, Path] | None:
        """The first of its runs another process holds, with that process's pid (0: not known yet)."""
        return next(((pid, d) for d in self.run_dirs if (pid := lock_holder(d)) is not None), None)

    def log_path(self) -> Path:
        """Where an attempt's output goes (``open_log``): the ``log.txt`` of its first run not complete."""
        return log_dirs(self.run_dirs)[0] / LOG_FILE


@dataclass(frozen=True)
class Slot:
    name: str
    device: str  # "cpu" or "cuda"
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    key: str
    state: str  # complete | skipped | failed | interrupted | busy
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


def mark_unfinished(task: Task, state: str, error: str) -> None:
    """``state`` (failed, interrupted) in the ``status.json`` of each run of ``task`` not complete,
    unless another process holds the run (then it is that process's to write)."""
    for run_dir in task.unfinished():
        set_status_if_free(run_dir, state, error)


# --- the job's side: stop with the scheduler -------------------------------------------------------
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` in the main thread, also where the
    process was started with SIGINT ignored (a shell's background job): every stop is a Ctrl-C."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.default_int_handler)


def _parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` when the parent dies (Linux); whether it was armed."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGINT)


def follow_scheduler(use_prctl: bool = True, poll_s: float = 1.0) -> None:
    """In a job started by ``run_local``: stop as on Ctrl-C (``KeyboardInterrupt``) when the
    scheduler dies, by the kernel's parent-death signal or, where there is none, a thread that
    polls the parent pid every ``poll_s``. Raises ``KeyboardInterrupt`` at once when the scheduler
    is already gone. Does nothing in a process the scheduler did not start."""
    text = os.environ.get(SCHEDULER_PID_ENV, "")
    if not text.isdigit():
        return
    parent = int(text)
    stop_on_signals()
    if not (use_prctl and _parent_death_signal(signal.SIGINT)):
        threading.Thread(
            target=_watch_parent, args=(parent, poll_s), name="watch-scheduler", daemon=True
        ).start()
    if os.getppid() != parent:  # it died before the signal was armed
        raise KeyboardInterrupt


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
        self.log: dict[str, Path] = {}  # where the last attempt's output went

    def start(self, task: Task) -> int:
        self.count[task.key] = self.count.get(task.key, 0) + 1
        self.started.setdefault(task.key, time.monotonic())
        self.log[task.key] = task.log_path()
        return self.count[task.key]

    def cancel(self, task: Task) -> None:
        """The attempt just started did not run (its run directory was locked): it does not count."""
        self.count[task.key] -= 1

    def finished(self, task: Task, returncode: int) -> Outcome | None:
        """Outcome when the task is done for good; ``None`` when it should be retried."""
        wall = time.monotonic() - self.started[task.key]
        attempts = self.count[task.key]
        if returncode == 0 and task.complete():
            return Outcome(task.key, "complete", attempts, wall)
        why = f"exit code {returncode}" if returncode != 0 else "exited 0 without status complete"
        if returncode == NO_SPACE_EXIT_CODE:
            why = f"no space left on device (exit code {returncode}), not retried"
        elif attempts <= self.retries:
            return None
        error = f"{why} after {attempts} attempt(s); see {self.log[task.key]}"
        mark_unfinished(task, "failed", error)
        return Outcome(task.key, "failed", attempts, wall, error)


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


def log_dirs(run_dirs: Sequence[Path]) -> list[Path]:
    """The runs an attempt of a task of ``run_dirs`` trains: those not complete (the first when all are)."""
    return [d for d in run_dirs if not is_complete(d)] or list(run_dirs[:1])


def open_log(run_dirs: Sequence[Path], attempt: int, where: str, argv: Sequence[str]) -> IO[bytes]:
    """The log of an attempt of the task of ``run_dirs`` (both backends): the ``log.txt`` of its first
    run not complete, for appending, opened with the attempt's header line. The other runs a packed
    task trains get the header and a line naming that log, where the pack's output goes."""
    left = log_dirs(run_dirs)
    header = f"=== attempt {attempt} on {where} at {_now()}: {shlex.join(argv)}\n"
    for run_dir in left[1:]:
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / LOG_FILE, "ab") as log:
            where = os.path.relpath(left[0] / LOG_FILE, run_dir)
            log.write(f"{header}=== packed: this attempt's output is in {where}\n".encode())
    left[0].mkdir(parents=True, exist_ok=True)
    log = open(left[0] / LOG_FILE, "ab")
    log.write(header.encode())
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
    busy_wait_s: float = BUSY_WAIT_S,
) -> list[Outcome]:
    """Run ``tasks`` on ``slots``; returns one outcome per task (see the module docstring)."""
    say = on_event or (lambda msg: print(msg, file=sys.stderr, flush=True))
    outcomes: dict[str, Outcome] = {}
    pending: list[Task] = []
    for task in tasks:
        try:
            if task.complete():
                outcomes[task.key] = Outcome(task.key, "skipped", 0, 0.0)
            else:
                pending.append(task)
        except RunUnreadable as error:
            outcomes[task.key] = Outcome(task.key, "failed", 0, 0.0, str(error))
            say(f"{task.key}: FAILED ({error})")
    if skipped := sum(o.state == "skipped" for o in outcomes.values()):
        say(f"skipping {skipped} finished task(s); {len(pending)} to run on {len(slots)} slot(s)")
    bar = Progress(tasks, progress)
    bar.done_steps = sum(t.steps for t in tasks if t.key in outcomes)
    attempts = Attempts(retries)
    free = list(slots)
    running: dict[str, tuple[Task, Slot, subprocess.Popen, IO[bytes]]] = {}
    busy_since: dict[str, float] = {}
    child_env = {**os.environ, SCHEDULER_PID_ENV: str(os.getpid())}
    previous_handlers = {sig: signal.signal(sig, signal.default_int_handler) for sig in STOP_SIGNALS}

    def done(task: Task, outcome: Outcome) -> None:
        outcomes[task.key] = outcome
        bar.done_steps += task.steps

    def ready(task: Task) -> bool:
        """Whether ``task`` can start now; settles it (skipped, busy, or failed when a run directory may
        not be read) when it never will. Before its first attempt, says what of its runs it repairs."""
        try:
            if task.complete():  # finished meanwhile by another scheduler
                done(task, Outcome(task.key, "skipped", 0, 0.0))
                return False
            held = task.holder()
            repairs = task.damage() if held is None and task.key not in attempts.count else []
        except RunUnreadable as error:
            say(f"{task.key}: FAILED ({error})")
            done(task, Outcome(task.key, "failed", attempts.count.get(task.key, 0), 0.0, str(error)))
            return False
        if held is None:
            busy_since.pop(task.key, None)
            for line in repairs:
                say(line)
            return True
        pid, run_dir = held
        who = f"pid {pid}" if pid else "another process"
        if task.key not in busy_since:
            busy_since[task.key] = time.monotonic()
            say(f"{task.key}: {who} is writing {run_dir}; waiting up to {busy_wait_s:.0f} s for it")
        if time.monotonic() - busy_since[task.key] >= busy_wait_s:
            error = f"{who} was still writing {run_dir} after {busy_wait_s:.0f} s; not run"
            say(f"{task.key}: BUSY ({error})")
            done(task, Outcome(task.key, "busy", attempts.count.get(task.key, 0), 0.0, error))
        return False

    try:
        while pending or running:
            for task in list(pending):
                if not free:
                    break
                if not ready(task):
                    continue
                pending.remove(task)
                try:
                    locks = take_locks(task.run_dirs)
                except RunBusy:  # taken since ``ready`` looked: waited for like any held run
                    pending.append(task)
                    continue
                except RunUnreadable as error:
                    say(f"{task.key}: FAILED ({error})")
                    done(task, Outcome(task.key, "failed", attempts.count.get(task.key, 0), 0.0, str(error)))
                    continue
                slot = free.pop(0)
                attempt = attempts.start(task)
                argv = [*task.argv, "--device", slot.device]
                try:
                    log = open_log(task.run_dirs, attempt, slot.name, argv)
                    proc = subprocess.Popen(
                        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env={**child_env, **slot.env, LOCK_FDS_ENV: json.dumps(locks)},
                        start_new_session=True, pass_fds=tuple(locks.values()),
                    )  # fmt: skip
                except OSError as e:  # disk full at the log, no memory to fork: this job cannot start
                    free.append(slot)
                    error = f"cannot start: {e.strerror or e} ({e.filename or task.argv[0]})"
                    say(f"{task.key}: FAILED ({error})")
                    done(task, Outcome(task.key, "failed", attempt, 0.0, error))
                    continue
                finally:
                    for fd in locks.values():  # the job holds them now (or, not started, nobody)
                        os.close(fd)
                running[task.key] = (task, slot, proc, log)
            pending = [t for t in pending if t.key not in outcomes]
            time.sleep(poll_s)
            for key, (task, slot, proc, log) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                log.close()
                del running[key]
                free.append(slot)
                if code == BUSY_EXIT_CODE:  # another process took the run's lock first: wait for it
                    attempts.cancel(task)
                    pending.append(task)
                    continue
                outcome = attempts.finished(task, code)
                if outcome is None:
                    say(
                        f"{task.key}: exit code {code}, "
                        f"retrying ({attempts.count[key]}/{retries + 1} attempts)"
                    )
                    pending.append(task)
                else:
                    done(task, outcome)
                    if outcome.state == "failed":
                        say(f"{task.key}: FAILED ({outcome.error})")
            n_failed = sum(o.state == "failed" for o in outcomes.values())
            running_steps = sum(t.steps_done() for t, *_ in running.values())
            bar.update(
                running_steps, f"done {len(outcomes)}/{len(tasks)} running {len(running)} failed {n_failed}"
            )
    except KeyboardInterrupt:
        say(f"interrupted: stopping {len(running)} job(s) (SIGINT, then SIGKILL after {grace_s:.0f} s)")
        _stop_jobs([proc for _, _, proc, _ in running.values()], grace_s, say)
        for task, _, _, log in running.values():
            log.close()
            # A job that stopped by itself said so in status.json; one that had to be killed did not.
            mark_unfinished(task, "interrupted", "the scheduler was interrupted")
            outcomes[task.key] = Outcome(task.key, "interrupted", attempts.count[task.key], 0.0)
        for task in pending:
            if task.key not in outcomes:
                outcomes[task.key] = Outcome(task.key, "interrupted", attempts.count.get(task.key, 0), 0.0)
    finally:
        bar.close()
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    return [outcomes[t.key] for t in tasks]


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
