"""Tiny end-to-end ``train()`` runs of the real algorithms through the registry: each writes a
complete run directory whose counters add up. Learning is checked by the benchmarks, not here."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import registry
from algorithms.envs.config import EnvConfig
from algorithms.rundir import read_run
from algorithms.train import RunnerConfig, SamplerConfig, TrainConfig, train

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")


def tiny(
    algo: str, n_steps: int, batch_T: int, batch_B: int, mode: str = "serial", n_workers: int = 1, **algo_kw
):
    return TrainConfig(
        algo=algo,
        algo_config=registry.config_class(algo)(**algo_kw),
        env=CARTPOLE,
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
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_run_completes_with_counters_that_add_up(tmp_path, case):
    config, expected_updates = CASES[case]
    counters = train(config, tmp_path / case)
    data = read_run(tmp_path / case)
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
