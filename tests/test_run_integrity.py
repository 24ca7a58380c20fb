"""Run integrity under faults (docs/results/run_integrity.md): jobs die with their scheduler, one
writer per run directory, SIGKILL and SIGTERM to ``python -m repro run``. Tables cut back to the
checkpoint on every start and damaged checkpoints: tests/test_run_integrity_checkpoints.py; values
refused before anything runs: tests/test_run_integrity_refusals.py.

Real processes are killed here (SIGKILL, SIGTERM); training is A2C on CartPole, the cheapest real
job.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from interrupts import sigint_default, wait_for
from run_integrity_helpers import REPO, check_rows, env_steps
from tiny_setting import a2c_cartpole_setting

from algorithms.rundir import LOCK_FILE, LOG_FILE, RunBusy, RunDir, lock_holder, read_run
from repro.cli import main
from repro.job_side import SCHEDULER_PID_ENV
from repro.scheduler import detect_slots, run_local
from repro.tasks import Task, last_env_steps


def alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


# --- one writer per run directory -------------------------------------------------------------------
HOLDER = textwrap.dedent(
    """
    import sys, time
    from algorithms.rundir import acquire_lock
    acquire_lock(sys.argv[1])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    """
)


def hold_lock(run_dir: Path, seconds: float) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir), str(seconds)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_writer_is_refused_and_a_killed_holder_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "r"
    holder = hold_lock(run_dir, 60)
    assert lock_holder(run_dir) == holder.pid
    with pytest.raises(RunBusy, match=f"pid {holder.pid} is writing"):
        RunDir.open(run_dir, {"a": 1}, {"seed": 0})
    assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_FILE]  # wrote nothing
    holder.kill()
    holder.wait()
    assert lock_holder(run_dir) is None
    RunDir.open(run_dir, {"a": 1}, {"seed": 0}).close()


TOY_JOB = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    run = Path(sys.argv[1]); run.mkdir(parents=True, exist_ok=True)
    (run / "progress.csv").write_text("env_steps\\n1\\n")
    (run / "status.json").write_text(json.dumps({"state": "complete"}))
    """
)


def test_scheduler_waits_for_a_busy_run_then_skips_it_without_writing(tmp_path):
    script = tmp_path / "toy.py"
    script.write_text(TOY_JOB)

    def task(name: str) -> Task:
        run_dir = tmp_path / name / "env" / "seed0"
        return Task(name, run_dir, (sys.executable, str(script), str(run_dir)), 1)

    events: list[str] = []
    slots = detect_slots(1, 1, n_gpus=0, cores=1)
    # Held past the wait: skipped, one line, nothing written into the run.
    busy, waited = task("busy"), task("waited")
    holder = hold_lock(busy.run_dir, 60)
    brief = hold_lock(waited.run_dir, 1.0)  # released while the scheduler waits: then it runs
    outcomes = run_local([busy, waited], slots, progress=False, poll_s=0.05, on_event=events.append,
                         busy_wait_s=3.0)  # fmt: skip
    holder.kill()
    holder.wait()
    brief.wait()
    assert [o.state for o in outcomes] == ["busy", "complete"]
    assert sorted(p.name for p in busy.run_dir.iterdir()) == [LOCK_FILE]
    assert sum("BUSY" in e for e in events) == 1 and f"pid {holder.pid}" in outcomes[0].error
    assert (waited.run_dir / LOG_FILE).read_text().count("=== attempt") == 1


def test_disk_full_at_the_log_is_one_line_not_a_traceback(tmp_path):
    run_dir = tmp_path / "r" / "env" / "seed0"
    run_dir.mkdir(parents=True)
    (run_dir / LOG_FILE).symlink_to("/dev/full")  # every write there fails with ENOSPC
    events: list[str] = []
    task = Task("r", run_dir, (sys.executable, "-c", "pass"), 1)
    outcomes = run_local(
        [task], detect_slots(1, 1, n_gpus=0, cores=1), progress=False, poll_s=0.05, on_event=events.append
    )
    assert outcomes[0].state == "failed" and "No space left on device" in outcomes[0].error
    assert events == [f"r: FAILED ({outcomes[0].error})"]


# --- jobs die with their scheduler -------------------------------------------------------------------
# A "scheduler" that starts one follower (with its pid in the job environment) and waits; the
# follower writes a file when it is stopped.
FOLLOWER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from repro.job_side import follow_scheduler
    try:
        follow_scheduler(use_prctl=sys.argv[2] == "prctl", poll_s=0.1)
        print("following", flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        Path(sys.argv[1]).write_text("stopped")
    """
)
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    env = {**os.environ, sys.argv[1]: str(os.getpid())}
    subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3], sys.argv[4]], env=env)
    time.sleep(60)
    """
)


@pytest.mark.parametrize("how", ["prctl", "watch"])
def test_follower_stops_when_its_scheduler_is_killed(tmp_path, how):
    marker = tmp_path / "stopped"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, SCHEDULER_PID_ENV, FOLLOWER, str(marker), how], cwd=REPO
    )
    wait_for(lambda: children_of(parent.pid), 30, "the follower", parent)
    (follower,) = children_of(parent.pid)
    time.sleep(1.5)  # let it arm (imports take most of this)
    parent.kill()
    parent.wait()
    wait_for(marker.exists, 5, "the follower to stop")
    wait_for(lambda: not alive(follower), 5, "the follower to exit")


# --- through `python -m repro run`: SIGKILL and SIGTERM to the scheduler ------------------------------
SETTING = a2c_cartpole_setting(20_000, 400, "test: several seconds, so a kill lands mid-run")


@pytest.fixture
def plan(tmp_path) -> Path:
    setting = tmp_path / "a2c_cartpole.toml"
    setting.write_text(SETTING)
    path = tmp_path / "cartpole.toml"
    path.write_text(
        f'[plan]\ntitle = "t"\narms = ["{setting}"]\nenvs = ["CartPole-v1"]\nenvs_source = "test"\n'
    )
    return path


def repro_cmd(plan: Path, seeds: int) -> list[str]:
    root = plan.parent / "runs"
    return [sys.executable, "-m", "repro", "run", str(plan), "--seeds", str(seeds), "--profile", "paper",
            "--root", str(root), "--jobs", str(seeds), "--no-estimate", "--no-progress"]  # fmt: skip


def run_dirs(plan: Path, seeds: int) -> list[Path]:
    exp = plan.parent / "runs" / "cartpole-paper" / "a2c_cartpole" / "CartPole-v1"
    return [exp / f"seed{k}" for k in range(seeds)]


@pytest.mark.slow
def test_scheduler_sigkilled_mid_plan_and_rerun_at_once(plan):
    """The issue's reproduction: ``kill -9`` of the scheduler, the same command at once. Before the
    fix the job ran on as an orphan, beside the job the rerun started in the same directory."""
    (run,) = run_dirs(plan, 1)
    first = subprocess.Popen(repro_cmd(plan, 1), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(lambda: last_env_steps(run) >= 1200, 120, "the job to log 1,200 steps", first)
    (job,) = children_of(first.pid)
    first.kill()
    first.wait()
    killed_at = time.monotonic()
    again = subprocess.Popen(
        repro_cmd(plan, 1), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    # It stops as on Ctrl-C (about 2 s on the loaded 2-core dev machine); before the fix it ran on
    # to the end of its budget (24 s there).
    wait_for(lambda: not alive(job), 6, "the orphaned job to stop")
    assert time.monotonic() - killed_at < 6
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    check_rows(run, 20000, 400)
    assert json.loads((run / "status.json").read_text())["state"] == "complete"


@pytest.mark.slow
def test_sigterm_to_the_scheduler_stops_its_job_and_says_interrupted(plan):
    (run,) = run_dirs(plan, 1)
    proc = subprocess.Popen(
        repro_cmd(plan, 1), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for(lambda: last_env_steps(run) >= 800, 120, "the job to log 800 steps", proc)
    (job,) = children_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "rerun the same command" in out
    assert not alive(job)
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted"
    assert "interrupted" in (run / LOG_FILE).read_text()
    steps = env_steps(run)
    assert steps == list(range(400, steps[-1] + 1, 400)) and steps[-1] < 20000


@pytest.mark.stress  # 476 s of a fresh clone's make test beside two busy cores (2026-12-07)
@pytest.mark.timeout(2400)  # 50 schedulers, ten at a time: 600 s was not enough at load 20 on 2 cores
def test_sigterm_to_the_scheduler_just_after_its_job_started_is_never_lost(tmp_path):
    """Issue 47's report, 50 times: SIGTERM to the scheduler about 0.2 s (0.1-0.32 s) after its job
    started, while the job is still in the interpreter's start-up and imports. Before, one such stop
    in 35 took 28 s and the job ran to complete ("Exception ignored in ... _get_module_lock" in its
    log). Ten schedulers at a time: the load stretches the imports, the window tested."""
    for first in range(0, 50, 10):
        trials = []
        for k in range(first, first + 10):
            where = tmp_path / f"t{k}"
            where.mkdir()
            (where / "a2c_cartpole.toml").write_text(SETTING)
            plan = where / "cartpole.toml"
            plan.write_text(f'[plan]\ntitle = "t"\narms = ["{where / "a2c_cartpole.toml"}"]\n'
                            'envs = ["CartPole-v1"]\nenvs_source = "test"\n')  # fmt: skip
            proc = subprocess.Popen(repro_cmd(plan, 1), cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)  # fmt: skip
            trials.append({"proc": proc, "run": run_dirs(plan, 1)[0], "delay": 0.1 + 0.012 * (k % 10) * 2})
        pending = list(trials)
        # Liveness bounds only (a lost stop is seen in the run's status below), wide enough for ten
        # interpreters' imports on two cores shared with other work (2026-12-07: over 300 s at load 20).
        deadline = time.monotonic() + 900
        while pending:  # each scheduler's SIGTERM, its delay after its job appeared
            assert time.monotonic() < deadline, "no job started within 900 s"
            now = time.monotonic()
            for trial in list(pending):
                if "job" not in trial:
                    jobs = [p for p in children_of(trial["proc"].pid) if "run-job" in cmdline(p)]
                    assert trial["proc"].poll() is None, trial["proc"].stdout.read()
                    if jobs:
                        trial["job"], trial["at"] = jobs[0], now + trial["delay"]
                elif now >= trial["at"]:
                    trial["proc"].send_signal(signal.SIGTERM)
                    pending.remove(trial)
            time.sleep(0.005)
        while any("ended" not in t for t in trials):
            for trial in trials:
                if "ended" not in trial and trial["proc"].poll() is not None:
                    trial["ended"] = time.monotonic()
            assert time.monotonic() < deadline + 600, "a scheduler still running 600 s after its SIGTERM"
            time.sleep(0.01)
        for trial in trials:
            proc = trial["proc"]
            out, _ = proc.communicate()
            log = (trial["run"] / LOG_FILE).read_text() if (trial["run"] / LOG_FILE).exists() else ""
            what = (trial["delay"], proc.returncode, out[-2000:], log[-2000:])
            assert proc.returncode == 130 and "Traceback" not in out, what
            assert "Exception ignored" not in log and not alive(trial["job"]), what
            # A lost stop ran the whole job: the run is never complete. No bound in seconds: with ten
            # schedulers on two loaded cores a kept stop took 51-58 s (2026-12-06), a fixed bound flaked.
            assert read_run(trial["run"]).status != "complete", what


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stop_during_the_local_backends_start_ends_without_a_traceback(plan, sig):
    proc = subprocess.Popen(repro_cmd(plan, 1), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=sigint_default)  # fmt: skip
    # torch is imported while planning (after the stop signals are handled), before any job starts.
    wait_for(lambda: loaded(proc.pid, "libtorch"), 60, "the scheduler to import torch", proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "interrupted" in out + err


def test_run_job_on_a_locked_run_exits_75_and_writes_nothing(plan, capsys):
    run = plan.parent / "busy" / "seed0"
    holder = hold_lock(run, 60)
    try:
        code = main(["run-job", "--arm", str(plan.parent / "a2c_cartpole.toml"), "--profile", "paper",
                     "--env", "CartPole-v1", "--seed", "0", "--run-dir", str(run)])  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert code == 75 and err.count("\n") == 1 and f"pid {holder.pid} is writing" in err
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]
