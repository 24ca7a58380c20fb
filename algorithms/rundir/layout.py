"""The names of a run directory's files and the directory's own path (docs/ARCHITECTURE.md,
Contract 5), the states a run can be in, and the error naming a directory this process may not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

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

# metadata.json key of the values in effect that other config fields set (``declared_effective_values``).
EFFECTIVE_VALUES_KEY = "effective_values"

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


def run_path(root: Path, experiment: str, arm: str, env: str, seed: int) -> Path:
    return Path(root) / experiment / arm / env / f"seed{int(seed)}"
