"""Run a plan's jobs as Ray tasks (``BACKEND=ray``), on a local instance or a cluster (``--address``).

Clusters as Ray's launcher and KubeRay make them: no file system shared with the driver, and
nothing of this project at a fixed path on the nodes.

* **Code to the nodes.** Every task runs with a Ray runtime environment whose working directory
  is this repository (``.gitignore``'d paths such as ``runs/`` and ``.venv/`` left out; ``.git``
  travels, so each run records its commit). The packages are **not** installed by Ray: a node's
  Python must already have those of ``constraints.txt`` (the node image, ``docs/ray_cluster.md``);
  the job is ``<node's python> -m repro run-job ...`` run in the shipped copy.
  A setting or profile file named on the command line from outside the repository travels with its
  job (with the ``.toml`` files beside it, where a setting's base is looked up).
* **Results to the driver, through Ray's object store.** The job writes its run directory on the
  node's scratch space (``repro-ray/<pid>-<start>-<id>/`` in ``tempfile.gettempdir()`` there:
  ``$TMPDIR`` or ``/tmp``; removed when the task ends, or by the node's next task once the worker
  that owned it is gone, as after a kill -9 of the driver: ``remove_orphans``). The task
  streams what changed (appended table rows and log lines, replaced JSON files and checkpoints,
  removed files: ``repro.mirror``) back as a Ray streaming generator about once a second, and the
  driver applies it to ``runs/<exp>/...``. So the driver's copy is the run's copy of record: the
  progress bar, the ETA and ``repro summary`` read it during the run; a retry, on whatever node,
  starts from the driver's copy (config, tables, ``checkpoints/``), so it resumes from the last
  checkpoint that reached the driver; and at the end the run directory is a local run's, file for
  file (the lock file and half-written temporary files, hidden names, are never copied).
  Why the object store rather than a storage path or URI (pyarrow.fs / fsspec): Ray already
  connects every node to the driver, so results need no bucket, no credentials and no extra
  package, and they land where a local run's land; checkpoints are as durable as the driver's
  disk, which outlives any node (a driver that dies ends the tasks in any case: Ray ties a task's
  life to its owner's). The cost is that every checkpoint crosses the network to the driver.
* **Packed tasks** (``run --pack``) are one Ray task each, running ``repro pack-job``: the
  driver seeds, holds and mirrors every run directory of the pack (the node's scratch copies sit
  under ``runs/`` at their paths below ``--root``, and stream as one tree).
* **A shared file system** (``--shared-fs``: ``runs/`` at the same path on the driver and every
  node) stays supported: jobs then write the driver's run directories in place, nothing streams.
* **Resources.** A job asks Ray for ``Task.threads`` CPUs (``--cpus-per-job``, else its torch
  threads) and ``gpus_per_job`` GPUs (``--gpus-per-job``, a fraction such as 0.25 shares a GPU;
  default one GPU when the cluster has GPUs, else none); the job runs on ``cuda`` when it has a
  GPU share. Before anything is written the driver checks that some node can hold one job, and a
  job that waits in Ray's queue for ``queue_timeout_s`` with none of the plan's jobs running or
  finishing meanwhile is cancelled and failed with a message, never left queued forever.
* **Node loss.** A task whose node dies (or whose worker crashes) is an attempt that ended with
  an error: retried like a job that failed (``retries``), on any node that fits, from the driver's
  copy. Skipping, waiting for held runs, retries, failure marking, progress and Ctrl-C are the
  scheduling loop the local backend runs too (``repro.loop``); this module is its ``RayBackend``.
* **One writer.** While an attempt streams into the driver's copy, the driver holds that run
  directory's lock (``algorithms.rundir``); a run another process holds is waited for as by the
  local backend, then not run (state ``busy``).
* **Ctrl-C** cancels the tasks: each task stops its job as Ctrl-C would (SIGINT) and ends. Ray
  drops what a cancelled task yields, so the driver waits up to ``grace_s`` for the tasks to end,
  then marks its copies interrupted: they keep their last checkpoint and the rows up to it (the
  rows of the job's last second stay on its node).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algorithms.process import process_times
from algorithms.rundir import LOG_FILE, RunBusy, acquire_lock, release_lock
from repro.job_side import BUSY_EXIT_CODE, SCHEDULER_PID_ENV
from repro.loop import BUSY_WAIT_S, Ended, Policy, run_tasks, say_stderr
from repro.mirror import Changes, Mirror, apply_changes, read_dir
from repro.ray_connect import REPO, connect, disconnect, gpus_per_job_default, job_size
from repro.tasks import Outcome, Task, open_log

# How long a job may wait in Ray's queue while none of the plan's jobs runs or finishes: a cluster
# launcher or KubeRay takes minutes to add a node, so a few of those.
QUEUE_TIMEOUT_S = 900.0
SYNC_INTERVAL_S = 1.0
# Files beside a setting file outside the repository travel with it up to this size in total.
MAX_INPUT_BYTES = 1 << 20
SCRATCH_DIR = "repro-ray"


# --- job command lines that run on another machine ----------------------------------------------
# An argv element is a plain string or one of these markers, resolved on the node: the interpreter,
# the scratch copy of the task's i-th run directory (``("run_dir", i)``), an input file.
_PYTHON = ("python",)
_RUN_DIR = ("run_dir", 0)


def _portable_argv(
    argv: Sequence[str], run_dirs: Path | Sequence[Path] | None
) -> tuple[list[str | tuple[str, ...]], dict[str, bytes]]:
    """``argv`` for a node: the driver's interpreter becomes the node's, each of ``run_dirs`` (a
    packed task has several) its scratch copy (when given), a file inside the repository its path in
    the shipped copy, a file outside it an input that travels with the task (returned as
    ``{relative path: content}``)."""
    out: list[str | tuple[str, ...]] = []
    inputs: dict[str, bytes] = {}
    dirs = [str(run_dirs)] if isinstance(run_dirs, Path) else [str(d) for d in run_dirs or ()]
    for i, arg in enumerate(argv):
        path = Path(arg)
        if i == 0 and path.resolve() == Path(sys.executable).resolve():
            out.append(_PYTHON)
        elif arg in dirs:
            out.append(("run_dir", dirs.index(arg)))
        elif "/" in arg and path.is_file():
            path = path.resolve()
            if path.is_relative_to(REPO):
                out.append(str(path.relative_to(REPO)))
            else:
                folder = f"{i}"
                beside = sorted(path.parent.glob("*.toml")) if path.suffix == ".toml" else []
                if sum(p.stat().st_size for p in beside) > MAX_INPUT_BYTES:
                    beside = []
                for p in {*beside, path}:
                    inputs[f"{folder}/{p.name}"] = p.read_bytes()
                out.append(("input", f"{folder}/{path.name}"))
        else:
            out.append(arg)
    return out, inputs


def _resolve_argv(
    argv: Sequence[str | tuple[str, ...]], run_dirs: Path | Sequence[Path], inputs_dir: Path
) -> list[str]:
    dirs = [run_dirs] if isinstance(run_dirs, Path) else list(run_dirs)
    resolved = []
    for arg in argv:
        if arg == _PYTHON:
            resolved.append(sys.executable)
        elif isinstance(arg, tuple) and arg[0] == _RUN_DIR[0]:
            resolved.append(str(dirs[arg[1]]))
        elif isinstance(arg, tuple):
            resolved.append(str(inputs_dir / arg[1]))
        else:
            resolved.append(arg)
    return resolved


# --- the task on a node ------------------------------------------------------------------------
@dataclass(frozen=True)
class JobSpec:
    """What a task needs to run one attempt of a job on any node."""

    argv: tuple[str | tuple[str, ...], ...]
    attempt: int
    threads: int
    device: str
    run_dirs: tuple[str, ...] | None  # the shared file system's run directories; None: scratch copies
    tails: tuple[str, ...]  # each run's <exp>/<arm>/<env>/seed<k>: its scratch copy's path under runs/


def _node_label() -> str:
    import ray

    context = ray.get_runtime_context()
    return f"{context.get_node_id()[:12]} ({ray.util.get_node_ip_address()})"


def _job_env(spec: JobSpec) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(spec.threads), "MKL_NUM_THREADS": str(spec.threads)}
    env[SCHEDULER_PID_ENV] = str(os.getpid())  # the job stops when this Ray worker dies
    if spec.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _stop(proc: subprocess.Popen, grace_s: float) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (``algorithms.process.ProcessTimes.start``), ``None`` when there is
    no such process."""
    found = process_times(pid)
    return None if found is None else str(found.start)


def scratch_dir() -> Path:
    """A new staging directory for this process's task, ``repro-ray/<pid>-<start>-<random>`` under the
    temporary directory: its name says which process owns it (``remove_orphans``)."""
    pid = os.getpid()
    return Path(tempfile.gettempdir()) / SCRATCH_DIR / f"{pid}-{_start_time(pid)}-{uuid.uuid4().hex[:12]}"


def remove_orphans() -> None:
    """Remove the staging directories whose owner is gone. A task removes its own when it ends, but
    a worker killed outright runs no ``finally``: Ray kills a task's worker so when its driver is
    killed (kill -9), and the checkpoints staged there would stay for good. Where ``/proc`` cannot
    tell whether the owner lives, nothing is removed."""
    if _start_time(os.getpid()) is None:
        return
    for path in (Path(tempfile.gettempdir()) / SCRATCH_DIR).glob("*-*-*"):
        pid, start, _ = path.name.split("-", 2)
        if pid.isdigit() and _start_time(int(pid)) != start:
            shutil.rmtree(path, ignore_errors=True)


def run_job_task(
    spec: JobSpec, seed: dict[str, bytes], inputs: dict[str, bytes], sync_s: float = SYNC_INTERVAL_S
) -> Iterator[Changes]:
    """Body of the Ray task (a streaming generator): run one attempt of a job and yield what changed
    in its run directories (``runs/`` of the scratch space: paths relative to the driver's ``--root``)
    about every ``sync_s`` seconds, the exit code in the last message."""
    where = _node_label()
    remove_orphans()
    attempt_dir = scratch_dir()
    try:
        if spec.run_dirs is not None:
            run_dirs, mirror = [Path(d) for d in spec.run_dirs], None
        else:
            root = attempt_dir / "runs"
            for rel, data in seed.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
            run_dirs = [root / tail for tail in spec.tails]
            mirror = Mirror(root)
            mirror.mark_sent()
        for run_dir in run_dirs:
            run_dir.mkdir(parents=True, exist_ok=True)
        for rel, data in inputs.items():
            (attempt_dir / "inputs" / rel).parent.mkdir(parents=True, exist_ok=True)
            (attempt_dir / "inputs" / rel).write_bytes(data)
        argv = [*_resolve_argv(spec.argv, run_dirs, attempt_dir / "inputs"), "--device", spec.device]
        here = run_dirs[0] if len(run_dirs) == 1 else run_dirs[0].parent
        yield Changes(node=f"{where} in {here}")
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        on = f"ray node {where} (CUDA_VISIBLE_DEVICES={gpus!r}) in {here}, code {os.getcwd()}"
        with open_log(run_dirs, spec.attempt, on, argv) as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_job_env(spec)
            )
            try:
                while proc.poll() is None:
                    time.sleep(sync_s)
                    if mirror is not None and (changes := mirror.changes()):
                        yield changes
            except BaseException:
                # Cancelled (Ray raises KeyboardInterrupt in the task): stop the job as Ctrl-C would.
                # Ray drops what a cancelled task yields, so the driver marks its copy itself.
                _stop(proc, grace_s=30)
                raise
        final = mirror.changes() if mirror is not None else Changes()
        final.exit_code = proc.returncode
        yield final
    finally:
        shutil.rmtree(attempt_dir, ignore_errors=True)


# --- the driver --------------------------------------------------------------------------------
@dataclass
class _Attempt:
    task: Task
    number: int
    submitted: float
    started: bool = False
    locked: list[Path] = field(default_factory=list)  # the driver's run directories it holds


def _root(task: Task) -> Path:
    """The driver's ``--root`` above the task's run directories (``<root>/<exp>/<arm>/<env>/seed<k>``),
    where what a node streams lands."""
    return task.run_dir.parents[3]


def _log_line(task: Task, line: str) -> None:
    """``=== line`` in the ``log.txt`` of each run of ``task`` not complete (those that exist)."""
    for run_dir in task.unfinished():
        if run_dir.is_dir():
            with open(run_dir / LOG_FILE, "ab") as log:
                log.write(f"=== {line}\n".encode())


class RayBackend:
    """Attempts as Ray tasks (``repro.loop.Backend``): submitted as soon as they may start (Ray queues
    them), what they stream applied to the driver's copies, the queue timed out."""

    who = "Ray driver"

    def __init__(
        self, gpus: float, shared_fs: bool, sync_s: float, queue_timeout_s: float, say: Callable[[str], None]
    ) -> None:
        import ray

        self.ray = ray
        self.gpus = gpus
        self.device = "cuda" if gpus > 0 else "cpu"
        self.shared_fs = shared_fs
        self.sync_s = sync_s
        self.queue_timeout_s = queue_timeout_s
        self.say = say
        self.remote = ray.remote(max_retries=0, num_returns="streaming")(run_job_task)
        self.attempts: dict[Any, _Attempt] = {}  # by the task's generator
        self.last_event = time.monotonic()

    def free(self) -> bool:
        return True

    def running(self) -> list[Task]:
        return [a.task for a in self.attempts.values()]

    def start(self, task: Task, attempt: int) -> None:
        argv, inputs = _portable_argv(task.argv, None if self.shared_fs else task.run_dirs)
        tails = tuple(str(d.relative_to(_root(task))) for d in task.run_dirs)
        spec = JobSpec(
            tuple(argv), attempt, task.threads, self.device,
            tuple(str(d) for d in task.run_dirs) if self.shared_fs else None, tails,
        )  # fmt: skip
        # The driver's copies, from which the attempt resumes.
        seed = {} if self.shared_fs else {
            os.path.join(tail, rel): data
            for tail, run_dir in zip(tails, task.run_dirs, strict=True)
            for rel, data in read_dir(run_dir).items()
        }  # fmt: skip
        options = {"num_cpus": task.threads, "num_gpus": self.gpus}
        gen = self.remote.options(**options).remote(spec, seed, inputs, self.sync_s)
        self.attempts[gen] = _Attempt(task, attempt, time.monotonic())

    def end(self, gen: Any) -> _Attempt:
        attempt = self.attempts.pop(gen)
        self.last_event = time.monotonic()
        for run_dir in attempt.locked:
            release_lock(run_dir)
        return attempt

    def lock(self, attempt: _Attempt) -> bool:
        """At the attempt's first message, take the driver's copy (``False``: another process has it)."""
        attempt.started = True
        self.last_event = time.monotonic()
        if self.shared_fs:
            return True
        try:
            for run_dir in attempt.task.run_dirs:
                run_dir.mkdir(parents=True, exist_ok=True)
                acquire_lock(run_dir)
                attempt.locked.append(run_dir)
        except RunBusy:
            return False
        return True

    def apply(self, attempt: _Attempt, changes: Changes) -> None:
        if not self.shared_fs and (changes.files or changes.deleted):
            apply_changes(_root(attempt.task), changes)

    def receive(self, gen: Any) -> int | None:
        """Apply the next message of ``gen``; the exit code when its attempt has ended (-1: lost,
        ``BUSY_EXIT_CODE``: the driver's copy was taken as it started, so it was cancelled)."""
        attempt = self.attempts[gen]
        try:
            changes: Changes = self.ray.get(next(gen))
        except StopIteration:
            return -1
        except self.ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None)
            if isinstance(e, self.ray.exceptions.RayTaskError) and cause is not None:
                # The task itself raised (its scratch space not writable, say): Ray's own first line
                # names only the task.
                line = f"attempt {attempt.number} failed on its node: {type(cause).__name__}: {cause}"
            else:  # its node died, its worker crashed
                detail = (str(e).strip().splitlines() or [""])[0]
                line = f"attempt {attempt.number} lost: {type(e).__name__}: {detail}"
            self.say(f"{attempt.task.key}: {line}")
            _log_line(attempt.task, line)
            return -1
        if changes.node is not None and not self.lock(attempt):
            self.ray.cancel(gen)
            return BUSY_EXIT_CODE
        self.apply(attempt, changes)
        return changes.exit_code

    def queued_too_long(self) -> list[Ended]:
        """The attempts still in Ray's queue when none of the plan's jobs has started or ended for
        ``queue_timeout_s`` and none runs: the cluster has no node free for them, and may never have."""
        waiting = [(g, a) for g, a in self.attempts.items() if not a.started]
        if not waiting or len(waiting) < len(self.attempts):
            return []
        stuck_s = time.monotonic() - max(self.last_event, min(a.submitted for _, a in waiting))
        if stuck_s <= self.queue_timeout_s:
            return []
        ended = []
        for gen, attempt in waiting:
            self.ray.cancel(gen)
            self.end(gen)
            size = job_size(attempt.task.threads, self.gpus)
            error = f"waited {stuck_s:.0f} s in the Ray queue for a node with {size} free (none ran)"
            ended.append(Ended(attempt.task, -1, error))
        return ended

    def wait(self, timeout_s: float) -> list[Ended]:
        if not self.attempts:
            time.sleep(timeout_s)
            return []
        ended = []
        ready, _ = self.ray.wait(list(self.attempts), num_returns=len(self.attempts), timeout=timeout_s)
        for gen in ready:
            while (code := self.receive(gen)) is None and self.ray.wait([gen], timeout=0)[0]:
                pass
            if code is not None:
                ended.append(Ended(self.end(gen).task, code))
        return ended + self.queued_too_long()

    def stop(self, grace_s: float) -> list[Task]:
        """Cancel every attempt and wait up to ``grace_s`` for their jobs to stop. Ray drops what a
        cancelled task yields, so the rows a job wrote after the last sync stay on its node: the copy
        keeps its checkpoint and the tables that reach it."""
        self.say(f"interrupted: cancelling {len(self.attempts)} ray task(s)")
        attempts = list(self.attempts.values())
        for gen in self.attempts:
            self.ray.cancel(gen)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
            while self.attempts and time.monotonic() < deadline:
                timeout = max(0.1, deadline - time.monotonic())
                ready, _ = self.ray.wait(list(self.attempts), num_returns=1, timeout=timeout)
                for gen in ready:
                    try:
                        changes: Changes = self.ray.get(next(gen))
                    except (self.ray.exceptions.RayError, StopIteration):
                        changes = Changes(exit_code=-1)  # the task ended: its job has stopped
                    self.apply(self.attempts[gen], changes)
                    if changes.exit_code is not None:
                        self.end(gen)
        for gen in list(self.attempts):
            self.end(gen)
        started = [a for a in attempts if a.started]
        for attempt in started:
            _log_line(attempt.task, f"attempt {attempt.number} cancelled: the Ray driver was interrupted")
        return [a.task for a in started]


def run_ray(
    tasks: Sequence[Task],
    address: str | None = None,
    retries: int = 2,
    progress: bool = True,
    poll_s: float = 1.0,
    on_event: Callable[[str], None] | None = None,
    gpus_per_job: float | None = None,
    shared_fs: bool = False,
    queue_timeout_s: float = QUEUE_TIMEOUT_S,
    sync_s: float = SYNC_INTERVAL_S,
    grace_s: float = 40.0,
    busy_wait_s: float = BUSY_WAIT_S,
) -> list[Outcome]:
    """Run ``tasks`` on a Ray cluster (``address``; ``None`` starts or joins a local instance) and
    return one outcome per task (see the module docstring); ``gpus_per_job`` ``None``: one GPU per
    job on a cluster with GPUs, else none."""
    import ray

    say = on_event or say_stderr
    started_here = not ray.is_initialized()
    connect(address)
    try:
        gpus = gpus_per_job_default() if gpus_per_job is None else gpus_per_job
        backend = RayBackend(gpus, shared_fs, sync_s, queue_timeout_s, say)
        resources = ray.cluster_resources()
        n_jobs = sum(not t.complete() for t in tasks)
        say(
            f"ray: {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs; {n_jobs} job(s) to run"
            + (", run directories on the shared file system" if shared_fs else ", results streamed here")
        )
        policy = Policy(retries, progress, grace_s, poll_s, busy_wait_s)
        return run_tasks(tasks, backend, policy, say, "the Ray cluster")
    finally:
        if started_here:
            disconnect()
