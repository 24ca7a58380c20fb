"""The GPU tier: the tiny runs of every algorithm, the parallel samplers, the asynchronous runner and a
packed run with the agent on a CUDA device, where the tests of the CPU tier never put it.

CI has no GPU, so there these tests are skipped; on a GPU machine ``make test-gpu`` runs them. The
device is ``RLREPRO_TEST_DEVICE`` (default ``cuda``); ``RLREPRO_TEST_DEVICE=cpu`` runs the same tier
on the CPU, which checks the tests themselves. Why the tier exists: on the first GPU machine this
project was lent, every R2D1 job failed at its first env step (the sampler moved the episode-end
flags to the model's device, where the agent's acting state is not), a fault no CPU test could see
(docs/results/r2d1_minatar_h200.md).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from algorithms.packed.pack import train_packed
from algorithms.run_config import TrainConfig
from algorithms.rundir import read_run
from algorithms.train import train
from tests.test_packed import seeded
from tests.test_train_algorithms import CASES, PENDULUM, Q_NET, QPG, REPLAY, check_tiny_run, tiny

DEVICE = os.environ.get("RLREPRO_TEST_DEVICE", "cuda")


def _device_available(device: str) -> bool:
    if device == "cpu":
        return True
    index = torch.device(device).index or 0
    return torch.cuda.is_available() and torch.cuda.device_count() > index


pytestmark = pytest.mark.skipif(
    not _device_available(DEVICE), reason=f"needs the device {DEVICE!r} (RLREPRO_TEST_DEVICE)"
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def on_device(config: TrainConfig, **sampler) -> TrainConfig:
    """``config`` with its agent on the tier's device and ``sampler`` fields replaced."""
    return dataclasses.replace(
        config,
        runner=dataclasses.replace(config.runner, device=DEVICE),
        sampler=dataclasses.replace(config.sampler, **sampler),
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_algorithm_trains_on_the_device_with_counters_that_add_up(tmp_path, case):
    config, expected_updates = CASES[case]
    check_tiny_run(on_device(config), expected_updates, tmp_path / case)


def with_steps(config: TrainConfig, n_steps: int) -> TrainConfig:
    """``config`` run for ``n_steps`` with a progress row at half of them (``check_tiny_run``)."""
    runner = dataclasses.replace(config.runner, n_steps=n_steps, log_interval_steps=n_steps // 2)
    return dataclasses.replace(config, runner=runner)


# Feed-forward and recurrent agents, on- and off-policy, acting on the device from worker processes
# (cpu), from the main process over remote envs (gpu), and in two alternating groups; 4 envs, and
# budgets of two sampler batches or more.
PARALLEL = {
    "ppo": with_steps(CASES["ppo"][0], 128),
    "r2d1": CASES["r2d1"][0],
    "sac": with_steps(tiny("sac", 80, 4, 4, env=PENDULUM, **QPG), 96),
}


@pytest.mark.parametrize("mode", ["cpu", "gpu", "alternating"])
@pytest.mark.parametrize("name", sorted(PARALLEL))
def test_parallel_samplers_with_the_agent_on_the_device(tmp_path, mode, name):
    config = on_device(PARALLEL[name], mode=mode, batch_B=4, n_workers=2)
    check_tiny_run(config, None, tmp_path / f"{name}_{mode}")


def test_the_asynchronous_runner_with_the_agent_on_the_device(tmp_path):
    config = tiny("dqn", 400, 4, 4, batch_size=16, env_steps_per_update=8, **REPLAY, **Q_NET)
    config = on_device(config, mode="cpu", n_workers=2)
    config = dataclasses.replace(
        config,
        runner=dataclasses.replace(
            config.runner, kind="async", replay_ratio_target=2.0, async_param_sync_steps=40
        ),
    )
    counters = train(config, tmp_path / "async")
    data = read_run(tmp_path / "async")
    assert data.status == "complete", data.problems
    assert counters.env_steps >= config.runner.n_steps and counters.updates > 0


def test_a_packed_r2d1_run_on_the_device_writes_each_seed_a_complete_run(tmp_path):
    runs = [tmp_path / f"seed{seed}" for seed in (1, 2)]
    train_packed(seeded(on_device(CASES["r2d1"][0]), (1, 2)), runs)
    for run in runs:
        data = read_run(run)
        assert data.status == "complete", data.problems
        assert data.progress["updates"].iloc[-1] > 0
