"""Temporal-difference targets and losses for the DQN family: pure functions over shaped tensors.

Suffixes: ``_t`` marks values at the bootstrap observation, the one the n-step window ends on
(rlax's ``q_t``); ``_n`` the window's n-step return and discount. The step whose value is learned
is no argument here: callers take Q(s, a) with :func:`select_action_values`. ``B`` is any batch
shape (e.g. [B] for transitions, [T, B] for sequences), ``A`` the number of actions, ``K`` the
number of atoms. Targets are returned without gradient bookkeeping; callers compute them
under ``torch.no_grad()`` or detach them.

* Q-learning target (Mnih et al. 2015, "Human-level control through deep RL", Alg. 1):
  y = G + discount * max_a Q_target(s_t, a).
* Double Q-learning target (van Hasselt et al. 2016, Eq. 4): the online net picks the action, the
  target net evaluates it.
* Huber loss (Mnih et al. 2015, Methods "clip the error term ... between -1 and 1") and 0.5 x^2.
* Categorical projection (Bellemare et al. 2017, "A Distributional Perspective on RL", Alg. 1).
"""

from __future__ import annotations

import torch
from torch.nn import functional


def _check_q(name: str, q: torch.Tensor, batch_shape: torch.Size) -> None:
    if q.dim() < 1 or q.shape[:-1] != batch_shape:
        raise ValueError(f"{name} must be [*B, A] with B={tuple(batch_shape)}, got shape {tuple(q.shape)}")


def _check_same(name: str, x: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if x.shape != ref.shape:
        raise ValueError(f"{name} shape {tuple(x.shape)} differs from {ref_name} shape {tuple(ref.shape)}")


def select_action_values(q: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Q(s, a) from q [*B, A] and integer action [*B] -> [*B]."""
    _check_q("q", q, action.shape)
    if action.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"action must be an integer tensor, got {action.dtype}")
    return q.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def q_learning_target(
    return_n: torch.Tensor, discount_n: torch.Tensor, q_target_t: torch.Tensor
) -> torch.Tensor:
    """y = G + discount * max_a Q_target(s_t, a) (Mnih et al. 2015).

    Args:
        return_n: [*B] n-step return (the reward for n = 1).
        discount_n: [*B] bootstrap discount, 0 where the window reached a terminal.
        q_target_t: [*B, A] target-network values at the bootstrap observation.
    """
    _check_same("discount_n", discount_n, "return_n", return_n)
    _check_q("q_target_t", q_target_t, return_n.shape)
    return return_n + discount_n * q_target_t.max(dim=-1).values


def double_q_learning_target(
    return_n: torch.Tensor, discount_n: torch.Tensor, q_target_t: torch.Tensor, q_online_t: torch.Tensor
) -> torch.Tensor:
    """y = G + discount * Q_target(s_t, argmax_a Q_online(s_t, a)) (van Hasselt et al. 2016, Eq. 4).

    Args as :func:`q_learning_target`, plus ``q_online_t`` [*B, A]: online-network values at the same
    observation, used only to select the action.
    """
    _check_same("discount_n", discount_n, "return_n", return_n)
    _check_q("q_target_t", q_target_t, return_n.shape)
    _check_same("q_online_t", q_online_t, "q_target_t", q_target_t)
    best_action = q_online_t.argmax(dim=-1)
    return return_n + discount_n * select_action_values(q_target_t, best_action)


def huber_loss(x: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Elementwise Huber loss: 0.5 x^2 for |x| <= delta, delta (|x| - 0.5 delta) beyond.

    Its gradient is the TD error clipped to [-delta, delta], which is what Mnih et al. (2015) mean by
    clipping the error term. No reduction: callers weight (importance sampling) and average.
    """
    if delta <= 0:
        raise ValueError(f"huber_loss: delta={delta} must be positive")
    # torch's one kernel each way, against seven ops each way written out (docs/results/bench_minatar.md);
    # its gradient is exactly x (or +-delta), where the written-out form rounded delta + (x - delta).
    return functional.huber_loss(x, torch.zeros_like(x), reduction="none", delta=delta)


def squared_loss(x: torch.Tensor) -> torch.Tensor:
    """Elementwise 0.5 x^2 (no reduction)."""
    return 0.5 * x**2


def categorical_projection(
    values_t: torch.Tensor, probs_t: torch.Tensor, atoms: torch.Tensor
) -> torch.Tensor:
    """Project a distribution with mass ``probs_t`` at ``values_t`` onto the fixed support ``atoms``.

    Bellemare et al. (2017), Alg. 1: each value is clipped to [v_min, v_max] and its mass split
    between the two neighbouring atoms in proportion to closeness; a value landing exactly on an
    atom gives all its mass to that atom.

    Args:
        values_t: [*B, K'] positions of the target distribution's mass, e.g. G + discount * z.
        probs_t: [*B, K'] their probabilities.
        atoms: [K] the fixed, evenly spaced support z_0 < ... < z_{K-1}.

    Returns:
        [*B, K] probabilities on ``atoms``.
    """
    _check_same("probs_t", probs_t, "values_t", values_t)
    if not probs_t.is_floating_point():
        raise ValueError(f"probs_t must be floating point, got {probs_t.dtype}")
    if atoms.dim() != 1 or atoms.numel() < 2:
        raise ValueError(f"atoms must be a 1-d support of at least 2 points, got shape {tuple(atoms.shape)}")
    num_atoms = atoms.numel()
    v_min, v_max = atoms[0], atoms[-1]
    delta_z = (v_max - v_min) / (num_atoms - 1)
    if delta_z <= 0:
        raise ValueError("atoms must be increasing (v_min < v_max)")
    b = (values_t.clamp(v_min, v_max) - v_min) / delta_z  # fractional atom index in [0, K-1]
    lower = b.floor().clamp(0, num_atoms - 1)
    upper = b.ceil().clamp(0, num_atoms - 1)
    # Where b is an integer, lower == upper and both weights below are 0; give the mass to lower.
    weight_lower = (upper - b) + (lower == upper).to(b.dtype)
    weight_upper = b - lower
    batch_shape = values_t.shape[:-1]
    flat_probs = probs_t.reshape(-1, probs_t.shape[-1])
    out = torch.zeros(flat_probs.shape[0], num_atoms, dtype=probs_t.dtype, device=probs_t.device)
    # Out of place: under torch.func transforms the zeros are not batched but the mass is.
    out = out.scatter_add(
        1, lower.reshape(flat_probs.shape).long(), flat_probs * weight_lower.reshape(flat_probs.shape)
    )
    out = out.scatter_add(
        1, upper.reshape(flat_probs.shape).long(), flat_probs * weight_upper.reshape(flat_probs.shape)
    )
    return out.reshape(*batch_shape, num_atoms)


def categorical_target(
    return_n: torch.Tensor, discount_n: torch.Tensor, probs_t: torch.Tensor, atoms: torch.Tensor
) -> torch.Tensor:
    """The C51 target distribution: project G + discount * z onto ``atoms`` (Bellemare et al. 2017, Alg. 1).

    Args:
        return_n: [*B] n-step return; discount_n: [*B] bootstrap discount (0 at terminals).
        probs_t: [*B, K] target-network probabilities of the bootstrap action at the bootstrap observation.
        atoms: [K] support.
    """
    _check_same("discount_n", discount_n, "return_n", return_n)
    _check_q("probs_t", probs_t, return_n.shape)
    if probs_t.shape[-1] != atoms.numel():
        raise ValueError(f"probs_t has {probs_t.shape[-1]} atoms but the support has {atoms.numel()}")
    values_t = return_n.unsqueeze(-1) + discount_n.unsqueeze(-1) * atoms
    return categorical_projection(values_t, probs_t, atoms)


def categorical_cross_entropy(target_probs: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """-sum_i target_i log softmax(logits)_i: [*B, K] -> [*B] (Bellemare et al. 2017, Eq. 7)."""
    _check_same("logits", logits, "target_probs", target_probs)
    return -(target_probs * torch.log_softmax(logits, dim=-1)).sum(dim=-1)
