"""The scheduling loop both backends run (``repro.scheduler.run_local``, ``repro.ray_backend.run_ray``):
skipping finished tasks, waiting for held runs, retries, failure marking, progress and Ctrl-C. What
differs between running a job here and on a Ray cluster is a ``Backend``.

* **Skip.** A task whose runs are all complete (``Task.complete``) is skipped, before it starts
  and again each time it is about to (another scheduler may have finished it meanwhile); one whose
  run directory may not be read, or not written (read-only), fails with one line, not retried.
  Before its first attempt, a task's runs that need repair (a damaged ``status.json``, a torn last
  row) are said in one line each.
* **Busy.** A task one of whose runs another process holds (``algorithms.rundir``'s lock) waits up
  to ``busy_wait_s`` for it, then is skipped with one line (state ``busy``), having written nothing.
  An attempt whose backend found the run taken when it started (``BUSY_EXIT_CODE``) did not count,
  and waits the same way.
* **Retry.** An attempt that ends with a non-zero code, or 0 without its runs complete, is retried
  up to ``retries`` more times, then its runs not complete are marked failed; the other tasks go on.
  A full disk (``NO_SPACE_EXIT_CODE``) fails the task at once.
* **Ctrl-C** (and SIGTERM, SIGHUP) stops every attempt (``Backend.stop``), marks the runs they were
  training interrupted and returns; rerunning the same command continues where it stopped.

Progress is one tqdm bar in env steps over all tasks (finished ones included, every run of a packed
task), read from the last row of each running run's ``progress.csv``; its ETA is what is left at the
rate seen so far. Beside it, each running task's latest training return and, where it has evaluated,
its last evaluation's mean return (``returns_text``): what zoo's ``ep_rew_mean`` shows. A task
that completes says its last returns in a line of its own, its final evaluation among them.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from algorithms.rundir import EVAL_FILE, PROGRESS_FILE, RunBusy, RunUnreadable
from repro.job_side import BUSY_EXIT_CODE, NO_SPACE_EXIT_CODE, STOP_SIGNALS, raise_stop
from repro.tasks import Outcome, Task, mark_unfinished, tail_rows

# How long a run whose lock is taken is waited for before it is skipped: a job whose scheduler was
# killed gets SIGINT at once and stops like on Ctrl-C, well within the scheduler's 30 s grace.
BUSY_WAIT_S = 60.0


@dataclass
class Ended:
    """An attempt that ended: the job's exit code (``BUSY_EXIT_CODE``: it found a run taken and did
    not run), or ``error`` when it failed for good without running (not retried)."""

    task: Task
    code: int
    error: str | None = None


class Backend(Protocol):
    """Where the attempts run. ``start`` raises ``RunBusy`` when a run was taken since the loop
    looked (the task waits as for any held run), ``RunUnreadable``, or ``OSError`` when the job
    cannot start; ``stop`` says its own line, stops every attempt (waiting up to ``grace_s``) and
    returns the tasks whose runs its jobs were writing."""

    who: str  # what is interrupted, in the interrupted runs' status.json: "scheduler", "Ray driver"

    def free(self) -> bool: ...  # whether another attempt may start now
    def start(self, task: Task, attempt: int) -> None: ...
    def wait(self, timeout_s: float) -> list[Ended]: ...  # what ended within about ``timeout_s``
    def running(self) -> list[Task]: ...
    def stop(self, grace_s: float) -> list[Task]: ...


def short_labels(keys: Sequence[str]) -> dict[str, str]:
    """Each task key (``arm/env/seed0``) by the parts that tell the tasks apart (``seed0`` when only
    the seeds differ), for the progress line; the last part when nothing differs."""
    parts = [key.split("/") for key in keys]
    if not parts:
        return {}
    varying = [i for i in range(len(parts[0])) if len({p[i] for p in parts if len(p) > i}) > 1]
    return {key: "/".join(p[i] for i in varying if i < len(p)) or p[-1] for key, p in zip(keys, parts)}


def returns_text(task: Task) -> str:
    """A running task's latest returns for the progress line: ``train`` the mean training return of
    its last progress row (episodes finished since the row before, as zoo's ``ep_rew_mean``),
    ``eval`` the mean of its last evaluation; ``train -`` before any episode ended. A packed task
    shows its first run's."""
    rows = tail_rows(task.run_dir / PROGRESS_FILE)
    train = _number(rows[-1].get("return_mean")) if rows else None
    text = "train " + ("-" if train is None else f"{train:.4g}")
    evals = tail_rows(task.run_dir / EVAL_FILE)
    if evals:
        last = [_number(r.get("return")) for r in evals if r.get("env_steps") == evals[-1].get("env_steps")]
        if all(v is not None for v in last):
            text += f" eval {sum(last) / len(last):.4g}"
    return text


def _number(text: str | None) -> float | None:
    """A CSV cell as a finite float; None when empty, NaN or not a number."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


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
    """Retry bookkeeping: attempts per task, since when, and where the last one's output went."""

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


def say_stderr(msg: str) -> None:
    """The scheduler's lines, by default: on stderr, above the progress bar (``tqdm.write`` clears the
    bar's line first, so a line never lands on the end of the bar)."""
    from tqdm import tqdm

    tqdm.write(msg, file=sys.stderr)
    sys.stderr.flush()


@dataclass(frozen=True)
class Policy:
    """How the loop runs the tasks (module docstring): retries of a failed task, the progress bar,
    seconds the jobs get to stop on Ctrl-C, between two looks at the attempts, and for a held run."""

    retries: int
    progress: bool
    grace_s: float
    poll_s: float
    busy_wait_s: float


def run_tasks(
    tasks: Sequence[Task], backend: Backend, policy: Policy, say: Callable[[str], None], where: str
) -> list[Outcome]:
    """Run ``tasks`` on ``backend``; one outcome per task (see the module docstring). ``where``
    (``3 slot(s)``) ends the line that says how many tasks were skipped."""
    retries, busy_wait_s = policy.retries, policy.busy_wait_s
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
        say(f"skipping {skipped} finished task(s); {len(pending)} to run on {where}")
    bar = Progress(tasks, policy.progress)
    labels = short_labels([t.key for t in tasks])
    bar.done_steps = sum(t.steps for t in tasks if t.key in outcomes)
    attempts = Attempts(retries)
    busy_since: dict[str, float] = {}
    previous_handlers = {sig: signal.signal(sig, raise_stop) for sig in (*STOP_SIGNALS, signal.SIGALRM)}

    def done(task: Task, outcome: Outcome) -> None:
        outcomes[task.key] = outcome
        bar.done_steps += task.steps

    def fail(task: Task, error: str, wall_s: float = 0.0) -> None:
        say(f"{task.key}: FAILED ({error})")
        done(task, Outcome(task.key, "failed", attempts.count.get(task.key, 0), wall_s, error))

    def ready(task: Task) -> bool:
        """Whether ``task`` can start now; settles it (skipped, busy, or failed when a run directory may
        not be read) when it never will. Before its first attempt, says what of its runs it repairs."""
        try:
            # The holder first, then completion: a job writes "complete" before it lets go of its run,
            # so a run found free and then read complete is finished. The other order let a scheduler
            # read "not complete" just before another's job finished, then find the run free, and run
            # it again.
            held = task.holder()
            if held is None and task.complete():  # finished meanwhile by another scheduler
                done(task, Outcome(task.key, "skipped", 0, 0.0))
                return False
            repairs = task.damage() if held is None and task.key not in attempts.count else []
            locked = task.read_only() if held is None else None
        except RunUnreadable as error:
            fail(task, str(error))
            return False
        if locked is not None:  # every attempt would fail at its first write: not started, not retried
            fail(task, f"{locked} is read-only (chmod u+w it, or run into another --exp)")
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

    def start(task: Task) -> None:
        attempt = attempts.start(task)
        try:
            backend.start(task, attempt)
        except RunBusy:  # taken since ``ready`` looked: waited for like any held run
            attempts.cancel(task)
            pending.append(task)
        except RunUnreadable as error:
            attempts.cancel(task)
            fail(task, str(error))
        except OSError as e:  # disk full at the log, no memory to fork: this job cannot start
            fail(task, f"cannot start: {e.strerror or e} ({e.filename or task.argv[0]})")

    def ended(end: Ended) -> None:
        task = end.task
        if end.code == BUSY_EXIT_CODE:  # another process took the run's lock first: wait for it
            attempts.cancel(task)
            pending.append(task)
            return
        if end.error is not None:
            fail(task, end.error, time.monotonic() - attempts.started[task.key])
            return
        outcome = attempts.finished(task, end.code)
        if outcome is None:
            n = attempts.count[task.key]
            say(f"{task.key}: exit code {end.code}, retrying ({n}/{retries + 1} attempts)")
            pending.append(task)
            return
        done(task, outcome)
        if outcome.state == "failed":
            say(f"{task.key}: FAILED ({outcome.error})")
        elif policy.progress:  # its final evaluation came as it ended: the bar never showed it running
            say(f"{task.key}: complete | {returns_text(task)}")

    try:
        while pending or backend.running():
            for task in list(pending):
                if not backend.free():
                    break
                if ready(task):
                    pending.remove(task)
                    start(task)
            pending = [t for t in pending if t.key not in outcomes]
            for end in backend.wait(policy.poll_s):
                ended(end)
            running = backend.running()
            n_failed = sum(o.state == "failed" for o in outcomes.values())
            bar.update(
                sum(t.steps_done() for t in running),
                f"done {len(outcomes)}/{len(tasks)} running {len(running)} failed {n_failed}"
                + "".join(f" | {labels[t.key]} {returns_text(t)}" for t in running if policy.progress),
            )
    except KeyboardInterrupt:
        for task in backend.stop(policy.grace_s):
            # A job that stopped by itself said so in status.json; one that had to be killed did not.
            mark_unfinished(task, "interrupted", f"the {backend.who} was interrupted")
    finally:
        bar.close()
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    for task in tasks:
        outcomes.setdefault(task.key, Outcome(task.key, "interrupted", attempts.count.get(task.key, 0), 0.0))
    return [outcomes[t.key] for t in tasks]
