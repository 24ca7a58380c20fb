"""What the scheduler runs (``Task``: one job, or a pack of runs trained in one process) and what
it reports (``Outcome``), with the run-directory reading and writing both backends share: how far a
run got (``last_env_steps``), an attempt's log (``open_log``) and failure marking (``mark_unfinished``).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from algorithms.rundir import (
    CHECKPOINT_DIR,
    EVAL_FILE,
    LOCK_FILE,
    LOG_FILE,
    PROGRESS_FILE,
    STATUS_FILE,
    RunFileNotRegular,
    check_regular,
    completion,
    is_complete,
    lock_holder,
    set_status_if_free,
)

# The files of a run directory its job writes in place (appends, truncates, locks) or whose rename it
# needs: each must be writable for the job to run.
REWRITTEN = (STATUS_FILE, PROGRESS_FILE, EVAL_FILE, LOG_FILE, LOCK_FILE)


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

    def read_only(self) -> Path | None:
        """The first path of its runs not complete that its job could not write (``read_only``)."""
        return next((p for d in self.unfinished() if (p := read_only(d)) is not None), None)

    def holder(self) -> tuple[int, Path] | None:
        """The first of its runs another process holds, with that process's pid (0: not known yet)."""
        return next(((pid, d) for d in self.run_dirs if (pid := lock_holder(d)) is not None), None)

    def log_path(self) -> Path:
        """Where an attempt's output goes (``open_log``): the ``log.txt`` of its first run not complete."""
        return log_dirs(self.run_dirs)[0] / LOG_FILE


@dataclass
class Outcome:
    key: str
    state: str  # complete | skipped | failed | interrupted | busy
    attempts: int
    wall_s: float
    error: str | None = None


def tail_rows(path: Path) -> list[dict[str, str]]:
    """The complete rows of the last 64 KiB of the CSV table at ``path`` (none when absent); cheap:
    the header and the tail only, a torn last line dropped."""
    try:
        check_regular(path)  # a FIFO would block the open below until a writer came
        with open(path, "rb") as f:
            header = f.readline().decode()
            f.seek(0, os.SEEK_END)
            size = f.tell()
            start = max(len(header), size - 65536)
            f.seek(start)
            tail = f.read().decode(errors="replace")
    except (OSError, RunFileNotRegular):
        return []
    lines = tail.split("\n")[:-1]  # drop a torn last line
    if start > len(header):  # the first line read starts part-way
        lines = lines[1:]
    lines = [ln for ln in lines if ln]
    if not lines or not header:
        return []
    return list(csv.DictReader(io.StringIO(header + "\n".join(lines) + "\n")))


def last_env_steps(run_dir: Path) -> int:
    """``env_steps`` of the last complete row of ``progress.csv`` (0 if none); cheap, tail only."""
    rows = tail_rows(Path(run_dir) / PROGRESS_FILE)
    try:
        return int(float(rows[-1]["env_steps"])) if rows else 0
    except (KeyError, ValueError, TypeError):
        return 0


def read_only(run_dir: Path) -> Path | None:
    """``run_dir``, or the first of its files a job rewrites, when this process may not write it (a
    read-only copy, ``chmod 555``): its job would fail at its first write, and fail again on every
    retry. ``None`` for a run not created yet (its parent's permission is its creation's matter)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    if not os.access(run_dir, os.W_OK | os.X_OK):
        return run_dir
    written = [run_dir / name for name in REWRITTEN] + [run_dir / CHECKPOINT_DIR]
    return next((p for p in written if p.exists() and not os.access(p, os.W_OK)), None)


def mark_unfinished(task: Task, state: str, error: str) -> None:
    """``state`` (failed, interrupted) in the ``status.json`` of each run of ``task`` not complete,
    unless another process holds the run (then it is that process's to write). A run whose
    ``status.json`` cannot be written (read-only, a full disk) keeps the one it has: said on stderr in
    one line, and the scheduler goes on."""
    for run_dir in task.unfinished():
        try:
            set_status_if_free(run_dir, state, error)
        except OSError as e:
            print(
                f"{run_dir}: cannot write status.json ({e.strerror or e}); it still says what it said",
                file=sys.stderr,
            )


def log_dirs(run_dirs: Sequence[Path]) -> list[Path]:
    """The runs an attempt of a task of ``run_dirs`` trains: those not complete (the first when all are)."""
    return [d for d in run_dirs if not is_complete(d)] or list(run_dirs[:1])


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


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
