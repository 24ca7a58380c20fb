"""Q-value heads on top of a torso's features ``[..., input_size]``.

* ``QHead``: fully connected layers to one value per action, ``[..., A]`` (Nature DQN's output).
* ``DuelingHead``: separate value and advantage streams combined as
  ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`` (Wang et al. 2016, "Dueling Network
  Architectures", eq. 9). With ``n_atoms > 1`` each stream outputs per-atom logits and the same
  combination is applied to the logits, as Rainbow does for its distributional dueling net (Hessel
  et al. 2018, Sec. "Dueling networks").
* ``CategoricalHead``: per-action logits over a fixed support of ``n_atoms`` returns, ``[..., A, N]``
  (Bellemare et al. 2017, "A Distributional Perspective on RL", C51).

``expected_q`` turns categorical logits into Q-values for acting and for the double-Q argmax.
"""

from __future__ import annotations

import torch
from torch import nn

from algorithms.models.torsos import Layers


def _mlp(input_size: int, hidden_sizes: tuple[int, ...], output_size: int) -> Layers:
    layers: list[nn.Module] = []
    last = input_size
    for size in hidden_sizes:
        layers += [nn.Linear(last, size), nn.ReLU()]
        last = size
    layers.append(nn.Linear(last, output_size))
    return Layers(*layers)


class QHead(nn.Module):
    """``[..., input_size]`` -> Q-values ``[..., n_actions]`` through ``hidden_sizes`` ReLU layers."""

    def __init__(self, input_size: int, n_actions: int, hidden_sizes: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.n_actions = int(n_actions)
        self.net = _mlp(int(input_size), tuple(hidden_sizes), self.n_actions)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


class DuelingHead(nn.Module):
    """Value and advantage streams, each with one ``hidden_size`` ReLU layer (512 in Wang et al. 2016
    and R2D2's Appendix). Output ``[..., A]`` for ``n_atoms == 1``, per-atom logits ``[..., A, N]``
    otherwise."""

    def __init__(self, input_size: int, n_actions: int, hidden_size: int = 512, n_atoms: int = 1) -> None:
        super().__init__()
        self.n_actions, self.n_atoms = int(n_actions), int(n_atoms)
        # hidden_size 0: linear streams (Obando-Ceron & Castro 2021's MinAtar network has no hidden layer).
        hidden = (int(hidden_size),) if hidden_size else ()
        self.value = _mlp(int(input_size), hidden, self.n_atoms)
        self.advantage = _mlp(int(input_size), hidden, self.n_actions * self.n_atoms)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        lead = features.shape[:-1]
        value = self.value(features).reshape(*lead, 1, self.n_atoms)
        advantage = self.advantage(features).reshape(*lead, self.n_actions, self.n_atoms)
        # Subtracting the mean advantage makes V and A identifiable (Wang et al. 2016, eq. 9).
        out = value + advantage - advantage.mean(dim=-2, keepdim=True)
        return out.squeeze(-1) if self.n_atoms == 1 else out


class CategoricalHead(nn.Module):
    """``[..., input_size]`` -> logits ``[..., n_actions, n_atoms]`` of each action's return distribution."""

    def __init__(
        self, input_size: int, n_actions: int, n_atoms: int, hidden_sizes: tuple[int, ...] = ()
    ) -> None:
        super().__init__()
        self.n_actions, self.n_atoms = int(n_actions), int(n_atoms)
        self.net = _mlp(int(input_size), tuple(hidden_sizes), self.n_actions * self.n_atoms)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features).reshape(*features.shape[:-1], self.n_actions, self.n_atoms)


def expected_q(logits: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Q(s, a) = sum_i z_i p_i(s, a) from logits ``[..., A, N]`` over support ``[N]`` -> ``[..., A]``."""
    if logits.shape[-1] != support.shape[-1]:
        raise ValueError(f"expected_q: logits have {logits.shape[-1]} atoms, support has {support.shape[-1]}")
    return torch.softmax(logits, dim=-1) @ support
