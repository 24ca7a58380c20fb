"""Shared by the run integrity tests (tests/test_run_integrity.py,
tests/test_run_integrity_checkpoints.py): a run's progress rows, checked complete and in order.
"""

from __future__ import annotations

from pathlib import Path

from algorithms.rundir import read_run

REPO = Path(__file__).resolve().parents[1]


def env_steps(run_dir: Path) -> list[int]:
    return read_run(run_dir).progress["env_steps"].astype(int).tolist()


def check_rows(run_dir: Path, n_steps: int, log_every: int) -> None:
    """Complete, every progress row once in order, one evaluation at the end."""
    data = read_run(run_dir)
    assert data.status == "complete", data.problems
    assert data.progress["env_steps"].astype(int).tolist() == list(range(log_every, n_steps + 1, log_every))
    assert data.eval["env_steps"].tolist() == [n_steps] * len(data.eval) and len(data.eval) >= 1
