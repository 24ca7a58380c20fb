"""The README's set-up lines, run as a newcomer types them: in a fresh shell with no profile, a bare
PATH and the repository as the working directory, they put ``rlrepro`` on the PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def setup_lines() -> list[str]:
    """The commands of the README's first bash block under a "## Set up" heading, comments cut."""
    text = (REPO / "README.md").read_text()
    found = re.search(r"^## Set up.*?^```bash\n(.*?)^```", text, re.S | re.M)
    assert found, "README.md has no '## Set up' section with a bash block"
    return [line.split("#")[0].strip() for line in found.group(1).splitlines() if line.split("#")[0].strip()]


def fresh_shell(lines: list[str]) -> subprocess.CompletedProcess:
    env = {"HOME": os.environ.get("HOME", "/tmp"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    script = "set -e\n" + "\n".join(lines)
    bash = shutil.which("bash") or "/bin/bash"
    return subprocess.run(
        [bash, "--noprofile", "--norc", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=1200,
    )  # fmt: skip


def test_the_readmes_set_up_lines_put_rlrepro_on_the_path():
    lines = setup_lines()
    assert lines[-1].startswith("rlrepro ")
    done = fresh_shell(lines)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "r2d1_breakout_cpu" in done.stdout


def test_without_the_activation_line_rlrepro_is_not_found():
    """The line the README adds is the one that matters: a fresh shell without it has no rlrepro."""
    lines = [line for line in setup_lines() if "activate" not in line]
    done = fresh_shell(lines)
    assert done.returncode == 127 and "rlrepro: command not found" in done.stderr


def test_the_readme_opens_with_the_main_job_and_the_tests_and_stays_a_guide():
    """A newcomer's first two commands come first and exist as make targets; the README stays a
    user's guide (it had grown to 212 lines of findings and figures, which live in docs/results/)."""
    text = (REPO / "README.md").read_text()
    first = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M).group(1)
    commands = [line.split("#")[0].strip() for line in first.splitlines()]
    assert commands == ["make reproduce-r2d1", "make test"]
    for command in commands:
        done = subprocess.run([*command.split(), "-n"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    assert len(text.splitlines()) <= 160
