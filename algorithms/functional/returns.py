"""n-step discounted returns over [T, B] with ``terminated`` and ``truncated`` kept apart.

The n-step target of Q-learning (Sutton 1988; Mnih et al. 2016, Sec. 4; Hessel et al. 2018,
"Rainbow", Sec. 2 "Multi-step learning") is

    G_t = sum_{k=0}^{m-1} gamma^k r_{t+k} + [not done] gamma^m max_a Q(s_{t+m}, a),

where the window of m <= n steps stops at the first episode end inside it:

* ``terminated`` at step t+k (an MDP terminal): the sum stops after r_{t+k}, ``done`` is set and
  nothing is bootstrapped;
* ``truncated`` at step t+k (a time limit): the sum stops after r_{t+k} and the target bootstraps
  from the *true final observation* of that step (``final_observation`` in Contract 1) with
  discount gamma^(k+1) (Pardo et al. 2018, "Time Limits in Reinforcement Learning").

``steps`` (m) tells the caller which observation to bootstrap from: the next observation of step
t+m-1, i.e. ``final_observation[t+m-1]`` where that step ended the episode by truncation and
``observation[t+m]`` otherwise. Windows that run past the end of the batch are cut there (m < n
for the last n-1 rows); callers that need full windows use the rows whose window fits.

``nstep_done_bug=True`` reproduces rlpyt before PR #182 (2020): the n-step ``done`` written into
replay kept only the 1-step done, so a window that crossed an episode end after its first step was
treated as not done and bootstrapped with gamma^n from s_{t+n}, a state of the *next* episode
(astooke/rlpyt PR #182: ``discount_return_n_step`` cast ``done_n`` to a new tensor, so the
destination buffer kept the 1-step done). The reward sum itself was cut correctly. Kept only as a
named switch for the as-published arm of the R2D1 reproduction.

``rescaled_nstep_targets`` turns these into the targets of R2D2 (Kapturowski et al. 2019, Sec. 2.3),
n-step Q-learning with the invertible value transform h of ``value_rescaling`` in place of reward
clipping: y_t = h(G_t + discount_t h^{-1}(V_{t+m})), with V the bootstrap value of each observation.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from algorithms.functional.value_rescaling import ValueTransform


class NStepReturn(NamedTuple):
    """Outputs of :func:`nstep_returns`, each shaped like ``reward`` ([T, B, ...])."""

    returns: torch.Tensor  # sum_{k<m} gamma^k r_{t+k}
    done: torch.Tensor  # bool: the window reached a terminal state, no bootstrap
    discount: torch.Tensor  # gamma^m where not done, 0 where done: the bootstrap's weight
    steps: torch.Tensor  # int64 m: bootstrap from the next observation of step t+m-1


def _check_inputs(
    reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, gamma: float, n: int
):
    if reward.dim() < 1:
        raise ValueError(
            f"nstep_returns: reward must have a leading time dim [T, ...], got shape {tuple(reward.shape)}"
        )
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if flag.shape != reward.shape:
            raise ValueError(
                f"nstep_returns: {name} shape {tuple(flag.shape)} differs from reward shape "
                f"{tuple(reward.shape)}"
            )
        if flag.dtype != torch.bool:
            raise ValueError(f"nstep_returns: {name} must be bool, got {flag.dtype}")
    if not reward.is_floating_point():
        raise ValueError(f"nstep_returns: reward must be floating point, got {reward.dtype}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"nstep_returns: gamma={gamma} must be in [0, 1]")
    if int(n) != n or n < 1:
        raise ValueError(f"nstep_returns: n={n} must be a positive integer")


def nstep_returns(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    n: int,
    *,
    nstep_done_bug: bool = False,
) -> NStepReturn:
    """n-step returns, done flags, bootstrap discounts and window lengths for every step t of [T, B].

    Args:
        reward: [T, B, ...] float, r_t from the env step at t.
        terminated: [T, B, ...] bool, the step at t reached an MDP terminal.
        truncated: [T, B, ...] bool, the step at t hit a time limit (bootstrap from its final observation).
        gamma: discount factor in [0, 1].
        n: the largest number of rewards summed.
        nstep_done_bug: reproduce rlpyt's pre-PR-#182 n-step done (see the module docstring).

    Returns:
        :class:`NStepReturn` of [T, B, ...] tensors. The target is
        ``returns + discount * V(next observation of step t + steps - 1)``.
    """
    _check_inputs(reward, terminated, truncated, gamma, n)
    T = reward.shape[0]
    returns = torch.zeros_like(reward)
    done = torch.zeros_like(terminated)
    ended = torch.zeros_like(terminated)  # an episode end (either kind) already lies in the window
    steps = torch.zeros_like(
        reward, dtype=torch.int64
    )  # like reward: batched too under torch.func transforms
    episode_end = terminated | truncated
    for k in range(min(n, T)):
        rows = T - k  # windows t < T - k still have a step t + k inside the batch
        active = ~ended[:rows]
        returns[:rows] += (gamma**k) * reward[k:] * active
        steps[:rows] += active
        done[:rows] |= active & terminated[k:]
        ended[:rows] |= active & episode_end[k:]
    if nstep_done_bug:
        # rlpyt kept the 1-step done and always bootstrapped from s_{t+n} with gamma^n (windows cut
        # at the batch end aside), unless the episode ended at t itself.
        window = torch.clamp(T - torch.arange(T, device=reward.device), max=n)
        window = window.view(T, *([1] * (reward.dim() - 1))).expand_as(steps)
        steps = torch.where(episode_end, torch.ones_like(steps), window)
        done = terminated.clone()
    discount = torch.where(done, torch.zeros_like(returns), torch.pow(gamma, steps.to(reward.dtype)))
    return NStepReturn(returns=returns, done=done, discount=discount, steps=steps)


def rescaled_nstep_targets(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    q_bootstrap: torch.Tensor,
    gamma: float,
    n: int,
    transform: ValueTransform,
    eps: float,
    *,
    nstep_done_bug: bool = False,
) -> torch.Tensor:
    """y_t = h(G_t + discount_t h^{-1}(q_bootstrap[t + m_t])) for every step t of [L, B, ...].

    ``q_bootstrap`` [L + 1, B, ...] holds the value to bootstrap from at each observation index, in
    the transformed space (index L: the observation after the last step). Where the window of step t
    ends in a time limit at t + m - 1, the caller puts the value of that step's true final
    observation at index t + m (the next episode's first observation sits there otherwise). Where it
    ends in a terminal the discount is 0 and y_t = h(G_t). ``transform`` is a ``(forward, inverse)``
    pair of ``value_rescaling`` (``identity`` gives the plain n-step target), ``eps`` its epsilon;
    windows are cut at the end of the L steps as in :func:`nstep_returns`.
    """
    L = reward.shape[0]
    if q_bootstrap.shape != (L + 1, *reward.shape[1:]):
        raise ValueError(
            f"rescaled_nstep_targets: q_bootstrap shape {tuple(q_bootstrap.shape)} should be "
            f"{(L + 1, *reward.shape[1:])} for reward shape {tuple(reward.shape)}"
        )
    nstep = nstep_returns(reward, terminated, truncated, gamma, n, nstep_done_bug=nstep_done_bug)
    index = torch.arange(L, device=reward.device).view(L, *([1] * (reward.dim() - 1))) + nstep.steps
    bootstrap = q_bootstrap.gather(0, index)
    return transform.forward(nstep.returns + nstep.discount * transform.inverse(bootstrap, eps), eps)
