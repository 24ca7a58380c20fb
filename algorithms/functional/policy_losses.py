"""Losses and targets of policy-gradient and Q-value policy-gradient methods, as pure functions.

Each function takes explicitly shaped tensors, checks the shapes on entry and cites the paper it
implements. Scalar losses are means over all elements; callers weight and sum them.

On-policy (A2C, PPO): ``ppo_clipped_surrogate``, ``value_loss`` (optionally clipped),
``entropy_bonus``, ``a2c_loss``, ``approx_kl``.
Off-policy (DDPG, TD3, SAC): ``tanh_gaussian_log_prob``, ``smoothed_target_action``, ``q_target``,
``clipped_double_q_target``, ``soft_q_target``, ``sac_temperature_loss``, ``polyak_update_``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def _check_same(names_and_tensors: tuple[tuple[str, torch.Tensor], ...]) -> torch.Size:
    shape = names_and_tensors[0][1].shape
    for name, x in names_and_tensors[1:]:
        if x.shape != shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)} (as {names_and_tensors[0][0]})"
            )
    return shape


# --- on-policy ------------------------------------------------------------------------------------


def ppo_clipped_surrogate(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantage: torch.Tensor, clip_epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate objective as a loss to minimise, Schulman et al. 2017 ("Proximal
    Policy Optimization Algorithms"), eq. 7:

        L = -mean( min(r * A, clip(r, 1 - eps, 1 + eps) * A) ),   r = exp(log_prob - old_log_prob)

    Args: ``log_prob`` (differentiable), ``old_log_prob`` and ``advantage`` of the same shape [N].
    Returns ``(loss, clip_fraction)``: the fraction of samples where the clipped term was active.
    """
    _check_same((("log_prob", log_prob), ("old_log_prob", old_log_prob), ("advantage", advantage)))
    if clip_epsilon <= 0:
        raise ValueError(f"clip_epsilon must be > 0, got {clip_epsilon}")
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon) * advantage
    loss = -torch.minimum(unclipped, clipped).mean()
    clip_fraction = ((ratio - 1.0).abs() > clip_epsilon).to(log_prob.dtype).mean()
    return loss, clip_fraction.detach()


def approx_kl(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """KL(old || new) estimated from samples of the old policy with the low-variance, unbiased,
    non-negative estimator ``(r - 1) - log r`` (Schulman 2020, "Approximating KL Divergence", k3)."""
    _check_same((("log_prob", log_prob), ("old_log_prob", old_log_prob)))
    log_ratio = (log_prob - old_log_prob).detach()
    return (torch.expm1(log_ratio) - log_ratio).mean()


def value_loss(
    value: torch.Tensor,
    target: torch.Tensor,
    old_value: torch.Tensor | None = None,
    clip_epsilon: float | None = None,
) -> torch.Tensor:
    """Squared-error value loss ``0.5 * mean((value - target)^2)``.

    With ``old_value`` and ``clip_epsilon`` it is PPO's clipped value loss as in OpenAI Baselines
    ``ppo2`` (the "value function clipping" studied by Engstrom et al. 2020, "Implementation Matters
    in Deep Policy Gradients", Sec. 3): the new value may move at most ``clip_epsilon`` from the
    value at sampling time before the loss stops pulling it further,

        0.5 * mean( max((v - R)^2, (old_v + clip(v - old_v, -eps, eps) - R)^2) ).
    """
    _check_same((("value", value), ("target", target)))
    if (old_value is None) != (clip_epsilon is None):
        raise ValueError("value_loss: give both old_value and clip_epsilon for the clipped loss, or neither")
    squared = (value - target).pow(2)
    if old_value is None:
        return 0.5 * squared.mean()
    _check_same((("value", value), ("old_value", old_value)))
    clipped_value = old_value + torch.clamp(value - old_value, -clip_epsilon, clip_epsilon)
    return 0.5 * torch.maximum(squared, (clipped_value - target).pow(2)).mean()


def entropy_bonus(entropy: torch.Tensor) -> torch.Tensor:
    """Mean policy entropy, the exploration bonus added to the objective by Williams & Peng 1991 and
    A3C (Mnih et al. 2016, Sec. 4, "adding the entropy of the policy to the objective function").
    Losses subtract ``entropy_coef * entropy_bonus(...)``."""
    return entropy.mean()


def a2c_loss(
    log_prob: torch.Tensor,
    advantage: torch.Tensor,
    value: torch.Tensor,
    target: torch.Tensor,
    entropy: torch.Tensor,
    value_coef: float,
    entropy_coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The advantage actor-critic loss of A3C/A2C, Mnih et al. 2016, Algorithm S3:

        L = -mean(log_prob * A) + value_coef * 0.5 * mean((V - R)^2) - entropy_coef * mean(H)

    ``advantage`` is treated as a constant (detached here) so the policy term does not train the
    value function. Returns ``(loss, {"pi_loss", "value_loss", "entropy"})`` (parts detached).
    """
    _check_same(
        (
            ("log_prob", log_prob),
            ("advantage", advantage),
            ("value", value),
            ("target", target),
            ("entropy", entropy),
        )
    )
    pi_loss = -(log_prob * advantage.detach()).mean()
    v_loss = value_loss(value, target.detach())
    entropy_mean = entropy_bonus(entropy)
    loss = pi_loss + value_coef * v_loss - entropy_coef * entropy_mean
    parts = {"pi_loss": pi_loss.detach(), "value_loss": v_loss.detach(), "entropy": entropy_mean.detach()}
    return loss, parts


# --- off-policy, continuous actions ---------------------------------------------------------------

_LOG_2 = math.log(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def tanh_gaussian_log_prob(
    pre_tanh: torch.Tensor,
    mean: torch.Tensor,
    log_std: torch.Tensor,
    action_scale: torch.Tensor | float = 1.0,
) -> torch.Tensor:
    """Log-density of ``a = center + scale * tanh(u)`` with ``u ~ N(mean, exp(log_std)^2)`` (diagonal),
    Haarnoja et al. 2018, "Soft Actor-Critic", Appendix C, eq. 21, by the change of variables

        log pi(a|s) = sum_i [ log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) - log scale_i ].

    ``log(1 - tanh(u)^2)`` is computed as ``2 * (log 2 - u - softplus(-2u))``, exact and finite for
    any ``u`` (the naive form gives ``log 0`` once ``|u|`` passes about 9 in float32).

    Args: ``pre_tanh``, ``mean``, ``log_std`` [..., A]; ``action_scale`` broadcastable to [A]
    (``(high - low) / 2``). Returns [...] (summed over the action dimension).
    """
    _check_same((("pre_tanh", pre_tanh), ("mean", mean), ("log_std", log_std)))
    if pre_tanh.dim() < 1:
        raise ValueError("tanh_gaussian_log_prob: tensors need a trailing action dimension")
    z = (pre_tanh - mean) * torch.exp(-log_std)
    gaussian = -0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI
    log_det_tanh = 2.0 * (_LOG_2 - pre_tanh - F.softplus(-2.0 * pre_tanh))
    scale = torch.as_tensor(action_scale, dtype=pre_tanh.dtype, device=pre_tanh.device)
    return (gaussian - log_det_tanh - torch.log(scale)).sum(dim=-1)


def smoothed_target_action(
    target_action: torch.Tensor,
    noise: torch.Tensor,
    noise_clip: torch.Tensor | float,
    low: torch.Tensor,
    high: torch.Tensor,
) -> torch.Tensor:
    """TD3's target policy smoothing, Fujimoto et al. 2018 ("Addressing Function Approximation Error
    in Actor-Critic Methods"), eq. 15: ``clip(mu'(s') + clip(noise, -c, c), low, high)``.

    ``noise`` is drawn by the caller (``N(0, sigma^2)``; sigma = 0.2 and c = 0.5 times the action
    range's half-width in the paper, Sec. 6.1) so this stays a pure function. Shapes [N, A];
    ``noise_clip``, ``low`` and ``high`` broadcast to [A].
    """
    _check_same((("target_action", target_action), ("noise", noise)))
    noise_clip = torch.as_tensor(noise_clip, dtype=noise.dtype, device=noise.device)
    if (noise_clip < 0).any():
        raise ValueError(f"noise_clip must be >= 0, got {noise_clip}")
    smoothed = target_action + torch.maximum(torch.minimum(noise, noise_clip), -noise_clip)
    return torch.maximum(torch.minimum(smoothed, high), low)


def q_target(reward: torch.Tensor, discount_t: torch.Tensor, next_q: torch.Tensor) -> torch.Tensor:
    """DDPG's critic target, Lillicrap et al. 2016 ("Continuous control with deep reinforcement
    learning"), Algorithm 1: ``y = r + discount_t * Q'(s', mu'(s'))``.

    ``discount_t`` [N] is gamma (gamma^n for n-step returns) and 0 where the transition ended in a
    terminal state (rlax convention), so truncated transitions still bootstrap. Returns detached [N].
    """
    _check_same((("reward", reward), ("discount_t", discount_t), ("next_q", next_q)))
    return (reward + discount_t * next_q).detach()


def clipped_double_q_target(
    reward: torch.Tensor,
    discount_t: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
) -> torch.Tensor:
    """TD3's clipped double-Q target, Fujimoto et al. 2018, eq. 10:

        y = r + discount_t * min(Q1'(s', a~), Q2'(s', a~))

    ``discount_t`` as in ``q_target`` (0 at terminals). Shapes [N]; returns detached [N].
    """
    _check_same((("reward", reward), ("discount_t", discount_t), ("next_q1", next_q1), ("next_q2", next_q2)))
    return (reward + discount_t * torch.minimum(next_q1, next_q2)).detach()


def soft_q_target(
    reward: torch.Tensor,
    discount_t: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """The soft Bellman target of SAC with twin critics, Haarnoja et al. 2018b ("Soft Actor-Critic
    Algorithms and Applications"), eqs. 3 and 5, with the clipped double-Q minimum of Sec. 5:

        y = r + discount_t * ( min(Q1'(s', a'), Q2'(s', a')) - alpha * log pi(a'|s') ),  a' ~ pi(.|s').

    ``discount_t`` as in ``q_target`` (0 at terminals). Shapes [N]; ``alpha`` a scalar. Returns
    detached [N].
    """
    _check_same(
        (
            ("reward", reward),
            ("discount_t", discount_t),
            ("next_q1", next_q1),
            ("next_q2", next_q2),
            ("next_log_prob", next_log_prob),
        )
    )
    soft_value = torch.minimum(next_q1, next_q2) - alpha * next_log_prob
    return (reward + discount_t * soft_value).detach()


def sac_temperature_loss(
    log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """Automatic entropy tuning, Haarnoja et al. 2018b, eq. 18:
    ``J(alpha) = E[-alpha * (log pi(a|s) + target_entropy)]``, minimised over ``log alpha`` (the
    parameterisation of the authors' code, which keeps alpha positive). ``log_prob`` [N] is detached
    here; ``target_entropy`` is ``-dim(A)`` in the paper (Sec. 5 / Table 1 of 2018b)."""
    if log_alpha.numel() != 1:
        raise ValueError(f"log_alpha must be a scalar, got shape {tuple(log_alpha.shape)}")
    return -(log_alpha.reshape(()) * (log_prob.detach() + target_entropy)).mean()


@torch.no_grad()
def polyak_update_(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Soft target update ``theta' <- tau * theta + (1 - tau) * theta'`` in place, Lillicrap et al. 2016
    ("Continuous control with deep reinforcement learning", Algorithm 1). Buffers (e.g. normalisation
    statistics) are copied. One fused ``lerp`` over all parameters."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    target_params = list(target.parameters())
    online_params = list(online.parameters())
    if len(target_params) != len(online_params):
        raise ValueError("polyak_update_: target and online modules have different parameter lists")
    torch._foreach_lerp_(target_params, online_params, tau)
    for t_buf, o_buf in zip(target.buffers(), online.buffers()):
        t_buf.copy_(o_buf)
