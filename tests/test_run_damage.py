"""Damaged and unreadable run files, and the plan run again: a damaged ``status.json`` does not stop
a plan; a torn or lost last progress row of a complete run is repaired, not skipped; a FIFO in a run
is refused by the dry run and fails that run; directories that may not be read give one line and a
non-zero exit; a changed config names the run and key and touches nothing; one rule of "complete" for
every reader; a read-only run fails in one line and is not retried.

Real jobs are A2C on CartPole (``tiny_setting``), the cheapest real training.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_damage_helpers import (
    REPO,
    STEPS,
    as_user,
    check_exact,
    rows,
    tear_last_row,
    write_plan,
    write_run,
)

from algorithms.rundir import LOG_FILE, read_run
from analysis.__main__ import main as analysis_main
from repro.cli import main as repro_main
from repro.summary import summary_text


# --- a plan of one A2C run, trained once per module and copied by each test -------------------------
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


# --- a torn or lost last row of a complete run ------------------------------------------------------
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


# --- a FIFO in a run (issue 57, item 3; the readers: tests/test_run_damage_readers.py) -----------------
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


# --- directories that may not be read -------------------------------------------------------------------
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
