"""Run integrity under faults (docs/results/run_integrity.md): tables cut back to the checkpoint on
every start, damaged checkpoints fall back, a new checkpoint keeps the one it replaces, damaged runs
reported (rows that repeat or go back).

Real processes are killed here (SIGKILL); training is A2C on CartPole, the cheapest real job. A kill
"during a checkpoint write" is placed exactly by a child that pauses inside the real
``save_checkpoint`` (at its rename) until it is killed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from interrupts import wait_for
from run_integrity_helpers import REPO, check_rows, env_steps

from algorithms.algos import a2c
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig, config_to_dict
from algorithms.rundir import RunDir, read_run, run_path
from algorithms.train import train
from analysis.runs import load_experiment
from repro.summary import summary_text
from repro.tasks import last_env_steps

CONFIG = TrainConfig(
    algo="a2c",
    algo_config=a2c.Config(hidden_sizes=(16,)),
    env=EnvConfig(id="CartPole-v1", kind="gym"),
    sampler=SamplerConfig(batch_T=5, batch_B=2, eval_episodes=1, eval_max_steps=20),
    runner=RunnerConfig(n_steps=2000, log_interval_steps=200, seed=1),
)
EXPECTED_STEPS = list(range(200, 2001, 200))


# --- the job's start: tables agree with the checkpoint ---------------------------------------------
# Trains CONFIG in a child process (argv: config json, run dir, and optionally the checkpoint rename
# to pause at: "N:K" = the K-th os.replace call of the N-th checkpoint, K 1 (a link to latest ->
# previous) or 2 (temp -> latest)). A paused child prints "paused" and waits to be killed.
CHILD = textwrap.dedent(
    """
    import json, os, sys, time, torch
    from algorithms.run_config import config_from_dict
    from algorithms.train import train
    torch.set_num_threads(1)
    if len(sys.argv) > 3:
        from algorithms import rundir
        stop_save, stop_call = (int(x) for x in sys.argv[3].split(":"))
        saves, real_replace, real_save = [0], os.replace, rundir.RunDir.save_checkpoint
        def save(self, state):
            saves[0] += 1
            calls = [0]
            def replace(src, dst):
                calls[0] += 1
                if saves[0] == stop_save and calls[0] == stop_call:
                    print("paused", flush=True)
                    time.sleep(600)
                real_replace(src, dst)
            os.replace = replace
            try:
                real_save(self, state)
            finally:
                os.replace = real_replace
        rundir.RunDir.save_checkpoint = save
    train(config_from_dict(json.loads(sys.argv[1])), sys.argv[2])
    """
)


def start_child(config: TrainConfig, run_dir: Path, pause: str | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-c", CHILD, json.dumps(config_to_dict(config)), str(run_dir)]
    return subprocess.Popen(argv + ([pause] if pause else []), cwd=REPO, stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_job_killed_before_its_first_checkpoint_restarts_with_empty_tables(tmp_path, capfd):
    # Checkpoints only at the end: a kill after some progress rows leaves rows and no checkpoint.
    config = TrainConfig(**{**CONFIG.__dict__, "runner": RunnerConfig(
        n_steps=2000, log_interval_steps=200, checkpoint_interval_steps=2000, seed=1)})  # fmt: skip
    run_dir = tmp_path / "run"
    child = start_child(config, run_dir)
    wait_for(lambda: last_env_steps(run_dir) >= 600, 120, "three progress rows", child)
    child.kill()
    child.wait()
    assert not (run_dir / "checkpoints" / "latest.pt").exists()
    assert env_steps(run_dir)[:3] == [200, 400, 600]

    train(config, run_dir)
    check_rows(run_dir, 2000, 200)
    err = capfd.readouterr().err
    assert "no checkpoint: starting afresh" in err and err.count("\n") == 1, err


@pytest.mark.slow
@pytest.mark.parametrize("pause", ["3:1", "3:2"], ids=["before-the-renames", "between-the-two-renames"])
def test_kill_during_a_checkpoint_write(tmp_path, capfd, pause):
    """Wherever the kill falls, latest.pt is the last complete checkpoint (the one it replaces was
    linked to previous.pt, never moved away): the rerun resumes from it with nothing to repair but
    the temporary files."""
    run_dir = tmp_path / "run"
    child = start_child(CONFIG, run_dir, pause)
    assert child.stdout.readline().strip() == "paused"
    child.kill()
    child.wait()
    checkpoints = run_dir / "checkpoints"
    assert list(checkpoints.glob(".latest.pt.*.tmp")), "the kill should leave the new checkpoint's temp file"

    train(CONFIG, run_dir)
    check_rows(run_dir, 2000, 200)
    assert not list(checkpoints.glob("*.tmp")) and not list(run_dir.glob(".*.tmp"))
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest.pt", "previous.pt"]
    # Nothing repaired or refused: the one line is the resume's own.
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1 and re.fullmatch(
        rf"{re.escape(str(run_dir))}: resumed from its checkpoint at [\d,]+ env steps", lines[0]
    ), lines


def replace_with(path: Path, data: bytes) -> None:
    """``path`` as a new file holding ``data`` (other hard links to the old file keep its bytes)."""
    path.unlink()
    path.write_bytes(data)


@pytest.mark.slow
@pytest.mark.parametrize("pause", [None, "5:2"], ids=["after-five-rows", "inside-the-fifth-save"])
def test_truncated_checkpoint_falls_back_to_previous_then_to_a_fresh_start(tmp_path, capfd, pause):
    """Killed at some point after five rows, or inside the fifth checkpoint's save where previous.pt
    has become a link to latest.pt and the new latest.pt is not renamed in yet."""
    run_dir = tmp_path / "run"
    child = start_child(CONFIG, run_dir, pause)
    if pause:
        assert child.stdout.readline().strip() == "paused"
    else:
        wait_for(lambda: last_env_steps(run_dir) >= 1000, 120, "five progress rows", child)
    child.kill()
    child.wait()
    checkpoints = run_dir / "checkpoints"
    latest = checkpoints / "latest.pt"
    previous_steps = torch.load(checkpoints / "previous.pt", weights_only=True)["counters"]["env_steps"]
    # Then the last checkpoint was truncated (a copy of the run directory cut short, a full disk).
    # Damage goes into new files: killed inside a save, previous.pt may still be a hard link to
    # latest.pt (RunDir.save_checkpoint), and writing in place would damage both names at once.
    replace_with(latest, latest.read_bytes()[: latest.stat().st_size // 2])

    train(CONFIG, run_dir)
    err = capfd.readouterr().err
    assert "latest.pt does not load (BadZipFile" in err, err
    assert f"resuming from previous.pt at {previous_steps:,} env steps" in err and err.count("\n") == 1
    check_rows(run_dir, 2000, 200)

    # Both checkpoints damaged: a fresh start with the tables emptied, said in one line.
    for path in (latest, checkpoints / "previous.pt"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte inside a tensor: caught by the CRC check
        replace_with(path, bytes(data))
    RunDir.open(run_dir, config_to_dict(CONFIG), {"seed": 1}).close()
    train(CONFIG, run_dir)
    err = capfd.readouterr().err
    assert "previous.pt does not load" in err and "starting afresh, progress.csv and eval.csv emptied" in err
    check_rows(run_dir, 2000, 200)


def test_recover_removes_stale_temp_files_and_cuts_tables(tmp_path):
    run = RunDir.open(tmp_path / "r", {"a": 1}, {"seed": 0})
    for steps in (100, 200, 300):
        run.append_progress({"env_steps": steps})
    run.save_checkpoint({"counters": {"env_steps": 200}})
    stale = [run.path / ".status.json.x.tmp", run.path / "checkpoints" / ".latest.pt.y.tmp"]
    for path in stale:
        path.write_bytes(b"partial")
    checkpoint, repaired = run.recover()
    assert checkpoint == {"counters": {"env_steps": 200}} and repaired is None
    assert not any(p.exists() for p in stale)
    assert env_steps(run.path) == [100, 200]
    run.close()


def test_a_new_checkpoint_keeps_the_one_it_replaces_as_previous(tmp_path):
    run = RunDir.open(tmp_path / "r", {"a": 1}, {"seed": 0})
    run.save_checkpoint({"counters": {"env_steps": 1}, "w": torch.ones(3)})
    run.save_checkpoint({"counters": {"env_steps": 2}, "w": torch.ones(3)})
    assert run.load_checkpoint()["counters"]["env_steps"] == 2
    assert torch.load(run.previous_checkpoint_path, weights_only=True)["counters"]["env_steps"] == 1
    run.close()


# --- the analysis notices ---------------------------------------------------------------------------------
def test_rows_that_repeat_or_go_back_make_a_run_corrupt_in_reader_summary_and_analysis(tmp_path):
    exp = tmp_path / "exp"
    progress = {
        "repeated": "env_steps,updates\n3200,1\n6400,2\n9600,3\n3200,1\n6400,2\n9600,3\n",
        "last_twice": "env_steps,updates\n3200,1\n6400,2\n6400,2\n",
        "second_header": "env_steps,updates\n3200,1\nenv_steps,updates\n6400,2\n",
        "eval_twice": "env_steps,updates\n3200,1\n6400,2\n",
        "fine": "env_steps,updates\n3200,1\n6400,2\n",
    }
    row = {"env_steps": 6400, "frames": 6400, "updates": 2, "wall_time_s": 1, "return": 1.0, "length": 9}
    for seed, (name, table) in enumerate(progress.items()):
        run = RunDir.open(run_path(tmp_path, "exp", "arm", name, seed), {"a": 1}, {"seed": seed})
        (run.path / "progress.csv").write_text(table)
        episodes = [0, 0] if name == "eval_twice" else [0, 1]
        run.append_eval([{**row, "episode": e} for e in episodes])
        run.set_status("complete")
        run.close()

    problems = {
        name: read_run(run_path(tmp_path, "exp", "arm", name, seed)) for seed, name in enumerate(progress)
    }
    assert {name: run.status for name, run in problems.items()} == {
        "repeated": "corrupt", "last_twice": "corrupt", "second_header": "corrupt", "eval_twice": "corrupt",
        "fine": "complete",
    }  # fmt: skip
    assert problems["repeated"].problems == [
        "progress.csv damaged: env_steps 3200 at line 5 after 9600 (rows repeat or go backwards: two "
        "writers, or a restart that did not cut the table)"
    ]
    assert "env_steps 6400 at line 4 after 6400" in problems["last_twice"].problems[0]
    assert "line 3 is not a row of numbers" in problems["second_header"].problems[0]
    assert "has episode 0 twice" in problems["eval_twice"].problems[0]

    summary = summary_text(exp)
    assert "ALL  5 runs  1 complete" in summary
    listed = summary.split("corrupt runs")[1]
    for seed, name in enumerate(progress):
        assert (f"arm/{name}/seed{seed}: " in listed) == (name != "fine")
    skipped = load_experiment(exp).skipped
    assert sorted(skipped.env) == ["eval_twice", "last_twice", "repeated", "second_header"]
    assert (skipped.status == "corrupt").all()
