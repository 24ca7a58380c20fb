"""``--as-frozen``: a study or report read with the code of the experiment's frozen commit, checked out
in a temporary worktree that is gone afterwards; the caller's paths and exit code kept; bad records one
line and exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from analysis.__main__ import main as analysis_main
from analysis.as_frozen import frozen_commit, run_as_frozen
from analysis.synthetic import SyntheticArm, write_experiment
from protocol.files import REPO_ROOT
from protocol.registration import RECORD_FILE
from reports.__main__ import main as reports_main

GIT_USER = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
# The module a fake checkout holds: it prints where it runs from, with what arguments, and exits 3 when
# told to fail.
REPORTER = (
    "import json, os, sys\n"
    "print(json.dumps({'file': __file__, 'argv': sys.argv[1:], 'cwd': os.getcwd(), 'who': WHO}))\n"
    "sys.exit(3 if 'fail' in sys.argv else 0)\n"
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *GIT_USER, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def _module(root: Path, who: str) -> None:
    (root / "fakemod").mkdir(parents=True)
    (root / "fakemod" / "__init__.py").write_text("")
    (root / "fakemod" / "__main__.py").write_text(f"WHO = {who!r}\n" + REPORTER)


def _record(exp: Path, *commits: str) -> Path:
    exp.mkdir(parents=True, exist_ok=True)
    freezes = [{"seed_set": "confirmatory", "commit": c} for c in commits]
    (exp / RECORD_FILE).write_text(json.dumps({"freezes": freezes}))
    return exp


@pytest.fixture
def frozen_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _module(repo, "frozen")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "frozen")
    commit = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "fakemod" / "__main__.py").write_text(
        "WHO = 'changed since'\n" + REPORTER
    )  # the checkout moved on
    return repo, commit


def test_the_frozen_commit_runs_from_a_worktree_that_is_removed_afterwards(tmp_path, frozen_repo, capfd,
                                                                          monkeypatch):  # fmt: skip
    """The caller's directory holds a module of the same name (as main's checkout holds ``analysis``):
    ``python -m`` would import it first; the frozen one must run, with the caller's arguments and
    directory."""
    repo, commit = frozen_repo
    caller = tmp_path / "caller"
    _module(caller, "caller")
    monkeypatch.chdir(caller)
    exp = _record(tmp_path / "runs" / "exp", commit)
    assert run_as_frozen(exp, "fakemod", ["study", "rel/path", "--x"], repo=repo) == 0
    out, err = capfd.readouterr()
    seen = json.loads(out)
    assert seen["who"] == "frozen" and seen["argv"] == ["study", "rel/path", "--x"]
    assert Path(seen["cwd"]) == caller.resolve()
    assert f"frozen-{commit[:12]}" in seen["file"] and f"frozen code of commit {commit[:12]}" in err
    assert not Path(seen["file"]).exists()
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    assert run_as_frozen(exp, "fakemod", ["fail"], repo=repo) == 3
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


def test_records_that_name_no_single_commit_here_are_refused(tmp_path, frozen_repo):
    repo, commit = frozen_repo
    with pytest.raises(ValueError, match="no frozen section to read as frozen"):
        frozen_commit(tmp_path / "none")
    with pytest.raises(ValueError, match=r"freezes at 2 commits \(0000000000aa, " + commit[:12]):
        frozen_commit(_record(tmp_path / "two", commit, "0000000000aa"))
    with pytest.raises(ValueError, match=f"its frozen commit {'1' * 12} is not in the repository"):
        run_as_frozen(_record(tmp_path / "gone", "1" * 40), "fakemod", [], repo=repo)
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


def test_bad_records_are_one_line_and_exit_2_from_both_commands(tmp_path, capsys):
    exp = tmp_path / "exp"
    exp.mkdir()
    assert analysis_main(["study", str(exp), "--as-frozen"]) == 2
    assert reports_main(["build", str(exp), "--as-frozen"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["analysis", "reports"]
    assert all("no frozen section to read as frozen" in line for line in err)


@pytest.mark.skipif(
    subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True).returncode != 0,
    reason="the project is not a git checkout",
)
def test_a_study_and_a_report_read_as_frozen_at_this_commit(tmp_path, capfd):
    """End to end with this repository: a freeze at HEAD is read by HEAD's code from a worktree; the
    page names that commit and the outputs land where the caller asked."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    commit = head.stdout.strip()
    arms = {a: SyntheticArm(s, {"algo": a}) for a, s in (("a", 0.5), ("b", 0.6))}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1], n_logs=3, eval_episodes=2)
    _record(exp, commit)
    markdown, page = tmp_path / "study.md", tmp_path / "page.html"
    assert (
        analysis_main(["study", str(exp), "--markdown", str(markdown), "--reps", "100", "--as-frozen"]) == 0
    )
    assert f"code: git commit {commit[:12]}" in markdown.read_text()
    assert reports_main(["build", str(exp), "--out", str(page), "--reps", "100", "--as-frozen"]) == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    err = capfd.readouterr().err
    assert err.count(f"reading with the frozen code of commit {commit[:12]}") == 2
