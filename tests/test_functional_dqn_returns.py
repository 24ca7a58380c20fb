"""n-step returns: hand-computed cases, a slow reference loop, and rlpyt's pre-PR-#182 done bug."""

import numpy as np
import pytest
import torch

from algorithms.functional.returns import nstep_returns

torch.set_num_threads(1)


def _flags(T, B, terminated_at=(), truncated_at=()):
    terminated = torch.zeros(T, B, dtype=torch.bool)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    for t, b in terminated_at:
        terminated[t, b] = True
    for t, b in truncated_at:
        truncated[t, b] = True
    return terminated, truncated


REWARD = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).unsqueeze(1)  # [T=5, B=1]


def test_hand_computed_terminal_inside_window():
    terminated, truncated = _flags(5, 1, terminated_at=[(1, 0)])
    out = nstep_returns(REWARD, terminated, truncated, gamma=0.5, n=3)
    # t=0: 1 + 0.5*2, terminal at t=1 -> no bootstrap; t=2: 3 + 0.5*4 + 0.25*5; rows 3, 4 are cut at T.
    torch.testing.assert_close(out.returns[:, 0], torch.tensor([2.0, 2.0, 6.25, 6.5, 5.0]))
    assert out.done[:, 0].tolist() == [True, True, False, False, False]
    assert out.steps[:, 0].tolist() == [2, 1, 3, 2, 1]
    torch.testing.assert_close(out.discount[:, 0], torch.tensor([0.0, 0.0, 0.125, 0.25, 0.5]))


def test_hand_computed_truncation_bootstraps_from_final_observation():
    terminated, truncated = _flags(5, 1, truncated_at=[(1, 0)])
    out = nstep_returns(REWARD, terminated, truncated, gamma=0.5, n=3)
    # t=0: the sum stops at the time limit (t=1) and bootstraps gamma^2 from final_observation[1].
    torch.testing.assert_close(out.returns[:, 0], torch.tensor([2.0, 2.0, 6.25, 6.5, 5.0]))
    assert not out.done.any()
    assert out.steps[:, 0].tolist() == [2, 1, 3, 2, 1]
    torch.testing.assert_close(out.discount[:, 0], torch.tensor([0.25, 0.5, 0.125, 0.25, 0.5]))


def test_one_step_is_reward_and_gamma():
    terminated, truncated = _flags(5, 1, terminated_at=[(2, 0)], truncated_at=[(3, 0)])
    out = nstep_returns(REWARD, terminated, truncated, gamma=0.9, n=1)
    torch.testing.assert_close(out.returns, REWARD)
    torch.testing.assert_close(out.discount[:, 0], torch.tensor([0.9, 0.9, 0.0, 0.9, 0.9]))
    assert out.steps.eq(1).all()


def _reference(reward, terminated, truncated, gamma, n):
    """Slow loop: walk each window until n steps, the batch end, or an episode end."""
    T, B = reward.shape
    returns, done, discount, steps = (np.zeros((T, B)) for _ in range(4))
    for b in range(B):
        for t in range(T):
            g, m, d = 0.0, 0, False
            for k in range(n):
                if t + k >= T:
                    break
                g += gamma**k * reward[t + k, b]
                m += 1
                if terminated[t + k, b]:
                    d = True
                    break
                if truncated[t + k, b]:
                    break
            returns[t, b], done[t, b], steps[t, b] = g, d, m
            discount[t, b] = 0.0 if d else gamma**m
    return returns, done.astype(bool), discount, steps


@pytest.mark.parametrize("n", [1, 3, 5])
def test_matches_reference_loop_on_random_data(n):
    rng = np.random.default_rng(n)
    T, B, gamma = 40, 7, 0.97
    reward = rng.normal(size=(T, B))
    terminated = rng.random((T, B)) < 0.1
    truncated = (rng.random((T, B)) < 0.1) & ~terminated
    out = nstep_returns(
        torch.from_numpy(reward), torch.from_numpy(terminated), torch.from_numpy(truncated), gamma, n
    )
    ref_returns, ref_done, ref_discount, ref_steps = _reference(reward, terminated, truncated, gamma, n)
    np.testing.assert_allclose(out.returns.numpy(), ref_returns, rtol=1e-12)
    np.testing.assert_array_equal(out.done.numpy(), ref_done)
    np.testing.assert_allclose(out.discount.numpy(), ref_discount, rtol=1e-12)
    np.testing.assert_array_equal(out.steps.numpy(), ref_steps)


def _rlpyt_discount_return_n_step(reward, done, n_step, discount):
    """rlpyt's ``discount_return_n_step`` (rlpyt/algos/utils.py, do_truncated=True), numpy path.

    Returns (return_, done_n) as rlpyt computed them, and the 1-step done its replay buffer stored
    instead of done_n before PR #182.
    """
    return_ = reward.copy()
    done_n = done.astype(reward.dtype)
    for n in range(1, n_step):
        return_[:-n] += (discount**n) * reward[n:] * (1 - done_n[:-n])
        done_n[:-n] = np.maximum(done_n[:-n], done[n:])
    return return_, done_n.astype(bool), done.copy()


def test_buggy_variant_matches_rlpyt_and_differs_only_across_episode_ends():
    rng = np.random.default_rng(0)
    T, B, gamma, n = 60, 5, 0.99, 5
    reward = rng.normal(size=(T, B))
    terminated = rng.random((T, B)) < 0.08
    truncated = np.zeros((T, B), dtype=bool)  # rlpyt had a single done flag
    args = (torch.from_numpy(reward), torch.from_numpy(terminated), torch.from_numpy(truncated), gamma, n)
    correct = nstep_returns(*args)
    buggy = nstep_returns(*args, nstep_done_bug=True)
    rl_return, rl_done_n, rl_done_1 = _rlpyt_discount_return_n_step(reward, terminated, n, gamma)

    full = slice(0, T - n + 1)  # rows whose window fits in the batch
    np.testing.assert_allclose(buggy.returns.numpy(), rl_return, rtol=1e-12)
    np.testing.assert_allclose(correct.returns.numpy(), rl_return, rtol=1e-12)
    np.testing.assert_array_equal(correct.done.numpy(), rl_done_n)
    np.testing.assert_array_equal(buggy.done.numpy(), rl_done_1)
    # rlpyt's target: return + gamma^n (1 - done) Q(s_{t+n}).
    np.testing.assert_allclose(buggy.discount.numpy()[full], (gamma**n * ~rl_done_1)[full], rtol=1e-12)
    assert (buggy.steps.numpy()[full][~rl_done_1[full]] == n).all()

    # They differ exactly where a terminal lies inside the window after its first step.
    crosses = rl_done_n & ~rl_done_1
    assert crosses[full].sum() > 5
    differs = (correct.done != buggy.done).numpy() | (correct.discount != buggy.discount).numpy()
    np.testing.assert_array_equal(differs, crosses)
    torch.testing.assert_close(correct.returns, buggy.returns)


def test_buggy_variant_hand_case():
    terminated, truncated = _flags(5, 1, terminated_at=[(1, 0)])
    buggy = nstep_returns(REWARD, terminated, truncated, gamma=0.5, n=3, nstep_done_bug=True)
    # t=0 crosses the terminal at t=1: not done, bootstraps gamma^3 from s_3 of the next episode.
    assert buggy.done[:, 0].tolist() == [False, True, False, False, False]
    assert buggy.steps[:, 0].tolist() == [3, 1, 3, 2, 1]
    torch.testing.assert_close(buggy.discount[:, 0], torch.tensor([0.125, 0.0, 0.125, 0.25, 0.5]))


def test_trailing_dims_and_errors():
    reward = torch.randn(6, 2, 3)
    terminated, truncated = torch.zeros(6, 2, 3, dtype=torch.bool), torch.zeros(6, 2, 3, dtype=torch.bool)
    assert nstep_returns(reward, terminated, truncated, 0.9, 2).returns.shape == (6, 2, 3)
    with pytest.raises(ValueError, match="terminated shape"):
        nstep_returns(reward, terminated[:, :1], truncated, 0.9, 2)
    with pytest.raises(ValueError, match="truncated must be bool"):
        nstep_returns(reward, terminated, truncated.float(), 0.9, 2)
    with pytest.raises(ValueError, match="n=0"):
        nstep_returns(reward, terminated, truncated, 0.9, 0)
    with pytest.raises(ValueError, match="gamma=1.5"):
        nstep_returns(reward, terminated, truncated, 1.5, 2)
