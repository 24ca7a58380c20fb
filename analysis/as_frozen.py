"""``--as-frozen``: read an experiment with the analysis code of its freeze, not this checkout's.

A frozen ``[analysis]`` section is pre-registered only when read by the code that was frozen with it
(``protocol.freeze_check``); once ``analysis/`` or ``protocol/`` change, this checkout's reading is
exploratory and says so. ``python -m analysis study runs/X --as-frozen`` (and ``python -m reports
build ... --as-frozen``) does what the page tells a reader to do by hand: check out the freeze's commit
in a temporary git worktree, run the same command there with this interpreter, and remove the
worktree. Paths on the command line are read from the caller's directory as usual: the command runs
there, with the worktree first on the import path, so every package it imports (the reading code, the
protocol, the data tables under them) is the frozen commit's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from algorithms.rundir import git_output
from protocol.files import REPO_ROOT
from protocol.registration import RECORD_FILE, read_record

FLAG = "--as-frozen"
# Runs the command module from the worktree given as the first argument, as ``python -m`` would,
# but with the worktree ahead of the caller's directory (which ``-m`` would put first) on sys.path.
_BOOT = (
    "import runpy, sys; tree, module = sys.argv[1], sys.argv[2]; sys.path.insert(0, tree); "
    "sys.argv = [module, *sys.argv[3:]]; runpy.run_module(module, run_name='__main__', alter_sys=True)"
)
# A checkout of this repository takes about 2 s here; a slow disk gets ample room.
CHECKOUT_TIMEOUT_S = 600


def frozen_commit(experiment: Path) -> str:
    """The one commit the experiment's freezes were made at; a ``ValueError`` naming the record when
    it has none, or freezes at several commits (each seed set is then read from its own checkout)."""
    record = read_record(experiment)
    commits = sorted({str(e.get("commit")) for e in record if isinstance(e, dict) and e.get("commit")})
    path = Path(experiment) / RECORD_FILE
    if not commits:
        raise ValueError(f"{path}: no frozen section to read as frozen (no freeze recorded)")
    if len(commits) > 1:
        raise ValueError(
            f"{path}: freezes at {len(commits)} commits ({', '.join(c[:12] for c in commits)}): read each "
            "seed set from its own checkout (git worktree add --detach DIR COMMIT)"
        )
    return commits[0]


def _git(args: list[str], repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, timeout=CHECKOUT_TIMEOUT_S, check=False
    )


def run_as_frozen(experiment: Path, module: str, argv: list[str], repo: Path = REPO_ROOT) -> int:
    """Run ``python -m <module> <argv>`` with the code of ``experiment``'s frozen commit, checked out
    from ``repo`` into a temporary worktree that is removed afterwards; its exit code. ``argv`` is the
    command line without ``FLAG``."""
    commit = frozen_commit(experiment)
    if git_output(["cat-file", "-e", f"{commit}^{{commit}}"], repo) is None:
        raise ValueError(
            f"{Path(experiment) / RECORD_FILE}: its frozen commit {commit[:12]} is not in the repository at "
            f"{repo} (fetch it, or read from a clone that has it)"
        )
    _git(["worktree", "prune"], repo)  # a worktree left by a killed reading: its registration goes
    with tempfile.TemporaryDirectory(prefix="rlrepro-as-frozen-") as scratch:
        tree = Path(scratch) / f"frozen-{commit[:12]}"
        added = _git(["worktree", "add", "--detach", str(tree), commit], repo)
        if added.returncode != 0:
            raise ValueError(f"git worktree add {tree} {commit[:12]} failed: {added.stderr.strip()}")
        try:
            print(f"{module}: reading with the frozen code of commit {commit[:12]} ({tree})", file=sys.stderr)
            return subprocess.run(
                [sys.executable, "-c", _BOOT, str(tree), module, *argv], check=False
            ).returncode
        finally:
            _git(["worktree", "remove", "--force", str(tree)], repo)


def add_as_frozen(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        FLAG,
        action="store_true",
        help="read with the code of the experiment's frozen commit, checked out in a temporary git "
        "worktree: the reading its pre-registration names",
    )


def as_frozen_main(module: str, experiment: Path, argv: list[str]) -> int:
    """A command's ``FLAG`` path: ``run_as_frozen`` with the rest of its command line; a bad record or a
    missing commit is one line and exit 2."""
    try:
        return run_as_frozen(experiment, module, [a for a in argv if a != FLAG])
    except ValueError as e:
        print(f"{module}: {e}", file=sys.stderr)
        return 2
