import pytest
import torch

from algorithms.arrays import NamedArrays
from algorithms.models.dqn_model import QNetwork
from algorithms.models.heads import CategoricalHead, DuelingHead, QHead, expected_q
from algorithms.models.r2d1_model import R2D1Model

torch.set_num_threads(1)


def test_dueling_head_combines_streams_with_mean_advantage():
    torch.manual_seed(0)
    head = DuelingHead(8, 3, hidden_size=16)
    x = torch.randn(5, 8)
    value = head.value(x)  # [5, 1]
    advantage = head.advantage(x)  # [5, 3]
    expected = value + advantage - advantage.mean(-1, keepdim=True)
    assert torch.allclose(head(x), expected, atol=1e-6)
    # Q averaged over actions is V (identifiability constraint, Wang et al. 2016 eq. 9).
    assert torch.allclose(head(x).mean(-1), value.squeeze(-1), atol=1e-6)


def test_distributional_heads_shapes_and_expectation():
    torch.manual_seed(0)
    assert QHead(8, 3)(torch.zeros(2, 4, 8)).shape == (2, 4, 3)
    logits = CategoricalHead(8, 3, 51)(torch.randn(2, 4, 8))
    assert logits.shape == (2, 4, 3, 51)
    assert DuelingHead(8, 3, hidden_size=16, n_atoms=51)(torch.randn(4, 8)).shape == (4, 3, 51)
    support = torch.linspace(-10, 10, 51)
    q = expected_q(logits, support)
    assert q.shape == (2, 4, 3)
    # A distribution with all mass on one atom has that atom as its expectation.
    point = torch.full((1, 51), -1e9)
    point[0, 40] = 0.0
    assert torch.allclose(expected_q(point, support), support[40:41])
    with pytest.raises(ValueError, match="atoms"):
        expected_q(logits, support[:10])


@pytest.mark.parametrize("shape", [(4,), (4, 84, 84)])
@pytest.mark.parametrize("dueling,n_atoms", [(False, 1), (True, 1), (False, 51), (True, 51)])
def test_q_network_output_shapes(shape, dueling, n_atoms):
    net = QNetwork(shape, 6, dueling=dueling, n_atoms=n_atoms)
    dtype = torch.uint8 if len(shape) == 3 else torch.float32
    out = net(torch.zeros(2, *shape, dtype=dtype))
    assert out.shape == ((2, 6) if n_atoms == 1 else (2, 6, n_atoms))


def _r2d1_inputs(T, B, shape=(4,), n_actions=3):
    obs = torch.randn(T, B, *shape)
    prev_action = torch.randint(0, n_actions, (T, B))
    prev_reward = torch.randn(T, B)
    return obs, prev_action, prev_reward


def test_r2d1_model_shapes_for_t_b_and_unbatched():
    torch.manual_seed(0)
    model = R2D1Model((4,), 3, lstm_size=16, fc_size=0, head_hidden_size=8, mlp_hidden_sizes=(8,))
    obs, pa, pr = _r2d1_inputs(5, 2)
    q, state = model(obs, pa, pr)
    assert q.shape == (5, 2, 3) and state.h.shape == (2, 16) and state.c.shape == (2, 16)
    q_b, state_b = model(obs[0], pa[0], pr[0])
    assert q_b.shape == (2, 3) and state_b.h.shape == (2, 16)
    assert torch.allclose(q_b, q[0], atol=1e-6)
    q_1, state_1 = model(obs[0, 1], pa[0, 1], pr[0, 1], NamedArrays(h=state_b.h[1] * 0, c=state_b.c[1] * 0))
    assert q_1.shape == (3,) and state_1.h.shape == (16,)
    assert torch.allclose(q_1, q[0, 1], atol=1e-6)
    conv = R2D1Model((4, 84, 84), 6, lstm_size=32, fc_size=32, head_hidden_size=16)
    frames = torch.randint(0, 256, (3, 2, 4, 84, 84), dtype=torch.uint8)
    q, state = conv(frames, torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 2))
    assert q.shape == (3, 2, 6) and state.h.shape == (2, 32)
    with pytest.raises(ValueError, match="leading dims"):
        conv(frames, torch.zeros(3, dtype=torch.long), torch.zeros(3, 2))
    # fc_size 0: R2D2's layout, the 3136 conv features (plus action one-hot and reward) into the LSTM.
    r2d2 = R2D1Model((4, 84, 84), 6, lstm_size=32, fc_size=0, head_hidden_size=16)
    assert r2d2.lstm.input_size == 64 * 7 * 7 + 6 + 1
    q, _ = r2d2(frames, torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 2))
    assert q.shape == (3, 2, 6)


def test_r2d1_model_sequence_equals_step_by_step():
    torch.manual_seed(0)
    model = R2D1Model((4,), 3, lstm_size=16, fc_size=0, head_hidden_size=8, mlp_hidden_sizes=(8,))
    obs, pa, pr = _r2d1_inputs(7, 3)
    state0 = NamedArrays(h=torch.randn(3, 16), c=torch.randn(3, 16))
    q_seq, final_seq = model(obs, pa, pr, state0)
    state, q_steps = state0, []
    for t in range(7):
        q_t, state = model(obs[t], pa[t], pr[t], state)
        q_steps.append(q_t)
    assert torch.allclose(q_seq, torch.stack(q_steps), atol=1e-5)
    assert torch.allclose(final_seq.h, state.h, atol=1e-5) and torch.allclose(final_seq.c, state.c, atol=1e-5)
    # The previous action and reward reach the LSTM: changing them changes the Q-values.
    q_other, _ = model(obs, (pa + 1) % 3, pr, state0)
    assert not torch.allclose(q_other, q_seq)
    q_other, _ = model(obs, pa, pr + 1.0, state0)
    assert not torch.allclose(q_other, q_seq)


def test_r2d1_model_reset_starts_episodes_from_zero_state():
    torch.manual_seed(0)
    model = R2D1Model((4,), 3, lstm_size=16, fc_size=0, head_hidden_size=8, mlp_hidden_sizes=(8,))
    obs, pa, pr = _r2d1_inputs(6, 2)
    state0 = NamedArrays(h=torch.randn(2, 16), c=torch.randn(2, 16))
    reset = torch.zeros(6, 2, dtype=torch.bool)
    reset[3, 0] = True  # env 0 starts a new episode at step 3
    q, final, states = model(obs, pa, pr, state0, reset=reset, return_states=True)
    q_fused, final_fused = model(obs, pa, pr, state0)
    assert torch.allclose(q[:, 1], q_fused[:, 1], atol=1e-5) and torch.allclose(q[:3], q_fused[:3], atol=1e-5)
    # From step 3 on, env 0 behaves as a fresh episode: equal to running those steps from zeros.
    q_new, final_new = model(obs[3:, :1], pa[3:, :1], pr[3:, :1])
    assert torch.allclose(q[3:, :1], q_new, atol=1e-5)
    assert torch.allclose(final.h[:1], final_new.h, atol=1e-5)
    # The per-step states are the states after each step: continuing from step 2's state gives step 3.
    q_next, _ = model(obs[3, 1:], pa[3, 1:], pr[3, 1:], states[2, 1:])
    assert torch.allclose(q_next, q[3, 1:], atol=1e-5)
    assert torch.allclose(states.h[-1], final.h) and torch.allclose(states.c[-1], final.c)


def test_r2d1_model_act_equals_one_step_of_forward():
    torch.manual_seed(0)
    model = R2D1Model((4,), 3, lstm_size=16, fc_size=0, head_hidden_size=8, mlp_hidden_sizes=(8,))
    obs, pa, pr = _r2d1_inputs(1, 5)
    state = NamedArrays(h=torch.randn(5, 16), c=torch.randn(5, 16))
    q, next_state = model(obs[0], pa[0], pr[0], state)
    with torch.inference_mode():
        q_act, h, c = model.act(obs[0], pa[0], pr[0], state.h, state.c)
    torch.testing.assert_close(q_act, q)
    torch.testing.assert_close(h, next_state.h)
    torch.testing.assert_close(c, next_state.c)
