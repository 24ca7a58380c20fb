"""Scheduling packed runs: ``python -m repro run --pack K`` groups a plan's jobs of
one arm and env into packs, each one ``repro pack-job`` process (``algorithms.packed.train_packed``)
on one slot of the local or the Ray backend, with skip, resume, retry and failure marking per pack
and per member; ``--dry-run`` lists the packs and the estimate packed and unpacked.

Grouping and the per-member scheduling run without training (a toy pack job, like
``test_repro_scheduler.py``'s); the end-to-end test trains DQN on CartPole for a few hundred steps.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from algorithms.rundir import LOG_FILE, acquire_lock, read_run, release_lock
from algorithms.train import train
from analysis.runs import load_experiment
from repro.cli import main
from repro.cli_run import _packs, _tasks
from repro.plans import expand, load_plan, pack_jobs
from repro.scheduler import detect_slots, run_local
from repro.tasks import Member, Task
from tests.local_ray import local_ray

REPO = Path(__file__).resolve().parents[1]

# A few hundred env steps of the shipped dqn_cartpole setting (double DQN, 256x256 MLP): seconds.
PROFILE = """
[profile]
description = "test: a few hundred env steps of DQN on CartPole"
[dqn.runner]
n_steps = { value = 400, source = "test" }
log_interval_steps = { value = 200, source = "test" }
eval_interval_steps = { value = 0, source = "test" }
[dqn.algo]
learning_starts_steps = { value = 100, source = "test" }
replay_size_steps = { value = 1_000, source = "test" }
[dqn.sampler]
eval_episodes = { value = 1, source = "test" }
eval_max_steps = { value = 50, source = "test" }
"""


def write_plan(path: Path, arms: list[str], envs: list[str]) -> Path:
    path.write_text(
        f'[plan]\ntitle = "t"\narms = {json.dumps(arms)}\nenvs = {json.dumps(envs)}\nenvs_source = "test"\n'
    )
    return path


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the probe cache (repro/probe.py)
    (tmp_path / "tiny.toml").write_text(textwrap.dedent(PROFILE))
    write_plan(tmp_path / "cartpole.toml", ["dqn_cartpole"], ["CartPole-v1"])
    return tmp_path


def test_packs_group_seeds_of_one_arm_and_env(files):
    plan = write_plan(files / "grid.toml", ["dqn_cartpole", "dqn_acrobot"], ["CartPole-v1", "Acrobot-v1"])
    jobs = expand(load_plan(str(plan)), 3, str(files / "tiny.toml"), files / "runs")
    packs = pack_jobs(jobs, 2)
    assert [len(p) for p in packs] == [2, 1] * 4  # K=2 over 3 seeds: a pack of 2, then one of 1
    assert [[j.seed for j in p] for p in packs[:2]] == [[0, 1], [2]]
    assert all(len({(j.arm, j.env) for j in p}) == 1 for p in packs)  # arms and envs never share a pack
    assert sorted(j.key for p in packs for j in p) == sorted(j.key for j in jobs)
    # --pack 1 (or none) is today's tasks, one run-job per job.
    assert pack_jobs(jobs, 1) == [(j,) for j in jobs]
    assert _packs("1", jobs, 2, "local") == _packs(None, jobs, 2, "local") == (pack_jobs(jobs, 1), 1)
    assert _tasks(jobs, packs=pack_jobs(jobs, 1)) == _tasks(jobs)
    tasks = _tasks(jobs, packs=packs)
    assert len(tasks) == 8 and tasks[0].argv[3] == "pack-job" and tasks[1].argv[3] == "run-job"
    assert tasks[0].key == "dqn_cartpole/CartPole-v1/seeds0,1"
    assert [m.key for m in tasks[0].members] == [j.key for j in packs[0]]
    assert tasks[0].argv.count("--run-dir") == 2 and tasks[0].steps == 800
    # auto: K = min(seeds, ceil(jobs / slots)); every job gets a slot: no packing.
    assert [_packs("auto", jobs, n, "local")[1] for n in (2, 8, 12)] == [3, 2, 1]


def test_a_pack_of_an_arm_that_cannot_pack_is_one_line(files, capsys):
    plan = write_plan(files / "a2c.toml", ["a2c_cartpole"], ["CartPole-v1"])
    argv = ["run", str(plan), "--seeds", "2", "--profile", "smoke", "--root", str(files / "runs")]
    argv += ["--dry-run", "--no-estimate", "--jobs", "1"]
    assert main([*argv, "--pack", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: --pack 2: arm 'a2c_cartpole' cannot be packed")
    assert main([*argv, "--pack", "auto"]) == 0  # auto leaves it unpacked, and says so
    assert "--pack auto: a2c_cartpole runs unpacked" in capsys.readouterr().out
    assert main([*argv, "--pack", "two"]) == 2
    assert "PACK must be a positive integer or 'auto'" in capsys.readouterr().err


def test_dry_run_lists_the_packs_and_both_estimates(files, capsys):
    argv = ["run", str(files / "cartpole.toml"), "--seeds", "3", "--profile", str(files / "tiny.toml")]
    assert main([*argv, "--root", str(files / "runs"), "--dry-run", "--pack", "2", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "packs (--pack 2): 2 process(es) for 3 jobs" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("dqn_cartpole  CartPole-v1")]
    assert rows == [["dqn_cartpole", "CartPole-v1", "0,1", "2"], ["dqn_cartpole", "CartPole-v1", "2", "1"]]
    # Measured, alone and packed by 2, and cached per K.
    assert "probing throughput: dqn_cartpole on CartPole-v1 ..." in out
    assert "probing throughput: dqn_cartpole on CartPole-v1, 2 seeds packed ..." in out
    line = next(line for line in out.splitlines() if line.startswith("estimated duration:"))
    assert " packed (--pack 2: 2 process(es)), " in line and " unpacked, for 3 job(s) left on 2 " in line
    cache = json.loads((files / "cache" / "rlrepro" / "probe_cache.json").read_text())
    assert sorted(r["env_steps"] for r in cache.values()) == [400, 800]
    assert not (files / "runs").exists()


@pytest.mark.slow
def test_packed_plan_end_to_end_and_rerun_skips(files):
    root = files / "runs"
    cmd = [sys.executable, "-m", "repro", "run", str(files / "cartpole.toml"), "--seeds", "3"]
    cmd += ["--profile", str(files / "tiny.toml"), "--root", str(root), "--pack", "2", "--jobs", "2"]
    cmd += ["--no-estimate", "--no-progress"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(3 jobs in 2 processes): 2 complete, 0 skipped" in done.stdout
    experiment = load_experiment(root / "cartpole-tiny")  # the analysis reader of the report
    assert list(experiment.runs.status) == ["complete"] * 3 and experiment.skipped.empty
    assert experiment.missing.empty  # the plan record lists the jobs, not the packs
    for seed in range(3):
        run = root / "cartpole-tiny" / "dqn_cartpole" / "CartPole-v1" / f"seed{seed}"
        assert json.loads((run / "config.json").read_text())["runner"]["seed"] == seed
        assert read_run(run).progress["env_steps"].iloc[-1] == 400
        assert (run / "checkpoints" / "latest.pt").is_file()
    first, second = (root / "cartpole-tiny" / "dqn_cartpole" / "CartPole-v1" / f"seed{k}" for k in (0, 1))
    assert "pack-job" in (first / LOG_FILE).read_text()
    assert "=== packed: this attempt's output is in ../seed0/log.txt" in (second / LOG_FILE).read_text()
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0 and "0 complete, 2 skipped" in again.stdout


# A pack job without the project: trains (writes as complete) its runs not complete yet, in order,
# and exits 3 after ``--fail-after`` of them.
TOY_PACK = textwrap.dedent(
    """
    import argparse, json, os, sys
    from pathlib import Path

    def write_json(path, obj):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(obj))
        os.replace(tmp, path)

    def complete(path):
        try:
            return json.loads((path / "status.json").read_text())["state"] == "complete"
        except OSError:
            return False

    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", action="append", required=True)
    p.add_argument("--fail-after", type=int, default=-1)
    p.add_argument("--device", required=True)
    a = p.parse_args()
    left = [Path(d) for d in a.run_dir if not complete(Path(d))]
    print("training", " ".join(d.name for d in left), flush=True)
    for i, path in enumerate(left):
        if i == a.fail_after:
            sys.exit(3)
        path.mkdir(parents=True, exist_ok=True)
        write_json(path / "config.json", {})
        (path / "progress.csv").write_text("env_steps\\n2\\n")
        write_json(path / "status.json", {"state": "complete", "updated": "", "error": None})
    """
)


@pytest.fixture
def toy_pack(tmp_path):
    script = tmp_path / "toy_pack.py"
    script.write_text(TOY_PACK)

    def make(n: int, fail_after: int = -1) -> Task:
        runs = [tmp_path / "runs" / "exp" / "arm" / "env" / f"seed{k}" for k in range(n)]
        members = [Member(f"arm/env/seed{k}", run, 2) for k, run in enumerate(runs)]
        argv = [sys.executable, str(script), "--fail-after", str(fail_after)]
        for run in runs:
            argv += ["--run-dir", str(run)]
        return Task.packed(f"arm/env/seeds{','.join(map(str, range(n)))}", members, argv)

    return make


def state(run_dir: Path) -> str:
    return json.loads((run_dir / "status.json").read_text())["state"]


def test_packed_task_skips_resumes_and_fails_per_member(toy_pack):
    slots = detect_slots(1, threads=1, n_gpus=0, cores=1)
    task = toy_pack(3, fail_after=1)  # each attempt trains one member, then fails
    a, b, c = task.run_dirs
    [outcome] = run_local([task], slots, retries=1, progress=False, poll_s=0.05)
    assert (outcome.state, outcome.attempts) == ("failed", 2)
    # The second attempt ran only what the first left; only the member not complete is marked failed.
    assert [state(d) for d in (a, b, c)] == ["complete", "complete", "failed"]
    assert f"see {b / LOG_FILE}" in outcome.error  # the log of the last attempt's output
    assert "training seed0 seed1 seed2" in (a / LOG_FILE).read_text()
    assert "training seed1 seed2" in (b / LOG_FILE).read_text()
    assert (c / LOG_FILE).read_text().count("=== packed: this attempt's output is in ../seed") == 2

    acquire_lock(c)  # another process writes a member: the pack waits, then is busy, starts nothing
    try:
        [busy] = run_local([task], slots, progress=False, poll_s=0.05, busy_wait_s=0.2, on_event=print)
    finally:
        release_lock(c)
    assert busy.state == "busy" and str(c) in busy.error

    done = toy_pack(3)
    assert [o.state for o in run_local([done], slots, progress=False, poll_s=0.05)] == ["complete"]
    assert "training seed2" in (c / LOG_FILE).read_text() and state(c) == "complete"
    assert [o.state for o in run_local([done], slots, progress=False, poll_s=0.05)] == ["skipped"]


@pytest.mark.ray
@pytest.mark.slow
def test_packed_task_on_ray(toy_pack):
    from repro.ray_backend import run_ray

    task = toy_pack(2, fail_after=1)
    with local_ray():
        [outcome] = run_ray([task], retries=1, progress=False, poll_s=0.2, on_event=print)
        assert (outcome.state, outcome.attempts) == ("complete", 2)
        # Both members streamed back; the retry started from the driver's copies (seed0 complete), so
        # it trained seed1 alone, its output in seed1's log.
        a, b = task.run_dirs
        assert (state(a), state(b)) == ("complete", "complete")
        log = (b / LOG_FILE).read_text()
        assert "=== packed: this attempt's output is in ../seed0/log.txt" in log and "training seed1\n" in log
        assert "training seed0 seed1" in (a / LOG_FILE).read_text()
        assert [o.state for o in run_ray([task], progress=False)] == ["skipped"]


def test_pack_job_continues_members_alone_after_a_pack_mismatch(files, capsys):
    """A crash between two members' checkpoint writes leaves them at different steps: ``pack-job``
    says so in one line and continues each alone (``train``), each run directory a single run's."""
    jobs = expand(load_plan(str(files / "cartpole.toml")), 2, str(files / "tiny.toml"), files / "runs")
    first = jobs[0].config
    train(dataclasses.replace(first, runner=dataclasses.replace(first.runner, n_steps=200)), jobs[0].run_dir)
    config = json.loads((jobs[0].run_dir / "config.json").read_text())
    config["runner"]["n_steps"] = 400  # as if the 400-step run had stopped after its checkpoint at 200
    (jobs[0].run_dir / "config.json").write_text(json.dumps(config))
    (jobs[0].run_dir / "status.json").write_text(json.dumps({"state": "interrupted"}))
    argv = [
        "pack-job",
        "--arm",
        "dqn_cartpole",
        "--profile",
        str(files / "tiny.toml"),
        "--env",
        "CartPole-v1",
    ]
    argv += ["--seeds", "0,1", "--run-dir", str(jobs[0].run_dir), "--run-dir", str(jobs[1].run_dir)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "pack-job: packed members resume at different env steps" in err and "as single runs" in err
    for job in jobs:
        run = read_run(job.run_dir)
        assert run.status == "complete", run.problems
        assert run.progress["env_steps"].tolist() == [200, 400]
