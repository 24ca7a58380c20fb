"""R2D1's n-step targets (``targets``), shared by its loss (``r2d1.loss``) and by the initial
priorities of new sequences, which R2D2 computes on the actors from the Q-values they acted on
(Kapturowski et al. 2019, Sec. 2.3): ``sampler_td_errors``, ``initial_sequence_priorities`` and
``InitialPriorities``, which follows the sampler batches a sequence spans.

The functions take any config with the fields of ``TargetConfig`` (``r2d1.Config``'s).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from algorithms.arrays import NamedArrays
from algorithms.functional.priorities import sequence_priority
from algorithms.functional.returns import rescaled_nstep_targets
from algorithms.functional.td import select_action_values
from algorithms.functional.value_rescaling import value_transform
from algorithms.replay.buffer import ReplayBuffer
from algorithms.resume import tree_from_state, tree_state


class TargetConfig(Protocol):
    discount: float
    n_step: int
    value_rescaling: str
    value_rescaling_eps: float
    nstep_done_bug: bool
    initial_priority_one_step: bool
    initial_priority_half_segment: int
    priority_eta: float
    burn_in_steps: int
    sequence_length_steps: int
    sequence_period_steps: int
    sequence_steps: int


def targets(
    config: TargetConfig,
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


def sampler_td_errors(
    config: TargetConfig, samples: NamedArrays, q_bootstrap_T: torch.Tensor
) -> torch.Tensor:
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


def initial_sequence_priorities(config: TargetConfig, td_abs: torch.Tensor) -> torch.Tensor:
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


class InitialPriorities:
    """The initial priorities of new sequences from the sampler's |TD errors| of their trained steps,
    which span several sampler batches: a batch's TD errors are final once the next batch brings
    their bootstrap values (the Q-values of its first step, which the sampler computes in its next
    acting forward).

    State, checkpointed with the replay (``state_dict``): the |TD errors| of the newest rows
    (``td_history`` [rows, B], from absolute row ``td_first_row`` on) and the fields of the last batch
    that its TD errors need (``pending``)."""

    def __init__(self, config: TargetConfig, num_envs: int) -> None:
        self.config = config
        self.td_history = torch.zeros(0, num_envs)
        self.td_first_row = 0
        self.pending: NamedArrays | None = None

    def append(self, replay: ReplayBuffer, samples: NamedArrays) -> None:
        """Append ``samples`` to ``replay`` and set the initial priorities of the sequences it completes."""
        storage = replay.storage
        t0 = storage.ring.t
        replay.append(samples)
        t = storage.ring.t
        # The bootstrap values of a batch are the Q-values of the next batch's first step, whose inputs
        # and state are the batch's bootstrap inputs: the sampler computes them in its next acting
        # forward. Until the next batch arrives the last n rows' TD errors stand on the batch's own
        # last Q-values; no sequence complete now trains on those rows (its trained steps end n steps
        # before the rows written), and they are recomputed when the next batch arrives.
        q = samples.agent_info.q
        td = sampler_td_errors(self.config, samples, q[-1])
        if self.td_first_row + self.td_history.shape[0] != t0:  # first batch of this process
            self.td_history, self.td_first_row = td, t0
        else:
            if self.pending is not None:
                previous = sampler_td_errors(self.config, self.pending, q[0])
                rows = min(previous.shape[0], self.td_history.shape[0])  # the history kept may be shorter
                self.td_history[-rows:] = previous[-rows:]
            self.td_history = torch.cat([self.td_history, td])
        self.pending = NamedArrays(
            reward=samples.reward.clone(),
            terminated=samples.terminated.clone(),
            truncated=samples.truncated.clone(),
            action=samples.action.clone(),
            agent_info=NamedArrays(q=q.clone()),
        )
        c, L = self.config, self.config.sequence_steps
        # Sequences starting at s are complete once rows up to s + L - 1 are written: s in (t0 - L, t - L].
        starts = storage.sequence_starts(max(t0 - L + 1, self.td_first_row), t - L + 1)
        if starts.size:
            offset = starts - self.td_first_row + c.burn_in_steps
            trained = torch.stack([self.td_history[o : o + c.sequence_length_steps] for o in offset], dim=1)
            priorities = initial_sequence_priorities(c, trained.flatten(1, 2))
            # [starts * B], ordered by start then env as items_of_starts numbers them; the selector
            # applies the priority exponent or not (initial_priority_no_alpha, rlpyt 2019).
            replay.set_input_priorities(storage.items_of_starts(starts), priorities)
        keep = L + c.sequence_period_steps  # enough history for every sequence not yet complete
        if self.td_history.shape[0] > keep:
            drop = self.td_history.shape[0] - keep
            self.td_history, self.td_first_row = self.td_history[drop:], self.td_first_row + drop

    def state_dict(self) -> dict[str, Any]:
        return {
            "td_history": self.td_history.clone(),
            "td_first_row": self.td_first_row,
            "pending": tree_state(self.pending),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.td_history = state["td_history"].clone()
        self.td_first_row = int(state["td_first_row"])
        self.pending = tree_from_state(state["pending"])
