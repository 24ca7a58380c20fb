"""GAE and discounted returns: hand-computed values and a slow forward-sum reference with episode ends."""

import pytest
import torch

from algorithms.functional.advantages import (
    discounted_returns,
    generalized_advantage_estimation,
    next_state_values,
    standardize_advantage,
)

torch.set_num_threads(1)


def _tb(values):
    return torch.tensor(values, dtype=torch.float64).reshape(-1, 1)


def _flags(values):
    return torch.tensor(values, dtype=torch.bool).reshape(-1, 1)


def _gae(reward, value, bootstrap, terminated, truncated, final_value, discount, lam):
    done = terminated | truncated
    next_value = next_state_values(value, bootstrap, done, final_value)
    return generalized_advantage_estimation(reward, value, next_value, terminated, truncated, discount, lam)


def test_gae_hand_values_without_episode_end():
    reward, value = _tb([1.0, 1.0, 1.0]), _tb([0.5, 0.4, 0.3])
    no = _flags([False, False, False])
    adv, ret = _gae(
        reward, value, torch.tensor([0.2], dtype=torch.float64), no, no, torch.zeros_like(value), 0.9, 0.8
    )
    # delta = [0.86, 0.87, 0.88]; A2 = 0.88, A1 = 0.87 + 0.72 * 0.88, A0 = 0.86 + 0.72 * A1.
    assert adv[:, 0].tolist() == pytest.approx([1.942592, 1.5036, 0.88])
    assert ret[:, 0].tolist() == pytest.approx([2.442592, 1.9036, 1.18])


def test_gae_terminated_drops_bootstrap_and_cuts_trace():
    reward, value = _tb([1.0, 1.0, 1.0]), _tb([0.5, 0.4, 0.3])
    terminated, truncated = _flags([False, True, False]), _flags([False, False, False])
    final_value = _tb([0.0, 5.0, 0.0])  # must be ignored: the episode terminated
    adv, _ = _gae(
        reward, value, torch.tensor([0.2], dtype=torch.float64), terminated, truncated, final_value, 0.9, 0.8
    )
    assert adv[:, 0].tolist() == pytest.approx([0.86 + 0.72 * 0.6, 0.6, 0.88])


def test_gae_truncated_bootstraps_from_final_observation_value():
    reward, value = _tb([1.0, 1.0, 1.0]), _tb([0.5, 0.4, 0.3])
    terminated, truncated = _flags([False, False, False]), _flags([False, True, False])
    final_value = _tb([0.0, 2.0, 0.0])
    adv, _ = _gae(
        reward, value, torch.tensor([0.2], dtype=torch.float64), terminated, truncated, final_value, 0.9, 0.8
    )
    # delta1 = 1 + 0.9 * 2.0 - 0.4 = 2.4 (bootstrap from V(final_observation), not V(obs[2])).
    assert adv[:, 0].tolist() == pytest.approx([0.86 + 0.72 * 2.4, 2.4, 0.88])


def _reference_gae(reward, value, bootstrap, terminated, truncated, final_value, discount, lam):
    """Forward sums A_t = sum_k (gamma lambda)^k delta_{t+k}, stopping at the episode's end."""
    T, B = reward.shape
    adv = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            total, weight = 0.0, 1.0
            for j in range(t, T):
                if terminated[j, b]:
                    nxt = 0.0
                elif truncated[j, b]:
                    nxt = float(final_value[j, b])
                elif j == T - 1:
                    nxt = float(bootstrap[b])
                else:
                    nxt = float(value[j + 1, b])
                delta = float(reward[j, b]) + discount * nxt - float(value[j, b])
                total += weight * delta
                weight *= discount * lam
                if terminated[j, b] or truncated[j, b]:
                    break
            adv[t, b] = total
    return adv


def _random_batch(T, B, seed):
    g = torch.Generator().manual_seed(seed)
    reward = torch.randn(T, B, generator=g, dtype=torch.float64)
    value = torch.randn(T, B, generator=g, dtype=torch.float64)
    final_value = torch.randn(T, B, generator=g, dtype=torch.float64)
    bootstrap = torch.randn(B, generator=g, dtype=torch.float64)
    u = torch.rand(T, B, generator=g)
    terminated, truncated = u < 0.15, (u >= 0.15) & (u < 0.3)
    return reward, value, bootstrap, terminated, truncated, final_value


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_gae_matches_slow_reference(lam):
    reward, value, bootstrap, terminated, truncated, final_value = _random_batch(17, 5, seed=3)
    adv, ret = _gae(reward, value, bootstrap, terminated, truncated, final_value, 0.97, lam)
    expected = _reference_gae(reward, value, bootstrap, terminated, truncated, final_value, 0.97, lam)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + value)


def test_discounted_returns_hand_values_and_gae_lambda_one():
    reward = _tb([1.0, 2.0, 3.0, 4.0])
    terminated, truncated = _flags([False, True, False, False]), _flags([False, False, False, False])
    value = torch.zeros(4, 1, dtype=torch.float64)
    next_value = next_state_values(value, torch.tensor([10.0], dtype=torch.float64), terminated, value)
    ret = discounted_returns(reward, next_value, terminated, truncated, 0.5)
    # Terminal at t=1: R1 = 2, R0 = 1 + 0.5 * 2. Then R3 = 4 + 0.5 * 10 (bootstrap), R2 = 3 + 0.5 * R3.
    assert ret[:, 0].tolist() == pytest.approx([2.0, 2.0, 3.0 + 0.5 * 9.0, 9.0])

    reward, value, bootstrap, terminated, truncated, final_value = _random_batch(13, 4, seed=7)
    done = terminated | truncated
    next_value = next_state_values(value, bootstrap, done, final_value)
    _, lambda_one = generalized_advantage_estimation(
        reward, value, next_value, terminated, truncated, 0.9, 1.0
    )
    torch.testing.assert_close(discounted_returns(reward, next_value, terminated, truncated, 0.9), lambda_one)


def test_shape_errors_name_the_argument():
    x = torch.zeros(3, 2)
    flags = torch.zeros(3, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="value_t"):
        generalized_advantage_estimation(x, torch.zeros(3, 3), x, flags, flags, 0.9, 0.9)
    with pytest.raises(ValueError, match="bootstrap_value"):
        next_state_values(x, torch.zeros(3), flags, x)
    with pytest.raises(ValueError, match="reward_t must be \\[T, B\\]"):
        discounted_returns(torch.zeros(3), x, flags, flags, 0.9)


def test_standardize_advantage_hand_values():
    # mean 2; sample std sqrt(2/3): squared deviations 1, 0, 1, 0 over n - 1 = 3 (torch.std, as PPO2)
    out = standardize_advantage(torch.tensor([[1.0, 2.0], [3.0, 2.0]]))
    expected = torch.tensor([[-1.0, 0.0], [1.0, 0.0]]) / torch.tensor(2.0 / 3.0).sqrt()
    torch.testing.assert_close(out, expected)
