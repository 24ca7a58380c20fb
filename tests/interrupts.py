"""Children that a test interrupts with SIGINT, as a terminal's Ctrl-C would, and waiting on them;
and an in-process run stopped by a Ctrl-C raised from inside its training loop.

A shell without job control starts a background command with SIGINT ignored (POSIX; e.g.
``nohup make test &``, or ``make test &`` in a script), and every process below inherits that: a
Python started so installs no ``KeyboardInterrupt`` handler, and the SIGINT a test sends it does
nothing. The tests that send one are about a user's Ctrl-C, so their child starts with SIGINT's
default action, whatever the test run inherited.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from algorithms import registry
from algorithms.run_config import TrainConfig
from algorithms.train import train


def sigint_default() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT back to its default action in the child, so
    that Python there installs its ``KeyboardInterrupt`` handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout_s`` or as soon as ``proc`` (the
    child that should bring it about) has ended, with that child's output when it was piped."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc is not None and proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout is not None else ""
            raise AssertionError(f"the process ended before {what}: {output}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def started_past_ray(
    start: Callable[[], subprocess.Popen], ready: Callable[[], bool], timeout_s: float, what: str
) -> subprocess.Popen:
    """``start()``'s child once ``ready()`` holds (as ``wait_for``), the child started afresh up to
    twice where it ended because Ray's start of a local instance timed out: Ray gives its node a
    hard-coded 30 s to register, which a loaded 2-core machine can miss (``repro.ray_connect``). The
    child's output must be piped as text."""
    from repro.ray_connect import LOCAL_START_FAILED

    for _ in range(2):
        proc = start()
        try:
            wait_for(ready, timeout_s, what, proc)
            return proc
        except AssertionError as e:
            if proc.poll() is None or LOCAL_START_FAILED not in str(e):
                raise
    proc = start()
    wait_for(ready, timeout_s, what, proc)
    return proc


def ctrl_c_in_optimize(config: TrainConfig, run_dir: Path, monkeypatch, at_call: int) -> Path:
    """Train ``config`` into ``run_dir``, stopped by a ``KeyboardInterrupt`` raised in its
    ``at_call``-th optimize call (the algorithm's ``optimize`` patched for this call only); returns
    the path of the run's latest.pt."""
    algo_class = registry.algo_module(config.algo).Algo
    original, calls = algo_class.optimize, {"n": 0}

    def optimize(self, env_steps, samples):
        calls["n"] += 1
        if calls["n"] == at_call:
            raise KeyboardInterrupt
        return original(self, env_steps, samples)

    with monkeypatch.context() as patch:
        patch.setattr(algo_class, "optimize", optimize)
        with pytest.raises(KeyboardInterrupt):
            train(config, run_dir)
    return run_dir / "checkpoints" / "latest.pt"
