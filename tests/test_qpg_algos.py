"""DDPG, TD3 and SAC: configs, agents, and a one-step continuous bandit probe with a known optimum.

The probe: observation s ~ U(-1, 1)^2, action a in [-1, 1]^2 (the box), reward -|a - s * [1, -0.5]|^2,
every episode one step long (terminated). The optimal policy is a*(s) = s * [1, -0.5] with value 0,
so a broken critic target, actor loss or squashing correction shows as a policy far from a*.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

from algorithms.agents.qpg_agents import DeterministicAgent, SquashedGaussianAgent
from algorithms.algos import ddpg, sac, td3
from algorithms.arrays import NamedArrays
from algorithms.samplers.base import BatchSpec

torch.set_num_threads(1)

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
SLOPE = torch.tensor([1.0, -0.5])


def _bandit_batch(agent, B, generator):
    obs = torch.rand(B, 2, generator=generator) * 2 - 1
    action, agent_info, _ = agent.step(obs, torch.zeros(B, 2), torch.zeros(B), None)
    reward = -((action - obs * SLOPE) ** 2).sum(-1)
    done = torch.ones(1, B, dtype=torch.bool)
    next_obs = torch.rand(B, 2, generator=generator) * 2 - 1
    return NamedArrays(
        observation=obs[None],
        action=action[None],
        reward=reward[None],
        terminated=done,
        truncated=torch.zeros(1, B, dtype=torch.bool),
        final_observation=obs[None],
        prev_action=torch.zeros(1, B, 2),
        prev_reward=torch.zeros(1, B),
        agent_info=agent_info[None] if agent_info.fields else agent_info,
        env_info=NamedArrays(
            life_loss=torch.zeros(1, B, dtype=torch.bool),
            raw_reward=reward[None],
            episode_return=reward[None],
            episode_length=torch.ones(1, B, dtype=torch.int64),
        ),
        bootstrap=NamedArrays(
            observation=next_obs, prev_action=torch.zeros(B, 2), prev_reward=torch.zeros(B)
        ),
    )


def _train_on_bandit(module, config, steps, B=8, seed=0):
    torch.manual_seed(seed)
    agent = module.build_agent(config, OBS, ACT)
    algo = module.Algo(config, agent, 1, BatchSpec(1, B))
    g = torch.Generator().manual_seed(seed)
    infos = []
    for itr in range(steps // B):
        agent.set_mode("sample", itr * B)
        samples = _bandit_batch(agent, B, g)
        agent.set_mode("train", (itr + 1) * B)
        infos.append(algo.optimize(itr, samples))
    agent.set_mode("eval")
    test_obs = torch.rand(256, 2, generator=g) * 2 - 1
    action, _, _ = agent.step(test_obs, None, None, None)
    return algo, infos, ((action - test_obs * SLOPE) ** 2).sum(-1).mean().item()


SMALL = {"hidden_sizes": (32, 32), "random_steps": 128, "learning_starts_steps": 128, "batch_size": 64}


@pytest.mark.slow
@pytest.mark.parametrize(
    "module,config",
    [
        (td3, td3.Config(**SMALL)),
        (ddpg, ddpg.Config(**SMALL)),
        (
            sac,
            sac.Config(
                **SMALL, actor_learning_rate=1e-3, critic_learning_rate=1e-3, alpha_learning_rate=1e-3
            ),
        ),
    ],
    ids=["td3", "ddpg", "sac"],
)
def test_bandit_probe_finds_the_optimal_action(module, config):
    algo, infos, error = _train_on_bandit(module, config, steps=640)
    # A uniform-random policy's squared error is about 1.1, the best constant action's about 0.42.
    # (SAC's is the largest of the three: its deterministic eval action is the mean of a policy that
    # still keeps entropy.)
    assert error < 0.05, error
    assert sum(i.updates for i in infos) == 640 - 128  # one update per env step once warm
    assert infos[-1].samples_trained == 8 * 64
    assert {"critic_loss", "actor_loss", "q_mean"} <= set(infos[-1].diagnostics)


def test_sac_temperature_moves_toward_the_entropy_target():
    config = sac.Config(**SMALL, target_entropy=5.0)  # unreachably high: alpha must grow
    algo, infos, _ = _train_on_bandit(sac, config, steps=192)
    assert infos[-1].diagnostics["alpha"] > 1.0
    config = sac.Config(**SMALL, autotune_alpha=False, initial_alpha=0.3)
    algo, infos, _ = _train_on_bandit(sac, config, steps=192)
    assert infos[-1].diagnostics["alpha"] == pytest.approx(0.3) and np.isnan(
        infos[-1].diagnostics["alpha_loss"]
    )


def test_td3_delays_policy_updates():
    algo, _, _ = _train_on_bandit(td3, td3.Config(**SMALL, policy_delay_updates=3), steps=160)
    changed = []
    for _ in range(6):
        before = [p.detach().clone() for p in algo.actor.parameters()]
        algo.update(algo.replay.sample(64, torch.device("cpu")))
        changed.append(not all(torch.equal(a, b) for a, b in zip(before, algo.actor.parameters())))
    # The actor (and the targets) move only on updates whose count is a multiple of the delay.
    first = algo.updates - 5
    assert changed == [(first + i) % 3 == 0 for i in range(6)] and sum(changed) == 2


def test_agents_explore_uniformly_then_with_the_policy():
    torch.manual_seed(0)
    det = td3.build_agent(td3.Config(random_steps=100, learning_starts_steps=100), OBS, ACT)
    assert isinstance(det, DeterministicAgent)
    obs = torch.zeros(2000, 2)
    det.set_mode("sample", 0)
    uniform, _, _ = det.step(obs, None, None, None)
    assert uniform.std(0).min() > 0.5  # U(-1, 1) has std 0.58
    det.set_mode("sample", 100)
    noisy, _, _ = det.step(obs, None, None, None)
    det.set_mode("eval", 100)
    greedy, _, _ = det.step(obs, None, None, None)
    assert torch.allclose(noisy.std(0), torch.full((2,), 0.1), atol=0.02)
    assert torch.equal(greedy, greedy[:1].expand_as(greedy))
    stochastic = sac.build_agent(sac.Config(random_steps=0, learning_starts_steps=256), OBS, ACT)
    assert isinstance(stochastic, SquashedGaussianAgent)
    stochastic.set_mode("sample", 0)
    a, _, _ = stochastic.step(obs, None, None, None)
    assert (a.abs() <= 1).all() and a.std(0).min() > 0.1


def test_configs_validate_and_presets_load():
    with pytest.raises(ValueError, match="td3.Config.tau"):
        td3.Config(tau=0.0)
    with pytest.raises(ValueError, match="sac.Config.learning_starts_steps"):
        sac.Config(learning_starts_steps=10)
    with pytest.raises(ValueError, match="unknown DDPG preset"):
        ddpg.Config.preset("atari")
    for module in (ddpg, td3, sac):
        for name in module.PRESETS:
            assert isinstance(module.Config.preset(name), module.Config)
    assert td3.Config().policy_delay_updates == 2 and sac.Config().batch_size == 256
