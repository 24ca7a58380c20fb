"""A run killed with SIGKILL (no cleanup at all) resumes from its last checkpoint, and its progress
table ends up with exactly the rows of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from algorithms.algos import a2c
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig, config_from_dict, config_to_dict
from algorithms.rundir import read_run
from algorithms.train import train

CONFIG = TrainConfig(
    algo="a2c",
    algo_config=a2c.Config(hidden_sizes=(16,)),
    env=EnvConfig(id="CartPole-v1", kind="gym"),
    sampler=SamplerConfig(batch_T=5, batch_B=2, eval_episodes=1, eval_max_steps=20),
    runner=RunnerConfig(n_steps=4000, log_interval_steps=200, checkpoint_interval_steps=1000, seed=2),
)

CHILD = textwrap.dedent(
    """
    import json, sys, torch
    from algorithms.run_config import config_from_dict
    from algorithms.train import train
    torch.set_num_threads(1)
    train(config_from_dict(json.loads(sys.argv[1])), sys.argv[2])
    """
)


@pytest.mark.slow
def test_sigkilled_run_resumes_without_duplicated_or_missing_rows(tmp_path):
    torch.set_num_threads(1)
    assert config_from_dict(config_to_dict(CONFIG)) == CONFIG
    run_dir = tmp_path / "killed"
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(config_to_dict(CONFIG)), str(run_dir)])
    checkpoint = run_dir / "checkpoints" / "latest.pt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed = read_run(run_dir)
    assert json.loads((run_dir / "status.json").read_text())["state"] == "running"
    assert killed.progress["env_steps"].max() < CONFIG.runner.n_steps

    train(CONFIG, run_dir)
    train(CONFIG, tmp_path / "straight")
    resumed, straight = read_run(run_dir), read_run(tmp_path / "straight")
    assert resumed.status == "complete", resumed.problems
    expected = list(range(200, 4001, 200))
    assert straight.progress["env_steps"].tolist() == expected
    assert resumed.progress["env_steps"].tolist() == expected
    assert resumed.progress["updates"].tolist() == straight.progress["updates"].tolist()
    assert resumed.eval["env_steps"].tolist() == [4000]
