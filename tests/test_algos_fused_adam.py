"""PPO, R2D1 and DQN (optimizer="adam") step with torch's fused Adam kernel, a speed choice (see the
comments at their optimizers). The same optimize calls with the reference per-tensor Adam must give
the same parameters up to float rounding."""

import numpy as np
import pytest
import torch
from dqn_probes import ACT as DQN_ACT
from dqn_probes import OBS as DQN_OBS
from dqn_probes import chain_samples
from r2d1_probes import ACT as R2D1_ACT
from r2d1_probes import OBS as R2D1_OBS
from r2d1_probes import Driver
from test_pg_algos import ACT, OBS, _batch
from test_r2d1_algo import SMALL as R2D1_SMALL

from algorithms.algos import dqn, ppo, r2d1
from algorithms.arrays import BatchSpec

torch.set_num_threads(1)


def _reference_adam(optimizer: torch.optim.Optimizer) -> torch.optim.Adam:
    """A per-tensor (non-fused, non-foreach) Adam with ``optimizer``'s parameters and settings."""
    group = optimizer.param_groups[0]
    return torch.optim.Adam(group["params"], lr=group["lr"], eps=group["eps"], foreach=False)


def _assert_same_parameters(model: torch.nn.Module, reference: torch.nn.Module, initial: list) -> None:
    for (name, p), q, p0 in zip(model.named_parameters(), reference.parameters(), initial):
        assert not torch.equal(p, p0), f"{name} did not change: the comparison would be vacuous"
        # Relative to the parameter's change: the fused kernel may round differently in the last bit.
        error = float((p - q).detach().norm() / (q - p0).detach().norm())
        assert error < 1e-4, f"{name}: fused and per-tensor Adam differ by {error:.2e} of the update"


def _fused_and_reference(build):
    """Two learners from ``build()`` under the same seed: the first keeps its fused Adam, the second
    gets the per-tensor reference; also the initial parameters."""
    learners = []
    for _ in range(2):
        torch.manual_seed(0)
        learners.append(build())
    fused, reference = learners
    assert fused.optimizer.defaults["fused"]
    reference.optimizer = _reference_adam(reference.optimizer)
    return fused, reference, [p.detach().clone() for p in fused.agent.model.parameters()]


@pytest.mark.parametrize("recurrent", [False, True])
def test_ppo_fused_adam_matches_per_tensor_adam(recurrent):
    config = ppo.Config(minibatch_size_steps=16, epochs=3, recurrent=recurrent)
    fused, reference, initial = _fused_and_reference(
        lambda: ppo.Algo(config, ppo.build_agent(config, OBS, ACT), 1, BatchSpec(8, 4))
    )
    batch = _batch(fused.agent, 8, 4)
    for algo in (fused, reference):
        torch.manual_seed(1)  # the same minibatch permutations
        algo.optimize(0, batch)
    _assert_same_parameters(fused.agent.model, reference.agent.model, initial)


def test_dqn_adam_is_fused_and_matches_per_tensor_adam():
    config = dqn.Config(optimizer="adam", batch_size=8, learning_starts_steps=16, env_steps_per_update=1)
    fused, reference, initial = _fused_and_reference(
        lambda: dqn.Algo(config, dqn.build_agent(config, DQN_OBS, DQN_ACT), 1, BatchSpec(4, 4))
    )
    for algo in (fused, reference):
        torch.manual_seed(1)  # the replay's sampling seed
        rng = np.random.default_rng(0)
        for itr in range(8):
            algo.optimize(itr, chain_samples(4, 4, rng))
    assert fused.updates == reference.updates > 0
    _assert_same_parameters(fused.model, reference.model, initial)


def test_r2d1_adam_is_fused_and_matches_per_tensor_adam():
    fused, reference, initial = _fused_and_reference(
        lambda: r2d1.Algo(R2D1_SMALL, r2d1.build_agent(R2D1_SMALL, R2D1_OBS, R2D1_ACT), 1, BatchSpec(8, 4))
    )
    for algo in (fused, reference):
        driver = Driver(algo.agent, 4, length=3)
        torch.manual_seed(1)  # the same exploration and replay draws
        for itr in range(12):
            algo.agent.set_mode("sample")
            algo.optimize(itr, driver.sample(8))
    assert fused.updates == reference.updates > 0
    _assert_same_parameters(fused.model, reference.model, initial)
