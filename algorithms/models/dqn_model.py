"""Feed-forward Q-networks: a torso (``torsos.py``) followed by a head (``heads.py``).

``QNetwork.forward(observation)`` maps ``[..., *obs_shape]`` to Q-values ``[..., A]`` or, for
distributional variants, to logits ``[..., A, N]``. The Atari configuration is Nature DQN (Mnih et
al. 2015, Methods "Model architecture"): the three convolutions, a 512-unit ReLU layer and a linear
output; dueling replaces the 512-unit layer and the output with two 512-unit streams (Wang et al.
2016, Sec. 4.2, the same convolutions).
"""

from __future__ import annotations

import torch
from torch import nn

from algorithms.models.heads import CategoricalHead, DuelingHead, QHead
from algorithms.models.torsos import build_torso


class QNetwork(nn.Module):
    """Torso + Q head. ``n_atoms > 1`` makes it distributional (logits over a support).

    ``conv_torso`` picks the convolutions for (C, H, W) observations (``torsos.CONV_TORSOS``);
    ``hidden_size`` is the fully connected layer after them, or each dueling stream's (0: none).
    """

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        n_actions: int,
        dueling: bool = False,
        n_atoms: int = 1,
        hidden_size: int = 512,
        mlp_hidden_sizes: tuple[int, ...] = (64, 64),
        conv_torso: str = "nature",
    ) -> None:
        super().__init__()
        self.n_actions, self.n_atoms, self.dueling = int(n_actions), int(n_atoms), bool(dueling)
        frames = len(observation_shape) == 3
        # Nature: conv -> fc 512 -> output; dueling: conv -> two streams of fc 512 -> V / A.
        self.torso: nn.Module = build_torso(
            tuple(observation_shape),
            fc_size=None if dueling else hidden_size,
            hidden_sizes=tuple(mlp_hidden_sizes),
            conv=conv_torso,
        )
        size = self.torso.output_size
        if dueling:
            stream = hidden_size if frames else size
            self.head: nn.Module = DuelingHead(size, n_actions, hidden_size=stream, n_atoms=n_atoms)
        elif n_atoms > 1:
            self.head = CategoricalHead(size, n_actions, n_atoms)
        else:
            self.head = QHead(size, n_actions)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(observation))
