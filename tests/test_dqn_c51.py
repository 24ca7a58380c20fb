"""C51 and Rainbow-minus-noisy: the categorical loss by hand, and the probe's expected returns."""

import numpy as np
import pytest
import torch
from dqn_probes import A_STATE, ACT, B_STATE, OBS, chain_samples, single_loss

from algorithms.algos import c51, rainbow
from algorithms.arrays import BatchSpec, NamedArrays

torch.set_num_threads(1)


def small(cls, **kw):
    base = dict(
        n_atoms=11,
        v_min=-2.0,
        v_max=2.0,
        discount=0.9,
        batch_size=32,
        replay_size_steps=2_000,
        learning_starts_steps=64,
        env_steps_per_update=1,
        target_update_period_updates=50,
        learning_rate=5e-3,
        optimizer_eps=1e-8,
        mlp_hidden_sizes=(32,),
    )
    base.update(kw)
    return cls(**base)


def make_algo(module, config, seed=0):
    torch.manual_seed(seed)
    agent = module.build_agent(config, OBS, ACT)
    return module.Algo(config, agent, 1, BatchSpec(8, 4)), agent


@pytest.mark.parametrize("module", [c51, rainbow])
def test_categorical_probe_expected_returns(module):
    config = small(module.Config, n_step=1) if module is rainbow else small(module.Config)
    algo, agent = make_algo(module, config)
    rng = np.random.default_rng(0)
    for itr in range(40):
        algo.optimize(itr, chain_samples(8, 4, rng))
    with torch.no_grad():
        q = agent.to_q(algo.model(torch.tensor([A_STATE, B_STATE])))
    assert torch.allclose(q, torch.tensor([[0.9, 0.9], [0.0, 1.0]]), atol=0.1), q


def test_c51_loss_matches_hand_projection():
    config = small(c51.Config, n_atoms=3, v_min=-1.0, v_max=1.0)
    algo, agent = make_algo(c51, config)
    obs = torch.tensor([A_STATE, B_STATE])
    batch = NamedArrays(
        observation=obs,
        action=torch.tensor([1, 0]),
        return_n=torch.tensor([0.5, 1.0]),
        discount_n=torch.tensor([0.5, 0.0]),
        next_observation=obs[[1, 0]],
        is_weights=torch.tensor([1.0, 0.5]),
    )
    loss, ce, _ = single_loss(algo, batch)
    with torch.no_grad():
        p_next = torch.softmax(algo.target_model(obs[[1]]), -1)[0]  # [A, 3] at s' = B of sample 0
        best = int((p_next * torch.tensor([-1.0, 0.0, 1.0])).sum(-1).argmax())
        p = p_next[best]
        # Sample 0: atoms -1, 0, 1 move to 0.5 + 0.5 z = 0, 0.5, 1: mass p0 at 0, p1 split 1/2-1/2
        # between 0 and 1, p2 at 1.
        target0 = torch.stack([torch.tensor(0.0), p[0] + 0.5 * p[1], 0.5 * p[1] + p[2]])
        # Sample 1: terminal-like discount 0, return 1: all mass on atom 1.0.
        target1 = torch.tensor([0.0, 0.0, 1.0])
        log_p = torch.log_softmax(algo.model(obs), -1)
        ce0 = -(target0 * log_p[0, 1]).sum()
        ce1 = -(target1 * log_p[1, 0]).sum()
    assert torch.allclose(ce, torch.stack([ce0, ce1]), atol=1e-6)
    assert torch.allclose(loss, (ce0 + 0.5 * ce1) / 2, atol=1e-6)


def test_rainbow_is_c51_with_published_options():
    config = rainbow.Config()
    assert isinstance(config, c51.Config)
    assert (config.n_step, config.double, config.dueling, config.prioritized) == (3, True, True, True)
    assert rainbow.Algo is c51.Algo
    with pytest.raises(ValueError, match="Config.v_min"):
        c51.Config(v_min=1.0, v_max=0.0)
