"""A2C and PPO: configs, one optimize call on hand-built batches, and a CI-sized learning check."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from algorithms.algos import a2c, ppo
from algorithms.arrays import BatchSpec, NamedArrays
from algorithms.configs import ConfigError
from algorithms.learners.policy_gradient import anneal_fraction
from repro.settings import setting_configs

torch.set_num_threads(1)

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def _batch(agent, T, B, seed=0):
    """A [T, B] batch in Contract 3's layout from ``agent`` on random observations (one truncation)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    obs = torch.randn(T, B, 4, generator=g)
    state = agent.initial_state(B)
    prev_action, prev_reward = torch.zeros(B, dtype=torch.int64), torch.zeros(B)
    actions, infos, prev_actions, prev_rewards = [], [], [], []
    reward = (obs[..., 0] > 0).float()  # reward 1 for pushing when x > 0: learnable from the observation
    for t in range(T):
        action, info, state = agent.step(obs[t], prev_action, prev_reward, state)
        prev_actions.append(prev_action)
        prev_rewards.append(prev_reward)
        actions.append(action)
        infos.append(info)
        prev_action, prev_reward = action, reward[t]
    truncated = torch.zeros(T, B, dtype=torch.bool)
    truncated[T // 2, 0] = True
    agent_info = NamedArrays({k: torch.stack([i[k] for i in infos]) for k in ("value", "log_prob")})
    if agent.recurrent:
        agent_info = agent_info.replace(
            prev_state=NamedArrays(
                h=torch.stack([i.prev_state.h for i in infos]), c=torch.stack([i.prev_state.c for i in infos])
            )
        )
    bootstrap = NamedArrays(
        observation=torch.randn(B, 4, generator=g), prev_action=prev_action, prev_reward=prev_reward
    )
    if agent.recurrent:
        bootstrap = bootstrap.replace(agent_state=state)
    return NamedArrays(
        observation=obs,
        action=torch.stack(actions),
        reward=reward * (torch.stack(actions) == 1),
        terminated=torch.zeros(T, B, dtype=torch.bool),
        truncated=truncated,
        final_observation=obs,
        prev_action=torch.stack(prev_actions),
        prev_reward=torch.stack(prev_rewards),
        agent_info=agent_info,
        bootstrap=bootstrap,
    )


def test_configs_validate_and_published_settings_load():
    with pytest.raises(ValueError, match="ppo.Config.discount"):
        ppo.Config(discount=1.5)
    with pytest.raises(ValueError, match="a2c.Config.learning_rate"):
        a2c.Config(learning_rate=0.0)
    with pytest.raises(ConfigError, match="unknown setting 'ppo_pong'"):
        setting_configs("ppo_pong")
    # Each published setting gives its sampler shape: horizon T x actors B.
    shapes = {
        "ppo_mujoco": (ppo, 2048, 1),  # Schulman et al. 2017, Table 3 (one actor, Sec. 6.1)
        "ppo_atari": (ppo, 128, 8),  # Schulman et al. 2017, Table 5
        "a2c_atari": (a2c, 5, 16),  # Mnih et al. 2016, Sec. 8: t_max 5, 16 actor-learners
        "a2c_mujoco": (a2c, 5, 16),
        "a2c_cartpole": (a2c, 5, 8),  # rl-baselines3-zoo a2c.yml CartPole-v1: n_envs 8, SB3 n_steps 5
    }
    for name, (module, batch_T, batch_B) in shapes.items():
        configs = setting_configs(name)
        assert isinstance(configs["algo"], module.Config), name
        assert (configs["sampler"].batch_T, configs["sampler"].batch_B) == (batch_T, batch_B), name
    assert setting_configs("ppo_atari")["algo"].clip_epsilon == 0.1  # Schulman et al. 2017, Table 5


def test_ppo_minibatch_size_must_fit_the_batch():
    agent = ppo.build_agent(ppo.Config(), OBS, ACT)
    with pytest.raises(ValueError, match="minibatch_size_steps=64 must divide"):
        ppo.Algo(ppo.Config(), agent, 1, BatchSpec(10, 3))
    recurrent = ppo.build_agent(ppo.Config(recurrent=True, minibatch_size_steps=3), OBS, ACT)
    with pytest.raises(ValueError, match="whole env columns"):
        ppo.Algo(ppo.Config(recurrent=True, minibatch_size_steps=3), recurrent, 1, BatchSpec(2, 3))


@pytest.mark.parametrize("recurrent", [False, True])
def test_ppo_optimize_counts_updates_and_improves_the_surrogate(recurrent):
    torch.manual_seed(0)
    config = ppo.Config(
        epochs=4, minibatch_size_steps=32, recurrent=recurrent, lstm_size=16, hidden_sizes=(16,)
    )
    agent = ppo.build_agent(config, OBS, ACT)
    algo = ppo.Algo(config, agent, 1, BatchSpec(16, 4))
    samples = _batch(agent, 16, 4)
    info = algo.optimize(0, samples)
    assert info.updates == 4 * 2 and info.samples_trained == 4 * 64
    for key in (
        "pi_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "grad_norm",
        "explained_variance",
    ):
        assert np.isfinite(info.diagnostics[key]), key
    # The policy moved toward the rewarded action where x > 0 (both agents evaluate [T, B] here).
    log_prob, _, _ = agent.evaluate(samples)
    rewarded = (samples.action == 1) & (samples.observation[..., 0] > 0)
    assert (log_prob - samples.agent_info.log_prob)[rewarded].mean() > 0


def test_ppo_target_kl_stops_early():
    torch.manual_seed(0)
    config = ppo.Config(epochs=10, minibatch_size_steps=16, learning_rate=1e-2, target_kl=1e-6)
    agent = ppo.build_agent(config, OBS, ACT)
    info = ppo.Algo(config, agent, 1, BatchSpec(16, 4)).optimize(0, _batch(agent, 16, 4))
    assert info.diagnostics["stopped_early"] == 1.0 and info.updates < 10 * 4


def test_learning_rate_anneals_linearly():
    assert [anneal_fraction(s, 640) for s in (0, 320, 640, 1280)] == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert anneal_fraction(10**9, 0) == 1.0  # 0: no annealing
    # The schedules are functions of the env step they are given.
    config = ppo.Config(anneal_env_steps=640, anneal_clip=True)
    assert ppo.schedule(config, 320) == (config.learning_rate * 0.5, config.clip_epsilon * 0.5)
    assert ppo.schedule(ppo.Config(anneal_env_steps=640), 320).clip_epsilon == 0.2
    assert a2c.learning_rate(a2c.Config(anneal_env_steps=640), 480) == pytest.approx(7e-4 * 0.25)


@pytest.mark.parametrize("recurrent", [False, True])
def test_a2c_optimize_one_step(recurrent):
    torch.manual_seed(0)
    config = a2c.Config(recurrent=recurrent, hidden_sizes=(16,), lstm_size=16, learning_rate=1e-2)
    agent = a2c.build_agent(config, OBS, ACT)
    algo = a2c.Algo(config, agent, 1, BatchSpec(8, 4))
    samples = _batch(agent, 8, 4)
    info = algo.optimize(0, samples)
    assert info.updates == 1 and info.samples_trained == 32
    assert {"pi_loss", "value_loss", "entropy", "grad_norm", "learning_rate"} <= set(info.diagnostics)
    _, _, value = agent.evaluate(samples)
    assert not torch.allclose(value, samples.agent_info.value)


@pytest.mark.parametrize(("gae_lambda", "normalize"), [(1.0, False), (0.5, False), (0.5, True)])
def test_a2c_advantage_options_set_the_losses(gae_lambda, normalize):
    """The logged losses equal the A2C loss on independently computed targets: n-step returns at
    lambda 1 (which GAE(1) equals), GAE(lambda) and the lambda-return below 1, standardized advantages
    when asked; a changed lambda must change the value loss."""
    from algorithms.functional.advantages import generalized_advantage_estimation

    torch.manual_seed(0)
    config = a2c.Config(hidden_sizes=(16,), gae_lambda=gae_lambda, normalize_advantage=normalize)
    agent = a2c.build_agent(config, OBS, ACT)
    algo = a2c.Algo(config, agent, 1, BatchSpec(8, 4))
    samples = _batch(agent, 8, 4)
    with torch.no_grad():
        value = samples.agent_info.value
        advantage, target = generalized_advantage_estimation(
            samples.reward,
            value,
            agent.next_values(samples),
            samples.terminated,
            samples.truncated,
            config.discount,
            gae_lambda,
        )
        if normalize:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        log_prob, _, _ = agent.evaluate(samples)
        expected_pi = -(log_prob * advantage).mean()
        expected_value = 0.5 * ((value - target) ** 2).mean()
        flags = (samples.terminated, samples.truncated)
        _, one_step = generalized_advantage_estimation(
            samples.reward, value, agent.next_values(samples), *flags, 0.99, 0.0
        )
    info = algo.optimize(0, samples)
    assert info.diagnostics["pi_loss"] == pytest.approx(float(expected_pi), rel=1e-5, abs=1e-6)
    assert info.diagnostics["value_loss"] == pytest.approx(float(expected_value), rel=1e-5)
    assert info.diagnostics["value_loss"] != pytest.approx(float(0.5 * ((value - one_step) ** 2).mean()))
    with pytest.raises(ValueError, match="a2c.Config.gae_lambda"):
        a2c.Config(gae_lambda=1.5)
