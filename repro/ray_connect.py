"""Connecting to Ray for the Ray backend (``repro.ray_backend``), and checking the cluster can take
the plan's jobs, before anything is written.

* The repository is the runtime environment of every task (``runtime_env``): Ray ships it to the
  nodes as the tasks' working directory, without ``.git``; its commit and dirtiness travel with it.
* A cluster address that does not answer, and Ctrl-C while Ray's client is connecting, are one
  line of ours within ``CONNECT_TIMEOUT_S``, not minutes of Ray's own retries (``connect``).
* A local instance this process starts stays on loopback (``LOOPBACK_NODE_IP``), and stops when this
  process exits, also when killed (``repro.ray_reaper``).
"""

from __future__ import annotations

import _thread
import json
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError
from algorithms.rundir import CODE_STATE_ENV, git_state
from repro.ray_reaper import start_reaper

REPO = Path(__file__).resolve().parents[1]
# An unreachable address is one line of ours within 30 s of the command, not minutes of Ray's
# retries; planning takes seconds before it.
CONNECT_TIMEOUT_S = 20.0
# Starting a local instance (no address) is not waiting for a cluster that may not be there: it
# took 27 s on the 2-core dev machine at load 8 (docs/results/run_integrity.md), past the 20 s above.
LOCAL_START_TIMEOUT_S = 120.0
INTERRUPTED_CONNECTING = "interrupted while connecting to Ray: no job was started"
# The start of the message of the bare Exception Ray raises when its node did not register in time,
# and of our line for it.
START_TIMED_OUT = "The current node timed out during startup."
LOCAL_START_FAILED = "the local Ray instance did not start"
# The node IP of a local instance this process starts, and of the test clusters: loopback, so that
# nothing of it connects over the host's interface address. Not 127.0.0.1 itself: Ray (2.60,
# ``ray._private.services.resolve_ip_for_localhost``, applied to ``ray.init``'s ``_node_ip_address``,
# ``ray start --node-ip-address`` and every cluster address) rewrites 127.0.0.1 and ``localhost`` to
# the host's interface address on Linux, and leaves any other address alone; Linux routes all of
# 127.0.0.0/8 over the loopback interface. Ray's servers still listen on every interface (its gRPC
# servers bind 0.0.0.0 whatever the node IP).
LOOPBACK_NODE_IP = "127.0.0.2"


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

    def exit_with(line: str, code: int) -> None:
        os.write(stderr, f"{line}\n".encode())
        os._exit(code)

    def watchdog() -> None:
        with signals, wakeup:  # closed here, once nothing selects on them any more
            end = time.monotonic() + timeout_s - 5
            while not connected.is_set() and (left := end - time.monotonic()) > 0:
                if select.select([signals], [], [], min(left, 0.5))[0] and signals.recv(64):
                    if not connected.wait(3):
                        exit_with(INTERRUPTED_CONNECTING, 130)
                    return
            if connected.is_set():
                return
            timed_out.set()
            _thread.interrupt_main()
            if not connected.wait(5):
                exit_with(message, 2)

    # Ray leaves .git out of a working directory by default; it travels so that runs record their
    # commit (``algorithms.rundir.collect_metadata`` asks git in the shipped copy).
    excludes_env = "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES"
    saved = os.environ.get(excludes_env)
    os.environ[excludes_env] = "__pycache__"
    ray_logger = logging.getLogger("ray")
    level = ray_logger.level
    ray_logger.setLevel(logging.ERROR)  # Ray's notices at connection are not ours to print
    # A local instance this process starts (no address, none to join) stays on loopback; one it
    # joins keeps the node IP it was started with.
    starting = not address and services.canonicalize_bootstrap_address(None) is None
    if starting:  # its agents and workers stop when this process does, however it exits
        start_reaper()
    # Ray's native client writes a warning to stderr for every attempt that is not answered within
    # 5 s ("rpc_client.h: Failed to connect to GCS"): stderr goes to /dev/null until ray.init is
    # done, and this process's own lines to the stderr it was given.
    sys.stderr.flush()
    stderr, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)

    threading.Thread(target=watchdog, name="ray-connect-watchdog", daemon=True).start()
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
    except Exception as e:
        # Ray raises a bare Exception when a node it starts has not registered with its GCS within
        # the 30 s it hard-codes (ray/_private/node.py), which a busy 2-core machine can miss.
        if not (starting and START_TIMED_OUT in str(e)):
            raise
        raise ConfigError(
            f"{LOCAL_START_FAILED}: {str(e).splitlines()[0]} Try again when the machine "
            "is less busy, or start one with `ray start --head` and give its address"
        ) from None
    finally:
        connected.set()
        sys.stderr.flush()
        os.dup2(stderr, 2)
        os.close(stderr)
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
        f"no node of the Ray cluster can run a job asking for {job_size(cpus, gpus)} "
        f"(nodes: {have}); lower --cpus-per-job / --gpus-per-job or add nodes"
    )


def gpus_per_job_default() -> float:
    """One GPU per job on a cluster with GPUs, none on one without (the default of ``--gpus-per-job``)."""
    import ray

    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def job_size(cpus: float, gpus: float) -> str:
    return f"{cpus:g} CPU(s) and {gpus:g} GPU(s)"


def runtime_env() -> dict[str, Any]:
    """The repository as the working directory of every task, a runtime environment of the whole Ray
    job (Ray uploads a local directory only for one given to ``ray.init``; a caller that connects
    itself passes this); Ray leaves out what ``.gitignore`` lists as well. The checkout's commit and
    dirtiness, read here when the tree is uploaded, go with it (``CODE_STATE_ENV``), for each run's
    metadata."""
    # .git stays here: a clone's packs hold every committed run's checkpoints (382 MB on 2026-12-07),
    # whose upload outlasted CONNECT_TIMEOUT_S in the two-node test, and without them git on a node
    # can tell the commit but not whether the tree was dirty.
    excludes = ["/runs/*", "!/runs/README.md", "/.venv/", "/.git/"]
    commit, dirty = git_state(REPO)
    state = json.dumps({"commit": commit, "dirty": dirty})
    return {"working_dir": str(REPO), "excludes": excludes, "env_vars": {CODE_STATE_ENV: state}}
