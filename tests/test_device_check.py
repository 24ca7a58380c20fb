"""A CUDA device this machine does not have (issue 57, item 9): ``--set runner.device=cuda`` (or an
index past the last GPU) is refused in one line before any run directory is created, where the
local scheduler ran it on a CPU slot under an arm named ``..._device-cuda``. CUDA is hidden from the
child (``CUDA_VISIBLE_DEVICES=""``), so the test holds on a GPU machine too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("device", ["cuda", "cuda:3"])
def test_a_cuda_device_this_machine_lacks_is_refused(tmp_path, device, dry_run):
    root = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "repro", "run", "dqn_cartpole", "--seeds", "1", "--profile", "smoke",
         "--set", f"runner.device={device}", "--root", str(root), "--no-estimate", "--no-progress",
         *(["--dry-run"] if dry_run else [])],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0] == f"error: runner.device={device}: this machine has no CUDA device"
    assert not root.exists()
