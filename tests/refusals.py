"""A bad plan's refusal as a user meets it: ``repro run`` in a fresh process, one line on stderr,
exit 2, no experiment directory written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def refused_run_line(plan: Path, root: Path) -> str:
    """Run ``plan`` for one smoke seed into ``root``; assert the refusal's shape and return its line."""
    done = subprocess.run(
        [sys.executable, "-m", "repro", "run", str(plan), "--seeds", "1", "--profile", "smoke",
         "--root", str(root), "--no-estimate", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert not root.exists()
    return lines[0]
