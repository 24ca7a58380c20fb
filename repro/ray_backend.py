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
  node's scratch space (``tempfile.gettempdir()`` there: ``$TMPDIR`` or ``/tmp``). The task
  streams what changed (appended table rows and log lines, replaced JSON files and checkpoints,
  removed files) back as a Ray streaming generator about once a second, and the driver applies it
  to ``runs/<exp>/...``. So the driver's copy is the run's copy of record: the progress bar, the
  ETA and ``repro summary`` read it during the run; a retry, on whatever node, starts from the
  driver's copy (config, tables, ``checkpoints/``), so it resumes from the last checkpoint that
  reached the driver; and at the end the run directory is a local run's, file for file (the lock
  file and half-written temporary files, hidden names, are never copied).
  Why the object store rather than a storage path or URI (pyarrow.fs / fsspec): Ray already
  connects every node to the driver, so results need no bucket, no credentials and no extra
  package, and they land where a local run's land; checkpoints are as durable as the driver's
  disk, which outlives any node (a driver that dies ends the tasks in any case: Ray ties a task's
  life to its owner's). The cost is that every checkpoint crosses the network to the driver.
  Within one sync round checkpoints are read before the tables, so the tables the driver holds
  always reach at least the step of its checkpoint (a runner writes a row before the checkpoint of
  that step), and a resume cuts them back to it (``RunDir.recover``).
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
  copy. Skipping, retries and failure marking are the local backend's (``repro.scheduler.Attempts``).
* **One writer.** While an attempt streams into the driver's copy, the driver holds that run
  directory's lock (``algorithms.rundir``); a run another process holds is not run (state ``busy``).
* **Ctrl-C** cancels the tasks: each task stops its job as Ctrl-C would (SIGINT) and ends. Ray
  drops what a cancelled task yields, so the driver waits up to ``grace_s`` for the tasks to end,
  then marks its copies interrupted: they keep their last checkpoint and the rows up to it (the
  rows of the job's last second stay on its node).
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError
from algorithms.rundir import (
    CHECKPOINT_DIR,
    LOG_FILE,
    RunBusy,
    acquire_lock,
    release_lock,
)
from repro.scheduler import (
    BUSY_EXIT_CODE,
    SCHEDULER_PID_ENV,
    Attempts,
    Outcome,
    Progress,
    Task,
    mark_unfinished,
    open_log,
)

REPO = Path(__file__).resolve().parents[1]
# Issue 19: an unreachable address is one line of ours within 30 s of the command, not minutes of Ray's
# retries; planning takes seconds before it.
CONNECT_TIMEOUT_S = 20.0
# Starting a local instance (no address) is not waiting for a cluster that may not be there: it
# took 27 s on the 2-core dev machine at load 8 (docs/results/run_integrity.md), past the 20 s above.
LOCAL_START_TIMEOUT_S = 120.0
# How long a job may wait in Ray's queue while none of the plan's jobs runs or finishes: a cluster
# launcher or KubeRay takes minutes to add a node, so a few of those.
QUEUE_TIMEOUT_S = 900.0
SYNC_INTERVAL_S = 1.0
INTERRUPTED_CONNECTING = "interrupted while connecting to Ray: no job was started"
# Files beside a setting file outside the repository travel with it up to this size in total.
MAX_INPUT_BYTES = 1 << 20
SCRATCH_DIR = "repro-ray"
# The node IP of a local instance this process starts, and of the test clusters: loopback, so that
# nothing of it connects over the host's interface address. Not 127.0.0.1 itself: Ray (2.60,
# ``ray._private.services.resolve_ip_for_localhost``, applied to ``ray.init``'s ``_node_ip_address``,
# ``ray start --node-ip-address`` and every cluster address) rewrites 127.0.0.1 and ``localhost`` to
# the host's interface address on Linux, and leaves any other address alone; Linux routes all of
# 127.0.0.0/8 over the loopback interface. Ray's servers still listen on every interface (its gRPC
# servers bind 0.0.0.0 whatever the node IP).
LOOPBACK_NODE_IP = "127.0.0.2"


# --- connecting --------------------------------------------------------------------------------
def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``host:port`` GCS address; ``None`` for ``auto``, ``local``, ``ray://...``."""
    if "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _check_reachable(address: str, timeout_s: float) -> None:
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address} ({e.strerror or e}); "
            "start it with `ray start --head` or give its head's address"
        ) from None


def connect(address: str | None, timeout_s: float | None = None) -> None:
    """Connect this process to Ray (``address`` ``None``: start or join a local instance), with the
    repository as the runtime environment (``runtime_env``). ``timeout_s`` defaults to
    ``CONNECT_TIMEOUT_S`` with an address, ``LOCAL_START_TIMEOUT_S`` without.

    A ``host:port`` that does not accept a connection is a ``ConfigError`` within ``timeout_s / 6``.
    One that accepts but does not answer as Ray is one at ``timeout_s - 5``, when Ray's client is
    between attempts, and Ctrl-C is ``KeyboardInterrupt`` as anywhere. But Ray spends up to 30 s per
    attempt in native code where Python runs no signal handler, so when it is still there at
    ``timeout_s``, or 3 s after a Ctrl-C (or SIGTERM, SIGHUP), this process prints the same one line
    and exits (2, or 130 after a signal): connecting comes before anything is written."""
    import ray
    from ray._private import services

    if ray.is_initialized():
        return
    timeout_s = timeout_s or (CONNECT_TIMEOUT_S if address else LOCAL_START_TIMEOUT_S)
    if address:
        _check_reachable(address, timeout_s / 6)
    what = f"the Ray cluster at {address}" if address else "the local Ray instance"
    message = f"error: {what} did not answer within {timeout_s:.0f} s"
    timed_out, connected = threading.Event(), threading.Event()
    # Python's C-level handler writes the signal's number here even while the main thread is stuck.
    signals, wakeup = socket.socketpair()
    wakeup.setblocking(False)
    in_main = threading.current_thread() is threading.main_thread()
    previous_wakeup = signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False) if in_main else -1

    def watchdog() -> None:
        with signals, wakeup:  # closed here, once nothing selects on them any more
            end = time.monotonic() + timeout_s - 5
            while not connected.is_set() and (left := end - time.monotonic()) > 0:
                if select.select([signals], [], [], min(left, 0.5))[0] and signals.recv(64):
                    if not connected.wait(3):
                        print(INTERRUPTED_CONNECTING, file=sys.stderr, flush=True)
                        os._exit(130)
                    return
            if connected.is_set():
                return
            timed_out.set()
            _thread.interrupt_main()
            if not connected.wait(5):
                print(message, file=sys.stderr, flush=True)
                os._exit(2)

    # Ray leaves .git out of a working directory by default; it travels so that runs record their
    # commit (``algorithms.rundir.collect_metadata`` asks git in the shipped copy).
    excludes_env = "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES"
    saved = os.environ.get(excludes_env)
    os.environ[excludes_env] = "__pycache__"
    ray_logger = logging.getLogger("ray")
    level = ray_logger.level
    ray_logger.setLevel(logging.ERROR)  # Ray's notices at connection are not ours to print
    threading.Thread(target=watchdog, name="ray-connect-watchdog", daemon=True).start()
    # A local instance this process starts (no address, none to join) stays on loopback; one it
    # joins keeps the node IP it was started with.
    starting = not address and services.canonicalize_bootstrap_address(None) is None
    try:
        ray.init(
            address=address,
            runtime_env=runtime_env(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            **({"_node_ip_address": LOOPBACK_NODE_IP} if starting else {}),
        )
    except KeyboardInterrupt:
        if not timed_out.is_set():
            raise
        raise ConfigError(message.removeprefix("error: ")) from None
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ConfigError(f"cannot connect to Ray at {address}: {str(e).splitlines()[0]}") from None
    finally:
        connected.set()
        if in_main:
            signal.set_wakeup_fd(previous_wakeup)
        ray_logger.setLevel(level)
        if saved is None:
            del os.environ[excludes_env]
        else:
            os.environ[excludes_env] = saved


def disconnect() -> None:
    import ray

    ray.shutdown()


def check_fits(cpus: float, gpus: float) -> None:
    """``ConfigError`` unless some alive node of the cluster can hold one job of this size."""
    import ray

    need = {"CPU": cpus, "GPU": gpus}
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if any(all(n.get(k, 0.0) >= v for k, v in need.items() if v > 0) for n in nodes):
        return
    have = "; ".join(f"{n.get('CPU', 0):g} CPUs, {n.get('GPU', 0):g} GPUs" for n in nodes) or "no nodes"
    raise ConfigError(
        f"no node of the Ray cluster can run a job asking for {_size(cpus, gpus)} "
        f"(nodes: {have}); lower --cpus-per-job / --gpus-per-job or add nodes"
    )


def gpus_per_job_default() -> float:
    """One GPU per job on a cluster with GPUs, none on one without (the default of ``--gpus-per-job``)."""
    import ray

    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def _size(cpus: float, gpus: float) -> str:
    return f"{cpus:g} CPU(s) and {gpus:g} GPU(s)"


def runtime_env() -> dict[str, Any]:
    """The repository as the working directory of every task, a runtime environment of the whole Ray
    job (Ray uploads a local directory only for one given to ``ray.init``; a caller that connects
    itself passes this); Ray leaves out what ``.gitignore`` lists as well."""
    return {"working_dir": str(REPO), "excludes": ["/runs/*", "!/runs/README.md", "/.venv/"]}


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


# --- mirroring a run directory -----------------------------------------------------------------
def _is_checkpoint(rel: str) -> bool:
    """Whether ``rel`` is a file of a run directory's ``checkpoints/``."""
    return Path(rel).parent.name == CHECKPOINT_DIR


def _visible_files(root: Path) -> list[str]:
    """Files under ``root`` (a run directory, or a tree of them) as relative paths, checkpoints first
    (see the module docstring), without hidden names (the lock file, temporary files of atomic writes
    in progress)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith("."):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found, key=lambda rel: (not _is_checkpoint(rel), rel))


def read_dir(root: Path) -> dict[str, bytes]:
    """Every visible file under ``root`` (``{}`` when it does not exist)."""
    return {rel: (root / rel).read_bytes() for rel in _visible_files(root)} if root.is_dir() else {}


# Bytes kept before the end of what was sent, to tell an appended file from one rewritten in place.
_TAIL = 256


@dataclass
class _Sent:
    inode: int
    size: int
    mtime_ns: int
    tail: bytes


@dataclass
class Changes:
    """One sync round: ``files`` as ``(path, offset, bytes, mode)`` (offset 0: the whole file, with
    its permission bits, else the bytes appended at ``offset``), ``deleted`` paths, and the job's exit
    code once it has ended."""

    files: list[tuple[str, int, bytes, int]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    exit_code: int | None = None
    node: str | None = None  # the first message: where the attempt runs

    def __bool__(self) -> bool:
        return bool(self.files or self.deleted) or self.exit_code is not None or self.node is not None


class Mirror:
    """The node side: what changed in a directory since the last round, starting from what the
    driver already has."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sent: dict[str, _Sent] = {}

    def mark_sent(self) -> None:
        """Everything now under ``root`` is what the driver has (the seed it sent)."""
        for rel in _visible_files(self.root):
            with open(self.root / rel, "rb") as f:
                data = f.read()
                self._remember(rel, os.fstat(f.fileno()), data)

    def _remember(self, rel: str, st: os.stat_result, data: bytes) -> None:
        self.sent[rel] = _Sent(st.st_ino, len(data), st.st_mtime_ns, data[-_TAIL:])

    def changes(self) -> Changes:
        out = Changes()
        present = set()
        for rel in _visible_files(self.root):
            try:
                f = open(self.root / rel, "rb")
            except FileNotFoundError:  # removed since the listing
                continue
            with f:
                st = os.fstat(f.fileno())
                present.add(rel)
                old = self.sent.get(rel)
                if old and (st.st_ino, st.st_size, st.st_mtime_ns) == (old.inode, old.size, old.mtime_ns):
                    continue
                if old and st.st_ino == old.inode and st.st_size >= old.size:
                    start = max(0, old.size - len(old.tail))
                    f.seek(start)
                    head = f.read(old.size - start)
                    if head == old.tail:  # appended to: send the new bytes only
                        added = f.read()
                        if added:
                            out.files.append((rel, old.size, added, 0))
                        self._remember(rel, st, old.tail + added)
                        self.sent[rel].size = old.size + len(added)
                        continue
                    f.seek(0)
                data = f.read()
                out.files.append((rel, 0, data, stat.S_IMODE(st.st_mode)))
                self._remember(rel, st, data)
        for rel in set(self.sent) - present:
            out.deleted.append(rel)
            del self.sent[rel]
        return out


def apply_changes(run_dir: Path, changes: Changes) -> None:
    """The driver side: make ``run_dir`` what the node's copy was when ``changes`` was read.

    Checkpoints are written after the other files of the round, removals last, so the driver's
    tables never fall behind its checkpoint."""
    from algorithms.rundir import atomic_write_bytes

    ordered = sorted(changes.files, key=lambda c: _is_checkpoint(c[0]))
    for rel, offset, data, mode in ordered:
        path = run_dir / rel
        if offset == 0:
            atomic_write_bytes(path, data)
            path.chmod(mode)
        else:
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(data)
                f.truncate()
    for rel in changes.deleted:
        (run_dir / rel).unlink(missing_ok=True)


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


def run_job_task(
    spec: JobSpec, seed: dict[str, bytes], inputs: dict[str, bytes], sync_s: float = SYNC_INTERVAL_S
) -> Iterator[Changes]:
    """Body of the Ray task (a streaming generator): run one attempt of a job and yield what changed
    in its run directories (``runs/`` of the scratch space: paths relative to the driver's ``--root``)
    about every ``sync_s`` seconds, the exit code in the last message."""
    where = _node_label()
    attempt_dir = Path(tempfile.gettempdir()) / SCRATCH_DIR / f"{uuid.uuid4().hex[:12]}"
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
def check_storage(run_dirs: Sequence[Path]) -> None:
    """``ConfigError`` unless the driver can create every job's run directory (nothing is created)."""
    for root in {Path(r).absolute().parents[2] for r in run_dirs}:
        probe = root
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise ConfigError(
                f"cannot write run directories under {root}: {probe} is not a writable directory"
            )


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


class _Driver:
    """One ``run_ray`` call: submits attempts, applies what they stream, retries, times out the queue."""

    def __init__(
        self, tasks: Sequence[Task], retries: int, gpus: float, shared_fs: bool, sync_s: float,
        progress: bool, say: Callable[[str], None],
    ) -> None:  # fmt: skip
        import ray

        self.ray = ray
        self.tasks = tasks
        self.gpus = gpus
        self.device = "cuda" if gpus > 0 else "cpu"
        self.shared_fs = shared_fs
        self.sync_s = sync_s
        self.say = say
        self.remote = ray.remote(max_retries=0, num_returns="streaming")(run_job_task)
        self.attempts = Attempts(retries)
        self.outcomes: dict[str, Outcome] = {}
        self.running: dict[Any, _Attempt] = {}
        self.last_event = time.monotonic()
        for task in tasks:
            if task.complete():
                self.outcomes[task.key] = Outcome(task.key, "skipped", 0, 0.0)
        self.bar = Progress(tasks, progress)
        self.bar.done_steps = sum(t.steps for t in tasks if t.key in self.outcomes)

    def submit(self, task: Task) -> None:
        number = self.attempts.start(task)
        argv, inputs = _portable_argv(task.argv, None if self.shared_fs else task.run_dirs)
        tails = tuple(str(d.relative_to(_root(task))) for d in task.run_dirs)
        spec = JobSpec(
            tuple(argv), number, task.threads, self.device,
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
        self.running[gen] = _Attempt(task, number, time.monotonic())

    def end(self, gen: Any) -> _Attempt:
        attempt = self.running.pop(gen)
        self.last_event = time.monotonic()
        for run_dir in attempt.locked:
            release_lock(run_dir)
        return attempt

    def finish(self, gen: Any, code: int) -> None:
        attempt = self.end(gen)
        if code == BUSY_EXIT_CODE:  # on a shared file system another process writes the run
            error = f"another process writes {attempt.task.run_dir}; not run"
            self.outcomes[attempt.task.key] = Outcome(attempt.task.key, "busy", attempt.number, 0.0, error)
            self.say(f"{attempt.task.key}: BUSY ({error})")
            return
        outcome = self.attempts.finished(attempt.task, code)
        if outcome is None:
            self.say(f"{attempt.task.key}: attempt {attempt.number} ended with {code}, retrying")
            self.submit(attempt.task)
            return
        self.outcomes[attempt.task.key] = outcome
        self.bar.done_steps += attempt.task.steps
        if outcome.state == "failed":
            self.say(f"{attempt.task.key}: FAILED ({outcome.error})")

    def start(self, gen: Any, attempt: _Attempt) -> bool:
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
        except RunBusy as e:
            self.ray.cancel(gen)
            self.end(gen)
            self.outcomes[attempt.task.key] = Outcome(attempt.task.key, "busy", attempt.number, 0.0, str(e))
            self.say(f"{attempt.task.key}: BUSY ({e}; not run)")
            return False
        return True

    def apply(self, attempt: _Attempt, changes: Changes) -> None:
        if not self.shared_fs and (changes.files or changes.deleted):
            apply_changes(_root(attempt.task), changes)

    def receive(self, gen: Any) -> bool:
        """Apply the next message of ``gen``; ``True`` when its attempt has ended."""
        attempt = self.running[gen]
        try:
            changes: Changes = self.ray.get(next(gen))
        except StopIteration:
            self.finish(gen, -1)
            return True
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
            self.finish(gen, -1)
            return True
        if changes.node is not None and not self.start(gen, attempt):
            return True
        self.apply(attempt, changes)
        if changes.exit_code is not None:
            self.finish(gen, changes.exit_code)
            return True
        return False

    def fail_queued(self, queue_timeout_s: float) -> None:
        """Fail the attempts still in Ray's queue when none of the plan's jobs has started or ended for
        ``queue_timeout_s`` and none runs: the cluster has no node free for them, and may never have."""
        waiting = [(g, a) for g, a in self.running.items() if not a.started]
        if not waiting or len(waiting) < len(self.running):
            return
        stuck_s = time.monotonic() - max(self.last_event, min(a.submitted for _, a in waiting))
        if stuck_s <= queue_timeout_s:
            return
        for gen, attempt in waiting:
            self.ray.cancel(gen)
            self.end(gen)
            size = _size(attempt.task.threads, self.gpus)
            error = f"waited {stuck_s:.0f} s in the Ray queue for a node with {size} free (none ran)"
            self.outcomes[attempt.task.key] = Outcome(
                attempt.task.key, "failed", attempt.number, stuck_s, error
            )
            self.say(f"{attempt.task.key}: FAILED ({error})")

    def run(self, poll_s: float, queue_timeout_s: float) -> None:
        for task in self.tasks:
            if task.key not in self.outcomes:
                self.submit(task)
        while self.running:
            ready, _ = self.ray.wait(list(self.running), num_returns=len(self.running), timeout=poll_s)
            for gen in ready:
                while gen in self.running and not self.receive(gen):
                    if not self.ray.wait([gen], timeout=0)[0]:
                        break
            self.fail_queued(queue_timeout_s)
            n_failed = sum(o.state == "failed" for o in self.outcomes.values())
            running_steps = sum(a.task.steps_done() for a in self.running.values())
            self.bar.update(
                running_steps,
                f"done {len(self.outcomes)}/{len(self.tasks)} running {len(self.running)} failed {n_failed}",
            )

    def interrupt(self, grace_s: float) -> None:
        """Cancel every attempt and wait up to ``grace_s`` for their jobs to stop; the driver's copies
        say interrupted. Ray drops what a cancelled task yields, so the rows a job wrote after the last
        sync stay on its node: the copy keeps its checkpoint and the tables that reach it."""
        self.say(f"interrupted: cancelling {len(self.running)} ray task(s)")
        attempts = list(self.running.values())
        for gen in self.running:
            self.ray.cancel(gen)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
            while self.running and time.monotonic() < deadline:
                timeout = max(0.1, deadline - time.monotonic())
                ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=timeout)
                for gen in ready:
                    try:
                        changes: Changes = self.ray.get(next(gen))
                    except (self.ray.exceptions.RayError, StopIteration):
                        changes = Changes(exit_code=-1)  # the task ended: its job has stopped
                    self.apply(self.running[gen], changes)
                    if changes.exit_code is not None:
                        self.end(gen)
        for gen in list(self.running):
            self.end(gen)
        for attempt in attempts:
            task = attempt.task
            if attempt.started:
                _log_line(task, f"attempt {attempt.number} cancelled: the Ray driver was interrupted")
                mark_unfinished(task, "interrupted", "the Ray driver was interrupted")
            self.outcomes[task.key] = Outcome(task.key, "interrupted", attempt.number, 0.0)

    def results(self) -> list[Outcome]:
        self.bar.close()
        for task in self.tasks:
            self.outcomes.setdefault(
                task.key, Outcome(task.key, "interrupted", self.attempts.count.get(task.key, 0), 0.0)
            )
        return [self.outcomes[t.key] for t in self.tasks]


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
) -> list[Outcome]:
    """Run ``tasks`` on a Ray cluster (``address``; ``None`` starts or joins a local instance) and
    return one outcome per task (see the module docstring); ``gpus_per_job`` ``None``: one GPU per
    job on a cluster with GPUs, else none."""
    import ray

    say = on_event or (lambda msg: print(msg, file=sys.stderr, flush=True))
    started_here = not ray.is_initialized()
    connect(address)
    try:
        gpus = gpus_per_job_default() if gpus_per_job is None else gpus_per_job
        driver = _Driver(tasks, retries, gpus, shared_fs, sync_s, progress, say)
        resources = ray.cluster_resources()
        n_jobs = len(tasks) - len(driver.outcomes)
        say(
            f"ray: {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs; {n_jobs} job(s) to run"
            + (", run directories on the shared file system" if shared_fs else ", results streamed here")
        )
        try:
            driver.run(poll_s, queue_timeout_s)
        except KeyboardInterrupt:
            driver.interrupt(grace_s)
        return driver.results()
    finally:
        if started_here:
            disconnect()
