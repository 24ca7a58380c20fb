"""Data-parallel runner: 2 gloo ranks on CPU train A2C on CartPole and SAC on Pendulum (critics and
temperature outside the agent's model); replicas stay identical, counts add up across ranks, and
the run directory is written once (by rank 0)."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from algorithms.algos import a2c, sac
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import read_run
from algorithms.runners.common import build_run_agent, seed_everything
from algorithms.runners.ddp import DataParallelModel, DdpRunner, exit_rank, rank_device
from algorithms.train import train

WORLD = 2
T, B = 8, 2


def ddp_config(n_steps: int, algo: str = "a2c") -> TrainConfig:
    if algo == "a2c":
        # Annealed learning rate: every rank must anneal on the run's global env-step count.
        algo_config, env = (
            a2c.Config(anneal_env_steps=2_000, hidden_sizes=(16,)),
            EnvConfig(id="CartPole-v1", kind="gym"),
        )
    else:
        algo_config = sac.Config(
            batch_size=16,
            replay_size_steps=1_000,
            random_steps=16,
            learning_starts_steps=32,
            hidden_sizes=(16,),
        )
        env = EnvConfig(id="Pendulum-v1", kind="gym")
    return TrainConfig(
        algo=algo,
        algo_config=algo_config,
        env=env,
        sampler=SamplerConfig(batch_T=T, batch_B=B, eval_n_envs=1, eval_episodes=2, eval_max_steps=50),
        runner=RunnerConfig(kind="ddp", n_steps=n_steps, log_interval_steps=64, n_gpus=WORLD, seed=3),
    )


def tensors(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict by dotted name."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(tensors(value, f"{prefix}{key}."))
        elif isinstance(value, torch.Tensor):
            out[f"{prefix}{key}"] = value
    return out


def _train_rank_and_save_parameters(rank: int, config: TrainConfig, init_file: str, out_dir: str) -> None:
    """One rank of a run without a run directory; saves its final parameters for the test to compare."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        runner = DdpRunner.build(config, None, None, rank=rank, world_size=WORLD, device="cpu")
        counters = runner.run()
        torch.save(
            {
                "params": runner.agent.state_dict(),
                "algo": runner.algo.state_dict(),
                "counters": counters.state_dict(),
            },
            Path(out_dir) / f"{rank}.pt",
        )
    finally:
        dist.destroy_process_group()
    exit_rank()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "updates", "samples_trained"),
    [
        # 5 iterations x 2 ranks x 8 x 2 steps. A2C: one synchronised update per iteration, not one
        # per rank, trained on every rank's batch (samples trained = env steps).
        ("a2c", 5, 160),
        # SAC: each rank stores 80 steps and updates once per step after its first 32: 48 updates of
        # a 16-transition minibatch on each of the 2 ranks.
        ("sac", 48, 48 * 16 * 2),
    ],
)
def test_replicas_stay_identical_and_counts_add_up_across_ranks(tmp_path, algo, updates, samples_trained):
    config = ddp_config(5 * WORLD * T * B, algo)
    with tempfile.TemporaryDirectory() as rendezvous:
        mp.start_processes(
            _train_rank_and_save_parameters,
            args=(config, str(Path(rendezvous) / "store"), str(tmp_path)),
            nprocs=WORLD,
            start_method="spawn",
        )
    ranks = [torch.load(tmp_path / f"{r}.pt", weights_only=True) for r in range(WORLD)]
    # Model, algorithm state (critics, targets, temperature, optimizer moments): equal on both ranks.
    states = [tensors({"model": r["params"], "algo": r["algo"]}) for r in ranks]
    assert states[0].keys() == states[1].keys()
    for name, value in states[0].items():
        assert torch.equal(value, states[1][name]), name
    seed_everything(config.runner.seed)  # as every rank seeds before building
    initial = build_run_agent(config, torch.device("cpu")).state_dict()
    # The replicas trained: their parameters left the initialisation both ranks started from.
    assert any(not torch.equal(v, initial[k]) for k, v in ranks[0]["params"].items())
    for state in (r["counters"] for r in ranks):
        assert state["env_steps"] == 160 and state["sampler_itrs"] == 5
        assert state["updates"] == updates
        assert state["samples_trained"] == samples_trained and state["samples_replayed"] == samples_trained
    assert ranks[0]["counters"]["episodes"] == ranks[1]["counters"]["episodes"]


@pytest.mark.slow
def test_train_with_ddp_writes_one_run_directory_and_reopens_it(tmp_path):
    config = ddp_config(n_steps=4 * WORLD * T * B)  # 128 steps: rows at 64 and 128
    counters = train(config, tmp_path / "run")
    data = read_run(tmp_path / "run")
    assert data.status == "complete", data.problems
    assert counters.env_steps == 128 and counters.updates == 4
    assert data.progress["env_steps"].tolist() == [64, 128]
    assert data.progress["updates"].tolist() == [2, 4]
    assert data.progress["replay_ratio_trained"].tolist() == [1.0, 1.0]
    assert data.eval["env_steps"].tolist() == [128, 128]
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=True)
    assert len(checkpoint["ddp_rng"]) == WORLD
    assert not any(k.startswith("module.") for k in checkpoint["agent"])
    # Resuming the finished run: every rank loads the checkpoint and its own RNG state, nothing is
    # trained or logged again.
    assert train(config, tmp_path / "run").env_steps == 128
    assert read_run(tmp_path / "run").progress["env_steps"].tolist() == [64, 128]
    assert (
        torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=True)["counters"]["updates"]
        == 4
    )


def test_data_parallel_model_behaves_like_the_model_it_wraps(tmp_path):
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(3, 4)
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head(self.body(x))

        def value(self, x):
            return self.forward(x) * 2

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = TwoHeads()
        replica = DataParallelModel(model, forward_sync_buffers=False)
        x = torch.randn(5, 3)
        assert torch.equal(replica(x), model(x))
        assert torch.equal(replica.value(x), model.value(x))  # methods come from the wrapped model
        assert replica.body is model.body
        assert list(replica.state_dict()) == list(model.state_dict())  # no "module." prefix
        target = copy.deepcopy(replica)
        assert type(target) is TwoHeads and target.body.weight is not model.body.weight
        replica.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
        assert torch.count_nonzero(model.body.weight) == 0
    finally:
        dist.destroy_process_group()


def test_rank_devices():
    assert rank_device("cpu", 1) == "cpu"
    assert rank_device("cuda", 1) == "cuda:1"
    assert rank_device("cuda:2", 1) == "cuda:3"
