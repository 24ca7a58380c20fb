"""Every DQN-family algorithm trains end to end through ``train()`` on a tiny CartPole budget."""

import math

import pytest
import torch

from algorithms.algos import c51, dqn, r2d1, rainbow
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import read_run
from algorithms.train import train

torch.set_num_threads(1)
REPLAY = dict(replay_size_steps=2_000, learning_starts_steps=200, mlp_hidden_sizes=(16,), eps_decay_steps=300)
CONFIGS = {
    "dqn": (dqn.Config(**REPLAY, batch_size=16, env_steps_per_update=8, double=True, dueling=True), 8, 1),
    "c51": (c51.Config(**REPLAY, batch_size=16, env_steps_per_update=8, n_atoms=11, v_max=20.0), 8, 1),
    "rainbow": (
        rainbow.Config(**REPLAY, batch_size=16, env_steps_per_update=8, n_atoms=11, v_max=20.0),
        8,
        1,
    ),
    "r2d1": (
        r2d1.Config(
            replay_size_steps=4_000,
            learning_starts_steps=200,
            sequence_length_steps=8,
            burn_in_steps=4,
            sequence_period_steps=4,
            n_step=3,
            batch_size_sequences=8,
            replay_ratio=1.0,
            lstm_size=16,
            fc_size=16,
            head_hidden_size=16,
            mlp_hidden_sizes=(16,),
        ),
        8,
        4,
    ),
}


@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_trains_end_to_end(algo, tmp_path):
    config, T, B = CONFIGS[algo]
    env = EnvConfig(id="CartPole-v1", kind="gym", mask_velocity=algo == "r2d1")
    counters = train(
        TrainConfig(
            algo=algo,
            algo_config=config,
            env=env,
            sampler=SamplerConfig(batch_T=T, batch_B=B, eval_episodes=2),
            runner=RunnerConfig(n_steps=640, log_interval_steps=320, seed=0),
        ),
        tmp_path / algo,
    )
    run = read_run(tmp_path / algo)
    assert run.status == "complete", run.problems
    assert counters.updates > 0 and counters.samples_replayed >= counters.samples_trained > 0
    assert math.isfinite(run.progress.loss.iloc[-1])
    assert len(run.eval) == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_pong_trains_with_thread_env_workers(kind, tmp_path):
    """``train()`` with the alternating sampler whose env workers are the native env's threads (in
    the learner's process, or in the async runner's sampler process): the config reaches the
    sampler (and ``config.json``), and the run trains on real frames. The async runner's throttle
    (one trained sample per env step after warm-up) holds its sampler back until the optimizer has
    made updates: unthrottled, a loaded machine sampled all 64 steps before the first update."""
    throttle = {"replay_ratio_target": 1.0} if kind == "async" else {}
    config = TrainConfig(
        algo="dqn",
        algo_config=dqn.Config(
            replay_size_steps=256, learning_starts_steps=32, batch_size=8, eps_decay_steps=64
        ),
        env=EnvConfig(id="pong", num_threads=1),
        sampler=SamplerConfig(
            mode="alternating", batch_T=4, batch_B=2, env_workers="threads", eval_episodes=0
        ),
        runner=RunnerConfig(kind=kind, n_steps=64, log_interval_steps=32, seed=0, **throttle),
    )
    counters = train(config, tmp_path / "run")
    run = read_run(tmp_path / "run")
    assert run.status == "complete", run.problems
    assert run.config["sampler"]["env_workers"] == "threads"
    assert counters.env_steps == 64 and counters.updates > 0
