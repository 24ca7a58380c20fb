"""The R2D1 recurrent Q-network (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
Reinforcement Learning", Appendix "Hyper-parameters"; rlpyt ``models/dqn/atari_r2d1_model.py``):

    frames -> Nature conv torso [-> fc (ReLU), rlpyt's layer, with ``fc_size`` > 0]
           -> LSTM 512, fed [features, one-hot previous action, previous reward]
           -> dueling head (value and advantage streams of 512 units each).

The sizes have no defaults (``algos.r2d1.Config`` holds them: R2D2's, no fc layer); the torso's
defaults are the Config's.

For vector observations the conv torso is replaced by an MLP (the velocity-masked control tasks); for
MinAtar's 10x10 maps ``conv_torso="minatar"`` puts its small convolution there (``torsos.py``).
The recurrent state is a ``NamedArrays(h=[B, H], c=[B, H])`` so samplers and replay can reset and
store it row by row.
"""

from __future__ import annotations

import torch
from torch import nn

from algorithms.arrays import NamedArrays
from algorithms.models.heads import DuelingHead
from algorithms.models.recurrent import lstm_with_resets, stepwise_lstm
from algorithms.models.torsos import build_torso


class R2D1Model(nn.Module):
    """``forward(observation, prev_action, prev_reward, state) -> (q, next_state)``.

    Leading dims of ``observation`` may be ``[T, B]``, ``[B]`` or none; ``prev_action`` (integer
    action indices) and ``prev_reward`` have the same leading dims; ``q`` has them too, followed by
    ``A``. ``state`` is the (h, c) before the first step (``None``: zeros), ``[B, H]`` (``[H]`` for
    unbatched input); ``next_state`` is the state after the last step, same shape.

    ``reset`` (``[T, B]`` bool, optional) zeroes the state before step t where an episode begins, so
    a replayed sequence that crosses an episode end never carries memory into the next episode;
    ``return_states`` adds the (h, c) after every step, ``[T, B, H]``, as a third output. Both go
    through ``recurrent.lstm_with_resets`` (one input product for all steps and a hand-written
    recurrence); otherwise the whole sequence goes through the fused LSTM in one call.
    ``stepwise`` runs the LSTM one step at a time in plain tensor operations instead
    (``recurrent.stepwise_lstm``): the same values, in a form ``torch.func`` transforms can batch
    (a packed run's loss), which neither the fused LSTM nor the hand-written recurrence is.
    """

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        n_actions: int,
        *,
        lstm_size: int,
        fc_size: int,
        head_hidden_size: int,
        mlp_hidden_sizes: tuple[int, ...] = (64, 64),
        conv_torso: str = "nature",
    ) -> None:
        super().__init__()
        self.observation_shape = tuple(int(s) for s in observation_shape)
        self.n_actions, self.lstm_size = int(n_actions), int(lstm_size)
        # fc_size 0: the conv features go straight to the LSTM, as in R2D2 (Kapturowski et al. 2019,
        # Sec. 2.3 and Appendix); rlpyt's atari_r2d1_model.py has a 512-unit layer in between.
        self.torso: nn.Module = build_torso(
            self.observation_shape,
            fc_size=fc_size or None,
            hidden_sizes=tuple(mlp_hidden_sizes),
            conv=conv_torso,
        )
        self.lstm = nn.LSTM(self.torso.output_size + self.n_actions + 1, self.lstm_size)
        self.head = DuelingHead(self.lstm_size, self.n_actions, hidden_size=head_hidden_size)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> NamedArrays:
        zeros = torch.zeros(batch_size, self.lstm_size, device=device)
        return NamedArrays(h=zeros, c=zeros.clone())

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        state: NamedArrays | None = None,
        reset: torch.Tensor | None = None,
        return_states: bool = False,
        stepwise: bool = False,
    ) -> tuple[torch.Tensor, NamedArrays] | tuple[torch.Tensor, NamedArrays, NamedArrays]:
        lead = observation.shape[: observation.dim() - len(self.observation_shape)]
        if len(lead) > 2:
            raise ValueError(
                f"R2D1Model: observation {tuple(observation.shape)} has more than [T, B] leading dims"
            )
        if prev_action.shape != lead or prev_reward.shape != lead:
            raise ValueError(
                f"R2D1Model: prev_action {tuple(prev_action.shape)} and prev_reward "
                f"{tuple(prev_reward.shape)} must have the observation's leading dims {tuple(lead)}"
            )
        T, B = (lead[0], lead[1]) if len(lead) == 2 else (1, lead[0] if lead else 1)
        features = self.torso(observation.reshape(T, B, *self.observation_shape))
        # A comparison, not F.one_hot, which reads the data (its range check): torch.func cannot batch it.
        actions = torch.arange(self.n_actions, device=prev_action.device)
        prev_action_one_hot = (prev_action.reshape(T, B, 1).long() == actions).to(features.dtype)
        lstm_input = torch.cat(
            [features, prev_action_one_hot, prev_reward.reshape(T, B, 1).to(features.dtype)], -1
        )
        if state is None:
            h0 = c0 = lstm_input.new_zeros(B, self.lstm_size)
        else:
            h0, c0 = state.h.reshape(B, self.lstm_size), state.c.reshape(B, self.lstm_size)
        sequence_lstm = stepwise_lstm if stepwise else lstm_with_resets
        lstm_out, h, c, cells = sequence_lstm(self.lstm, lstm_input, h0, c0, reset, return_states)
        q = self.head(lstm_out).reshape(*lead, self.n_actions)
        state_shape = (B, self.lstm_size) if len(lead) else (self.lstm_size,)
        next_state = NamedArrays(h=h.reshape(state_shape), c=c.reshape(state_shape))
        if not return_states:
            return q, next_state
        states = NamedArrays(
            h=lstm_out.reshape(*lead, self.lstm_size), c=cells.reshape(*lead, self.lstm_size)
        )
        return q, next_state, states

    def act(
        self, observation: torch.Tensor, prev_action: torch.Tensor, prev_reward: torch.Tensor, h, c
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of B envs for acting, with no checks: ``observation`` [B, *obs], ``prev_action``
        and ``prev_reward`` [B], state (h, c) [B, H] -> (q [B, A], h, c). The LSTM step is
        ``torch.lstm_cell`` (one input product over B rows), cheaper for one step than the fused
        sequence kernel (docs/results/r2d1_minatar_speed.md, "Acting")."""
        features = self.torso(observation)
        actions = torch.arange(self.n_actions, device=prev_action.device)
        lstm_input = torch.cat(
            [
                features,
                (prev_action.long().unsqueeze(-1) == actions).to(features.dtype),
                prev_reward.unsqueeze(-1).to(features.dtype),
            ],
            -1,
        )
        lstm = self.lstm
        h, c = torch.lstm_cell(
            lstm_input, (h, c), lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0
        )
        return self.head(h), h, c
