"""Policy-gradient and Q-value policy-gradient losses: hand-computed values and numerical checks."""

import math

import pytest
import torch
from torch import nn

from algorithms.functional.policy_losses import (
    a2c_loss,
    approx_kl,
    clipped_double_q_target,
    entropy_bonus,
    polyak_update_,
    ppo_clipped_surrogate,
    q_target,
    sac_temperature_loss,
    smoothed_target_action,
    soft_q_target,
    tanh_gaussian_log_prob,
    value_loss,
)

torch.set_num_threads(1)


def test_ppo_clipped_surrogate_hand_values_and_gradient():
    log_prob = torch.log(torch.tensor([1.5, 0.5, 1.0], dtype=torch.float64)).requires_grad_()
    old = torch.zeros(3, dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
    loss, clip_fraction = ppo_clipped_surrogate(log_prob, old, adv, clip_epsilon=0.2)
    # min(1.5, 1.2) = 1.2; min(0.5, 0.8) = 0.5; min(-1, -1) = -1.
    assert loss.item() == pytest.approx(-(1.2 + 0.5 - 1.0) / 3)
    assert clip_fraction.item() == pytest.approx(2 / 3)
    loss.backward()
    # Clipped with A > 0 above 1 + eps: no gradient; the others: -r * A / 3.
    assert log_prob.grad.tolist() == pytest.approx([0.0, -0.5 / 3, 1.0 / 3])


def test_value_loss_plain_and_clipped():
    assert value_loss(torch.tensor([2.0, 0.0]), torch.tensor([3.0, 0.0])).item() == pytest.approx(0.25)
    value = torch.tensor([2.0, 1.2], requires_grad=True)
    target, old = torch.tensor([3.0, 3.0]), torch.tensor([1.0, 1.0])
    loss = value_loss(value, target, old_value=old, clip_epsilon=0.5)
    # Row 0: max((2-3)^2, (1.5-3)^2) = 2.25; row 1: inside the clip range, (1.2-3)^2 = 3.24.
    assert loss.item() == pytest.approx(0.5 * (2.25 + 3.24) / 2)
    loss.backward()
    assert value.grad.tolist() == pytest.approx([0.0, 0.5 * (1.2 - 3.0)])
    with pytest.raises(ValueError, match="both"):
        value_loss(value, target, old_value=old)


def test_entropy_bonus_and_a2c_loss_hand_values():
    assert entropy_bonus(torch.tensor([1.0, 3.0])).item() == 2.0
    log_prob = torch.tensor([-1.0, -2.0], requires_grad=True)
    advantage = torch.tensor([2.0, -1.0], requires_grad=True)
    value, target, entropy = torch.tensor([1.0, 1.0]), torch.tensor([2.0, 3.0]), torch.tensor([0.5, 1.5])
    loss, parts = a2c_loss(log_prob, advantage, value, target, entropy, value_coef=0.5, entropy_coef=0.1)
    pi = -((-1.0 * 2.0) + (-2.0 * -1.0)) / 2  # 0.0
    v = 0.5 * (1.0 + 4.0) / 2
    assert parts["pi_loss"].item() == pytest.approx(pi)
    assert parts["value_loss"].item() == pytest.approx(v)
    assert loss.item() == pytest.approx(pi + 0.5 * v - 0.1 * 1.0)
    loss.backward()
    assert advantage.grad is None  # the advantage is a constant in the policy term
    assert log_prob.grad.tolist() == pytest.approx([-1.0, 0.5])


def test_approx_kl_hand_value_and_zero():
    old = torch.zeros(2)
    assert approx_kl(old, old).item() == 0.0
    assert approx_kl(torch.full((2,), math.log(2.0)), old).item() == pytest.approx(1.0 - math.log(2.0))


def _tanh_gaussian_cdf(a, mean, std, center, scale):
    u = torch.atanh((a - center) / scale)
    return torch.distributions.Normal(mean, std).cdf(u)


@pytest.mark.parametrize("center,scale", [(0.0, 1.0), (0.5, 2.0)])
def test_tanh_gaussian_log_prob_matches_finite_difference_of_cdf(center, scale):
    mean = torch.tensor([0.3, -1.2, 0.0], dtype=torch.float64)
    std = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    u = torch.tensor([0.1, -2.5, 1.7], dtype=torch.float64)
    a = center + scale * torch.tanh(u)
    h = 1e-6
    density = (
        _tanh_gaussian_cdf(a + h, mean, std, center, scale)
        - _tanh_gaussian_cdf(a - h, mean, std, center, scale)
    ) / (2 * h)
    expected = torch.log(density).sum()
    got = tanh_gaussian_log_prob(u, mean, torch.log(std), action_scale=scale)
    assert got.item() == pytest.approx(expected.item(), abs=1e-5)


def test_tanh_gaussian_log_prob_matches_torch_transformed_and_is_finite_when_saturated():
    g = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(4, 2, generator=g), torch.randn(4, 2, generator=g) * 0.3
    u = mean + torch.exp(log_std) * torch.randn(4, 2, generator=g)
    reference = (
        torch.distributions.TransformedDistribution(
            torch.distributions.Normal(mean, log_std.exp()), [torch.distributions.TanhTransform()]
        )
        .log_prob(torch.tanh(u))
        .sum(-1)
    )
    torch.testing.assert_close(tanh_gaussian_log_prob(u, mean, log_std), reference, rtol=1e-4, atol=1e-4)
    saturated = tanh_gaussian_log_prob(torch.tensor([[20.0]]), torch.tensor([[20.0]]), torch.tensor([[0.0]]))
    # log N(0; 0, 1) - log(1 - tanh(20)^2) = -0.919 - (2 log 2 - 40 - ~0): finite and large.
    assert saturated.item() == pytest.approx(
        -0.5 * math.log(2 * math.pi) - 2 * (math.log(2) - 20.0), rel=1e-5
    )


def test_td3_smoothing_and_clipped_double_q_target_hand_values():
    action = torch.tensor([[0.9, -0.2]])
    noise = torch.tensor([[0.3, -0.8]])
    smoothed = smoothed_target_action(
        action, noise, 0.5, torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0])
    )
    assert smoothed[0].tolist() == pytest.approx([1.0, -0.7])  # 1.2 clipped to the bound; -0.8 to -0.5
    discount_t = torch.tensor([0.9, 0.0])  # the second transition ended in a terminal state
    reward = torch.tensor([1.0, 1.0])
    y = clipped_double_q_target(reward, discount_t, torch.tensor([3.0, 3.0]), torch.tensor([2.0, 9.0]))
    assert y.tolist() == pytest.approx([1.0 + 0.9 * 2.0, 1.0])
    assert q_target(reward, discount_t, torch.tensor([3.0, 3.0])).tolist() == pytest.approx([3.7, 1.0])
    per_dim = smoothed_target_action(action, noise, torch.tensor([0.1, 1.0]), -torch.ones(2), torch.ones(2))
    assert per_dim[0].tolist() == pytest.approx([1.0, -1.0])  # noise clipped to 0.1 in dim 0


def test_soft_q_target_hand_values():
    y = soft_q_target(
        reward=torch.tensor([1.0, 1.0]),
        discount_t=torch.tensor([0.9, 0.0]),
        next_q1=torch.tensor([3.0, 3.0]),
        next_q2=torch.tensor([4.0, 3.0]),
        next_log_prob=torch.tensor([-2.0, -2.0]),
        alpha=0.5,
    )
    assert y.tolist() == pytest.approx([1.0 + 0.9 * (3.0 + 1.0), 1.0])


def test_sac_temperature_loss_raises_alpha_when_entropy_below_target():
    log_alpha = torch.zeros((), requires_grad=True)
    # Entropy estimate -mean(log_prob) = -1 is below the target 0: alpha must grow.
    loss = sac_temperature_loss(log_alpha, torch.tensor([1.0, 1.0]), target_entropy=0.0)
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(-1.0)  # gradient descent increases log alpha
    log_alpha.grad = None
    sac_temperature_loss(log_alpha, torch.tensor([-3.0, -3.0]), target_entropy=-1.0).backward()
    # Entropy 3 is above the target -1: d/dlog_alpha = -(log_prob + target) = 4 > 0, alpha shrinks.
    assert log_alpha.grad.item() == pytest.approx(4.0)


def test_polyak_update():
    online, target = nn.Linear(2, 2), nn.Linear(2, 2)
    nn.init.constant_(online.weight, 1.0)
    nn.init.constant_(target.weight, 0.0)
    polyak_update_(target, online, tau=0.1)
    assert torch.allclose(target.weight, torch.full((2, 2), 0.1))
    polyak_update_(target, online, tau=1.0)
    assert torch.equal(target.weight, online.weight) and torch.equal(target.bias, online.bias)
    with pytest.raises(ValueError, match="tau"):
        polyak_update_(target, online, tau=1.5)


def test_shape_mismatch_is_named():
    with pytest.raises(ValueError, match="advantage"):
        ppo_clipped_surrogate(torch.zeros(3), torch.zeros(3), torch.zeros(4), 0.2)
    with pytest.raises(ValueError, match="next_q2"):
        clipped_double_q_target(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(2))
