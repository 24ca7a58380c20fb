"""Outputs are written only to regular files or new paths (issue 57, item 2): a symlink, FIFO, device
or directory given as a command's output file is refused in one line, exit 2, and left as it was.
Before, the atomic rename replaced it (as root, ``--csv /dev/full`` replaced the system's device
with a regular file) and a symlink was replaced instead of its target written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from special_files import not_a_file

from algorithms.rundir import NotARegularFile, check_output
from analysis.__main__ import main as analysis_main
from analysis.random_scores import main as random_scores_main
from analysis.synthetic import SyntheticArm, write_experiment
from reports.__main__ import main as reports_main

REPO = Path(__file__).resolve().parents[1]
ARMS = {"a": SyntheticArm(1.0, {"algo": "dqn"}), "b": SyntheticArm(1.2, {"algo": "dqn"})}
SPECIAL_KINDS = ("symlink", "dangling symlink", "FIFO", "directory", "device")


def snapshot(path: Path) -> tuple:
    """What the refusal must leave unchanged: the thing's kind, a symlink's target and its text."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        target = Path(os.readlink(path))
        return mode, target, target.read_text() if target.exists() else None
    return mode, sorted(os.listdir(path)) if stat.S_ISDIR(mode) else None


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("outputs")
    return write_experiment(root, "exp", ARMS, ["CartPole-v1"], [0, 1], n_logs=3, eval_episodes=2)


def assert_refused(code: int, err: str, path: Path, before: tuple) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and str(path) in lines[0], (code, err)
    assert "not a regular file" in lines[0]
    assert snapshot(path) == before


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
@pytest.mark.parametrize("option", ["--csv", "--markdown"])
def test_study_refuses_an_output_that_is_not_a_file(experiment, tmp_path, capsys, kind, option):
    path = not_a_file(kind, tmp_path / "out")
    before = snapshot(path)
    code = analysis_main(["study", str(experiment), "--reps", "100", option, str(path)])
    assert_refused(code, capsys.readouterr().err, path, before)


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_report_refuses_an_out_that_is_not_a_file(experiment, tmp_path, capsys, kind):
    path = not_a_file(kind, tmp_path / "report.html")
    before = snapshot(path)
    code = reports_main(["build", str(experiment), "--reps", "100", "--out", str(path)])
    assert_refused(code, capsys.readouterr().err, path, before)


def test_report_refuses_a_figure_file_that_is_not_a_file(experiment, tmp_path, capsys):
    figures = tmp_path / "figures"
    assert reports_main(["build", str(experiment), "--reps", "100", "--out", str(tmp_path / "first.html"),
                         "--figures", str(figures)]) == 0  # fmt: skip
    capsys.readouterr()
    first = sorted(figures.iterdir())[0]
    first.unlink()
    path = not_a_file("symlink", first)
    before = snapshot(path)
    out = tmp_path / "second.html"
    code = reports_main(
        ["build", str(experiment), "--reps", "100", "--out", str(out), "--figures", str(figures)]
    )
    assert_refused(code, capsys.readouterr().err, path, before)
    assert not out.exists()


def test_random_scores_refuses_an_out_that_is_not_a_file(tmp_path, capsys):
    path = not_a_file("symlink", tmp_path / "scores.csv")
    before = snapshot(path)
    code = random_scores_main(["--envs", "CartPole-v1", "--episodes", "1", "--out", str(path)])
    assert_refused(code, capsys.readouterr().err, path, before)


def test_a_bench_refuses_its_out_before_measuring(tmp_path):
    path = not_a_file("FIFO", tmp_path / "replay.csv")
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_replay", "--out", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert_refused(done.returncode, done.stderr, path, snapshot(path))


def test_the_system_device_itself_is_refused():
    with pytest.raises(NotARegularFile, match="a device"):
        check_output(Path("/dev/full"))
