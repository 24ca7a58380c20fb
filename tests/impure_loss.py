"""The pattern a purity check must reject, kept as a fixture (tests/test_loss_purity.py): DQN's loss
with its diagnostics switched by a module flag that the gradient step sets around the call and
resets in a ``finally``, instead of by the ``mode`` argument. Inside a learner's update it measures
as the caller asked; called on its own with the same arguments it never measures.
"""

from __future__ import annotations

from typing import Any

import torch

from algorithms.algos import dqn
from algorithms.arrays import NamedArrays
from algorithms.functional.td import huber_loss, q_learning_target, select_action_values
from algorithms.learners.q_replay import LossMode, LossOut, SingleGradStep

_measuring = False


def loss(config: dqn.Config, model: Any, target_model: Any, batch: NamedArrays, mode: LossMode) -> LossOut:
    """DQN's loss (no double Q, Huber), measuring when the module flag says so."""
    q = select_action_values(model(batch.observation), batch.action)
    with torch.no_grad():
        y = q_learning_target(batch.return_n, batch.discount_n, target_model(batch.next_observation))
    td_error = q - y
    weighted = (batch.is_weights * huber_loss(td_error)).mean()
    td_abs = td_error.detach().abs()
    if not _measuring:
        return LossOut(weighted, td_abs, {})
    return LossOut(weighted, td_abs, {"q_mean": q.detach().mean(), "td_abs_mean": td_abs.mean()})


class FlagGradStep(SingleGradStep):
    """A single run's gradient step that tells the loss to measure through the module flag."""

    def gradient_update(self, batch: NamedArrays, measure: bool) -> tuple[dict[str, torch.Tensor], Any]:
        global _measuring
        _measuring = measure
        try:
            return super().gradient_update(batch, measure)
        finally:
            _measuring = False


class Algo(dqn.Algo):
    """DQN with the flagged loss and gradient step."""

    loss_fn = staticmethod(loss)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.grad_step = FlagGradStep(self)


build_agent = dqn.build_agent
