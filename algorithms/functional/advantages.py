"""Advantages and returns for on-policy policy gradients over [T, B] batches.

Conventions (docs/ARCHITECTURE.md, Contract 3): row ``t`` holds the step taken from the
observation at ``t``: its ``reward``, and whether that step ended the episode by ``terminated`` (an
MDP terminal: the value after it is 0) or ``truncated`` (a time limit: the episode was cut, and the
value after it is the value of the true final observation, Pardo et al. 2018, "Time Limits in
Reinforcement Learning"). With same-step autoreset the observation at ``t + 1`` already belongs to
the next episode, so the value *after* step ``t`` is not always ``value[t + 1]``;
``next_state_values`` builds the right one for every row.

Names follow rlax: ``value_t`` is V(s_t) for the observation the agent acted on at ``t``,
``next_value_t`` is V(s_{t+1}) of the state the step at ``t`` led to (before any reset).
"""

from __future__ import annotations

import torch


def _check_tb(shape: torch.Size, **tensors: torch.Tensor) -> None:
    """Each of ``tensors``, named by its keyword in the errors, must be [T, B] of ``shape``."""
    for name, x in tensors.items():
        if x.dim() != 2:
            raise ValueError(f"{name} must be [T, B], got shape {tuple(x.shape)}")
        if x.shape != shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")


def next_state_values(
    value_t: torch.Tensor,
    bootstrap_value: torch.Tensor,
    done_t: torch.Tensor,
    final_value_t: torch.Tensor,
) -> torch.Tensor:
    """V of the state each step led to: ``value[t + 1]``, the bootstrap value after the last row,
    and ``final_value[t]`` (V of ``final_observation[t]``) where the step ended an episode.

    Args:
        value_t: [T, B] V(observation[t]).
        bootstrap_value: [B] V(observation at T), the observation after the batch.
        done_t: [T, B] bool, ``terminated | truncated``.
        final_value_t: [T, B] V(final_observation[t]); only read where ``done_t`` (callers may
            compute it only at truncated rows and leave anything elsewhere). Terminated rows are
            masked later by ``terminated`` in the return, so their value here does not matter.

    Returns:
        [T, B] next-state values.
    """
    _check_tb(value_t.shape, value_t=value_t, done_t=done_t, final_value_t=final_value_t)
    if bootstrap_value.shape != value_t.shape[1:]:
        raise ValueError(
            f"bootstrap_value must be [B]={tuple(value_t.shape[1:])}, got {tuple(bootstrap_value.shape)}"
        )
    following = torch.cat([value_t[1:], bootstrap_value.unsqueeze(0)], dim=0)
    return torch.where(done_t, final_value_t, following)


def generalized_advantage_estimation(
    reward_t: torch.Tensor,
    value_t: torch.Tensor,
    next_value_t: torch.Tensor,
    terminated_t: torch.Tensor,
    truncated_t: torch.Tensor,
    discount: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation, Schulman et al. 2016 ("High-Dimensional Continuous Control
    Using Generalized Advantage Estimation"), eq. 16, over a [T, B] batch with episode boundaries.

        delta_t = r_t + discount * (1 - terminated_t) * next_value_t - value_t
        A_t     = delta_t + discount * lambda * (1 - done_t) * A_{t+1},    A_T = 0

    ``terminated`` removes the bootstrap (the value after a terminal state is 0); ``truncated``
    keeps it (``next_value_t`` is then V(final_observation), see ``next_state_values``). Either ends
    the trace: the advantage never mixes two episodes.

    Args:
        reward_t, value_t, next_value_t: [T, B] float.
        terminated_t, truncated_t: [T, B] bool.
        discount: gamma in [0, 1]; gae_lambda: lambda in [0, 1] (1 gives discounted returns minus
            the baseline, 0 gives the one-step TD error).

    Returns:
        ``(advantage_t, return_t)`` both [T, B], with ``return_t = advantage_t + value_t`` (the
        lambda-return, the value target of PPO).
    """
    shape = reward_t.shape
    _check_tb(
        shape,
        reward_t=reward_t,
        value_t=value_t,
        next_value_t=next_value_t,
        terminated_t=terminated_t,
        truncated_t=truncated_t,
    )
    if not 0.0 <= discount <= 1.0 or not 0.0 <= gae_lambda <= 1.0:
        raise ValueError(f"discount and gae_lambda must be in [0, 1], got {discount} and {gae_lambda}")
    not_terminal = (~terminated_t).to(reward_t.dtype)
    not_done = (~(terminated_t | truncated_t)).to(reward_t.dtype)
    delta = reward_t + discount * not_terminal * next_value_t - value_t
    decay = discount * gae_lambda * not_done
    advantage = torch.empty_like(delta)
    running = torch.zeros_like(delta[0])
    for t in reversed(range(shape[0])):
        running = delta[t] + decay[t] * running
        advantage[t] = running
    return advantage, advantage + value_t


def discounted_returns(
    reward_t: torch.Tensor,
    next_value_t: torch.Tensor,
    terminated_t: torch.Tensor,
    truncated_t: torch.Tensor,
    discount: float,
) -> torch.Tensor:
    """n-step discounted returns to the end of the batch, the targets of A3C/A2C (Mnih et al. 2016,
    "Asynchronous Methods for Deep Reinforcement Learning", Algorithm S3):

        R_t = r_t + discount * (1 - terminated_t) * (next_value_t   if done_t or t = T - 1
                                                     R_{t+1}        otherwise)

    i.e. the rollout's rewards, bootstrapped from V of the state after the last step of the batch
    or after a truncation, and from nothing after a terminal.

    Args: as ``generalized_advantage_estimation``. Returns [T, B].
    """
    shape = reward_t.shape
    _check_tb(
        shape,
        reward_t=reward_t,
        next_value_t=next_value_t,
        terminated_t=terminated_t,
        truncated_t=truncated_t,
    )
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")
    not_terminal = (~terminated_t).to(reward_t.dtype)
    done = terminated_t | truncated_t
    returns = torch.empty_like(reward_t)
    following = next_value_t[-1]
    for t in reversed(range(shape[0])):
        bootstrap = torch.where(done[t], next_value_t[t], following)
        following = reward_t[t] + discount * not_terminal[t] * bootstrap
        returns[t] = following
    return returns


def standardize_advantage(advantage: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + eps)`` over all elements: the advantage normalization of OpenAI
    Baselines' PPO2 (and SB3's ``normalize_advantage``), applied per minibatch by PPO."""
    return (advantage - advantage.mean()) / (advantage.std() + eps)


def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """``1 - Var(target - prediction) / Var(target)``, a value-function diagnostic: 1 is perfect, 0 no
    better than a constant, negative worse (NaN when the target is constant)."""
    if prediction.shape != target.shape:
        raise ValueError(
            f"prediction {tuple(prediction.shape)} and target {tuple(target.shape)} differ in shape"
        )
    var = target.var()
    return float("nan") if var == 0 else float(1.0 - (target - prediction).var() / var)
