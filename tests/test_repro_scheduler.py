"""Scheduler: parallel slots, retries, failure marking, skipping finished runs, resume after a kill, Ray.

Jobs here are a tiny script that writes a run directory in the Contract 5 format: one progress row
per step, a checkpoint of its step count, status complete at the end. It can be told
to fail its first N attempts. The end-to-end tests with real training are in
``test_repro_end_to_end.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from interrupts import sigint_default

from algorithms.rundir import LOG_FILE, read_run
from repro.scheduler import detect_slots, run_local
from repro.tasks import Task, last_env_steps
from tests.local_ray import local_ray

REPO = Path(__file__).resolve().parents[1]

# Written without importing the project (no pandas/torch start-up), in the Contract 5 file format.
TOY_JOB = textwrap.dedent(
    """
    import argparse, json, os, sys, time
    from pathlib import Path

    def write_json(path, obj):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(obj))
        os.replace(tmp, path)

    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--fail-attempts", type=int, default=0)
    p.add_argument("--device", required=True)
    a = p.parse_args()
    path = Path(a.run_dir)
    path.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "metadata.json"):
        write_json(path / name, {"steps": a.steps})
    write_json(path / "status.json", {"state": "running", "updated": "", "error": None})
    ckpt = path / "toy_checkpoint.json"
    start = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    attempts = path / "toy_attempts.txt"
    n = int(attempts.read_text()) + 1 if attempts.exists() else 1
    attempts.write_text(str(n))
    with open(path / "toy_events.txt", "a") as f:
        event = {"attempt": n, "start_step": start, "device": a.device, "t0": time.time()}
        f.write(json.dumps(event) + "\\n")
    if n <= a.fail_attempts:
        print("toy job failing on purpose", flush=True)
        sys.exit(3)
    progress = path / "progress.csv"
    if start == 0:
        progress.write_text("env_steps\\n")
    for step in range(start, a.steps):
        time.sleep(a.sleep)
        with open(progress, "a") as f:
            f.write(f"{step + 1}\\n")
        write_json(ckpt, {"step": step + 1})
    with open(path / "toy_events.txt", "a") as f:
        f.write(json.dumps({"end": time.time()}) + "\\n")
    write_json(path / "status.json", {"state": "complete", "updated": "", "error": None})
    """
)


@pytest.fixture
def toy(tmp_path):
    script = tmp_path / "toy_job.py"
    script.write_text(TOY_JOB)

    def make(name: str, steps: int = 3, sleep: float = 0.0, fail_attempts: int = 0) -> Task:
        run_dir = tmp_path / "runs" / "exp" / name / "env" / "seed0"
        argv = (sys.executable, str(script), "--run-dir", str(run_dir), "--steps", str(steps))
        argv += ("--sleep", str(sleep), "--fail-attempts", str(fail_attempts))
        return Task(key=name, run_dir=run_dir, argv=argv, steps=steps)

    return make


def events(task: Task) -> list[dict]:
    return [json.loads(line) for line in (task.run_dir / "toy_events.txt").read_text().splitlines()]


def cpu_slots(n: int):
    return detect_slots(n, threads=1, n_gpus=0, cores=n)


def test_detect_slots_gpu_and_cpu():
    gpu = detect_slots(3, threads=1, n_gpus=2, cores=16)
    assert [s.device for s in gpu] == ["cuda"] * 3
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in gpu] == ["0", "1", "0"]
    assert len(detect_slots(None, threads=1, n_gpus=2, cores=16)) == 2
    cpu = detect_slots(None, threads=2, n_gpus=0, cores=5)
    assert len(cpu) == 2 and all(s.device == "cpu" and s.env["CUDA_VISIBLE_DEVICES"] == "" for s in cpu)
    assert cpu[0].env["OMP_NUM_THREADS"] == "2"
    assert len(detect_slots(None, threads=4, n_gpus=0, cores=2)) == 1


def test_a_completed_job_says_its_final_evaluation(toy):
    """The final evaluation comes as the job ends, when the bar no longer shows it: a line does."""
    task = toy("a", steps=2)
    task.run_dir.mkdir(parents=True)
    (task.run_dir / "eval.csv").write_text("env_steps,episode,return\n2,0,30\n2,1,50\n")
    lines: list[str] = []
    [outcome] = run_local([task], cpu_slots(1), progress=True, poll_s=0.05, on_event=lines.append)
    assert outcome.state == "complete" and lines == ["a: complete | train - eval 40"]
    quiet: list[str] = []
    again = toy("b", steps=2)
    run_local([again], cpu_slots(1), progress=False, poll_s=0.05, on_event=quiet.append)
    assert quiet == []  # a log (--no-progress) gets the scores once, at the end of the run


def test_parallel_slots_run_jobs_at_once(toy):
    tasks = [toy("a", steps=2, sleep=0.6), toy("b", steps=2, sleep=0.6)]
    outcomes = run_local(tasks, cpu_slots(2), retries=0, progress=False, poll_s=0.05)
    assert [o.state for o in outcomes] == ["complete", "complete"]
    (a_start, a_end), (b_start, b_end) = [(events(t)[0]["t0"], events(t)[-1]["end"]) for t in tasks]
    assert a_start < b_end and b_start < a_end, "the two jobs did not overlap in time"
    assert all(events(t)[0]["device"] == "cpu" for t in tasks)
    log = (tasks[0].run_dir / LOG_FILE).read_text()
    assert log.startswith("=== attempt 1 on cpu") and "--device cpu" in log
    assert last_env_steps(tasks[0].run_dir) == 2


def test_one_slot_runs_jobs_one_after_another(toy):
    tasks = [toy("a", steps=1, sleep=0.3), toy("b", steps=1, sleep=0.3)]
    run_local(tasks, cpu_slots(1), retries=0, progress=False, poll_s=0.05)
    assert events(tasks[0])[-1]["end"] <= events(tasks[1])[0]["t0"]


def test_retry_then_fail_without_stopping_others(toy):
    flaky = toy("flaky", fail_attempts=1)
    broken = toy("broken", fail_attempts=99)
    fine = toy("fine")
    outcomes = {
        o.key: o
        for o in run_local([flaky, broken, fine], cpu_slots(2), retries=1, progress=False, poll_s=0.05)
    }
    assert outcomes["flaky"].state == "complete" and outcomes["flaky"].attempts == 2
    assert outcomes["fine"].state == "complete" and outcomes["fine"].attempts == 1
    assert outcomes["broken"].state == "failed" and outcomes["broken"].attempts == 2
    status = json.loads((broken.run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "exit code 3 after 2 attempt(s)" in status["error"]
    log = (broken.run_dir / LOG_FILE).read_text()
    assert log.count("=== attempt") == 2 and "failing on purpose" in log


def test_skip_finished_runs(toy):
    tasks = [toy("a"), toy("b")]
    run_local(tasks, cpu_slots(2), retries=0, progress=False, poll_s=0.05)
    again = run_local(tasks, cpu_slots(2), retries=0, progress=False, poll_s=0.05)
    assert [o.state for o in again] == ["skipped", "skipped"]
    assert (tasks[0].run_dir / LOG_FILE).read_text().count("=== attempt") == 1


@dataclasses.dataclass(frozen=True)
class FinishedByAnother(Task):
    """A run another scheduler's job holds and finishes right after this scheduler's second look:
    before its second look it is held and not complete, after it free and complete."""

    looks: list = dataclasses.field(default_factory=list)

    def _look(self) -> bool:
        self.looks.append(None)
        return len(self.looks) > 2  # the job finished: it wrote "complete", then let go of the run

    def complete(self) -> bool:
        return self._look()

    def holder(self):
        return None if self._look() else (4242, self.run_dir)


def test_a_run_another_job_finishes_between_two_looks_is_skipped_not_rerun(toy):
    """The loop reads a run's holder before its completion: the other order could read "not
    complete" just before the other job finished, then "free", and run the finished job again."""
    template = toy("a")
    task = FinishedByAnother(template.key, template.run_dir, template.argv, template.steps)
    said: list[str] = []
    [outcome] = run_local([task], cpu_slots(1), retries=0, progress=False, poll_s=0.01, on_event=said.append)
    assert outcome.state == "skipped" and not task.run_dir.exists(), said
    assert said == [f"a: pid 4242 is writing {task.run_dir}; waiting up to 60 s for it"]


DRIVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from repro.scheduler import Task, detect_slots, run_local
    run_dir = Path(sys.argv[1])
    argv = (sys.executable, sys.argv[2], "--run-dir", str(run_dir), "--steps", "40", "--sleep", "0.1")
    outcomes = run_local([Task("long", run_dir, argv, 40)], detect_slots(1, 1, n_gpus=0, cores=1),
                         retries=0, progress=False, grace_s=10, poll_s=0.05)
    print(outcomes[0].state)
    """
)


@pytest.mark.slow
def test_ctrl_c_stops_children_and_rerun_resumes(tmp_path, toy):
    task = toy("long")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    cmd = [sys.executable, str(driver), str(task.run_dir), task.argv[1]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO, preexec_fn=sigint_default)
    deadline = time.monotonic() + 30
    while last_env_steps(task.run_dir) < 5:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "interrupted"
    stopped_at = last_env_steps(task.run_dir)
    assert 5 <= stopped_at < 40
    time.sleep(0.3)
    assert last_env_steps(task.run_dir) == stopped_at, "the child kept running after Ctrl-C"
    assert read_run(task.run_dir).state != "complete"

    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO, timeout=1200).stdout
    assert out.strip() == "complete"
    starts = [e["start_step"] for e in events(task) if "start_step" in e]
    assert starts[0] == 0 and starts[1] >= stopped_at - 1  # resumed from its checkpoint
    assert read_run(task.run_dir).progress["env_steps"].tolist()[-1] == 40


@pytest.mark.ray
@pytest.mark.slow
def test_ray_backend_on_local_instance(toy):
    from repro.ray_backend import run_ray

    tasks = [toy("a", fail_attempts=1), toy("b")]
    with local_ray():
        outcomes = run_ray(tasks, retries=1, progress=False, poll_s=0.2)
        assert [(o.state, o.attempts) for o in outcomes] == [("complete", 2), ("complete", 1)]
        assert all(read_run(t.run_dir).state == "complete" for t in tasks)
        assert "=== attempt 2 on ray node" in (tasks[0].run_dir / LOG_FILE).read_text()
        assert [o.state for o in run_ray(tasks, retries=0, progress=False)] == ["skipped", "skipped"]
        # On a shared file system the job writes the driver's run directory itself.
        shared = toy("shared", steps=2)
        assert [o.state for o in run_ray([shared], shared_fs=True, progress=False, poll_s=0.2)] == [
            "complete"
        ]
        assert f" in {shared.run_dir}, code " in (shared.run_dir / LOG_FILE).read_text()
        # A job no node can hold fails after the queue timeout, with a message; nothing is written.
        big = dataclasses.replace(toy("big"), threads=3)
        [outcome] = run_ray([big], progress=False, poll_s=0.2, queue_timeout_s=2, on_event=lambda msg: None)
        assert outcome.state == "failed" and "in the Ray queue for a node with 3 CPU(s)" in outcome.error
        assert not big.run_dir.exists()
    assert os.path.isdir(tasks[1].run_dir)
