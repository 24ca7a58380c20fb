"""CI-sized learning checks through the real training entry (sampler, runner, run directory).

Small budgets, thresholds far from what a broken loss reaches: a uniform-random CartPole policy
scores about 22 per episode; these runs reach well over 100. The full checks (5 seeds, 100k steps,
475) are ``make bench-learn-pg``.
"""

import numpy as np
import pytest
import torch

from algorithms.algos import ppo
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import read_run
from algorithms.train import train
from repro.settings import setting_configs

torch.set_num_threads(1)

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")


def _setting_run(setting: str, algo: str, runner: RunnerConfig) -> TrainConfig:
    """The setting's algorithm config, env and sampler shape at this test's budget, no evaluation."""
    configs = setting_configs(setting)
    sampler = configs["sampler"]
    return TrainConfig(
        algo=algo,
        algo_config=configs["algo"],
        env=configs["env"],
        sampler=SamplerConfig(batch_T=sampler.batch_T, batch_B=sampler.batch_B, eval_episodes=0),
        runner=runner,
    )


def _last_return(run_dir) -> float:
    return float(read_run(run_dir).progress["return_mean"].iloc[-1])


# rl-baselines3-zoo's CartPole PPO as bench/bench_learn_pg.py's ppo_cartpole arm runs it; A2C at
# a2c_cartpole.
@pytest.mark.slow
@pytest.mark.parametrize(
    "setting, algo, n_steps, floor",
    [("ppo_cartpole_bench", "ppo", 16_384, 100), ("a2c_cartpole", "a2c", 20_000, 80)],
)
def test_cartpole_beats_random_at_a_tiny_budget(tmp_path, setting, algo, n_steps, floor):
    config = _setting_run(
        setting, algo, RunnerConfig(n_steps=n_steps, log_interval_steps=n_steps // 4, seed=1)
    )
    train(config, tmp_path / algo, resume=False)
    assert _last_return(tmp_path / algo) > floor


def test_ppo_same_seed_same_run(tmp_path):
    def run(name):
        config = TrainConfig(
            algo="ppo",
            algo_config=ppo.Config(minibatch_size_steps=64, epochs=2),
            env=CARTPOLE,
            sampler=SamplerConfig(batch_T=32, batch_B=4, eval_episodes=0),
            runner=RunnerConfig(n_steps=512, log_interval_steps=256, seed=3),
        )
        train(config, tmp_path / name, resume=False)
        progress = read_run(tmp_path / name).progress
        return progress[["return_mean", "pi_loss", "value_loss", "approx_kl"]].to_numpy()

    np.testing.assert_array_equal(run("a"), run("b"))  # NaN == NaN here (no episode ended yet)
