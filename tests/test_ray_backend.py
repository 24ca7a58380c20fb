"""The Ray backend's parts that need no cluster: mirroring a run directory to the driver, job
command lines for another machine, resources per job (both backends), and the bad input that must
be one line and exit 2 before anything is written. The backend on a real two-node cluster is
``test_ray_cluster.py``; on a local instance, ``test_repro_scheduler.py``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from algorithms.configs import ConfigError
from repro.mirror import Mirror, apply_changes, read_dir
from repro.ray_backend import _PYTHON, _RUN_DIR, _portable_argv, _resolve_argv
from repro.ray_connect import REPO
from repro.record import check_storage
from repro.scheduler import detect_slots


def sync(mirror: Mirror, dst: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """One round: apply what changed; returns (path, offset) per file sent, and the removed paths."""
    changes = mirror.changes()
    apply_changes(dst, changes)
    return [(rel, offset) for rel, offset, _, _ in changes.files], changes.deleted


def test_mirror_appends_rewrites_replaces_and_removes(tmp_path):
    src, dst = tmp_path / "node", tmp_path / "driver"
    src.mkdir()
    mirror = Mirror(src)
    (src / "progress.csv").write_text("env_steps,loss\n100,0.5\n")
    (src / "checkpoints").mkdir()
    (src / "checkpoints" / "latest.pt").write_bytes(b"\x00" * 1000)
    (src / ".lock").write_text("123\n")
    (src / "checkpoints" / ".latest.pt.abc.tmp").write_bytes(b"half")
    sent, _ = sync(mirror, dst)
    # Checkpoints are read first (the tables read after them reach at least their step); hidden
    # files (the lock, an atomic write in progress) are never sent.
    assert sent == [("checkpoints/latest.pt", 0), ("progress.csv", 0)]
    assert read_dir(dst) == read_dir(src) and not (dst / ".lock").exists()

    with open(src / "progress.csv", "a") as f:
        f.write("200,0.4\n")
    assert sync(mirror, dst) == ([("progress.csv", len("env_steps,loss\n100,0.5\n"))], [])
    assert read_dir(dst) == read_dir(src)
    assert sync(mirror, dst) == ([], [])  # nothing changed, nothing sent

    # Rewritten in place to the same length: not an append, the whole file goes.
    with open(src / "progress.csv", "r+b") as f:
        f.write(b"env_steps,LOSS")
    assert sync(mirror, dst)[0] == [("progress.csv", 0)]
    # Cut back in place (a torn last line repaired), then replaced by a new file (an atomic write).
    with open(src / "progress.csv", "r+b") as f:
        f.truncate(20)
    assert sync(mirror, dst)[0] == [("progress.csv", 0)]
    (src / "status.tmp").write_text('{"state": "complete"}')
    (src / "status.tmp").chmod(0o600)
    os.replace(src / "status.tmp", src / "status.json")
    assert sync(mirror, dst)[0] == [("status.json", 0)]
    assert read_dir(dst) == read_dir(src)
    assert (dst / "status.json").stat().st_mode & 0o777 == 0o600

    (src / "checkpoints" / "latest.pt").unlink()
    assert sync(mirror, dst) == ([], ["checkpoints/latest.pt"])
    assert read_dir(dst) == read_dir(src)


def test_mirror_from_a_seed_sends_only_what_the_job_changes(tmp_path):
    """A retry starts from the driver's copy: what it already has is not sent back."""
    driver, node = tmp_path / "driver", tmp_path / "node"
    (driver / "checkpoints").mkdir(parents=True)
    (driver / "checkpoints" / "latest.pt").write_bytes(b"ckpt")
    (driver / "log.txt").write_text("=== attempt 1\n")
    for rel, data in read_dir(driver).items():
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        (node / rel).write_bytes(data)
    mirror = Mirror(node)
    mirror.mark_sent()
    assert sync(mirror, driver) == ([], [])
    with open(node / "log.txt", "a") as f:
        f.write("=== attempt 2\n")
    assert sync(mirror, driver) == ([("log.txt", len("=== attempt 1\n"))], [])
    assert (driver / "log.txt").read_text() == "=== attempt 1\n=== attempt 2\n"


def test_portable_argv_ships_files_outside_the_repository(tmp_path):
    setting = tmp_path / "mine.toml"
    setting.write_text('[setting]\nbase = "my_base"\n')
    (tmp_path / "my_base.toml").write_text("[setting]\n")
    profile = REPO / "repro" / "configs" / "profiles" / "smoke.toml"
    run_dir = tmp_path / "runs" / "exp" / "mine" / "pong" / "seed0"
    argv = [sys.executable, "-m", "repro", "run-job", "--arm", str(setting), "--profile", str(profile)]
    argv += ["--env", "pong", "--run-dir", str(run_dir)]
    portable, inputs = _portable_argv(argv, run_dir)
    assert portable[0] == _PYTHON and portable[-1] == _RUN_DIR
    assert portable[7] == "repro/configs/profiles/smoke.toml"  # in the shipped copy, by its place there
    assert portable[5] == ("input", "5/mine.toml")
    assert inputs == {"5/mine.toml": setting.read_bytes(), "5/my_base.toml": b"[setting]\n"}  # its base too
    resolved = _resolve_argv(portable, Path("/scratch/run"), Path("/scratch/inputs"))
    assert resolved[0] == sys.executable and resolved[5] == "/scratch/inputs/5/mine.toml"
    assert resolved[-1] == "/scratch/run" and resolved[1:5] == ["-m", "repro", "run-job", "--arm"]
    # On a shared file system the run directory stays the driver's path.
    assert _portable_argv(argv, None)[0][-1] == str(run_dir)


def test_slots_with_gpu_fractions_and_whole_gpus():
    quarter = detect_slots(None, threads=1, n_gpus=2, cores=16, gpus_per_job=0.25)
    assert len(quarter) == 8 and [s.env["CUDA_VISIBLE_DEVICES"] for s in quarter].count("0") == 4
    pairs = detect_slots(None, threads=2, n_gpus=4, cores=16, gpus_per_job=2)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in pairs] == ["0,1", "2,3"]
    cpu = detect_slots(None, threads=2, n_gpus=2, cores=4, gpus_per_job=0)
    assert [(s.device, s.env["CUDA_VISIBLE_DEVICES"], s.env["OMP_NUM_THREADS"]) for s in cpu] == [
        ("cpu", "", "2")
    ] * 2
    with pytest.raises(ConfigError, match="GPUS_PER_JOB=0.5 but this machine has 0 GPU"):
        detect_slots(None, threads=1, n_gpus=0, cores=4, gpus_per_job=0.5)


def test_cpus_per_job_become_the_jobs_torch_threads():
    from repro.cli_run import _tasks
    from repro.plans import expand, load_plan, resolve_job_setting
    from repro.profiles import load_profile

    jobs = expand(
        load_plan("r2d1_minatar_published_vs_corrected"),
        1,
        "smoke",
        Path("runs"),
        envs=("minatar_breakout",),
        arms=("r2d1_minatar",),
    )
    task = _tasks(jobs, cpus_per_job=3)[0]
    assert task.threads == 3 and task.argv[-2:] == ("--threads", "3")
    assert _tasks(jobs)[0].threads == jobs[0].config.runner.torch_threads
    setting, _ = resolve_job_setting(
        "r2d1_minatar", load_profile("smoke"), "minatar_breakout", 0, "cpu", threads=3
    )
    assert setting.entries["runner.torch_threads"].value == 3


def test_storage_check(tmp_path):
    check_storage([tmp_path / "runs" / "exp" / "arm" / "env" / "seed0"])
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot write run directories under"):
        check_storage([blocker / "runs" / "exp" / "arm" / "env" / "seed0"])


def repro_run(tmp_path: Path, *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        textwrap.dedent("""
        [plan]
        title = "t"
        arms = ["r2d1_minatar"]
        envs = ["minatar_breakout"]
        envs_source = "test"
        """)
    )
    cmd = [sys.executable, "-m", "repro", "run", str(plan), "--seeds", "1", "--profile", "smoke"]
    cmd += ["--no-estimate", "--no-progress", *args]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - start


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_resource_values():
    from repro.cli_run import _gpus_arg, _positive_int_arg

    def cpus(text):
        return _positive_int_arg(text, "CPUS_PER_JOB")

    assert (cpus(""), cpus("3")) == (None, 3)
    assert (_gpus_arg(None), _gpus_arg("0.25"), _gpus_arg("2")) == (None, 0.25, 2.0)
    for bad in ("-1", "1.5", "nan", "inf", "half"):
        with pytest.raises(ConfigError, match="GPUS_PER_JOB must be 0, a fraction up to 1 or a whole number"):
            _gpus_arg(bad)
    for bad in ("0", "1.5", "x"):
        with pytest.raises(ConfigError, match="CPUS_PER_JOB must be a positive integer"):
            cpus(bad)


@pytest.mark.ray
@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("{tmp}/runs", "error: cannot reach the Ray cluster at 127.0.0.1:"),  # nothing listens there
        ("{tmp}/file/runs", "error: cannot write run directories under"),  # checked first
    ],
)
def test_ray_bad_input_is_one_line_and_exit_2(tmp_path, where, message):
    pytest.importorskip("ray")
    (tmp_path / "file").write_text("")
    root = Path(where.format(tmp=tmp_path))
    done, seconds = repro_run(
        tmp_path, "--backend", "ray", "--address", f"127.0.0.1:{closed_port()}", "--root", str(root)
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith(message), done.stderr
    # Within 30 s, not Ray's minutes of retries; planning comes first (seconds on an idle
    # machine, more while the suite loads it).
    assert not root.exists() and seconds < 60


def test_gpu_share_on_a_machine_without_gpus_is_refused(tmp_path):
    import torch

    if torch.cuda.device_count():
        pytest.skip("this machine has a GPU")
    root = tmp_path / "runs"
    done, _ = repro_run(tmp_path, "--gpus-per-job", "0.25", "--root", str(root))
    assert done.returncode == 2 and done.stderr.startswith(
        "error: GPUS_PER_JOB=0.25 but this machine has 0 GPU"
    )
    assert not root.exists()


# --- the local instance stops with its driver (issue 47, item 10) -------------------------------------------
TAG_ENV = "RLREPRO_TEST_RAY_TAG"


def tagged(tag: str) -> list[str]:
    """What runs (its command line) with ``TAG_ENV=tag`` in its environment: every process of the
    driver's local instance inherits it, whatever the code under test does."""
    mark, found = f"{TAG_ENV}={tag}".encode(), []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and mark in Path(entry.path, "environ").read_bytes().split(b"\0"):
                found.append(Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()[:80])
        except OSError:
            continue
    return found


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigint_while_connecting", "kill_9_while_running"])
def test_a_local_ray_instance_leaves_no_process_once_its_driver_is_gone(tmp_path, stop):
    """Before, ray::DashboardAgent and ray::RuntimeEnvAgent outlived the driver by 35-80 s."""
    pytest.importorskip("ray")
    from interrupts import started_past_ray, wait_for
    from tiny_setting import a2c_cartpole_setting

    (tmp_path / "a2c.toml").write_text(a2c_cartpole_setting(200_000, 200))
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[plan]\ntitle = "t"\narms = ["{tmp_path / "a2c.toml"}"]\nenvs = ["CartPole-v1"]\n'
                    'envs_source = "test"\n')  # fmt: skip
    tag = f"{stop}-{os.getpid()}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "repro", "run", str(plan), "--seeds", "1", "--profile", "paper", "--backend",
           "ray", "--root", str(tmp_path / "runs"), "--no-estimate", "--no-progress"]  # fmt: skip

    def start() -> subprocess.Popen:
        return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, TAG_ENV: tag}, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip

    def training() -> bool:
        return any((tmp_path / "runs").rglob("progress.csv"))

    driver = None
    try:
        if stop == "sigint_while_connecting":  # Ray's head processes are up, ray.init has not returned
            driver = start()
            wait_for(lambda: len(tagged(tag)) > 2, 300, "the local instance starting", driver)
            driver.send_signal(signal.SIGINT)
        else:
            driver = started_past_ray(start, training, 600, "a job training on Ray")
            driver.kill()
        driver.wait(timeout=60)
        deadline = time.monotonic() + 10  # 5 s on an idle machine; the suite's load stretches it
        while (left := tagged(tag)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, left
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()


@pytest.mark.ray
def test_a_local_start_that_ray_gives_up_on_is_one_line(monkeypatch):
    ray = pytest.importorskip("ray")
    import repro.ray_connect as ray_connect

    raised = []

    def init(**_):
        raise raised[-1]

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_connect, "start_reaper", lambda: None)  # no instance to reap
    monkeypatch.setenv("RAY_TMPDIR", "/nonexistent-ray-tmp")  # no local instance to join
    # What Ray raises (a bare Exception) when the node it starts has not registered within its 30 s.
    raised.append(Exception(ray_connect.START_TIMED_OUT + " This could happen because the raylet failed."))
    with pytest.raises(ConfigError, match=r"^the local Ray instance did not start: The current node timed"):
        ray_connect.connect(None)
    raised.append(Exception("something else"))  # any other failure is not ours to reword
    with pytest.raises(Exception, match="^something else$"):
        ray_connect.connect(None)
