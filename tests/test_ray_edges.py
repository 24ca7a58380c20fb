"""Ray's edges (issue 57, item 8): SIGTERM while the driver connects is one line and exit 130; a
task's staging directory goes when its owner is gone, also after a kill -9; ``--jobs`` with Ray is
refused in one line. Loopback addresses only, every wait bounded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro import ray_backend
from repro.ray_backend import remove_orphans, scratch_dir

REPO = Path(__file__).resolve().parents[1]


def repro_run(root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "repro", "run", "dqn_cartpole", "--seeds", "1", "--profile", "smoke",
            "--root", str(root), "--no-estimate", "--no-progress", *args]  # fmt: skip


@pytest.mark.ray
def test_jobs_with_ray_is_refused_in_one_line(tmp_path):
    pytest.importorskip("ray")
    root = tmp_path / "runs"
    done = subprocess.run(repro_run(root, "--backend", "ray", "--jobs", "2"), cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --jobs 2 "), done.stderr
    assert not root.exists()


@pytest.mark.ray
def test_sigterm_while_connecting_is_one_line_and_130(tmp_path):
    """A "cluster" that accepts connections and never answers: SIGTERM while Ray's client is connecting
    (its second connection: the first is the driver's reachability check). Before, Ray's own
    warning came first ("rpc_client.h:153: Failed to connect to GCS ...")."""
    pytest.importorskip("ray")
    from repro.ray_connect import INTERRUPTED_CONNECTING

    with socket.socket() as silent:
        silent.bind(("127.0.0.3", 0))
        silent.listen(64)
        silent.settimeout(240)
        address = f"127.0.0.3:{silent.getsockname()[1]}"
        cmd = repro_run(tmp_path / "runs", "--backend", "ray", "--address", address)
        driver = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            held = [silent.accept()[0] for _ in range(2)]
            # Past the 5 s after which Ray's native client warns on stderr that the GCS did not answer,
            # before the 15 s at which the driver gives up on the address.
            time.sleep(7)
            driver.send_signal(signal.SIGTERM)
            _, err = driver.communicate(timeout=60)
        finally:
            if driver.poll() is None:
                driver.kill()
        for connection in held:
            connection.close()
    assert driver.returncode == 130 and err.strip() == INTERRUPTED_CONNECTING, (driver.returncode, err)


def test_a_staging_directory_goes_once_its_owner_is_killed(tmp_path, monkeypatch):
    """The owner, a real process, makes its staging directory with a checkpoint and dies by SIGKILL
    (as a task's worker does when its driver is killed): the next task removes it, and keeps a
    living owner's; a directory named for a pid now used by another process (its start differs) goes."""
    code = (
        "import os\nfrom repro.ray_backend import scratch_dir\nd = scratch_dir()\n"
        "(d / 'checkpoints').mkdir(parents=True)\n(d / 'checkpoints' / 'latest.pt').write_bytes(b'x')\n"
        "print(d, flush=True)\nos.kill(os.getpid(), 9)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    killed = Path(done.stdout.strip())
    assert killed.parent == tmp_path / ray_backend.SCRATCH_DIR and killed.is_dir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    living = scratch_dir()
    living.mkdir()
    reused = living.with_name(f"{os.getpid()}-1-{'0' * 12}")
    reused.mkdir()
    remove_orphans()
    assert not killed.exists() and not reused.exists() and living.is_dir()


def test_the_runtime_env_ships_the_checkouts_state_and_not_its_git():
    import json

    from algorithms.rundir import CODE_STATE_ENV, git_state
    from repro.ray_connect import REPO, runtime_env

    env = runtime_env()
    assert "/.git/" in env["excludes"] and env["working_dir"] == str(REPO)
    shipped = json.loads(env["env_vars"][CODE_STATE_ENV])
    assert (shipped["commit"], shipped["dirty"]) == git_state(REPO) and shipped["commit"]
