"""The names of a run directory's files and the directory's own path (docs/ARCHITECTURE.md,
Contract 5), the states a run can be in, the errors naming a directory this process may not read or
a run file that is not a regular file, and the one way run files are read (``read_regular``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from algorithms.rundir.atomic import file_kind

CONFIG_FILE = "config.json"
METADATA_FILE = "metadata.json"
STATUS_FILE = "status.json"
PROGRESS_FILE = "progress.csv"
EVAL_FILE = "eval.csv"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_FILE = "latest.pt"
PREVIOUS_CHECKPOINT_FILE = "previous.pt"
LOCK_FILE = ".lock"
TENSORBOARD_DIR = "tb"
LOG_FILE = "log.txt"

EVAL_COLUMNS = ("env_steps", "frames", "updates", "wall_time_s", "episode", "return", "length")

# config.json's record of where values not from a settings file came from (``TrainConfig.origins``).
ORIGINS_KEY = "origins"
# metadata.json key of the values in effect that other config fields set (``declared_effective_values``).
EFFECTIVE_VALUES_KEY = "effective_values"
# metadata.json keys of a start that can change from one start of a run to the next (code, host,
# command): the top level holds the first start's, and each entry of RESUMES_KEY a later start's, with
# its time and the env steps it continued from, so a run resumed on another host or from other code
# says so (``RunDir.note_resume``).
START_KEYS = (
    "git_commit", "git_dirty", "platform", "hostname", "cpu_model", "cpu_count", "gpu_model", "gpu_count",
    "cuda_visible_devices", "argv",
)  # fmt: skip
RESUMES_KEY = "resumes"
# Where code shipped without its .git (the Ray backend's runtime env) finds the commit and dirtiness of
# the checkout it came from: JSON {"commit": ..., "dirty": ...}, read by ``git_state``.
CODE_STATE_ENV = "RLREPRO_CODE_STATE"

# config.json keys that change what a run shows, not what it computes: a run resumed with TensorBoard
# event files turned on (or off) is the same run, and two seeds of an arm that differ only there ran
# one configuration.
RESULT_NEUTRAL_KEYS = ("runner.tensorboard",)

RunStatus = Literal["complete", "incomplete", "corrupt"]
RunState = Literal["running", "complete", "failed", "interrupted"]


class RunUnreadable(ValueError):
    """A run directory, or one above it, that this process may not read (its permissions); ``str``
    is one line naming it. A ``ValueError`` so that the analysis and report commands, which turn bad
    input into one line, do so here too."""

    @classmethod
    def from_error(cls, error: OSError, path: Path) -> RunUnreadable:
        where = error.filename or path
        return cls(f"{where}: {error.strerror or error} (check its permissions)")


class RunFileNotRegular(RunUnreadable):
    """A file a run or an experiment keeps (``progress.csv``, ``status.json``, ``plan.json``, ...) that
    is a FIFO, socket, device or directory: opening a FIFO blocks until a writer comes, reading a
    device may never end, so it is refused unread; ``str`` is one line naming it."""


def check_regular(path: Path) -> None:
    """``RunFileNotRegular`` when ``path`` exists and is not a regular file; a symlink is followed, so
    one to a regular file passes (a run directory assembled from links reads as its targets), one to a
    FIFO or device does not. Absent: nothing to refuse (the caller says what a missing file means).
    Only ``stat``: nothing is opened."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file at ``path`` (``check_regular`` first, so a FIFO or device is never
    opened); ``FileNotFoundError`` when absent. Opened non-blocking and checked again on the open
    descriptor: a FIFO swapped in between the two looks still cannot block the read."""
    check_regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        return f.read()


def _not_regular(path: Path, mode: int) -> RunFileNotRegular:
    return RunFileNotRegular(
        f"{path} is {file_kind(mode)}, not a regular file: refused unread (move it out of the way)"
    )


def run_path(root: Path, experiment: str, arm: str, env: str, seed: int) -> Path:
    return Path(root) / experiment / arm / env / f"seed{int(seed)}"
