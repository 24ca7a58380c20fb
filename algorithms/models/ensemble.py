"""Ensembles of independent MLPs evaluated in one batched matrix product per layer.

The critics of DDPG (one), TD3 and SAC (two: clipped double Q, Fujimoto et al. 2018, Sec. 4.2) are
``QEnsemble`` modules: member k's layer weights are slice k of one ``[K, in, out]`` tensor, so a forward
pass for all members is one ``torch.baddbmm`` per layer, one backward, one optimizer over a few
stacked tensors and one fused Polyak update, instead of K of each. The members stay independent:
no parameter or gradient is shared, and each is initialised as ``nn.Linear`` would be, so an
ensemble computes exactly what K separate ``StateActionQNetwork`` modules with the same weights compute
(tests/test_qpg_algos.py checks outputs and gradients).

The batched products run at the rate of separate ``addmm`` calls; what the ensemble removes is
the per-tensor work around them (dispatches, autograd nodes, optimizer and Polyak loops over twice
as many tensors), which makes DDPG, TD3 and SAC updates faster (docs/results/core_measurements.md,
models/ensemble.py).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn


class EnsembleLinear(nn.Module):
    """K independent affine maps: ``x [K, N, in] -> x @ weight[k] + bias[k]`` -> ``[K, N, out]``.

    ``weight`` is ``[K, in, out]`` (the transpose of ``nn.Linear``'s per member) and ``bias``
    ``[K, 1, out]``; both start as ``nn.Linear``'s default, U(-1/sqrt(in), 1/sqrt(in)) (its
    Kaiming-uniform with a = sqrt(5)).
    """

    def __init__(self, n_members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        if min(n_members, in_features, out_features) < 1:
            raise ValueError(
                f"EnsembleLinear: n_members, in_features, out_features must be >= 1, "
                f"got {(n_members, in_features, out_features)}"
            )
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(n_members, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n_members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, n_members: int | None = None) -> torch.Tensor:
        """``x`` [K', N, in] for the first ``n_members`` = K' members (all K by default)."""
        weight, bias = self.weight, self.bias
        if n_members is not None and n_members != weight.shape[0]:
            # Sliced only when needed: a sliced parameter's gradient is a zero-filled copy plus a scatter.
            weight, bias = weight[:n_members], bias[:n_members]
        if weight.shape[-1] == 1:
            # A single output is a dot product: multiply-and-sum is faster than batched matrix-vector
            # products through bmm (docs/results/core_measurements.md, models/ensemble.py).
            return (x * weight.transpose(1, 2)).sum(-1, keepdim=True) + bias
        return torch.baddbmm(bias, x, weight)


class QEnsemble(nn.Module):
    """K independent Q(s, a) ReLU MLPs on ``[observation, action]`` (each as ``StateActionQNetwork``):
    ``forward(observation [..., D], action [..., A], n_members=None) -> q [K', ...]``.

    ``n_members`` evaluates only the first K' members (TD3's actor loss uses Q1 only: 1).
    """

    def __init__(
        self, observation_dim: int, action_dim: int, hidden_sizes: tuple[int, ...], n_members: int
    ) -> None:
        super().__init__()
        sizes = (observation_dim + action_dim, *hidden_sizes, 1)
        self.n_members = int(n_members)
        self.layers = nn.ModuleList(
            EnsembleLinear(self.n_members, n_in, n_out) for n_in, n_out in zip(sizes[:-1], sizes[1:])
        )

    def frozen_view(self) -> QEnsemble:
        """The same members with parameters that share this module's storage but record no gradient:
        Q-values computed through the view carry gradients to their inputs only (an actor's action),
        and the members' weight gradients are never computed. It sees every in-place change of the
        parameters (optimizer steps, ``load_state_dict``); one made before the parameters are replaced
        by new tensors (moved to another device, stacked into a packed run) does not."""
        view = copy.deepcopy(self)
        for view_module, module in zip(view.modules(), self.modules(), strict=True):
            for name, param in module._parameters.items():
                view_module._parameters[name] = nn.Parameter(param.detach(), requires_grad=False)
        return view

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, n_members: int | None = None
    ) -> torch.Tensor:
        x = torch.cat([observation.to(action.dtype), action], dim=-1)
        lead = x.shape[:-1]
        k = self.n_members if n_members is None else n_members
        x = x.reshape(1, -1, x.shape[-1]).expand(k, -1, -1)
        for layer in self.layers[:-1]:
            # In place: baddbmm's backward does not need its output, and relu_'s needs only its own.
            x = torch.relu_(layer(x, n_members))
        return self.layers[-1](x, n_members).reshape(k, *lead)
