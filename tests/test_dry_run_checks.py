"""The dry run runs every check the run does (issue 57, item 7): a dirty tree under a plan with an
[analysis] section, and a ``--root`` that cannot hold run directories, refuse the dry run with the
run's own line, exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cartpole_plan
import pytest

from algorithms.rundir import git_state
from repro import preregister
from repro.cli import main as repro_main

REPO = Path(__file__).resolve().parents[1]
PLAN = cartpole_plan.PLAN.format(head=cartpole_plan.GOOD_HEAD, endpoint='test = "mann_whitney"')


def dirty_checkout(path: Path) -> Path:
    """A git checkout with a commit and an uncommitted change to a tracked file."""
    path.mkdir()
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@example.com",
                                                  "commit", "-qm", "c"]):  # fmt: skip
        if args[0] == "add":
            (path / "train.py").write_text("a = 1\n")
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    (path / "train.py").write_text("a = 2\n")
    return path


def test_a_dirty_tree_refuses_the_dry_run_as_it_refuses_the_run(tmp_path, capsys, monkeypatch):
    code = dirty_checkout(tmp_path / "code")
    monkeypatch.setattr(preregister, "git_state", lambda code_dir=None: git_state(code))
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    root = tmp_path / "runs"
    args = ["run", str(plan), "--seeds", "0-1", "--profile", "smoke", "--root", str(root), "--no-estimate",
            "--no-progress", "--no-probe"]  # fmt: skip
    found = []
    for extra in (["--dry-run"], []):
        assert repro_main([*args, *extra]) == 2
        found.append(capsys.readouterr().err.strip().splitlines())
    assert found[0] == found[1] and len(found[0]) == 1, found
    assert "uncommitted changes" in found[0][0] and "--allow-dirty" in found[0][0]
    assert not root.exists()
    assert repro_main([*args, "--dry-run", "--allow-dirty"]) == 0
    assert not root.exists()


def run_line(root: Path, dry_run: bool) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "repro", "run", "dqn_cartpole", "--seeds", "1", "--profile", "smoke",
         "--root", str(root), "--no-estimate", "--no-progress", *(["--dry-run"] if dry_run else [])],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return done.returncode, done.stderr.strip().splitlines()


@pytest.mark.parametrize("where", ["/proc/nope", "under a file"])
def test_a_root_that_cannot_be_written_refuses_the_dry_run_as_it_refuses_the_run(tmp_path, where):
    if where == "under a file":
        (tmp_path / "a_file").write_text("")
        root = tmp_path / "a_file" / "runs"
    else:
        root = Path(where)
    dry, run = run_line(root, dry_run=True), run_line(root, dry_run=False)
    assert dry == run, (dry, run)
    code, lines = dry
    assert (
        code == 2
        and len(lines) == 1
        and lines[0].startswith(f"error: cannot write run directories under {root}")
    )
