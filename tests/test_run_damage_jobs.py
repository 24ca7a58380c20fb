"""Jobs stopped or faulted: ``run-job`` stopped by SIGTERM says interrupted; a full disk is said
and not retried; two schedulers write one attempt header between them; a stop in a job's first
second is never lost; and the smaller faults of a hostile tester's second round: a run stopped at
its start is interrupted, not corrupt, and a job stopped before its run opened does not point at a
``status.json``.

Real jobs are A2C on CartPole (``tiny_setting``), the cheapest real training.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from interrupts import wait_for
from run_damage_helpers import LOG_EVERY, REPO, STEPS, write_plan

from algorithms.rundir import LOG_FILE, read_run, run_path
from repro.scheduler import detect_slots, run_local, spawn_job
from repro.summary import summary_text
from repro.tasks import Task, last_env_steps


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


# --- smaller faults (issue 47, item 12; a checkpoint of another seed: tests/test_run_damage_recovery.py) --
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
