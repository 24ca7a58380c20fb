"""Runs of a plan whose recorded config differs from the one the plan resolves now (a changed
profile, ``--set`` value or edited settings file): checked at ``--dry-run`` and before the first job,
so that a job never meets a run it may not resume (``RunDir.open`` refuses it) and a finished run is
never retried and marked failed. Without ``--rerun-changed`` the command names each such run and the
keys that differ, and stops (exit 2); with it, each such run directory is moved aside, kept as
``seed<k>.changed-<time>`` (which no reader counts as a run), and the run starts afresh.

Options that do not change what a run computes (``algorithms.rundir.RESULT_NEUTRAL_KEYS``:
``--tensorboard``; ``--track`` is not in the config) never count as a change.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from algorithms.configs import ConfigError
from algorithms.rundir import CONFIG_FILE, lock_holder, read_regular
from repro.plans import Job

# The slot a job lands on sets its device and threads (``run-job --device/--threads``), not the plan;
# the job itself still refuses a run that ran with others.
SLOT_KEYS = ("runner.device", "runner.torch_threads")

# How many differing keys a run's line names before "and N more".
SHOWN_KEYS = 3


def changed_runs(jobs: Sequence[Job]) -> list[tuple[Job, list[str]]]:
    """Each job whose run directory holds a config that differs from the job's, with the keys that
    differ. A run without a config.json (not started), with a damaged one (``read_run`` reports it
    corrupt) or one that may not be read (the scheduler fails it in one line) is not compared."""
    from algorithms.train import config_changes

    found = []
    for job in jobs:
        path = job.run_dir / CONFIG_FILE
        try:
            stored = json.loads(read_regular(path))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(stored, dict) and (changes := config_changes(stored, job.config, SLOT_KEYS)):
            found.append((job, changes))
    return found


def _line(job: Job, changes: list[str]) -> str:
    more = f" and {len(changes) - SHOWN_KEYS} more" if len(changes) > SHOWN_KEYS else ""
    return f"  {job.key}: config differs at {'; '.join(changes[:SHOWN_KEYS])}{more}"


def check_unchanged(jobs: Sequence[Job], rerun_changed: bool, dry_run: bool) -> frozenset[str]:
    """Raise ``ConfigError`` (after one line per changed run on stderr) when runs of ``jobs`` ran
    with another config; with ``rerun_changed``, move each aside instead (said, not done, on a dry
    run) so that it runs afresh. Returns the keys of the jobs that run afresh so."""
    changed = changed_runs(jobs)
    if not changed:
        return frozenset()
    for job, changes in changed:
        print(_line(job, changes), file=sys.stderr)
    experiment = jobs[0].run_dir.parents[2]
    if not rerun_changed:
        raise ConfigError(
            f"{len(changed)} run(s) in {experiment} ran with another config (listed above); nothing was "
            "run: give a new experiment (--exp NAME), or --rerun-changed to run them afresh (their "
            "directories are kept as seed<k>.changed-<time>)"
        )
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    for job, _ in changed:
        kept = job.run_dir.with_name(f"{job.run_dir.name}.changed-{stamp}")
        if dry_run:
            print(f"--rerun-changed: would keep {job.run_dir} as {kept.name} and run it afresh")
            continue
        _move_aside(job.run_dir, kept)
        print(f"--rerun-changed: kept {job.run_dir} as {kept.name}; running it afresh")
    return frozenset(job.key for job, _ in changed)


def _move_aside(run_dir: Path, kept: Path) -> None:
    """Rename ``run_dir`` to ``kept``: refused (``ConfigError``) while another process writes it, or
    where the directory may not be renamed."""
    if (pid := lock_holder(run_dir)) is not None:
        raise ConfigError(
            f"--rerun-changed: {'pid ' + str(pid) if pid else 'another process'} is writing {run_dir}"
        )
    try:
        run_dir.rename(kept)
    except OSError as error:
        raise ConfigError(f"--rerun-changed: cannot rename {run_dir}: {error.strerror or error}") from None
