import gymnasium as gym
import numpy as np
import pytest
import torch

from algorithms.agents.base import RankStreams
from algorithms.agents.dqn_agents import EpsilonGreedyAgent, R2D1Agent
from algorithms.agents.epsilon import EpsilonSchedule, apex_epsilons, linear_anneal, log_spaced_epsilons
from algorithms.arrays import NamedArrays
from algorithms.models.dqn_model import QNetwork
from algorithms.models.r2d1_model import R2D1Model

torch.set_num_threads(1)
OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


def test_apex_epsilons_hand_computed():
    eps = apex_epsilons(np.arange(8), 8)
    assert eps[0] == pytest.approx(0.4)  # 0.4 ** 1
    assert eps[7] == pytest.approx(0.4**8)  # 0.4 ** (1 + 7)
    assert eps[2] == pytest.approx(0.4**3)  # 0.4 ** (1 + 7 * 2 / 7)
    assert apex_epsilons(np.array([0]), 1)[0] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="n_envs=8"):
        apex_epsilons(np.array([8]), 8)


def test_log_spaced_epsilons_hand_computed():
    """rlpyt's vector epsilon: 0.0005 .. 0.1 log-spaced over 3 envs gives the geometric middle."""
    eps = log_spaced_epsilons(np.arange(3), 3, 0.0005, 0.1)
    np.testing.assert_allclose(eps, [0.0005, (0.0005 * 0.1) ** 0.5, 0.1])
    np.testing.assert_allclose(log_spaced_epsilons(np.array([1]), 3, 0.0005, 0.1), eps[1:2])
    assert log_spaced_epsilons(np.array([0]), 1, 0.0005, 0.1)[0] == pytest.approx(0.1)
    sched = EpsilonSchedule(start=1.0, final=0.1, decay_steps=10, per_env="log_spaced", final_min=0.001)
    np.testing.assert_allclose(sched.sample_epsilons(10, np.array([0, 2]), 3), [0.001, 0.1])
    np.testing.assert_allclose(sched.sample_epsilons(5, np.array([0]), 3), [0.5005])
    with pytest.raises(ValueError, match="final_min"):
        EpsilonSchedule(final_min=0.0)


def test_linear_anneal_and_schedule():
    assert linear_anneal(1.0, 0.1, 100, 0) == pytest.approx(1.0)
    assert linear_anneal(1.0, 0.1, 100, 50) == pytest.approx(0.55)
    assert linear_anneal(1.0, 0.1, 100, 1000) == pytest.approx(0.1)
    assert linear_anneal(1.0, 0.1, 0, 0) == pytest.approx(0.1)
    sched = EpsilonSchedule(start=1.0, decay_steps=10, per_env="apex")
    np.testing.assert_allclose(sched.sample_epsilons(10, np.array([0, 3]), 4), [0.4, 0.4**8])
    np.testing.assert_allclose(sched.sample_epsilons(5, np.array([0]), 4), [0.7])
    with pytest.raises(ValueError, match="EpsilonSchedule.final"):
        EpsilonSchedule(final=1.5)
    with pytest.raises(ValueError, match="per_env"):
        EpsilonSchedule(per_env="ape-x")


def _agent(eps: EpsilonSchedule) -> EpsilonGreedyAgent:
    torch.manual_seed(0)
    return EpsilonGreedyAgent(QNetwork((4,), 3), OBS, ACT, eps)


def test_epsilon_greedy_modes_and_per_env_epsilons():
    agent = _agent(EpsilonSchedule(start=1.0, final=1.0, decay_steps=0, eval=0.0))
    obs = torch.randn(2000, 4)
    greedy = agent.model(obs).argmax(-1)
    agent.set_mode("eval")
    action, info, state = agent.step(obs, torch.zeros(2000, dtype=torch.long), torch.zeros(2000), None)
    assert state is None and torch.equal(action, greedy)
    assert info.fields == ()  # feed-forward algorithms read no Q-values from the samples
    agent.set_mode("sample", env_steps=0)
    action, _, _ = agent.step(obs, torch.zeros(2000, dtype=torch.long), torch.zeros(2000), None)
    # epsilon 1: uniform actions, so about a third agree with the greedy action.
    assert 0.28 < (action == greedy).float().mean() < 0.39
    counts = np.bincount(action.numpy(), minlength=3)
    assert counts.min() > 580

    apex = _agent(EpsilonSchedule(decay_steps=0, per_env="apex"))
    apex.set_env_ranks([4, 5], global_batch=6)
    np.testing.assert_allclose(apex.epsilons(2), [0.4 ** (1 + 7 * 4 / 5), 0.4 ** (1 + 7 * 5 / 5)])
    apex.set_mode("eval")
    np.testing.assert_allclose(apex.epsilons(2), [0.05, 0.05])


def test_categorical_agent_acts_on_expected_q():
    torch.manual_seed(0)
    support = torch.linspace(-5, 5, 11)
    model = QNetwork((4,), 3, n_atoms=11)
    agent = EpsilonGreedyAgent(model, OBS, ACT, EpsilonSchedule(eval=0.0), support=support)
    agent.set_mode("eval")
    obs = torch.randn(16, 4)
    action, info, _ = agent.step(obs, torch.zeros(16, dtype=torch.long), torch.zeros(16), None)
    q = (torch.softmax(model(obs), -1) * support).sum(-1)
    assert info.fields == () and torch.equal(action, q.argmax(-1))


def test_epsilon_greedy_runs_the_net_only_when_some_env_acts_greedily():
    agent = _agent(EpsilonSchedule(start=0.5, final=0.5, decay_steps=0, eval=0.0))
    calls = []
    agent.model.register_forward_hook(lambda module, args, output: calls.append(len(args[0])))
    twin = _agent(EpsilonSchedule(start=0.5, final=0.5, decay_steps=0, eval=0.0))
    twin.model.load_state_dict(agent.model.state_dict())
    for a in (agent, twin):
        a.set_env_ranks([0], global_batch=1, streams=RankStreams(7))
        a.set_mode("sample", env_steps=0)
    obs = torch.randn(200, 1, 4)
    zeros = torch.zeros(1, dtype=torch.long), torch.zeros(1)
    actions = [int(agent.step(o, *zeros, None)[0]) for o in obs]
    # One env at epsilon 0.5: about half the steps explore and skip the net ...
    assert 70 < len(calls) < 130
    # ... and the actions are those of an agent that runs it on every step (same draws).
    expected = [int(twin.select_action(twin.model(o)).item()) for o in obs]
    assert actions == expected


def test_r2d1_agent_reports_prev_state_and_carries_state():
    torch.manual_seed(0)
    model = R2D1Model((4,), 3, lstm_size=8, fc_size=0, head_hidden_size=8, mlp_hidden_sizes=(8,))
    agent = R2D1Agent(model, OBS, ACT, EpsilonSchedule(eval=0.0))
    agent.set_mode("eval")
    state = agent.initial_state(2)
    assert state.h.shape == (2, 8) and float(state.h.abs().sum()) == 0.0
    obs, pa, pr = torch.randn(3, 2, 4), torch.randint(0, 3, (3, 2)), torch.randn(3, 2)
    q_seq, _ = model(obs, pa, pr)
    for t in range(3):
        action, info, next_state = agent.step(obs[t], pa[t], pr[t], state)
        assert info.prev_state == state  # the state *before* step t, for stored-state replay
        assert torch.allclose(info.q, q_seq[t], atol=1e-5)
        assert torch.equal(action, q_seq[t].argmax(-1))
        state = next_state
    reset = agent.reset_state(state, torch.tensor([True, False]))
    assert float(reset.h[0].abs().sum()) == 0.0 and torch.equal(reset.h[1], state.h[1])
    # Without a state the agent starts from zeros.
    _, info, _ = agent.step(obs[0], pa[0], pr[0], None)
    assert info.prev_state == NamedArrays(h=torch.zeros(2, 8), c=torch.zeros(2, 8))


def test_reset_state_keeps_each_leaf_on_its_own_device():
    # The sampler's episode ends are CPU arrays; the R2D1 agent keeps its acting state on the CPU
    # while its model may be on a GPU, and recurrent PPO keeps its state on the model's device. The
    # meta device stands in for a GPU here: a leaf there must stay there, next to a CPU leaf.
    # (On the H200 machine the stepper once moved ``done`` to the model's device and every R2D1 job
    # on cuda failed at its first step.)
    model = R2D1Model((4,), 3, lstm_size=8, fc_size=0, head_hidden_size=8, mlp_hidden_sizes=(8,))
    agent = R2D1Agent(model, OBS, ACT, EpsilonSchedule(eval=0.0))
    state = NamedArrays(h=torch.ones(2, 8, device="meta"), c=torch.ones(2, 8))
    reset = agent.reset_state(state, torch.tensor([True, False]))
    assert reset.h.device.type == "meta" and reset.h.shape == (2, 8)
    assert torch.equal(reset.c, torch.tensor([[0.0] * 8, [1.0] * 8]))
