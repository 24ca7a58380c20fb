"""Replay priorities: R2D2's sequence priority and prioritized replay's importance-sampling weights.

* Sequence priority (Kapturowski et al. 2019, "R2D2", Sec. 2.3): p = eta max_i |delta_i| +
  (1 - eta) mean_i |delta_i| over the n-step TD errors of a sequence, eta = 0.9 (Table 2).
* Importance-sampling weights (Schaul et al. 2016, "Prioritized Experience Replay", Sec. 3.4 and
  Alg. 1 line 10): w_i = (N P(i))^(-beta), normalised by max_i w_i over the sampled batch so that
  weights only ever scale the update down.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

ArrayT = TypeVar("ArrayT", torch.Tensor, np.ndarray)


def sequence_priority(
    td_error: torch.Tensor, eta: float, valid: torch.Tensor | None = None, check_valid: bool = True
) -> torch.Tensor:
    """eta * max|delta| + (1 - eta) * mean|delta| over time, per sequence (R2D2, Sec. 2.3).

    Args:
        td_error: [T, B] TD errors (signed or absolute) of B sequences.
        eta: mixing weight in [0, 1]; R2D2 uses 0.9.
        valid: optional [T, B] bool mask; padded steps (after an episode end, or beyond the data)
            are excluded from both the max and the mean. Every sequence needs one valid step.
        check_valid: raise when one has none; off under ``torch.func`` transforms, where no
            check may read the data (such a sequence then gets priority 0).

    Returns:
        [B] priorities.
    """
    if td_error.dim() != 2:
        raise ValueError(f"sequence_priority: td_error must be [T, B], got shape {tuple(td_error.shape)}")
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"sequence_priority: eta={eta} must be in [0, 1]")
    abs_delta = td_error.abs()
    if valid is None:
        return eta * abs_delta.max(dim=0).values + (1 - eta) * abs_delta.mean(dim=0)
    if valid.shape != td_error.shape or valid.dtype != torch.bool:
        raise ValueError(
            f"sequence_priority: valid must be a bool tensor shaped like td_error {tuple(td_error.shape)}, "
            f"got {valid.dtype} {tuple(valid.shape)}"
        )
    count = valid.sum(dim=0)
    if check_valid and bool((count == 0).any()):
        raise ValueError(
            f"sequence_priority: sequences {torch.nonzero(count == 0).flatten().tolist()} have no valid step"
        )
    masked = abs_delta * valid
    return eta * masked.max(dim=0).values + (1 - eta) * masked.sum(dim=0) / count.clamp(min=1)


def importance_weights(probabilities: ArrayT, beta: float) -> ArrayT:
    """(N P(i))^(-beta) / max_j (N P(j))^(-beta) over the batch (Schaul et al. 2016, Alg. 1 line 10).

    N, the number of items that could have been drawn, cancels in the normalisation, which leaves
    (min_j P(j) / P(i))^beta; that form is also free of overflow.

    Works on torch tensors and on numpy arrays alike (the replay samplers call it with numpy).

    Args:
        probabilities: [batch] sampling probabilities P(i) of the sampled items (all > 0).
        beta: correction exponent in [0, 1] (1 = full correction).
    """
    if probabilities.ndim != 1:
        raise ValueError(
            f"importance_weights: probabilities must be [batch], got shape {tuple(probabilities.shape)}"
        )
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"importance_weights: beta={beta} must be in [0, 1]")
    if bool((probabilities <= 0).any()):
        raise ValueError("importance_weights: every sampled item needs a positive probability")
    return (probabilities.min() / probabilities) ** beta
