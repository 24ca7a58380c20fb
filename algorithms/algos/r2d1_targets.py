"""R2D1's n-step targets (``targets``), shared by its loss (``r2d1.Algo.loss``) and by the initial
priorities of new sequences, which R2D2 computes on the actors from the Q-values they acted on
(Kapturowski et al. 2019, Sec. 2.3): ``sampler_td_errors`` and ``initial_sequence_priorities``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from algorithms.arrays import NamedArrays
from algorithms.functional.priorities import sequence_priority
from algorithms.functional.returns import rescaled_nstep_targets
from algorithms.functional.td import select_action_values
from algorithms.functional.value_rescaling import value_transform

if TYPE_CHECKING:
    from algorithms.algos.r2d1 import Config


def targets(
    config: Config,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    q_bootstrap: torch.Tensor,
    n_step: int,
) -> torch.Tensor:
    """``functional.returns.rescaled_nstep_targets`` [L, B] with this config's discount, value
    transform and n-step done switch (``q_bootstrap`` [L + 1, B])."""
    return rescaled_nstep_targets(
        reward,
        terminated,
        truncated,
        q_bootstrap,
        config.discount,
        n_step,
        value_transform(config.value_rescaling),
        config.value_rescaling_eps,
        nstep_done_bug=config.nstep_done_bug,
    )


def sampler_td_errors(config: Config, samples: NamedArrays, q_bootstrap_T: torch.Tensor) -> torch.Tensor:
    """|TD errors| [T, B] of a sampler batch from the Q-values the sampler acted on (initial priorities).

    ``samples.agent_info.q`` [T, B, A] are the online net's values at each observation and
    ``q_bootstrap_T`` [B, A] those at the observation after the batch. The sampler has only the online
    net, so the target is max_a Q (double Q-learning's argmax and evaluation coincide). n-step, or
    1-step with ``initial_priority_one_step`` (rlpyt 2019). The sampler never evaluates the true final
    observation of a time limit, so a window ending in truncation bootstraps from the next episode's
    first observation here; only the initial priority of such a sequence is affected.
    """
    q = samples.agent_info.q
    q_next = torch.cat([q, q_bootstrap_T.unsqueeze(0)], dim=0).max(dim=-1).values
    n = 1 if config.initial_priority_one_step else config.n_step
    y = targets(config, samples.reward, samples.terminated, samples.truncated, q_next, n)
    return (select_action_values(q, samples.action) - y).abs()


def initial_sequence_priorities(config: Config, td_abs: torch.Tensor) -> torch.Tensor:
    """Priorities [B] of new sequences from the sampler's |TD errors| [T, B] over their trained steps.

    ``initial_priority_half_segment`` 1 or 2 keeps only the first or second half of the trained steps
    (rlpyt's ``input_priority_shift``, whose sampler batch was half a sequence long).
    """
    T = td_abs.shape[0]
    if config.initial_priority_half_segment == 1:
        td_abs = td_abs[: T // 2]
    elif config.initial_priority_half_segment == 2:
        td_abs = td_abs[T // 2 :]
    return sequence_priority(td_abs, config.priority_eta)
