"""Run a plan's jobs as Ray tasks (``BACKEND=ray``), on a local instance or a cluster (``--address``).

Each job is one Ray task that asks for the job's CPU threads and, when the cluster has GPUs, one
GPU (Ray sets ``CUDA_VISIBLE_DEVICES`` for it). The task runs the same command as the local
backend (``python -m repro run-job ...``) as a subprocess, writing ``log.txt``, ``status.json`` and
everything else into the same run directory. **The run directories must be on a file system
shared by the driver and every node, at the same path, and the repository and its ``.venv`` must
be at the same path on every node**: the task runs ``sys.executable`` of the driver in the
driver's working directory. Skipping, retries and failure marking are the local backend's
(``repro.scheduler.Attempts``); Ctrl-C cancels the tasks, whose subprocesses get SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from algorithms.rundir import is_complete
from repro.scheduler import Attempts, Outcome, Progress, Task, last_env_steps, open_log


def _run_command(argv: list[str], run_dir: str, attempt: int, cwd: str) -> int:
    """Body of the Ray task: run ``argv`` with its output appended to the run's log; its exit code."""
    task = Task(key="", run_dir=Path(run_dir), argv=tuple(argv), steps=0)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    where = f"ray node {os.uname().nodename} (CUDA_VISIBLE_DEVICES={gpus!r})"
    with open_log(task, attempt, where, argv) as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
        try:
            return proc.wait()
        except BaseException:
            # Cancelled (Ray raises KeyboardInterrupt in the task): stop the job as Ctrl-C would.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def run_ray(
    tasks: Sequence[Task],
    address: str | None = None,
    retries: int = 2,
    progress: bool = True,
    poll_s: float = 1.0,
    on_event: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Run ``tasks`` on a Ray cluster (``address``; ``None`` starts or joins a local instance)."""
    import ray

    say = on_event or (lambda msg: print(msg, file=sys.stderr, flush=True))
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        n_gpus = ray.cluster_resources().get("GPU", 0)
        device = "cuda" if n_gpus > 0 else "cpu"
        remote = ray.remote(max_retries=0)(_run_command)
        outcomes: dict[str, Outcome] = {}
        pending = []
        for task in tasks:
            if is_complete(task.run_dir):
                outcomes[task.key] = Outcome(task.key, "skipped", 0, 0.0)
            else:
                pending.append(task)
        say(
            f"ray: {ray.cluster_resources().get('CPU', 0):.0f} CPUs, {n_gpus:.0f} GPUs; "
            f"{len(pending)} job(s) to run"
        )
        bar = Progress(tasks, progress)
        bar.done_steps = sum(t.steps for t in tasks if t.key in outcomes)
        attempts = Attempts(retries)
        running: dict[ray.ObjectRef, Task] = {}

        def submit(task: Task) -> None:
            attempt = attempts.start(task)
            argv = [*task.argv, "--device", device]
            options = {"num_cpus": task.threads, "num_gpus": 1 if n_gpus > 0 else 0}
            ref = remote.options(**options).remote(argv, str(task.run_dir), attempt, os.getcwd())
            running[ref] = task

        try:
            for task in pending:
                submit(task)
            while running:
                ready, _ = ray.wait(list(running), num_returns=1, timeout=poll_s)
                for ref in ready:
                    task = running.pop(ref)
                    try:
                        code = ray.get(ref)
                    except ray.exceptions.RayError as e:
                        say(f"{task.key}: ray task error: {str(e).splitlines()[0]}")
                        code = -1
                    outcome = attempts.finished(task, code)
                    if outcome is None:
                        say(f"{task.key}: exit code {code}, retrying")
                        submit(task)
                    else:
                        outcomes[task.key] = outcome
                        bar.done_steps += task.steps
                n_failed = sum(o.state == "failed" for o in outcomes.values())
                running_steps = sum(min(t.steps, last_env_steps(t.run_dir)) for t in running.values())
                bar.update(
                    running_steps,
                    f"done {len(outcomes)}/{len(tasks)} running {len(running)} failed {n_failed}",
                )
        except KeyboardInterrupt:
            say(f"interrupted: cancelling {len(running)} ray task(s)")
            for ref in running:
                ray.cancel(ref)
            deadline = time.monotonic() + 40
            for ref, task in running.items():
                try:
                    ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                except (ray.exceptions.RayError, KeyboardInterrupt):
                    pass
                outcomes[task.key] = Outcome(task.key, "interrupted", attempts.count[task.key], 0.0)
        finally:
            bar.close()
        for task in tasks:
            outcomes.setdefault(
                task.key, Outcome(task.key, "interrupted", attempts.count.get(task.key, 0), 0.0)
            )
        return [outcomes[t.key] for t in tasks]
    finally:
        if started_here:
            ray.shutdown()
