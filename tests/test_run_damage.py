"""Damaged and unreadable run files, and the smaller faults of a hostile tester's second round: a
damaged ``status.json`` does not stop a plan; a torn or lost progress row before a valid checkpoint
is repaired from the last point the table and a checkpoint agree on, and said; reading (summary,
study, report) never crashes on runs without rows or with garbage in them; directories that may
not be read give one line and a non-zero exit; a full disk is said and not retried; ``run-job``
stopped by SIGTERM says interrupted; two schedulers write one attempt header between them.

Real jobs are A2C on CartPole (``tiny_setting``), the cheapest real training.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from interrupts import wait_for
from special_files import not_a_file
from tiny_setting import a2c_cartpole_setting

from algorithms.algos import a2c
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import EVAL_COLUMNS, LOG_FILE, RunDir, completion, read_run, run_path, schedule_gap
from algorithms.train import train
from analysis.__main__ import main as analysis_main
from analysis.synthetic import SyntheticArm, write_experiment
from reports.__main__ import main as reports_main
from repro.cli import main as repro_main
from repro.scheduler import detect_slots, run_local, spawn_job
from repro.summary import summary_text
from repro.tasks import Task, last_env_steps

REPO = Path(__file__).resolve().parents[1]
STEPS, LOG_EVERY = 2000, 200
ROWS = list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))


# --- a plan of one A2C run, trained once per module and copied by each test -------------------------
def write_plan(where: Path, n_steps: int = STEPS) -> Path:
    setting = where / "a2c_cartpole.toml"
    setting.write_text(a2c_cartpole_setting(n_steps, LOG_EVERY, "test"))
    plan = where / "cartpole.toml"
    plan.write_text(
        f'[plan]\ntitle = "t"\narms = ["{setting}"]\nenvs = ["CartPole-v1"]\nenvs_source = "test"\n'
    )
    return plan


def run_args(plan: Path, seeds: int = 1) -> list[str]:
    root = str(plan.parent / "runs")
    return ["run", str(plan), "--seeds", str(seeds), "--profile", "paper", "--root", root, "--jobs", "1",
            "--no-estimate", "--no-progress"]  # fmt: skip


def run_of(plan: Path, seed: int = 0) -> Path:
    return plan.parent / "runs" / "cartpole-paper" / "a2c_cartpole" / "CartPole-v1" / f"seed{seed}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("trained")
    plan = write_plan(where)
    done = subprocess.run([sys.executable, "-m", "repro", *run_args(plan)], cwd=REPO, capture_output=True,
                          text=True, timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return where


@pytest.fixture
def plan(trained, tmp_path) -> Path:
    """A copy of the trained plan's files and its complete run."""
    shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
    return tmp_path / "cartpole.toml"


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


# --- a damaged status.json ----------------------------------------------------------------------------
STATUS_DAMAGE = {
    "random_bytes": b"\x8f\xff\x00\x13garbage\xfe",
    "json_list": b"[]",
    "json_string": b'"complete"',
    "state_not_text": b'{"state": 5}',
    "empty": b"",
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(STATUS_DAMAGE))
def test_a_damaged_status_json_is_said_and_the_run_resumed(plan, kind, capfd):
    run = run_of(plan)
    (run / "status.json").write_bytes(STATUS_DAMAGE[kind])
    assert summary_text(plan.parent / "runs" / "cartpole-paper")  # the reader copes, before and after
    assert repro_main(run_args(plan)) == 0
    out, err = capfd.readouterr()
    said = [line for line in err.splitlines() if "status.json" in line]
    assert len(said) == 1 and said[0].endswith("running it again"), err
    assert "Traceback" not in out + err and "1 complete, 0 skipped" in out
    check_exact(run)
    assert json.loads((run / "status.json").read_text())["state"] == "complete"


# --- a torn or lost progress row before a valid checkpoint -------------------------------------------
CONFIG = TrainConfig(
    algo="a2c",
    algo_config=a2c.Config(hidden_sizes=(16,)),
    env=EnvConfig(id="CartPole-v1", kind="gym"),
    sampler=SamplerConfig(batch_T=5, batch_B=2, eval_episodes=1, eval_max_steps=20),
    runner=RunnerConfig(n_steps=STEPS, log_interval_steps=LOG_EVERY, seed=1),
)


@pytest.mark.parametrize("how", ["torn", "half_with_newline", "lost"])
def test_a_lost_row_before_the_checkpoint_is_rerun_from_previous_and_said(tmp_path, monkeypatch, capfd, how):
    """Stopped after its 5th checkpoint (1,000 env steps), then the row at 1,000 damaged: before, the
    resumed run went on from 1,000 and the table read [..., 800, 1200, ...] with no word of it."""
    run_dir = tmp_path / "run"
    saves, real_save = [0], RunDir.save_checkpoint

    def save_then_stop(self, state):
        real_save(self, state)
        saves[0] += 1
        if saves[0] == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(CONFIG, run_dir)
    monkeypatch.setattr(RunDir, "save_checkpoint", real_save)
    assert rows(run_dir) == ROWS[:5]
    tear_last_row(run_dir / "progress.csv", how)
    capfd.readouterr()

    train(CONFIG, run_dir)
    err = capfd.readouterr().err
    assert err.count("\n") == 1, err
    assert "progress.csv ends at env_steps 800 without the row at 1,000 (torn or lost) that " in err
    assert "checkpoints/latest.pt logged: resuming from previous.pt at 800 env steps" in err
    check_exact(run_dir)


def test_without_a_checkpoint_the_table_agrees_with_the_run_starts_afresh(tmp_path, capfd):
    run = RunDir.open(tmp_path / "r", {"a": 1}, {"seed": 0})
    for steps in (100, 200):
        run.append_progress({"env_steps": steps})
    run.save_checkpoint({"counters": {"env_steps": 200}, "runner": {"last_log_steps": 200}})
    tear_last_row(run.path / "progress.csv", "lost")
    checkpoint, repaired = run.recover()
    assert checkpoint is None and not run.checkpoint_path.exists()
    assert repaired == (
        "progress.csv ends at env_steps 100 without the row at 200 (torn or lost) that checkpoints/latest.pt "
        "logged: starting afresh, progress.csv and eval.csv emptied"
    )
    assert not (run.path / "progress.csv").exists()
    run.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["torn", "half_with_newline", "lost"])
def test_a_complete_run_with_a_damaged_last_row_is_not_skipped_but_repaired(plan, capfd, how):
    run = run_of(plan)
    tear_last_row(run / "progress.csv", how)
    exp = plan.parent / "runs" / "cartpole-paper"
    # Not complete to the summary either (one rule: ``completion``), and listed with why.
    assert "status.json calls complete that are not" in summary_text(exp)
    if how != "lost":
        assert "dropped a torn last line" in summary_text(exp)
    assert repro_main(run_args(plan)) == 0
    out, err = capfd.readouterr()
    said = "the last row of progress.csv is torn" if how != "lost" else "progress.csv ends at 1,800 of 2,000"
    assert f"a2c_cartpole/CartPole-v1/seed0: status.json says complete but {said}" in err, err
    assert "1 complete, 0 skipped" in out and "Traceback" not in out + err
    assert "resuming from previous.pt at 1,800 env steps" in (run / LOG_FILE).read_text()
    check_exact(run)
    assert "calls complete that are not" not in summary_text(exp)


def test_cutting_a_table_back_keeps_the_bytes_of_the_rows_it_keeps(tmp_path):
    """A resumed run's earlier rows must not change: re-serialising them through pandas wrote floats
    with 15 significant digits (0.04209942100033004 back as 0.04209942100033: the timings of 192 of
    205 progress tables of a test run), a NaN logged as ``nan`` back as an empty cell and an int of
    a column with NaNs as a float. The two-node Ray test compares a retried run's rows with the lost
    attempt's byte for byte, and failed when the retry had rows to cut (a row streamed to the driver
    before its checkpoint, more likely under load)."""
    run = RunDir.open(tmp_path / "r", {"a": 1}, {"seed": 0})
    rows_ = ((100, "", float("nan"), 0.04209942100033004), (200, 2, 1.5, 0.1), (300, 3, 2.0, 0.2))
    for steps, episodes, ret, seconds in rows_:
        run.append_progress({"env_steps": steps, "episodes": episodes, "return": ret, "time_s": seconds})
    before = (run.path / "progress.csv").read_bytes()
    assert run.progress.truncate_after("env_steps", 200) == 2
    assert (run.path / "progress.csv").read_bytes() == before[: before.index(b"300,")]
    run.close()


# --- reading an experiment with no rows yet, or garbage in its runs -------------------------------------
EVAL_HEADER = b"env_steps,frames,updates,wall_time_s,episode,return,length\n"
GARBAGE = {
    "progress_random_bytes": {"progress.csv": bytes(range(256)) * 2},
    "progress_header_only": {"progress.csv": b"env_steps,frames,return_mean\n"},
    "progress_text": {"progress.csv": b"env_steps,frames,return_mean\n100,100,abc\n200,200,x\n"},
    "progress_without_env_steps": {"progress.csv": b"frames,return_mean\n100,1\n"},
    "progress_short_row_inside": {"progress.csv": b"env_steps,frames,return_mean\n100,100\n200,200,1\n"},
    "eval_text": {
        "eval.csv": b"env_steps,frames,updates,wall_time_s,episode,return,length\n200,200,1,1,0,abc,3\n"
    },  # fmt: skip
    "eval_one_column": {"eval.csv": b"env_steps\n200\n"},
    "eval_random_bytes": {"eval.csv": bytes(range(255, -1, -1))},
    "config_list": {"config.json": b"[]"},
    "metadata_bytes": {"metadata.json": b"\xff\xfe\x00"},
    "status_list": {"status.json": b"[]"},
    "status_bytes": {"status.json": b"\x8f\xff"},
    # Returns that are not finite numbers (issue 57, item 5): before, a nan gave "P = nan [nan, nan]"
    # and an inf an infinite IQM with 30 lines of warnings. A NaN training return is damage only in a
    # row that logged episodes (with none, the logger writes NaN by design).
    "eval_nan": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,nan,3\n"},
    "eval_inf": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,inf,3\n"},
    "eval_minus_inf": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,-inf,3\n"},
    "eval_return_empty": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,,3\n"},
    "progress_inf": {"progress.csv": b"env_steps,frames,return_mean\n100,100,1.0\n200,200,inf\n"},
    "progress_nan_after_episodes": {
        "progress.csv": b"env_steps,frames,return_mean,episodes_logged\n100,100,nan,0\n200,200,nan,2\n"
    },
    "plan_bytes": {"../../../plan.json": b"\xff\xfe{"},
    "plan_list": {"../../../plan.json": b'["a"]'},
}


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


def read_everything(exp: Path, tmp_path: Path, capsys) -> dict[str, tuple[int, str, str]]:
    """Exit code, stdout and stderr of the summary, the study and the report of ``exp``."""
    found, report = {}, str(tmp_path / "r.html")
    for name, call in (
        ("summary", lambda: repro_main(["summary", str(exp)])),
        ("study", lambda: analysis_main(["study", str(exp), "--reps", "100"])),
        ("report", lambda: reports_main(["build", str(exp), "--reps", "100", "--out", report])),
    ):
        code = call()
        out, err = capsys.readouterr()
        found[name] = (code, out, err)
    return found


def test_reports_and_study_of_runs_without_rows_say_what_is_missing(tmp_path, capsys):
    exp = tmp_path / "exp"
    for seed in (0, 1):  # jobs just started: config, metadata, status running, no row yet
        write_run(tmp_path, "exp", seed, rows_=0)
    found = read_everything(exp, tmp_path, capsys)
    assert all(code == 0 for code, _, _ in found.values()), found
    study = found["study"][1]
    assert "from 0 complete runs" in study and "no complete run has a score yet" in study
    assert study.count("progress.csv missing") == 2
    assert "progress.csv missing" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_in_a_run_is_listed_not_a_crash(tmp_path, capsys, kind):
    exp = tmp_path / "exp"
    write_run(tmp_path, "exp", 0)
    bad = write_run(tmp_path, "exp", 1)
    for name, data in GARBAGE[kind].items():
        path = bad / name
        if path.parent.is_file():  # a directory where a run file belongs
            path.parent.unlink()
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    found = read_everything(exp, tmp_path, capsys)
    for name, (code, _, err) in found.items():
        assert code == 0 and err == "", (name, err)
    study = found["study"][1]
    if kind.startswith("plan"):  # the runs are fine; the plan file is named with what is wrong
        assert (
            f"Plan file unusable (expected runs and arm order not taken from it): {exp / 'plan.json'}"
            in study
        )
        assert "from 2 complete runs" in study
    else:  # the damaged run is left out and listed with why
        assert "from 1 complete runs" in study
        assert "arm/minatar_breakout/seed1: " in study.split("## Runs not used")[1]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_return_is_never_a_score(tmp_path, capsys, value):
    """Both episodes of one run's last evaluation returned ``value``: before, the verdict read "b - a =
    +nan [+nan, +nan]" with "P(b > a) = nan" (inf: an IQM of -inf and 8 lines of RuntimeWarnings). Now
    the run is damaged, named in one line, and the verdict is made of the other runs."""
    arms = {"a": SyntheticArm(1.0, {"algo": "dqn"}), "b": SyntheticArm(1.2, {"algo": "dqn"})}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1, 2], n_logs=3, eval_episodes=2)
    table = exp / "a" / "CartPole-v1" / "seed1" / "eval.csv"
    lines = table.read_text().splitlines()
    for i in (-2, -1):
        cells = lines[i].split(",")
        cells[EVAL_COLUMNS.index("return")] = value
        lines[i] = ",".join(cells)
    table.write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
        assert reports_main(["build", str(exp), "--reps", "100", "--out", str(tmp_path / "r.html")]) == 0
    out, err = capsys.readouterr()
    verdict = next(line for line in out.splitlines() if line.startswith("**Verdict"))
    assert not re.search(r"\b(nan|inf)\b", verdict) and "over 1 game x 2 seeds per arm" in verdict, verdict
    named = f"eval.csv damaged: return {value} at line {len(lines) - 1} is not a finite number"
    assert f"a/CartPole-v1/seed1: {named}" in out and named in (tmp_path / "r.html").read_text()
    assert err == "", err


def test_a_nan_training_return_of_a_row_without_episodes_is_no_damage(tmp_path):
    """The logger writes NaN return columns where no episode ended since the last row."""
    run = write_run(tmp_path, "exp", 0)
    (run / "progress.csv").write_bytes(
        b"env_steps,frames,return_mean,episodes_logged\n100,100,nan,0\n200,200,1.5,2\n"
    )
    data = read_run(run)
    assert data.status == "complete" and not data.problems, data.problems


# --- run files that are not regular files (issue 57, item 3) ----------------------------------------------
# Before, a FIFO named progress.csv or eval.csv blocked the summary, the study and the report forever
# (the open waited for a writer), a device was read until memory ran out, and a directory named
# status.json was read as damage. Each is refused in one line naming it, exit 2, without being opened;
# the timeout turns a regression (a reader blocked on the FIFO) into a failure instead of a hang.
NOT_REGULAR_FILES = ("progress.csv", "eval.csv", "status.json", "config.json", "metadata.json", "plan.json")
NOT_REGULAR_KINDS = ("FIFO", "socket", "directory", "device")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", NOT_REGULAR_KINDS)
@pytest.mark.parametrize("name", NOT_REGULAR_FILES)
def test_a_run_file_that_is_not_a_regular_file_is_refused_unread(tmp_path, capsys, name, kind):
    exp = tmp_path / "exp"
    write_run(tmp_path, "exp", 0)
    bad = (exp if name == "plan.json" else write_run(tmp_path, "exp", 1)) / name
    bad.unlink(missing_ok=True)
    not_a_file(kind, bad)
    for command, (code, _, err) in read_everything(exp, tmp_path, capsys).items():
        if command == "summary" and name == "plan.json":  # the summary reads runs only
            assert code == 0 and err == "", err
            continue
        assert code == 2 and err.count("\n") == 1, (command, err)
        assert f"{bad} is a {kind}, not a regular file" in err, err
        assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["progress.csv", "status.json"])
def test_a_fifo_in_a_run_is_refused_by_the_dry_run_and_failed_by_the_run(plan, capfd, name):
    """The dry run refuses in one line, exit 2; the run fails that run in one line and goes on."""
    run = run_of(plan)
    (run / name).unlink()
    os.mkfifo(run / name)
    assert repro_main(run_args(plan) + ["--dry-run"]) == 2
    said = f"{run / name} is a FIFO, not a regular file: refused unread (move it out of the way)"
    assert capfd.readouterr().err == f"error: {said}\n"
    assert repro_main(run_args(plan)) == 1
    out, err = capfd.readouterr()
    assert f"a2c_cartpole/CartPole-v1/seed0: FAILED ({said})" in err and "Traceback" not in out + err, err


def test_a_run_file_linked_to_a_regular_file_is_read_as_its_target(tmp_path, capsys):
    """The choice ``read_regular`` makes: a symlink is followed; only what it reaches must be a file."""
    exp = tmp_path / "exp"
    write_run(tmp_path, "exp", 0)
    run = write_run(tmp_path, "exp", 1)
    kept = tmp_path / "kept-progress.csv"
    (run / "progress.csv").rename(kept)
    (run / "progress.csv").symlink_to(kept)
    assert read_run(run).status == "complete"
    assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
    assert "from 2 complete runs" in capsys.readouterr().out


# --- directories that may not be read -------------------------------------------------------------------
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


@pytest.fixture
def locked_out(tmp_path):
    """Makes a directory unreadable for the test, and readable again after it (for tmp_path's removal)."""
    chmodded: list[Path] = []

    def lock(path: Path) -> None:
        path.chmod(0)
        chmodded.append(path)

    yield lock
    for path in chmodded:
        path.chmod(0o755)


@pytest.mark.parametrize("what", ["experiment", "run"])
def test_unreadable_directories_give_one_line_and_a_non_zero_exit(tmp_path, locked_out, what):
    exp = tmp_path / "exp"
    write_run(tmp_path, "exp", 0)
    unreadable = exp if what == "experiment" else write_run(tmp_path, "exp", 1)
    locked_out(unreadable)
    for command, code in ((["repro", "summary"], 1), (["analysis", "study"], 2), (["reports", "build"], 2)):
        done = as_user(*command, str(exp))
        assert done.returncode == code, (command, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, (command, done.stderr)
        assert str(unreadable) in done.stderr and "Permission denied (check its permissions)" in done.stderr
        assert "no run directories" not in done.stdout + done.stderr


@pytest.mark.slow
def test_the_scheduler_fails_an_unreadable_run_in_one_line_and_runs_the_others(trained, tmp_path, locked_out):
    plan = write_plan(tmp_path, 400)
    unreadable = run_of(plan, 0)
    unreadable.mkdir(parents=True)
    locked_out(unreadable)
    done = as_user("repro", *run_args(plan, seeds=2))
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert f"a2c_cartpole/CartPole-v1/seed0: FAILED ({unreadable}" in done.stderr
    assert "Permission denied (check its permissions)" in done.stderr
    assert "1 complete, 0 skipped (already complete), 1 failed" in done.stdout
    assert read_run(run_of(plan, 1)).status == "complete"


# --- run-job stopped by SIGTERM, a full disk, two schedulers at once ---------------------------------------
@pytest.mark.slow
def test_run_job_started_by_hand_and_sigtermed_says_interrupted(tmp_path):
    plan = write_plan(tmp_path, 200_000)
    run = tmp_path / "run"
    job = subprocess.Popen(
        [sys.executable, "-m", "repro", "run-job", "--arm", str(tmp_path / "a2c_cartpole.toml"), "--profile",
         "paper", "--env", "CartPole-v1", "--seed", "0", "--run-dir", str(run)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_for(lambda: last_env_steps(run) >= 2 * LOG_EVERY, 120, "two progress rows", job)
    job.send_signal(signal.SIGTERM)
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 130 and "Traceback" not in out, out[-3000:]
    assert json.loads((run / "status.json").read_text())["state"] == "interrupted"
    assert plan.exists()


# The real run-job, with the disk filling up at its third progress row.
FULL_DISK_JOB = textwrap.dedent(
    """
    import errno, sys
    from algorithms import rundir
    from repro.cli import main
    real, written = rundir.CsvTable.append_many, []
    def append_many(self, rows):
        if self.path.name == "progress.csv" and len(written) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        written.extend(rows)
        real(self, rows)
    rundir.CsvTable.append_many = append_many
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
def test_a_full_disk_is_said_by_the_scheduler_and_not_retried(tmp_path):
    write_plan(tmp_path)
    run = tmp_path / "runs" / "seed0"
    argv = (sys.executable, "-c", FULL_DISK_JOB, "run-job", "--arm", str(tmp_path / "a2c_cartpole.toml"),
            "--profile", "paper", "--env", "CartPole-v1", "--seed", "0", "--run-dir", str(run))  # fmt: skip
    events: list[str] = []
    [outcome] = run_local([Task("r", run, argv, STEPS)], detect_slots(1, 1, n_gpus=0, cores=1), retries=2,
                          progress=False, poll_s=0.05, on_event=events.append)  # fmt: skip
    assert (outcome.state, outcome.attempts) == ("failed", 1)
    assert events == [f"r: FAILED ({outcome.error})"]
    assert outcome.error.startswith("no space left on device (exit code 74), not retried after 1 attempt(s)")
    log = (run / LOG_FILE).read_text()
    assert log.count("=== attempt") == 1 and "Traceback" not in log
    assert f"error: no space left on device writing {run}/progress.csv" in log
    status = json.loads((run / "status.json").read_text())
    assert status == {**status, "state": "failed", "error": outcome.error}


# A scheduler of one real job whose start waits for a file to exist (standing in for the imports of a
# loaded machine, which take seconds before the job takes its run's lock), printing its events.
SCHEDULER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from repro.scheduler import Task, detect_slots, run_local
    run, go, job = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    slow_start = (
        "import os, sys, time\\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\\n"
        "from repro.cli import main\\nsys.exit(main(sys.argv[2:]))"
    )
    argv = (sys.executable, "-c", slow_start, go, *job)
    slots = detect_slots(1, 1, n_gpus=0, cores=1)
    say = lambda line: print(line, flush=True)
    [outcome] = run_local([Task("r", run, argv, 400)], slots, progress=False, poll_s=0.05, on_event=say)
    say(f"outcome {outcome.state}")
    """
)


@pytest.mark.slow
def test_two_schedulers_at_once_write_one_attempt_header(tmp_path):
    """The second scheduler looks at the run while the first one's job is still starting (not yet
    holding the run's lock): before, it saw the run free, wrote a header and started a job too."""
    write_plan(tmp_path, 400)
    run, go = tmp_path / "runs" / "seed0", tmp_path / "go"
    arm = str(tmp_path / "a2c_cartpole.toml")
    job = ["run-job", "--arm", arm, "--profile", "paper", "--env", "CartPole-v1", "--seed", "0", "--run-dir",
           str(run)]  # fmt: skip
    cmd = [sys.executable, "-c", SCHEDULER, str(run), str(go), *job]
    outputs = [tmp_path / "first.out", tmp_path / "second.out"]
    with open(outputs[0], "w") as out:
        first = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    wait_for(lambda: (run / LOG_FILE).exists(), 120, "the first scheduler's header", first)
    with open(outputs[1], "w") as out:
        second = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def decided() -> bool:  # it waits for the run (found it held), or it has started a job of its own
        return "is writing" in outputs[1].read_text() or (run / LOG_FILE).read_text().count("===") > 1

    wait_for(decided, 120, "the second scheduler to act", second)
    go.touch()  # the jobs may start now
    for proc in (first, second):
        proc.wait(timeout=600)
    first_out, second_out = (path.read_text() for path in outputs)
    assert "outcome complete" in first_out and "outcome skipped" in second_out, first_out + second_out
    log = (run / LOG_FILE).read_text()
    assert log.count("=== attempt") == 1 and "did not start" not in log, log
    assert "is writing" in second_out
    data = read_run(run)
    assert data.status == "complete" and data.progress["env_steps"].tolist() == [200, 400]


# --- a changed config never touches a finished run; one rule of "complete" (issue 47, items 1, 9) --------
def files_of(run: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_changed_config_names_the_run_and_key_and_touches_nothing(plan, capfd, dry_run):
    """Before, the dry run called the run complete and the run retried it 3x and marked it failed."""
    run = run_of(plan)
    before = files_of(run)
    write_plan(plan.parent, 2 * STEPS)  # the plan's arm, its budget edited
    assert repro_main(run_args(plan) + (["--dry-run"] if dry_run else [])) == 2
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert (
        lines[0]
        == "a2c_cartpole/CartPole-v1/seed0: config differs at 'runner.n_steps': stored 2000, now 4000"
    )
    assert (
        lines[1].startswith("error: 1 run(s) in ")
        and "--exp NAME" in lines[1]
        and "--rerun-changed" in lines[1]
    )
    assert len(lines) == 2 and "complete" not in out
    assert files_of(run) == before


@pytest.mark.slow
def test_rerun_changed_keeps_the_old_run_and_runs_it_afresh(plan, capfd):
    run = run_of(plan)
    before = files_of(run)
    write_plan(plan.parent, 2 * STEPS)
    assert repro_main(run_args(plan) + ["--rerun-changed", "--dry-run"]) == 0
    out, _ = capfd.readouterr()
    assert f"--rerun-changed: would keep {run} as seed0.changed-" in out and "1 not started" in out, out
    assert files_of(run) == before
    assert repro_main(run_args(plan) + ["--rerun-changed", "--verbose"]) == 0
    out, err = capfd.readouterr()
    [kept] = run.parent.glob("seed0.changed-*")
    assert f"--rerun-changed: kept {run} as {kept.name}; running it afresh" in out
    assert {kept / p.relative_to(run): data for p, data in before.items()} == files_of(kept)
    assert rows(run)[-1] == 2 * STEPS and read_run(run).status == "complete"
    assert "1 runs  1 complete" in out  # the kept directory is not a run of the experiment


@pytest.mark.slow
def test_tensorboard_on_a_rerun_is_not_a_change(plan, capfd):
    """Before, the job refused to resume: config differs at 'runner.tensorboard'."""
    run = run_of(plan)
    tear_last_row(run / "progress.csv", "lost")
    assert repro_main(run_args(plan) + ["--tensorboard"]) == 0
    out, err = capfd.readouterr()
    assert "1 complete, 0 skipped" in out and "differs" not in out + err, out + err
    check_exact(run)
    assert any((run / "tb").iterdir())


@pytest.mark.slow
def test_a_run_missing_whole_rows_is_unfinished_to_every_reader(plan, capfd):
    """The dry run, the summary and the study go by the scheduler's rule (``completion``): before,
    all three called a run complete whose last rows were gone, while ``run`` repaired it."""
    run = run_of(plan)
    table = run / "progress.csv"
    table.write_bytes(b"".join(table.read_bytes().splitlines(keepends=True)[:-3]))  # 1,400 of 2,000
    exp = plan.parent / "runs" / "cartpole-paper"
    assert repro_main(run_args(plan) + ["--dry-run"]) == 0
    out, _ = capfd.readouterr()
    assert "resumes at 1.4k" in out and "done: 0 complete, 1 part-way" in out, out
    text = summary_text(exp)
    assert "0 complete" in text and "status.json calls complete that are not" in text
    assert "progress.csv ends at 1,400 of 2,000 env steps" in text
    assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
    assert "from 0 complete runs" in capfd.readouterr().out
    assert repro_main(run_args(plan)) == 0
    check_exact(run)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["missing", "random_bytes"])
def test_a_run_without_a_sound_status_json_is_unfinished_to_every_reader(plan, capfd, kind):
    """Its last row reaches the budget: before, the dry run called it complete while ``run`` reran it
    and the summary and the study left it out (issue 57, item 4). Now all four go by ``completion``."""
    run = run_of(plan)
    if kind == "missing":
        (run / "status.json").unlink()
    else:
        (run / "status.json").write_bytes(STATUS_DAMAGE[kind])
    exp = plan.parent / "runs" / "cartpole-paper"
    assert repro_main(run_args(plan) + ["--dry-run"]) == 0
    out, _ = capfd.readouterr()
    assert "resumes at 2k" in out and "done: 0 complete, 1 part-way, 0 not started" in out, out
    if kind != "missing":  # the line the run says before it repairs it
        assert "a2c_cartpole/CartPole-v1/seed0: status.json unreadable" in out and "running it again" in out
    assert "1 runs  0 complete" in summary_text(exp)
    assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
    assert "from 0 complete runs" in capfd.readouterr().out
    assert repro_main(run_args(plan)) == 0
    assert "1 complete, 0 skipped" in capfd.readouterr().out
    check_exact(run)


@pytest.mark.slow
def test_a_run_missing_a_middle_row_is_unfinished_to_every_reader_and_repaired(plan, capfd):
    """The row at 1,000 env steps lost from a complete run: before, every reader called it complete."""
    run = run_of(plan)
    table = run / "progress.csv"
    lines = table.read_bytes().splitlines(keepends=True)
    table.write_bytes(b"".join(lines[:5] + lines[6:]))
    said = (
        "status.json says complete but progress.csv lacks the row due at 1,000 env steps (it goes from 800 "
        "to 1,200)"
    )
    exp = plan.parent / "runs" / "cartpole-paper"
    assert repro_main(run_args(plan) + ["--dry-run"]) == 0
    out, _ = capfd.readouterr()
    assert "done: 0 complete, 1 part-way" in out and f"a2c_cartpole/CartPole-v1/seed0: {said}" in out, out
    assert said in summary_text(exp)
    assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
    assert "from 0 complete runs" in capfd.readouterr().out
    assert repro_main(run_args(plan)) == 0
    out, err = capfd.readouterr()
    assert f"{said}: repairing it" in err and "1 complete, 0 skipped" in out, out + err
    assert "starting afresh" in (run / LOG_FILE).read_text()
    check_exact(run)


def test_schedule_gap_finds_a_lost_row_from_the_rows_alone():
    """Hand-computed: rows every 200 env steps of batches of 10 (``sampler_itrs`` counts batches)."""
    assert schedule_gap([200, 400, 600, 800], [20, 40, 60, 80], 200) is None
    assert (
        schedule_gap([200, 400, 800, 1000], [20, 40, 80, 100], 200)
        == "lacks the row due at 600 env steps (it goes from 400 to 800)"
    )
    assert schedule_gap([400], [40], 200) == "lacks the row due at 200 env steps (it goes from 0 to 400)"
    # A row just past each multiple (batches of 80 against 25,000), and the last at the budget.
    assert schedule_gap([25040, 50000, 75040, 80000], [313, 625, 938, 1000], 25000) is None
    # Batches larger than the interval: every batch logs, each past several multiples.
    assert schedule_gap([250, 500, 750], [1, 2, 3], 100) is None
    # Without the iterations the batch is not known, so nothing is claimed.
    assert schedule_gap([200, 800], [math.nan, math.nan], 200) is None


def scheduled_run(root: Path, lost: int | None = None) -> Path:
    """A complete run of 1,000 env steps, a row every 200 (batches of 10), the row at ``lost`` removed."""
    path = run_path(root, "exp", "arm", "minatar_breakout", 0)
    run = RunDir.open(path, {"runner": {"n_steps": 1000, "log_interval_steps": 200}}, {"seed": 0})
    for steps in range(200, 1001, 200):
        run.append_progress({"env_steps": steps, "sampler_itrs": steps // 10, "return_mean": 1.0,
                             "episodes_logged": 1})  # fmt: skip
    run.append_eval([{"env_steps": 1000, "frames": 1000, "updates": 1, "wall_time_s": 1, "episode": 0,
                      "return": 1.0, "length": 3}])  # fmt: skip
    run.set_status("complete")
    run.close()
    if lost is not None:
        table = path / "progress.csv"
        table.write_bytes(b"".join(x for x in table.read_bytes().splitlines(keepends=True)
                                   if not x.startswith(f"{lost},".encode())))  # fmt: skip
    return path


def test_a_lost_middle_row_makes_a_complete_run_unfinished_to_every_reader(tmp_path, capsys):
    assert completion(scheduled_run(tmp_path / "whole")) == (True, None)
    run = scheduled_run(tmp_path, lost=600)
    said = "status.json says complete but progress.csv lacks the row due at 600 env steps (it goes from 400 "
    said += "to 800)"
    assert completion(run) == (False, f"{said}: repairing it")
    data = read_run(run)
    assert data.status == "incomplete" and said in data.problems
    assert "runs status.json calls complete that are not" in summary_text(tmp_path / "exp")
    assert analysis_main(["study", str(tmp_path / "exp"), "--reps", "100"]) == 0
    assert "from 0 complete runs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("lost", "expected"),
    [
        (200, (None, "progress.csv lacks the row due at 200 env steps (it goes from 100 to 300) that "
                     "checkpoints/latest.pt logged; progress.csv lacks the row due at 200 env steps (it goes "
                     "from 100 to 300) that checkpoints/previous.pt logged: starting afresh, progress.csv "
                     "and eval.csv emptied")),
        (400, (300, "progress.csv lacks the row due at 400 env steps (it goes from 300 to 500) that "
                    "checkpoints/latest.pt logged: resuming from previous.pt at 300 env steps, tables cut "
                    "back to it")),
    ],
)  # fmt: skip
def test_a_lost_middle_row_is_repaired_from_a_checkpoint_before_it_or_afresh(tmp_path, lost, expected):
    """A resumed run never fills a gap before its checkpoint: before, it went on from ``latest.pt`` and
    the table kept the hole for good."""
    run = RunDir.open(tmp_path / "r", {"runner": {"log_interval_steps": 100}}, {"seed": 0})
    for steps in range(100, 501, 100):
        run.append_progress({"env_steps": steps, "sampler_itrs": steps // 10})
        if steps in (300, 500):
            run.save_checkpoint({"counters": {"env_steps": steps}, "runner": {"last_log_steps": steps}})
    table = run.path / "progress.csv"
    table.write_bytes(b"".join(x for x in table.read_bytes().splitlines(keepends=True)
                               if not x.startswith(f"{lost},".encode())))  # fmt: skip
    checkpoint, said = run.recover()
    assert (checkpoint and checkpoint["counters"]["env_steps"], said) == expected
    run.close()


# --- a read-only run directory (issue 47, item 6) ---------------------------------------------------------
@pytest.mark.slow
def test_a_read_only_run_fails_in_one_line_not_retried_and_the_others_run(plan):
    """Before, its job failed 3x, then the scheduler died of a PermissionError marking it failed."""
    run = run_of(plan)
    tear_last_row(run / "progress.csv", "lost")
    (run / "status.json").write_text('{"state": "interrupted", "error": null}')
    before = files_of(run)
    run.chmod(0o555)
    try:
        done = as_user("repro", *run_args(plan, seeds=2))
    finally:
        run.chmod(0o755)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    said = f"a2c_cartpole/CartPole-v1/seed0: FAILED ({run} is read-only (chmod u+w it, or run into another"
    assert said in done.stderr and "retrying" not in done.stderr, done.stderr
    assert "1 complete, 0 skipped (already complete), 1 failed" in done.stdout
    assert files_of(run) == before and read_run(run_of(plan, 1)).status == "complete"


# --- a full disk or a read-only directory in the report path (issue 47, item 7) ---------------------------
# ``reports`` or ``analysis`` with the file size limited to ``argv[1]`` bytes: a write past it fails
# (EFBIG), at the point and in the way a full disk's ENOSPC does.
SMALL_DISK = textwrap.dedent(
    """
    import importlib, resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
    sys.exit(importlib.import_module(sys.argv[2] + ".__main__").main(sys.argv[3:]))
    """
)
REPORT_WRITERS = {
    "reports": lambda exp, out: ["build", str(exp), "--reps", "100", "--out", str(out)],
    "analysis": lambda exp, out: ["study", str(exp), "--reps", "100", "--csv", str(out)],
}


@pytest.mark.parametrize("tool", sorted(REPORT_WRITERS))
@pytest.mark.parametrize("fault", ["full_disk", "read_only"])
def test_report_and_study_writes_are_whole_or_nothing_and_one_line(tmp_path, tool, fault):
    """Before: a traceback, and a 0-byte (or cut) report.html or CSV left behind."""
    for seed in (0, 1):
        write_run(tmp_path, "exp", seed)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "result"
    argv = REPORT_WRITERS[tool](tmp_path / "exp", out)
    if fault == "full_disk":
        done = subprocess.run([sys.executable, "-c", SMALL_DISK, "64", tool, *argv], cwd=REPO,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        why = "File too large"
    else:
        out_dir.chmod(0o555)
        try:
            done = as_user(tool, *argv)
        finally:
            out_dir.chmod(0o755)
        why = "Permission denied"
    assert done.returncode == 1 and done.stderr == f"{tool}: cannot write {out}: {why}\n", done.stderr[-3000:]
    assert list(out_dir.iterdir()) == []


# --- a stop in a job's first second (issue 47, items 11 and 12) --------------------------------------------
@pytest.mark.slow
def test_a_stop_in_a_jobs_first_second_is_never_lost(tmp_path):
    """50 jobs, started as the scheduler starts them, each sent the scheduler's stop (SIGINT to its
    group) 0 to 1.5 s in: within the interpreter's start-up and the imports, where before one stop in
    35 was swallowed ("Exception ignored in ... _get_module_lock"; the job ran to its end) and one
    before Python's handler killed the interpreter (exit -2). Ten at a time: the load stretches the
    imports, the window tested."""
    write_plan(tmp_path, 200_000)
    arm = str(tmp_path / "a2c_cartpole.toml")
    for first in range(0, 50, 10):
        jobs = []
        for k in range(first, first + 10):
            log = tmp_path / f"job{k}.log"
            argv = [sys.executable, "-m", "repro", "run-job", "--arm", arm, "--profile", "paper", "--env",
                    "CartPole-v1", "--seed", "0", "--run-dir", str(tmp_path / f"run{k}")]  # fmt: skip
            with open(log, "wb") as out:
                proc = spawn_job(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
            jobs.append((time.monotonic() + 0.03 * k, proc, log))
        for at, proc, _ in jobs:
            time.sleep(max(0.0, at - time.monotonic()))
            os.killpg(proc.pid, signal.SIGINT)
        for _, proc, log in jobs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            text = log.read_text()
            assert proc.returncode == 130 and "Exception ignored" not in text, (
                log.name,
                proc.returncode,
                text,
            )


# --- smaller faults (issue 47, item 12) ---------------------------------------------------------------------
def test_a_checkpoint_copied_from_another_seed_is_not_resumed(tmp_path, capfd):
    """Before, a run resumed from another seed's checkpoint and ended a mixed run marked complete."""
    runs = {}
    for seed in (0, 1):
        run = RunDir.open(tmp_path / f"seed{seed}", {"runner": {"seed": seed}}, {"seed": seed})
        run.append_progress({"env_steps": 100})
        run.save_checkpoint({"counters": {"env_steps": 100}, "runner": {"last_log_steps": 100}})
        runs[seed] = run
    shutil.copyfile(runs[0].checkpoint_path, runs[1].checkpoint_path)
    runs[1].previous_checkpoint_path.unlink(missing_ok=True)
    checkpoint, said = runs[1].recover()
    assert checkpoint is None and "another run's checkpoint" in said and "starting afresh" in said, said
    assert runs[0].recover() == (runs[0].load_checkpoint(), None)  # its own is resumed as before
    for run in runs.values():
        run.close()


def test_a_run_stopped_at_its_start_is_interrupted_not_corrupt(tmp_path, capsys):
    """The scheduler's status.json beside the log of a job stopped before it wrote config.json."""
    run = run_path(tmp_path, "exp", "arm", "CartPole-v1", 0)
    run.mkdir(parents=True)
    (run / LOG_FILE).write_text("=== attempt 1 on cpu0\n")
    (run / "status.json").write_text('{"state": "interrupted", "error": "the scheduler was interrupted"}')
    assert read_run(run).status == "incomplete"
    assert "corrupt" not in summary_text(tmp_path / "exp")


def test_a_job_stopped_before_its_run_opened_does_not_point_at_a_status_json(tmp_path, capsys):
    from repro.cli_job import _as_job
    from repro.job_side import STOP_SIGNALS

    def stopped() -> None:
        raise KeyboardInterrupt

    handlers = {sig: signal.getsignal(sig) for sig in (*STOP_SIGNALS, signal.SIGALRM)}
    try:  # a job's handlers (``stop_on_signals``), not this process's once the test is over
        assert _as_job(stopped, [str(tmp_path / "seed0")]) == 130
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    err = capsys.readouterr().err
    assert "status.json" not in err and "stopped before the run started" in err, err
