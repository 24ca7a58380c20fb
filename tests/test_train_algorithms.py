"""Tiny end-to-end ``train()`` runs of the real algorithms through the registry: each writes a
complete run directory whose counters add up. Learning is checked by the benchmarks, not here."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from interrupts import ctrl_c_in_optimize

from algorithms import registry
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import read_run
from algorithms.train import train

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")
MASKED_CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym", mask_velocity=True)
PENDULUM = EnvConfig(id="Pendulum-v1", kind="gym")
# Small replays that start learning within the budget, and small networks.
REPLAY = dict(
    replay_size_steps=1_000, learning_starts_steps=64, target_update_period_updates=5, eps_decay_steps=100
)
Q_NET = dict(mlp_hidden_sizes=(16,), hidden_size=16)
QPG = dict(
    batch_size=16, replay_size_steps=1_000, random_steps=16, learning_starts_steps=32, hidden_sizes=(16,)
)


def tiny(
    algo: str,
    n_steps: int,
    batch_T: int,
    batch_B: int,
    mode: str = "serial",
    n_workers: int = 1,
    env: EnvConfig = CARTPOLE,
    **algo_kw,
):
    return TrainConfig(
        algo=algo,
        algo_config=registry.config_class(algo)(**algo_kw),
        env=env,
        sampler=SamplerConfig(
            mode=mode,
            batch_T=batch_T,
            batch_B=batch_B,
            n_workers=n_workers,
            eval_n_envs=1,
            eval_episodes=2,
            eval_max_steps=50,
        ),
        runner=RunnerConfig(n_steps=n_steps, log_interval_steps=n_steps // 2, seed=1),
    )


CASES = {
    "a2c": (tiny("a2c", 40, 5, 2, hidden_sizes=(16,)), 4),
    "ppo": (tiny("ppo", 64, 16, 2, epochs=2, minibatch_size_steps=16, hidden_sizes=(16,)), 2 * 2 * 2),
    "ppo_recurrent": (
        tiny(
            "ppo",
            64,
            16,
            2,
            epochs=1,
            minibatch_size_steps=16,
            recurrent=True,
            lstm_size=8,
            hidden_sizes=(16,),
        ),
        None,
    ),
    # 160 steps, one update per 8 env steps once 64 are stored: at 64, 72, ..., 160, 13 updates.
    "dqn": (tiny("dqn", 160, 4, 2, batch_size=16, env_steps_per_update=8, **REPLAY, **Q_NET), 13),
    "dqn_double_dueling_prioritized_3step": (
        tiny(
            "dqn",
            160,
            4,
            2,
            batch_size=16,
            env_steps_per_update=8,
            double=True,
            dueling=True,
            prioritized=True,
            n_step=3,
            **REPLAY,
            **Q_NET,
        ),
        None,
    ),
    "c51": (tiny("c51", 160, 4, 2, batch_size=16, env_steps_per_update=8, n_atoms=11, **REPLAY, **Q_NET), 13),
    "rainbow": (
        tiny("rainbow", 160, 4, 2, batch_size=16, env_steps_per_update=8, n_atoms=11, **REPLAY, **Q_NET),
        None,
    ),
    # 80 steps, one update per env step after the first 32 stored: 48 updates.
    "ddpg": (tiny("ddpg", 80, 4, 2, env=PENDULUM, **QPG), 48),
    "td3": (tiny("td3", 80, 4, 2, env=PENDULUM, **QPG), 48),
    "sac": (tiny("sac", 80, 4, 2, env=PENDULUM, **QPG), 48),
    "r2d1": (
        tiny(
            "r2d1",
            256,
            8,
            2,
            env=MASKED_CARTPOLE,
            sequence_length_steps=8,
            burn_in_steps=4,
            sequence_period_steps=4,
            batch_size_sequences=4,
            replay_size_steps=1_000,
            learning_starts_steps=64,
            target_update_period_updates=5,
            lstm_size=16,
            fc_size=16,
            head_hidden_size=16,
            mlp_hidden_sizes=(16,),
        ),
        None,
    ),
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_run_completes_with_counters_that_add_up(tmp_path, case):
    config, expected_updates = CASES[case]
    check_tiny_run(config, expected_updates, tmp_path / case)


def check_tiny_run(config: TrainConfig, expected_updates: int | None, path) -> None:
    """Train ``config`` into ``path``: a complete run directory whose counters add up, with finite
    diagnostics and the evaluation's episodes (also the GPU tier's check, tests/test_gpu.py)."""
    counters = train(config, path)
    data = read_run(path)
    assert data.status == "complete", data.problems
    half = config.runner.n_steps // 2
    assert data.progress["env_steps"].tolist() == [half, 2 * half]
    assert counters.env_steps == config.runner.n_steps
    assert counters.sampler_itrs == config.runner.n_steps // config.sampler.batch_size
    if expected_updates is not None:
        assert counters.updates == expected_updates
    assert counters.updates > 0 and counters.samples_trained > 0
    last = data.progress.iloc[-1]
    diagnostics = (
        set(data.progress.columns)
        - set(counters.snapshot())
        - {
            "return_mean",
            "return_std",
            "return_min",
            "return_max",
            "length_mean",
            "episodes_logged",
        }
    )
    assert diagnostics, "the algorithm reports diagnostics"
    assert all(math.isfinite(last[k]) for k in diagnostics), last[sorted(diagnostics)]
    assert data.eval["episode"].tolist() == [0, 1]


@pytest.mark.slow
def test_tiny_run_with_parallel_cpu_sampler_through_the_agent_factory(tmp_path):
    """The sync runner with worker processes: agents rebuilt in ``spawn`` children from the registry."""
    config = tiny(
        "ppo", 64, 16, 4, mode="cpu", n_workers=2, epochs=1, minibatch_size_steps=32, hidden_sizes=(16,)
    )
    counters = train(config, tmp_path / "cpu")
    data = read_run(tmp_path / "cpu")
    assert data.status == "complete", data.problems
    assert counters.env_steps == 64 and counters.sampler_itrs == 1
    assert data.progress["env_steps"].tolist() == [64]


@pytest.mark.parametrize("checkpoint_replay", ["never", "auto"])
def test_replay_algorithm_resumes_with_an_empty_replay_that_it_refills(
    tmp_path, monkeypatch, checkpoint_replay
):
    """With ``checkpoint_replay = "never"`` replay contents are not checkpointed
    (algorithms.runners.sync): after a resume DQN stores ``learning_starts_steps`` new steps before
    it updates again, and the counters say so. By default ("auto") it resumes with its replay and
    updates as if it had not stopped."""
    config = tiny("dqn", 160, 4, 2, batch_size=16, env_steps_per_update=8, **REPLAY, **Q_NET)
    config = dataclasses.replace(
        config, runner=dataclasses.replace(config.runner, checkpoint_replay=checkpoint_replay)
    )
    # Stopped in the batch reaching step 104 (8 per batch); the last checkpoint is at 80.
    ctrl_c_in_optimize(config, tmp_path / "run", monkeypatch, at_call=13)
    counters = train(config, tmp_path / "run")
    progress = read_run(tmp_path / "run").progress
    assert progress["env_steps"].tolist() == [80, 160]
    if checkpoint_replay == "auto":  # updates at 64, 72, ..., 160 as in an uninterrupted run
        assert progress["updates"].tolist() == [3, 13]
        return
    # Updates at 64, 72, 80 before the checkpoint; after it, the replay refills from step 80 and
    # learning restarts once 64 steps are stored: updates at 144, 152, 160.
    assert progress["updates"].tolist() == [3, 6]
    assert counters.samples_trained == 6 * 16
