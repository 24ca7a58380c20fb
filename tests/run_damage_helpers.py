"""Shared by the tests of damaged run files (tests/test_run_damage.py, tests/test_run_damage_jobs.py,
tests/test_run_damage_readers.py, tests/test_run_damage_recovery.py): a plan of one A2C run on
CartPole, the exact rows of a complete run, a torn or lost last row, a run written without training,
and a command run with file permissions applied as to any user.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

from tiny_setting import a2c_cartpole_setting

from algorithms.rundir import RunDir, read_run, run_path

REPO = Path(__file__).resolve().parents[1]
STEPS, LOG_EVERY = 2000, 200
ROWS = list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))


def write_plan(where: Path, n_steps: int = STEPS) -> Path:
    setting = where / "a2c_cartpole.toml"
    setting.write_text(a2c_cartpole_setting(n_steps, LOG_EVERY, "test"))
    plan = where / "cartpole.toml"
    plan.write_text(
        f'[plan]\ntitle = "t"\narms = ["{setting}"]\nenvs = ["CartPole-v1"]\nenvs_source = "test"\n'
    )
    return plan


def rows(run: Path) -> list[int]:
    return read_run(run).progress["env_steps"].astype(int).tolist()


def check_exact(run: Path) -> None:
    data = read_run(run)
    assert data.status == "complete" and not data.problems, data.problems
    assert rows(run) == ROWS
    assert data.eval["env_steps"].tolist() == [STEPS] * len(data.eval) and len(data.eval) >= 1


def tear_last_row(path: Path, how: str) -> None:
    """``torn``: the last row cut in half (no newline); ``half_with_newline``: cut in half, newline kept;
    ``lost``: the whole last row gone."""
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    cut = start + (len(data) - start) // 2
    path.write_bytes({"torn": data[:cut], "half_with_newline": data[:cut] + b"\n", "lost": data[:start]}[how])


def write_run(root: Path, exp: str, seed: int, rows_: int = 2) -> Path:
    run = RunDir.open(run_path(root, exp, "arm", "minatar_breakout", seed), {"a": 1}, {"seed": seed})
    for k in range(1, rows_ + 1):
        run.append_progress({"env_steps": 100 * k, "frames": 100 * k, "return_mean": float(k + seed)})
    if rows_:
        run.append_eval([{"env_steps": 100 * rows_, "frames": 100 * rows_, "updates": 1, "wall_time_s": 1,
                          "episode": 0, "return": 1.0 + seed, "length": 3}])  # fmt: skip
        run.set_status("complete")
    run.close()
    return run.path


def without_file_permission_bypass() -> None:
    """``preexec_fn``: as root, drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so
    that the command run next holds neither (capabilities(7): at execve root's permitted set is the
    bounding set) and file permissions apply to it as to any user."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # linux/capability.h: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def as_user(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200,
                          preexec_fn=without_file_permission_bypass)  # fmt: skip
