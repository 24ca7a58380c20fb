"""Worker processes for the parallel samplers: start, command, watch, and shut down.

Every parallel mode (``parallel_cpu``, ``parallel_gpu``, ``alternating``) and the asynchronous
runner use the same machinery:

* processes are started with the ``spawn`` method (no reliance on ``fork``: CUDA, threads and
  macOS all break it), so everything a worker needs crosses the process boundary by pickling: a
  *body factory* (a picklable callable that builds envs and, in CPU mode, an agent inside the
  child) and the shared-memory buffers, which torch sends by handle, not by value;
* each worker has one ``Pipe`` that carries only small commands and replies; the bulk data (the
  [T, B] batch, observations, actions) lives in shared memory the parent allocated;
* every order reaches a worker as a 9-byte message on a raw pipe of its own: either "read a command
  from the ``Pipe``" or, for the group's one *fast command* (the env-only workers' per-step
  ``step(t)``), the command itself with its integer argument, answered by one byte on a second raw
  pipe. A ``Pipe`` round trip (pickling, ``connection.wait``'s selector, two reads per message)
  costs several times a raw pipe's (docs/results/core_measurements.md, samplers/workers.py), and
  the env-only samplers' workers take one order per env step. A fast command may return the rest
  of its work as a callable, which the worker runs right after replying, before it reads its next
  order: work the parent does not wait for (an env worker's copy of the step's final
  observations) then overlaps the parent's own; an error there is reported at the next reply;
* the parent waits on the reply pipes *and* on the process sentinels at once (``select.poll``), so
  a worker that dies (an exception, a segfault, a ``SIGKILL``) is noticed at once and reported as a
  ``WorkerError`` naming the worker, its pid and exit code, instead of a hang;
* workers ignore ``SIGINT``: Ctrl-C reaches the parent, whose ``close`` ends the children (ask,
  join with a timeout, then terminate, then kill); a worker whose parent has died sees its order
  pipe close and exits, so no orphan is left behind. Shared tensors use torch's ``file_descriptor``
  strategy on Linux, whose segments are unlinked at creation, so nothing persists in /dev/shm.

``SharedStateDict`` is the parameter channel from the learner to the workers: a shared-memory copy
of the model's ``state_dict`` with a version counter, so a worker reloads only when the learner has
pushed new parameters (rlpyt synced the same way, rlpyt/samplers/parallel/worker.py).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import select
import signal
import struct
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from algorithms.cpus import pin_process
from algorithms.process import configure_process, process_times

# Seconds a worker may take to build its envs and agent, and to answer an ordinary command, without
# using any CPU time meanwhile. A worker that is still computing is slow, not stuck: on a loaded
# machine a spawned worker's imports alone took over 120 s of wall time (two training runs, a test
# suite and a benchmark on 2 cores, 2026-12-07), so while its CPU time grows the wait goes on, until
# it has used PROGRESS_LIMIT times the timeout in CPU seconds: a worker in a busy loop still ends.
START_TIMEOUT_S = 120.0
COMMAND_TIMEOUT_S = 600.0
PROGRESS_LIMIT = 10
JOIN_TIMEOUT_S = 5.0

# An order on a worker's raw order pipe: what to do, and the fast command's argument. Pipe writes up
# to PIPE_BUF bytes are atomic, and a worker has at most one order outstanding, so a read of
# ``_ORDER.size`` bytes returns exactly one order.
_ORDER = struct.Struct("<Bq")
_READ_COMMAND, _RUN_FAST, _CLOSE = 0, 1, 2
# A fast command's reply on the raw done pipe; after _FAILED the error report waits on the Pipe.
_DONE, _FAILED = b"\x00", b"\x01"


def spawn_context() -> mp.context.SpawnContext:
    """The one start method every worker uses (see the module docstring for why not ``fork``)."""
    return mp.get_context("spawn")


class WorkerError(RuntimeError):
    """A worker process raised, died or stopped answering; the message names it."""


class WorkerBody(Protocol):
    """What runs inside a worker: public methods are commands the parent may call by name."""

    def close(self) -> None: ...


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (exit code {exitcode})"
    return f"exited with code {exitcode}"


def _worker_main(
    name: str,
    body_factory: Callable[[], WorkerBody],
    conn: mpc.Connection,
    orders: mpc.Connection,
    done: mpc.Connection,
    torch_threads: int,
    fast_command: str | None,
    cpus: frozenset[int],
) -> None:
    """Child entry point: build the body, then serve orders until told to close.

    ``orders`` and ``done`` are used as raw pipes (``os.read`` / ``os.write`` on their file
    descriptors; never their ``Connection`` methods). An exception is reported to the parent with its
    traceback, then the worker exits; a parent that has gone away (its end of the order pipe closed)
    ends the worker too.
    """
    # Ctrl-C goes to the whole process group; only the parent should react (by closing us).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    body: WorkerBody | None = None
    order_fd, done_fd = orders.fileno(), done.fileno()
    try:
        try:
            pin_process(cpus, name)  # before the body starts threads: they inherit the CPUs
            configure_process(torch_threads)
            body = body_factory()
            fast = getattr(body, fast_command) if fast_command else None
        except Exception:
            conn.send(("error", f"{name} raised while starting:\n{traceback.format_exc()}"))
            return
        conn.send(("ok", os.getpid()))
        while True:
            order = os.read(order_fd, _ORDER.size)
            if not order:
                return  # the parent is gone: exit instead of lingering as an orphan
            what, value = _ORDER.unpack(order)
            if what == _CLOSE:
                return
            command = fast_command if what == _RUN_FAST else None
            try:
                if what == _RUN_FAST:
                    rest = fast(value)
                    os.write(done_fd, _DONE)
                    if rest is not None:
                        rest()  # after the reply: the parent goes on meanwhile
                else:
                    command, args = conn.recv()
                    conn.send(("ok", getattr(body, command)(*args)))
            except (BrokenPipeError, EOFError):
                raise
            except Exception:
                # Where the reply was sent already, the parent reads this at its next receive.
                conn.send(("error", f"{name} raised during {command!r}:\n{traceback.format_exc()}"))
                if what == _RUN_FAST:
                    os.write(done_fd, _FAILED)
                return
    except (BrokenPipeError, EOFError, ConnectionResetError):
        return  # the parent is gone
    finally:
        if body is not None:
            body.close()
        for channel in (conn, orders, done):
            channel.close()


def _readable(fd: int) -> bool:
    poller = select.poll()  # not select.select: it fails on descriptors past 1023
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class WorkerGroup:
    """A set of worker processes, one body each, driven by named commands.

    ``call(command, *args)`` sends the command to every worker and returns their results in
    order; ``send`` / ``receive`` split the two halves so the parent can work meanwhile (the
    alternating sampler selects actions for one group while the other steps its envs). The
    ``fast_command``, if any, takes one integer argument and returns None or a callable, the part of
    its work to run after the reply (its ``receive`` returns None); it travels on the raw pipes
    (module docstring).
    """

    def __init__(
        self,
        name: str,
        body_factories: Sequence[Callable[[], WorkerBody]],
        *,
        torch_threads: int = 1,
        start_timeout_s: float = START_TIMEOUT_S,
        daemon: bool = True,
        fast_command: str | None = None,
        cpus: Sequence[frozenset[int]] | None = None,
    ) -> None:
        """``daemon=False`` lets a worker start workers of its own (the asynchronous runner's sampler
        process running a parallel sampler); it still exits when its parent dies (its pipe closes).
        ``cpus``: the CPUs of each worker (``algorithms.cpus.cpu_share``; empty: not pinned)."""
        if not body_factories:
            raise ValueError(f"{name}: a worker group needs at least one worker")
        cpus = [frozenset()] * len(body_factories) if cpus is None else list(cpus)
        if len(cpus) != len(body_factories):
            raise ValueError(f"{name}: {len(cpus)} CPU sets for {len(body_factories)} workers")
        ctx = spawn_context()
        self.name = name
        self.fast_command = fast_command
        self._conns: list[mpc.Connection] = []
        self._orders: list[mpc.Connection] = []  # raw pipes, parent -> worker
        self._done: list[mpc.Connection] = []  # raw pipes, worker -> parent
        self._procs: list[mp.process.BaseProcess] = []
        self._pending: list[str | None] = []
        self._closed = False
        try:
            for rank, factory in enumerate(body_factories):
                parent_conn, child_conn = ctx.Pipe()
                order_reader, order_writer = ctx.Pipe(duplex=False)
                done_reader, done_writer = ctx.Pipe(duplex=False)
                self._conns.append(parent_conn)
                self._orders.append(order_writer)
                self._done.append(done_reader)
                proc = ctx.Process(
                    target=_worker_main,
                    args=(
                        self.worker_name(rank),
                        factory,
                        child_conn,
                        order_reader,
                        done_writer,
                        torch_threads,
                        fast_command,
                        cpus[rank],
                    ),
                    name=self.worker_name(rank),
                    daemon=daemon,  # daemons are ended by a parent that exits without closing them
                )
                proc.start()
                # The parent keeps only its ends: EOF on them then means the child died.
                for child_end in (child_conn, order_reader, done_writer):
                    child_end.close()
                self._procs.append(proc)
                self._pending.append("start")
            self.receive(timeout_s=start_timeout_s)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self._procs)

    def worker_name(self, rank: int) -> str:
        return f"{self.name} worker {rank}"

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (all started in the constructor)."""
        return [int(p.pid) for p in self._procs]

    @property
    def busy(self) -> bool:
        """The group is open and some worker still owes a reply to a command sent with ``send``."""
        return not self._closed and any(p is not None for p in self._pending)

    # --- commands ----------------------------------------------------------------------------
    def send(self, command: str, *args: Any, ranks: Sequence[int] | None = None) -> None:
        """Send ``command(*args)`` to the workers in ``ranks`` (all by default) without waiting."""
        if self._closed:
            raise WorkerError(f"{self.name}: the workers are closed")
        fast = command == self.fast_command
        if fast and not (len(args) == 1 and isinstance(args[0], int)):
            raise TypeError(f"{self.name}: the fast command {command!r} takes one int, got {args!r}")
        order = _ORDER.pack(_RUN_FAST, args[0]) if fast else _ORDER.pack(_READ_COMMAND, 0)
        for rank in range(len(self)) if ranks is None else ranks:
            if self._pending[rank] is not None:
                raise RuntimeError(f"{self.worker_name(rank)} still owes a reply to {self._pending[rank]!r}")
            try:
                os.write(self._orders[rank].fileno(), order)
                if not fast:
                    self._conns[rank].send((command, args))
            except (BrokenPipeError, OSError):
                self._raise_dead(rank, command)
            self._pending[rank] = command

    def receive(self, ranks: Sequence[int] | None = None, timeout_s: float = COMMAND_TIMEOUT_S) -> list[Any]:
        """Wait for the replies of ``ranks`` (all by default) and return them in rank order.

        Raises ``WorkerError`` as soon as one of them reports an exception, dies, or passes
        ``timeout_s`` without a reply and without using CPU time (``PROGRESS_LIMIT``); the group is
        closed first so no process is left behind.
        """
        ranks = list(range(len(self))) if ranks is None else list(ranks)
        results: dict[int, Any] = {}
        start = time.monotonic()
        deadline = start + timeout_s
        cpu_first = cpu_seen = self._cpu_seconds(ranks)
        try:
            poller = select.poll()
            owner: dict[int, int] = {}
            for rank in ranks:
                for fd in (self._reply_fd(rank), self._procs[rank].sentinel):
                    poller.register(fd, select.POLLIN)
                    owner[fd] = rank
            while len(results) < len(ranks):
                now = time.monotonic()
                if now >= deadline:
                    waiting = [r for r in ranks if r not in results]
                    cpu_now = self._cpu_seconds(waiting)
                    computing = [r for r in waiting if cpu_now[r] > cpu_seen[r]]  # False for NaN
                    used = max((cpu_now[r] - cpu_first[r] for r in computing), default=0.0)
                    if computing and used < PROGRESS_LIMIT * timeout_s:
                        cpu_seen = {**cpu_seen, **cpu_now}
                        deadline = now + timeout_s
                        continue
                    names = ", ".join(self.worker_name(r) for r in waiting)
                    within = (
                        f"{timeout_s:g} s, computing all along ({used:.0f} CPU s, {now - start:.0f} s in all)"
                        if computing
                        else f"{timeout_s:g} s of using no CPU time ({now - start:.0f} s in all)"
                    )
                    raise WorkerError(f"{names} did not answer {self._pending[waiting[0]]!r} within {within}")
                remaining = deadline - now
                for fd, _ in poller.poll(max(1, int(remaining * 1000))):
                    rank = owner[fd]
                    if rank in results:
                        continue
                    # A dead worker's pipe may still hold its last message (its reply or error report);
                    # an event on the reply pipe itself needs no second look.
                    reply_fd = self._reply_fd(rank)
                    if fd == reply_fd or _readable(reply_fd):
                        results[rank] = self._read_reply(rank)
                        self._pending[rank] = None
                        # Done with it: its sentinel, if it exits now, must not wake the wait again.
                        poller.unregister(reply_fd)
                        poller.unregister(self._procs[rank].sentinel)
                    elif not self._procs[rank].is_alive():
                        self._raise_dead(rank, self._pending[rank])
        except BaseException:
            self.close()
            raise
        return [results[r] for r in ranks]

    def _cpu_seconds(self, ranks: Sequence[int]) -> dict[int, float]:
        """CPU seconds each worker in ``ranks`` has used (NaN where the system cannot tell)."""
        times = {rank: process_times(int(self._procs[rank].pid)) for rank in ranks}
        return {rank: math.nan if t is None else t[1] for rank, t in times.items()}

    def _reply_fd(self, rank: int) -> int:
        """Where ``rank``'s reply to its pending command arrives."""
        channel = self._done if self._fast_pending(rank) else self._conns
        return channel[rank].fileno()

    def _fast_pending(self, rank: int) -> bool:
        return self.fast_command is not None and self._pending[rank] == self.fast_command

    def _read_reply(self, rank: int) -> Any:
        """The reply of ``rank``, whose reply channel is readable; raises for an error or EOF."""
        if self._fast_pending(rank):
            status = os.read(self._done[rank].fileno(), 1)
            if status == _DONE:
                return None
            if not status:
                self._raise_dead(rank, self._pending[rank])
        try:
            status, value = self._conns[rank].recv()
        except (EOFError, OSError):
            self._raise_dead(rank, self._pending[rank])
        if status == "error":
            raise WorkerError(value)
        return value

    def call(self, command: str, *args: Any, timeout_s: float = COMMAND_TIMEOUT_S) -> list[Any]:
        self.send(command, *args)
        return self.receive(timeout_s=timeout_s)

    def dead_worker(self) -> str | None:
        """A description of the first worker that is no longer running, or None (no side effects)."""
        for rank, proc in enumerate(self._procs):
            if not proc.is_alive():
                return f"{self.worker_name(rank)} (pid {proc.pid}) {_describe_exit(proc.exitcode)}"
        return None

    def _raise_dead(self, rank: int, command: str | None) -> None:
        proc = self._procs[rank]
        proc.join(timeout=1.0)
        report = self._error_report(rank)
        if report is not None:  # it raised, then exited, e.g. in a fast command's part after its reply
            raise WorkerError(report)
        during = f" during {command!r}" if command else ""
        if command == "start":
            # The commonest cause: spawn re-imports the main module, whose unguarded code starts
            # workers again, which Python forbids in a child (its error is on the child's stderr).
            during += ' (see its stderr; scripts must start workers under if __name__ == "__main__":)'
        raise WorkerError(
            f"{self.worker_name(rank)} (pid {proc.pid}) {_describe_exit(proc.exitcode)}{during}"
        )

    def _error_report(self, rank: int) -> str | None:
        """The error report ``rank`` left on its ``Pipe`` before it exited, if any."""
        conn = self._conns[rank]
        try:
            if conn.poll():
                status, value = conn.recv()
                return value if status == "error" else None
        except (EOFError, OSError):
            pass
        return None

    # --- shutdown ----------------------------------------------------------------------------
    def close(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Ask idle workers to stop and join them with a timeout; terminate busy ones (they would not
        read the request before finishing their command), then kill what is left."""
        if self._closed:
            return
        self._closed = True
        for orders, proc, pending in zip(self._orders, self._procs, self._pending):
            if not proc.is_alive():
                continue
            if pending is not None:
                proc.terminate()
                continue
            try:
                os.write(orders.fileno(), _ORDER.pack(_CLOSE, 0))
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + timeout_s
        for proc in self._procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for stop in ("terminate", "kill"):
            alive = [p for p in self._procs if p.is_alive()]
            for proc in alive:
                getattr(proc, stop)()
            for proc in alive:
                proc.join(timeout=JOIN_TIMEOUT_S)
        for channel in (*self._conns, *self._orders, *self._done):
            channel.close()
        for proc in self._procs:
            proc.close()

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A sampler dropped without close() (e.g. an exception before the runner's finally).
        if not getattr(self, "_closed", True):
            self.close()


class SharedStateDict:
    """A shared-memory copy of a ``state_dict`` with a version counter.

    The learner calls ``push(state_dict)``; a worker calls ``pull(module_or_agent, have_version)``,
    which loads the parameters only when a newer version exists and returns the version it now
    has. Pass it to the workers inside their body factory (it is picklable only while a process is
    being started, like every ``multiprocessing`` lock and value).
    """

    def __init__(self, state_dict: dict[str, torch.Tensor]) -> None:
        ctx = spawn_context()
        self.tensors = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in state_dict.items()}
        self._version = ctx.Value("q", 0, lock=False)
        self._lock = ctx.Lock()

    @property
    def version(self) -> int:
        return int(self._version.value)

    def push(self, state_dict: dict[str, Any]) -> int:
        if state_dict.keys() != self.tensors.keys():
            diff = sorted(set(state_dict) ^ set(self.tensors))
            raise KeyError(f"SharedStateDict.push: keys differ from the shared copy: {diff[:5]}")
        with self._lock, torch.no_grad():
            for k, v in state_dict.items():
                self.tensors[k].copy_(v)
            self._version.value += 1
            return int(self._version.value)

    def pull(self, target: Any, have_version: int) -> int:
        """Load into ``target`` (anything with ``load_state_dict``) if newer than ``have_version``."""
        if self._version.value == have_version:
            return have_version
        with self._lock:
            target.load_state_dict(self.tensors)
            return int(self._version.value)


def split_ranks(n_envs: int, n_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(first_rank, num_envs)`` slices of ``n_envs`` envs over ``n_workers`` workers.

    The first ``n_envs % n_workers`` workers take one env more, so slices differ by at most one.
    """
    if not 1 <= n_workers <= n_envs:
        raise ValueError(f"split_ranks: need 1 <= n_workers ({n_workers}) <= n_envs ({n_envs})")
    sizes = [n_envs // n_workers + (w < n_envs % n_workers) for w in range(n_workers)]
    starts = [sum(sizes[:w]) for w in range(n_workers)]
    return list(zip(starts, sizes))
