"""Worker processes for the parallel samplers: start, command, watch, and shut down.

Every parallel mode (``parallel_cpu``, ``parallel_gpu``, ``alternating``) and the asynchronous
runner use the same machinery:

* processes are started with the ``spawn`` method (no reliance on ``fork``: CUDA, threads and
  macOS all break it), so everything a worker needs crosses the process boundary by pickling: a
  *body factory* (a picklable callable that builds envs and, in CPU mode, an agent inside the
  child) and the shared-memory buffers, which torch sends by handle, not by value;
* each worker has one ``Pipe`` that carries only small commands and replies; the bulk data (the
  [T, B] batch, observations, actions) lives in shared memory the parent allocated;
* the parent waits on the pipes *and* on the process sentinels at once
  (``multiprocessing.connection.wait``), so a worker that dies (an exception, a segfault, a
  ``SIGKILL``) is noticed at once and reported as a ``WorkerError`` naming the worker, its pid and
  exit code, instead of a hang;
* workers ignore ``SIGINT``: Ctrl-C reaches the parent, whose ``close`` ends the children (ask,
  join with a timeout, then terminate, then kill); a worker whose parent has died sees its pipe
  close and exits, so no orphan is left behind. Shared tensors use torch's ``file_descriptor``
  strategy on Linux, whose segments are unlinked at creation, so nothing persists in /dev/shm.

``SharedStateDict`` is the parameter channel from the learner to the workers: a shared-memory copy
of the model's ``state_dict`` with a version counter, so a worker reloads only when the learner has
pushed new parameters (rlpyt synced the same way, rlpyt/samplers/parallel/worker.py).
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

# Seconds a worker may take to build its envs and agent, and to answer an ordinary command.
START_TIMEOUT_S = 120.0
COMMAND_TIMEOUT_S = 600.0
JOIN_TIMEOUT_S = 5.0


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
    torch_threads: int,
) -> None:
    """Child entry point: build the body, then serve ``(command, args)`` until told to close.

    An exception is reported to the parent with its traceback, then the worker exits; a parent that
    has gone away (its end of the pipe closed) ends the worker too.
    """
    # Ctrl-C goes to the whole process group; only the parent should react (by closing us).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(torch_threads)
    body: WorkerBody | None = None
    try:
        try:
            body = body_factory()
        except Exception:
            conn.send(("error", f"{name} raised while starting:\n{traceback.format_exc()}"))
            return
        conn.send(("ok", os.getpid()))
        while True:
            command, args = conn.recv()
            if command == "close":
                return
            try:
                conn.send(("ok", getattr(body, command)(*args)))
            except (BrokenPipeError, EOFError):
                raise
            except Exception:
                conn.send(("error", f"{name} raised during {command!r}:\n{traceback.format_exc()}"))
                return
    except (BrokenPipeError, EOFError, ConnectionResetError):
        return  # the parent is gone: exit instead of lingering as an orphan
    finally:
        if body is not None:
            body.close()
        conn.close()


class WorkerGroup:
    """A set of worker processes, one body each, driven by named commands.

    ``call(command, *args)`` sends the command to every worker and returns their results in
    order; ``send`` / ``receive`` split the two halves so the parent can work meanwhile (the
    alternating sampler selects actions for one group while the other steps its envs).
    """

    def __init__(
        self,
        name: str,
        body_factories: Sequence[Callable[[], WorkerBody]],
        *,
        torch_threads: int = 1,
        start_timeout_s: float = START_TIMEOUT_S,
        daemon: bool = True,
    ) -> None:
        """``daemon=False`` lets a worker start workers of its own (the asynchronous runner's sampler
        process running a parallel sampler); it still exits when its parent dies (its pipe closes)."""
        if not body_factories:
            raise ValueError(f"{name}: a worker group needs at least one worker")
        ctx = spawn_context()
        self.name = name
        self._conns: list[mpc.Connection] = []
        self._procs: list[mp.process.BaseProcess] = []
        self._pending: list[str | None] = []
        self._closed = False
        try:
            for rank, factory in enumerate(body_factories):
                parent_conn, child_conn = ctx.Pipe()
                proc = ctx.Process(
                    target=_worker_main,
                    args=(self.worker_name(rank), factory, child_conn, torch_threads),
                    name=self.worker_name(rank),
                    daemon=daemon,  # daemons are ended by a parent that exits without closing them
                )
                proc.start()
                child_conn.close()  # the parent keeps only its end: EOF then means the child died
                self._conns.append(parent_conn)
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
        for rank in range(len(self)) if ranks is None else ranks:
            if self._pending[rank] is not None:
                raise RuntimeError(f"{self.worker_name(rank)} still owes a reply to {self._pending[rank]!r}")
            try:
                self._conns[rank].send((command, args))
            except (BrokenPipeError, OSError):
                self._raise_dead(rank, command)
            self._pending[rank] = command

    def receive(self, ranks: Sequence[int] | None = None, timeout_s: float = COMMAND_TIMEOUT_S) -> list[Any]:
        """Wait for the replies of ``ranks`` (all by default) and return them in rank order.

        Raises ``WorkerError`` as soon as one of them reports an exception, dies, or the timeout
        passes; the group is closed first so no process is left behind.
        """
        ranks = list(range(len(self))) if ranks is None else list(ranks)
        results: dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        try:
            while len(results) < len(ranks):
                waiting = [r for r in ranks if r not in results]
                handles = {self._conns[r]: r for r in waiting}
                handles.update({self._procs[r].sentinel: r for r in waiting})
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = ", ".join(self.worker_name(r) for r in waiting)
                    raise WorkerError(
                        f"{names} did not answer {self._pending[waiting[0]]!r} within {timeout_s:.0f} s"
                    )
                for ready in mpc.wait(list(handles), timeout=remaining):
                    rank = handles[ready]
                    if rank in results:
                        continue
                    # A dead worker's pipe may still hold its last message (its error report).
                    if self._conns[rank].poll():
                        try:
                            status, value = self._conns[rank].recv()
                        except (EOFError, OSError):
                            self._raise_dead(rank, self._pending[rank])
                        if status == "error":
                            raise WorkerError(value)
                        results[rank] = value
                        self._pending[rank] = None
                    elif not self._procs[rank].is_alive():
                        self._raise_dead(rank, self._pending[rank])
        except BaseException:
            self.close()
            raise
        return [results[r] for r in ranks]

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
        during = f" during {command!r}" if command else ""
        if command == "start":
            # The commonest cause: spawn re-imports the main module, whose unguarded code starts
            # workers again, which Python forbids in a child (its error is on the child's stderr).
            during += ' (see its stderr; scripts must start workers under if __name__ == "__main__":)'
        raise WorkerError(
            f"{self.worker_name(rank)} (pid {proc.pid}) {_describe_exit(proc.exitcode)}{during}"
        )

    # --- shutdown ----------------------------------------------------------------------------
    def close(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Ask idle workers to stop and join them with a timeout; terminate busy ones (they would not
        read the request before finishing their command), then kill what is left."""
        if self._closed:
            return
        self._closed = True
        for conn, proc, pending in zip(self._conns, self._procs, self._pending):
            if not proc.is_alive():
                continue
            if pending is not None:
                proc.terminate()
                continue
            try:
                conn.send(("close", ()))
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
        for conn in self._conns:
            conn.close()
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
