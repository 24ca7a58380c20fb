"""Every loss is a function of its inputs, checked two ways that can fail
(tests/purity.py): statically, its source reads nothing but its arguments, locals, module constants
and functions; by behaviour, every call a learner's own update makes returns what the same call
returns on its own. Both checks reject tests/impure_loss.py, DQN's loss switched by a module flag
the gradient step sets around the call, the pattern they exist for.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dqn_probes import ACT as DQN_ACT
from dqn_probes import OBS as DQN_OBS
from dqn_probes import chain_samples

from algorithms.algos import a2c, c51, ddpg, dqn, ppo, r2d1, sac, td3
from algorithms.arrays import BatchSpec
from tests import impure_loss
from tests.purity import Spy, impurities
from tests.test_dqn_algo import small_config
from tests.test_pg_algos import ACT as PG_ACT
from tests.test_pg_algos import OBS as PG_OBS
from tests.test_pg_algos import _batch
from tests.test_qpg_algos import ACT as QPG_ACT
from tests.test_qpg_algos import OBS as QPG_OBS
from tests.test_qpg_algos import _bandit_batch
from tests.test_r2d1_algo import OBS as R2D1_OBS
from tests.test_r2d1_algo import _time_limit_learner

torch.set_num_threads(1)

LOSSES = {
    "dqn": [dqn.loss],
    "c51": [c51.loss],
    "r2d1": [r2d1.loss, r2d1.loss_mode],
    "a2c": [a2c.loss, a2c.learning_rate],
    "ppo": [ppo.loss, ppo.schedule],
    "ddpg": [ddpg.critic_loss, ddpg.actor_loss],
    "td3": [td3.critic_loss, td3.actor_loss],
    "sac": [sac.critic_loss, sac.actor_loss],
}


@pytest.mark.parametrize("name", LOSSES)
def test_every_loss_reads_only_its_inputs(name):
    for fn in LOSSES[name]:
        assert impurities(fn) == [], fn


def test_the_static_check_rejects_the_module_flag():
    found = impurities(impure_loss.loss)
    assert found and "_measuring" in found[0], found


def _q_replay_spies(module, **options):
    """A warm learner of ``module`` (DQN's probe chain); its next 10 updates with a spy in its loss's
    place (one of every ten measures: ``diagnostic_period``)."""
    config = dqn.Config(**{**small_config(prioritized=True).__dict__, "optimizer": "adam"})
    if module is c51:
        config = c51.Config(**{**config.__dict__, **options})
    torch.manual_seed(0)
    algo = module.Algo(config, module.build_agent(config, DQN_OBS, DQN_ACT), 1, BatchSpec(8, 4))
    algo.optimize(0, chain_samples(16, 4, np.random.default_rng(0)))  # warm: 64 updates
    spy = algo.loss_fn = Spy(algo.loss_fn)
    algo.learn(10)
    return [spy]


def _r2d1_spies():
    """R2D1 after batches with time limits, so that its loss bootstraps from final observations."""
    _, algo, _ = _time_limit_learner(R2D1_OBS)
    spy = algo.loss_fn = Spy(algo.loss_fn)
    algo.learn(2)
    return [spy]


def _pg_spies(module, monkeypatch, **options):
    """One ``optimize`` call of A2C or PPO (half way through a learning-rate anneal) with a spy in
    place of the module's loss."""
    config = module.Config(hidden_sizes=(16,), anneal_env_steps=1_000, **options)
    torch.manual_seed(0)
    agent = module.build_agent(config, PG_OBS, PG_ACT)
    algo = module.Algo(config, agent, 1, BatchSpec(8, 4))
    spy = Spy(module.loss)
    monkeypatch.setattr(module, "loss", spy)
    algo.optimize(500, _batch(agent, 8, 4))
    return [spy]


def _qpg_spies(module):
    """A DDPG, TD3 or SAC learner on the bandit probe, two updates with spies in its losses' places."""
    config = module.Config(hidden_sizes=(16,), random_steps=16, learning_starts_steps=16, batch_size=8)
    torch.manual_seed(0)
    agent = module.build_agent(config, QPG_OBS, QPG_ACT)
    algo = module.Algo(config, agent, 1, BatchSpec(1, 8))
    generator = torch.Generator().manual_seed(0)
    agent.set_mode("sample", 0)
    algo.optimize(0, _bandit_batch(agent, 8, generator))  # 16 steps stored: warm
    critic = algo.critic_loss_fn = Spy(algo.critic_loss_fn)
    actor = algo.actor_loss_fn = Spy(algo.actor_loss_fn)
    for _ in range(2):  # TD3 updates its actor on every second
        algo.optimize(8, _bandit_batch(agent, 8, generator))
    return [critic, actor]


CASES = {
    "dqn": lambda monkeypatch: _q_replay_spies(dqn),
    "c51": lambda monkeypatch: _q_replay_spies(c51, n_atoms=11),
    "r2d1": lambda monkeypatch: _r2d1_spies(),
    "a2c": lambda monkeypatch: _pg_spies(a2c, monkeypatch),
    "a2c_recurrent": lambda monkeypatch: _pg_spies(a2c, monkeypatch, recurrent=True, lstm_size=8),
    "ppo": lambda monkeypatch: _pg_spies(
        ppo, monkeypatch, epochs=2, minibatch_size_steps=16, anneal_clip=True
    ),
    "ddpg": lambda monkeypatch: _qpg_spies(ddpg),
    "td3": lambda monkeypatch: _qpg_spies(td3),
    "sac": lambda monkeypatch: _qpg_spies(sac),
}


@pytest.mark.parametrize("name", CASES)
def test_a_loss_inside_its_update_equals_the_same_call_alone(name, monkeypatch):
    for spy in CASES[name](monkeypatch):
        assert spy.mismatches() == []


def test_the_behavioural_check_rejects_the_module_flag():
    (spy,) = _q_replay_spies(impure_loss)
    measured = [i for i, (_, _, out) in enumerate(spy.calls) if out.diagnostics]
    assert len(measured) == 1  # inside the update, as the flag said
    mismatches = spy.mismatches()
    assert len(mismatches) == 1 and mismatches[0].startswith(f"call {measured[0]} "), mismatches


def test_a_loss_measures_as_its_mode_says():
    """What the flag did, the mode does: the same call without ``measure`` has the same loss and no
    diagnostics."""
    config, algo, batch = _time_limit_learner(R2D1_OBS)
    batch = batch.replace(is_weights=torch.ones(2))
    mode = r2d1.loss_mode(config, batch, measure=True, traced=False)
    assert mode.time_limits is not None
    loud = r2d1.loss(config, algo.model, algo.target_model, batch, mode)
    quiet = r2d1.loss(config, algo.model, algo.target_model, batch, mode._replace(measure=False))
    assert torch.equal(quiet.loss, loud.loss) and quiet.diagnostics == {} and loud.diagnostics
