"""Actor-critic models and agents: shapes, clipping, recurrent resets inside a batch, bootstrap values."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from algorithms.agents.base import RankStreams
from algorithms.agents.pg_agents import PgAgent, RecurrentPgAgent
from algorithms.agents.qpg_agents import SquashedGaussianAgent
from algorithms.arrays import NamedArrays
from algorithms.models.policies import (
    ActorCritic,
    DeterministicPolicy,
    RecurrentActorCritic,
    StateActionQNetwork,
    TanhGaussianPolicy,
    ValueNetwork,
)

torch.set_num_threads(1)

VEC = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
FRAMES = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


@pytest.mark.parametrize("obs_space", [VEC, FRAMES])
@pytest.mark.parametrize("action_space", [DISCRETE, BOX])
def test_actor_critic_shapes_and_agent_step(obs_space, action_space):
    torch.manual_seed(0)
    model = ActorCritic(obs_space, action_space)
    assert model.shared == (obs_space is FRAMES)
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(5)]))
    dist, value = model(obs)
    assert value.shape == (5,) and dist.batch_shape == (5,)
    agent = PgAgent(model, obs_space, action_space)
    action, info, state = agent.step(obs, None, None, None)
    assert state is None and info.value.shape == (5,) and info.log_prob.shape == (5,)
    if action_space is BOX:
        assert action.shape == (5, 2) and (action.abs() <= 2.0).all()
        assert info.pre_clip_action.shape == (5, 2)
        torch.testing.assert_close(info.pre_clip_action.clamp(-2.0, 2.0), action)
    else:
        assert action.shape == (5,) and action.dtype == torch.int64
    agent.set_mode("eval")
    greedy, _, _ = agent.step(obs, None, None, None)
    if action_space is DISCRETE:
        assert torch.equal(greedy, dist.logits.argmax(-1))


def test_gaussian_log_prob_belongs_to_the_unclipped_sample():
    torch.manual_seed(1)
    tiny_box = gym.spaces.Box(-0.01, 0.01, (2,), np.float32)
    agent = PgAgent(ActorCritic(VEC, tiny_box), VEC, tiny_box)
    obs = torch.randn(64, 4)
    action, info, _ = agent.step(obs, None, None, None)
    assert (info.pre_clip_action != action).any()  # std 1 samples leave a +-0.01 box
    batch = NamedArrays(observation=obs, action=action, agent_info=info)
    log_prob, _, _ = agent.evaluate(batch)
    torch.testing.assert_close(log_prob, info.log_prob)


def _recurrent(action_space=DISCRETE, seed=0):
    torch.manual_seed(seed)
    return RecurrentActorCritic(VEC, action_space, hidden_sizes=(16,), lstm_size=8)


def test_recurrent_reset_inside_batch_equals_separate_episodes():
    model = _recurrent()
    T1, T2 = 4, 3
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(T1 + T2, 1, 4, generator=g)
    prev_action = torch.randint(0, 3, (T1 + T2, 1), generator=g)
    prev_reward = torch.randn(T1 + T2, 1, generator=g)
    prev_action[T1], prev_reward[T1] = 0, 0.0  # a new episode starts with zero previous action/reward
    start = NamedArrays(h=torch.randn(1, 8, generator=g), c=torch.randn(1, 8, generator=g))
    reset = torch.zeros(T1 + T2, 1, dtype=torch.bool)
    reset[T1] = True
    dist, value, ends = model(obs, prev_action, prev_reward, start, reset)

    no_reset = torch.zeros(T1, 1, dtype=torch.bool)
    d1, v1, ends1 = model(obs[:T1], prev_action[:T1], prev_reward[:T1], start, no_reset)
    d2, v2, ends2 = model(obs[T1:], prev_action[T1:], prev_reward[T1:], model.initial_state(1), no_reset[:T2])
    torch.testing.assert_close(value, torch.cat([v1, v2]))
    torch.testing.assert_close(dist.logits, torch.cat([d1.logits, d2.logits]))
    # The state after each episode's last step is reported where that episode ends.
    torch.testing.assert_close(ends.h[T1 - 1], ends1.h[-1])
    torch.testing.assert_close(ends.c[-1], ends2.c[-1])
    assert (ends.h[: T1 - 1] == 0).all()
    # And without the reset the second episode would differ (the test can fail).
    _, leaked, _ = model(obs, prev_action, prev_reward, start, torch.zeros_like(reset))
    assert not torch.allclose(leaked[T1:], v2)


def _rollout(agent, T, B, seed, done_at=()):
    """A hand-driven [T, B] batch in Contract 3's layout from ``agent`` acting on random observations."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, 4, generator=g)
    final_obs = torch.randn(T, B, 4, generator=g)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    for t, b, kind in done_at:
        (terminated if kind == "terminated" else truncated)[t, b] = True
    reward = torch.randn(T, B, generator=g)
    state = agent.initial_state(B)
    prev_action, prev_reward = torch.zeros(B, dtype=torch.int64), torch.zeros(B)
    rows = []
    for t in range(T):
        action, info, state = agent.step(obs[t], prev_action, prev_reward, state)
        rows.append(
            NamedArrays(action=action, prev_action=prev_action, prev_reward=prev_reward, agent_info=info)
        )
        done = terminated[t] | truncated[t]
        state = agent.reset_state(state, done)
        prev_action = torch.where(done, torch.zeros_like(action), action)
        prev_reward = torch.where(done, torch.zeros_like(reward[t]), reward[t])
    stacked = NamedArrays(
        action=torch.stack([r.action for r in rows]),
        prev_action=torch.stack([r.prev_action for r in rows]),
        prev_reward=torch.stack([r.prev_reward for r in rows]),
        agent_info=NamedArrays(
            value=torch.stack([r.agent_info.value for r in rows]),
            log_prob=torch.stack([r.agent_info.log_prob for r in rows]),
            prev_state=NamedArrays(
                h=torch.stack([r.agent_info.prev_state.h for r in rows]),
                c=torch.stack([r.agent_info.prev_state.c for r in rows]),
            ),
        ),
    )
    bootstrap_obs = torch.randn(B, 4, generator=g)
    bootstrap = NamedArrays(
        observation=bootstrap_obs, prev_action=prev_action, prev_reward=prev_reward, agent_state=state
    )
    return NamedArrays(
        observation=obs,
        action=stacked.action,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        final_observation=final_obs,
        prev_action=stacked.prev_action,
        prev_reward=stacked.prev_reward,
        agent_info=stacked.agent_info,
        bootstrap=bootstrap,
    )


def test_recurrent_agent_evaluate_reproduces_sampling_and_bootstraps_truncation():
    model = _recurrent()
    agent = RecurrentPgAgent(model, VEC, DISCRETE)
    samples = _rollout(agent, T=6, B=3, seed=2, done_at=[(2, 0, "terminated"), (3, 1, "truncated")])
    log_prob, _, value = agent.evaluate(samples)
    torch.testing.assert_close(value, samples.agent_info.value)
    torch.testing.assert_close(log_prob, samples.agent_info.log_prob)

    next_value = agent.next_values(samples)
    torch.testing.assert_close(next_value[:2, 0], samples.agent_info.value[1:3, 0])
    # Truncated at (3, 1): V(final_observation) continued from the episode's state after step 3.
    _, _, end_states = model(
        samples.observation[:4, 1:2],
        samples.prev_action[:4, 1:2],
        samples.prev_reward[:4, 1:2],
        samples.agent_info.prev_state[0][1:2],
        torch.zeros(4, 1, dtype=torch.bool),
    )
    expected = model.value(
        samples.final_observation[3, 1:2], samples.action[3, 1:2], samples.reward[3, 1:2], end_states[-1]
    )
    torch.testing.assert_close(next_value[3, 1:2], expected)
    boot = samples.bootstrap
    torch.testing.assert_close(
        next_value[-1], model.value(boot.observation, boot.prev_action, boot.prev_reward, boot.agent_state)
    )


def test_feedforward_next_values_use_final_observation_only_where_truncated():
    torch.manual_seed(0)
    model = ActorCritic(VEC, DISCRETE)
    agent = PgAgent(model, VEC, DISCRETE)
    T, B = 3, 2
    obs, final_obs = torch.randn(T, B, 4), torch.randn(T, B, 4)
    terminated = torch.tensor([[False, False], [True, False], [False, False]])
    truncated = torch.tensor([[False, True], [False, False], [False, False]])
    with torch.no_grad():
        value = model.value(obs)
    samples = NamedArrays(
        terminated=terminated,
        truncated=truncated,
        final_observation=final_obs,
        agent_info=NamedArrays(value=value),
        bootstrap=NamedArrays(observation=torch.randn(B, 4)),
    )
    nv = agent.next_values(samples)
    with torch.no_grad():
        assert nv[0, 1] == pytest.approx(model.value(final_obs[0, 1]).item())
        assert nv[0, 0] == pytest.approx(value[1, 0].item())
        torch.testing.assert_close(nv[2], model.value(samples.bootstrap.observation))


def test_off_policy_networks():
    torch.manual_seed(0)
    obs, action = torch.randn(7, 4), torch.rand(7, 2) * 4 - 2
    assert StateActionQNetwork(4, 2, (32, 32))(obs, action).shape == (7,)
    assert ValueNetwork(4, (32,))(obs).shape == (7,)
    mu = DeterministicPolicy(4, BOX, (32, 32))(obs)
    assert mu.shape == (7, 2) and (mu.abs() <= 2.0).all()
    pi = TanhGaussianPolicy(4, BOX, (32, 32))
    a, log_prob = pi(obs)
    assert a.shape == (7, 2) and log_prob.shape == (7,) and (a.abs() <= 2.0).all()
    a_det, _ = pi(obs, deterministic=True)
    a_det2, _ = pi(obs, deterministic=True)
    torch.testing.assert_close(a_det, a_det2)
    with pytest.raises(ValueError, match="bounded"):
        TanhGaussianPolicy(4, gym.spaces.Box(-np.inf, np.inf, (2,)), (8,))


def test_sac_acting_without_log_prob_gives_the_same_actions():
    """The agent skips the log-density (``with_log_prob=False``); its actions equal the full forward's."""
    torch.manual_seed(0)
    pi = TanhGaussianPolicy(4, BOX, (32, 32))
    obs, noise = torch.randn(7, 4) * 3, torch.randn(7, 2)
    for kwargs in ({"noise": noise}, {"deterministic": True}):
        action, log_prob = pi(obs, with_log_prob=False, **kwargs)
        assert log_prob is None
        torch.testing.assert_close(action, pi(obs, **kwargs)[0], rtol=0, atol=0)
    agent = SquashedGaussianAgent(pi, VEC, BOX, random_steps=0)
    ranks = np.arange(7)
    agent.set_env_ranks(ranks, 7, RankStreams(3))
    for mode, kwargs in (
        ("sample", {"noise": RankStreams(3).normal(ranks, (2,))}),
        ("eval", {"deterministic": True}),
    ):
        agent.set_mode(mode, 100)
        action, agent_info, _ = agent.step(obs, None, None, None)
        assert agent_info.fields == ()
        torch.testing.assert_close(action, pi(obs, **kwargs)[0], rtol=0, atol=0)


def test_recurrent_packed_segments_match_a_step_by_step_loop():
    model = _recurrent()
    T, B = 9, 4
    g = torch.Generator().manual_seed(5)
    obs, prev_reward = torch.randn(T, B, 4, generator=g), torch.randn(T, B, generator=g)
    prev_action = torch.randint(0, 3, (T, B), generator=g)
    reset = torch.rand(T, B, generator=g) < 0.3
    reset[:, 0] = False  # one column without resets
    reset[0, 1] = True  # a reset at the very first step ignores the given state
    start = NamedArrays(h=torch.randn(B, 8, generator=g), c=torch.randn(B, 8, generator=g))
    _, value, ends = model(obs, prev_action, prev_reward, start, reset)

    x = model._lstm_input(obs, prev_action, prev_reward)
    h, c = start.h, start.c
    expected, expected_end_h = [], torch.zeros(T, B, 8)
    for t in range(T):
        keep = (~reset[t]).float().unsqueeze(-1)
        _, (h, c) = model.lstm(x[t][None], ((h * keep)[None], (c * keep)[None]))
        h, c = h[0], c[0]
        expected.append(model.v_head(h).squeeze(-1))
        ends_here = reset[t + 1] if t + 1 < T else torch.ones(B, dtype=torch.bool)
        expected_end_h[t][ends_here] = h[ends_here]
    torch.testing.assert_close(value, torch.stack(expected))
    torch.testing.assert_close(ends.h, expected_end_h)
