"""Run directories: the on-disk format every run writes and analysis reads.

Layout (docs/ARCHITECTURE.md, Contract 5)::

    runs/<experiment>/<arm>/<env>/seed<k>/
        config.json  metadata.json  status.json  progress.csv  eval.csv  checkpoints/latest.pt  tb/  log.txt

Crash safety: JSON files and checkpoints are written to a temporary file in the same directory,
fsynced, then renamed over the target (``os.replace`` is atomic on POSIX), so a reader sees the old
or the new file, never half of one. Tables are appended one row at a time with flush + fsync; a
kill can leave at most a torn last line, which ``read_table`` drops and reports.

Integrity under faults (docs/results/run_integrity.md):

* **One writer.** ``RunDir.open`` takes an exclusive ``flock`` on ``<run>/.lock`` and holds it until
  ``close``; the kernel drops it when the process dies, so a kill never leaves a stale lock. A second
  process finds it taken (``RunBusy``, ``lock_holder``) and writes nothing.
* **Checkpoints.** A new checkpoint is written to a temporary file, verified (every zip member's
  CRC, ``verify_checkpoint``), and only then renamed over ``latest.pt``, the old one kept as
  ``previous.pt``.
* **Recovery on every start** (``RunDir.recover``): stale temporary files are removed; a
  ``latest.pt`` that does not load is replaced by ``previous.pt``, or dropped when that does not
  load either; then ``progress.csv`` and ``eval.csv`` are cut back to the checkpoint's env steps, or
  emptied without one, so the tables always agree with the state the run continues from.
* **Tables agree with the checkpoint's own log.** A checkpoint records the env steps of the last
  progress row written before it (``runner.last_log_steps``); when ``progress.csv`` lacks that row
  after the cut (a torn or lost last row: a copy cut short, a damaged disk), the run resumes from
  ``previous.pt`` when the table agrees with that one, else starts afresh, and says so in one line.
* **Reading.** ``read_run`` calls a run whose ``env_steps`` repeat or go backwards, or whose rows
  are not rows of numbers, corrupt: two writers or an unrepaired restart wrote it, and its counters
  cannot be trusted. A run whose ``status.json`` says complete but whose ``progress.csv`` ends in a
  torn row is read with a note, and is not finished for ``is_complete``: rerunning its plan
  repairs it.
* **Unreadable directories** (permissions) raise ``RunUnreadable``, one line naming the directory.
* **Only regular files are read** (``read_regular``): a run file (or an experiment's ``plan.json``)
  that is a FIFO, socket, device or directory raises ``RunFileNotRegular``, one line naming it, and
  is never opened (a FIFO would block the reader until a writer came, a device might never end). A
  symlink is followed: one to a regular file is read as its target.
* **Rows on schedule.** A run is finished (``completion``) only when ``progress.csv`` holds every row
  of the runner's schedule (``schedule_gap``); a row lost from the middle is named, and the next
  start passes over checkpoints the table no longer agrees with, as for a lost last row.
* **Returns are finite.** A return in ``eval.csv`` or ``progress.csv`` that is infinite, or NaN
  where episodes were played, makes the run corrupt, named in one line: no score is made of it.

The package imports torch only inside the checkpoint and RNG-state functions, so ``analysis`` can
read runs without importing the training stack. Its modules, one concern each: ``layout`` (file
names, paths, ``RunUnreadable``, ``read_regular``), ``atomic`` (crash-safe writes), ``lock`` (one
writer), ``meta`` (metadata.json, RNG states), ``tables`` (CSV tables, ``schedule_gap``), ``writer``
(``RunDir``), ``reader`` (``read_run``, ``find_runs``, ``completion``). Every public name is
importable from here.
"""

from algorithms.rundir.atomic import NotARegularFile, atomic_write_bytes, atomic_write_json, check_output
from algorithms.rundir.layout import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    CODE_STATE_ENV,
    CONFIG_FILE,
    EFFECTIVE_VALUES_KEY,
    EVAL_COLUMNS,
    EVAL_FILE,
    LOCK_FILE,
    LOG_FILE,
    METADATA_FILE,
    ORIGINS_KEY,
    PREVIOUS_CHECKPOINT_FILE,
    PROGRESS_FILE,
    RESULT_NEUTRAL_KEYS,
    RESUMES_KEY,
    START_KEYS,
    STATUS_FILE,
    TENSORBOARD_DIR,
    RunFileNotRegular,
    RunState,
    RunStatus,
    RunUnreadable,
    check_regular,
    read_regular,
    run_path,
)
from algorithms.rundir.lock import (
    LOCK_FDS_ENV,
    RunBusy,
    acquire_lock,
    lock_holder,
    release_lock,
    set_status_if_free,
    take_lock,
)
from algorithms.rundir.meta import (
    RECORDED_PACKAGES,
    collect_metadata,
    declared_effective_values,
    git_output,
    git_state,
    rng_state,
    set_rng_state,
    start_record,
)
from algorithms.rundir.reader import RunData, completion, find_runs, is_complete, read_run, read_status
from algorithms.rundir.tables import CsvTable, read_table, schedule_gap, sound_length
from algorithms.rundir.writer import RunDir, config_differences, verify_checkpoint

__all__ = [
    "CHECKPOINT_DIR",
    "CHECKPOINT_FILE",
    "CONFIG_FILE",
    "EFFECTIVE_VALUES_KEY",
    "ORIGINS_KEY",
    "EVAL_COLUMNS",
    "CODE_STATE_ENV",
    "EVAL_FILE",
    "LOCK_FDS_ENV",
    "LOCK_FILE",
    "LOG_FILE",
    "METADATA_FILE",
    "PREVIOUS_CHECKPOINT_FILE",
    "PROGRESS_FILE",
    "RECORDED_PACKAGES",
    "RESULT_NEUTRAL_KEYS",
    "RESUMES_KEY",
    "START_KEYS",
    "STATUS_FILE",
    "TENSORBOARD_DIR",
    "CsvTable",
    "NotARegularFile",
    "RunBusy",
    "RunData",
    "RunDir",
    "RunFileNotRegular",
    "RunState",
    "RunStatus",
    "RunUnreadable",
    "acquire_lock",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_output",
    "check_regular",
    "collect_metadata",
    "completion",
    "config_differences",
    "declared_effective_values",
    "find_runs",
    "git_output",
    "git_state",
    "is_complete",
    "lock_holder",
    "read_regular",
    "read_run",
    "read_status",
    "read_table",
    "release_lock",
    "rng_state",
    "run_path",
    "schedule_gap",
    "set_rng_state",
    "set_status_if_free",
    "sound_length",
    "start_record",
    "take_lock",
    "verify_checkpoint",
]
