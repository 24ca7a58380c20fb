"""No tracebacks (issue 57, item 6): a standard output that is full or closed by its reader stops
every command (repro, analysis, reports) with one line on stderr, and a model larger than the
machine's memory is refused in one line naming the key and the memory it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analysis.synthetic import SyntheticArm, write_experiment

REPO = Path(__file__).resolve().parents[1]
ARMS = {"a": SyntheticArm(1.0, {"algo": "dqn"}), "b": SyntheticArm(1.2, {"algo": "dqn"})}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stdout")
    return write_experiment(root, "exp", ARMS, ["CartPole-v1"], [0, 1], n_logs=3, eval_episodes=2)


def commands(experiment: Path) -> dict[str, list[str]]:
    return {
        "repro list": ["repro", "list"],
        "repro show": ["repro", "show", "dqn_cartpole"],
        "repro summary": ["repro", "summary", str(experiment)],
        "analysis study": ["analysis", "study", str(experiment), "--reps", "100"],
        "analysis ending": ["analysis", "ending", str(experiment), "--reps", "100"],
        "reports build": ["reports", "build", str(experiment), "--reps", "100",
                          "--out", str(experiment / "r.html")],
    }  # fmt: skip


def assert_one_line(code: int, err: str, prog: str, why: str) -> None:
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0] == f"{prog}: cannot write to standard output: {why}", err


@pytest.mark.parametrize("name", ["repro list", "repro show", "repro summary", "analysis study",
                                  "analysis ending", "reports build"])  # fmt: skip
def test_a_full_stdout_stops_in_one_line(experiment, name):
    argv = commands(experiment)[name]
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=300)  # fmt: skip
    assert_one_line(done.returncode, done.stderr, argv[0], "No space left on device")


@pytest.mark.parametrize("name", ["repro list", "analysis study", "reports build"])
def test_a_stdout_closed_by_its_reader_stops_in_one_line(experiment, name):
    """As ``| head -1`` once it has its line: the reading end closed before the command writes."""
    argv = commands(experiment)[name]
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert_one_line(proc.returncode, err, argv[0], "Broken pipe")


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_model_larger_than_memory_is_refused_in_one_line(tmp_path, dry_run):
    root = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "repro", "run", "dqn_cartpole", "--seeds", "1", "--profile", "smoke",
         "--set", "algo.mlp_hidden_sizes=[100000,100000]", "--root", str(root), "--no-estimate",
         "--no-progress", *(["--dry-run"] if dry_run else [])],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --set algo.mlp_hidden_sizes=[100000,100000]: ")
    assert "one of its tensors alone needs 37.3 GiB" in lines[0]
    assert not root.exists()
