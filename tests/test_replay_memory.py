"""The planning estimate of a replay's memory (``registry.replay_bytes``, which ``repro`` refuses a
setting on before any job runs) against the arrays the algorithm really allocates: a lower bound, and a
tight one where nothing but the replay's own rows is stored, so a replay that cannot fit is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from dqn_probes import ACT as DQN_ACT
from dqn_probes import OBS as DQN_OBS
from dqn_probes import chain_samples
from r2d1_probes import ACT as R2D1_ACT
from r2d1_probes import OBS as R2D1_OBS

from algorithms import registry
from algorithms.algos import dqn, r2d1, sac
from algorithms.arrays import BatchSpec
from tests.test_qpg_algos import ACT as QPG_ACT
from tests.test_qpg_algos import OBS as QPG_OBS
from tests.test_qpg_algos import SMALL as QPG_SMALL
from tests.test_qpg_algos import _bandit_batch
from tests.test_r2d1_algo import SMALL as R2D1_SMALL
from tests.test_r2d1_algo import _truncating_batches

CAPACITY = 20_000


def allocated(replay) -> int:
    """Bytes of every array the replay holds (storage and selector: what a checkpoint saves)."""
    return sum(np.asarray(a).nbytes for a in replay.state_arrays().values())


@pytest.mark.parametrize("prioritized", [False, True])
def test_dqn_estimate_is_the_replays_bytes(prioritized):
    config = dqn.Config(replay_size_steps=CAPACITY, prioritized=prioritized, mlp_hidden_sizes=(8,))
    algo = dqn.Algo(config, dqn.build_agent(config, DQN_OBS, DQN_ACT), 1, BatchSpec(4, 4))
    algo.append_samples(chain_samples(4, 4, np.random.default_rng(0)))
    estimate = registry.replay_bytes("dqn", config, DQN_OBS, DQN_ACT)
    real = allocated(algo.replay)
    # The sum tree's upper levels (1/16 of its leaves and less) and the ring's n-step spare rows are
    # all the estimate leaves out.
    assert estimate <= real <= 1.06 * estimate


def test_sac_estimate_is_the_replays_bytes():
    config = sac.Config(**{**QPG_SMALL, "replay_size_steps": CAPACITY})
    torch.manual_seed(0)
    agent = sac.build_agent(config, QPG_OBS, QPG_ACT)
    algo = sac.Algo(config, agent, 1, BatchSpec(1, 8))
    agent.set_mode("sample", 0)
    algo.optimize(0, _bandit_batch(agent, 8, torch.Generator().manual_seed(0)))
    estimate = registry.replay_bytes("sac", config, QPG_OBS, QPG_ACT)
    assert estimate <= allocated(algo.replay.replay) <= 1.02 * estimate  # the feed's replay


def test_r2d1_estimate_is_a_lower_bound_short_by_the_stored_states():
    config = dataclasses.replace(R2D1_SMALL, replay_size_steps=CAPACITY)
    algo = r2d1.Algo(config, r2d1.build_agent(config, R2D1_OBS, R2D1_ACT), 1, BatchSpec(8, 2))
    algo.append_samples(_truncating_batches(False, 1)[0])
    estimate = registry.replay_bytes("r2d1", config, R2D1_OBS, R2D1_ACT)
    states = 2 * config.lstm_size * 4 * CAPACITY / config.sequence_period_steps  # h and c, float32
    assert estimate <= allocated(algo.replay) <= 1.03 * (estimate + states)


def test_a_replay_just_past_this_machines_memory_is_refused_at_the_dry_run(tmp_path, capsys, monkeypatch):
    """Issue 47's own example: 500M CartPole steps take 59 bytes each (27.5 GiB) on a 24 GiB machine;
    the ring's fields alone (47 bytes) would have let it through to grow until the kernel kills it."""
    from repro import memory
    from repro.cli import main

    monkeypatch.setattr(memory, "physical_memory", lambda: 24 * 2**30)
    root = tmp_path / "runs"
    argv = ["run", "dqn_cartpole", "--seeds", "1", "--set", "algo.replay_size_steps=500000000", "--dry-run"]
    assert main([*argv, "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs at least 27.5 GiB of memory; this machine has 24.0 GiB" in err
    assert not root.exists()
