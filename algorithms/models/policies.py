"""Policy and value networks for policy gradients (A2C, PPO) and Q-value policy gradients (DDPG, TD3, SAC).

On-policy actor-critics return a ``torch.distributions`` object and a value:

* ``ActorCritic``: Atari frames go through the shared Nature conv torso with its 512-unit layer and
  two linear heads (Mnih et al. 2016, Sec. 8 / Schulman et al. 2017, Sec. 6.2, "the same policy
  network architecture as Mnih et al. 2016"); vector observations go through two separate MLPs
  with tanh units for policy and value (Schulman et al. 2017, Sec. 6.1: "two hidden layers of 64
  units, and tanh nonlinearities ... we don't share parameters between the policy and value
  function").
* ``RecurrentActorCritic``: torso -> LSTM fed ``[features, previous action, previous reward]`` ->
  heads, whose state is zeroed before every step that starts a new episode *inside* a [T, B]
  sequence, so training on a batch with episode boundaries sees exactly what the sampler saw.

Action heads: ``CategoricalPolicyHead`` (discrete) and ``GaussianHead`` (continuous, diagonal, with a
state-independent log-std as in Schulman et al. 2017, Sec. 6.1 and the TRPO code it cites).

Off-policy continuous-control networks: ``StateActionQNetwork`` (Q(s, a) on the concatenated input, as TD3,
Fujimoto et al. 2018, Sec. 6.1; the algorithms train K of them as one ``models.ensemble.QEnsemble``),
``DeterministicPolicy`` (tanh output scaled to the action box, DDPG/TD3) and
``TanhGaussianPolicy`` (SAC, Haarnoja et al. 2018, Appendix C). ``ValueNetwork`` is V(s).

Initialisation of the on-policy nets follows OpenAI Baselines (orthogonal, gain sqrt(2) in the
torso, 0.01 on the policy output, 1 on the value output); Andrychowicz et al. 2021 ("What Matters
in On-Policy RL", Sec. 3.2) found the small policy-output scale among the choices that matter most.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal
from torch.nn import functional as F

from algorithms.arrays import NamedArrays
from algorithms.functional.policy_losses import tanh_gaussian_log_prob
from algorithms.models.torsos import Layers, MlpTorso, build_torso

# SAC's log-std bounds, from the authors' code (haarnoja/sac, policies/gaussian_policy.py).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def orthogonal_init_(module: nn.Module, gain: float) -> None:
    """Orthogonal weights with ``gain`` and zero biases for every Linear/Conv2d in ``module``."""
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Conv2d):
            nn.init.orthogonal_(m.weight, gain)
            nn.init.zeros_(m.bias)


def _box_bounds(action_space: gym.spaces.Box) -> tuple[torch.Tensor, torch.Tensor]:
    low = torch.as_tensor(action_space.low, dtype=torch.float32)
    high = torch.as_tensor(action_space.high, dtype=torch.float32)
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        raise ValueError(f"the action box must be bounded for a squashed policy, got low={low} high={high}")
    return low, high


def _torso(
    observation_shape: tuple[int, ...],
    hidden_sizes: tuple[int, ...],
    activation: type[nn.Module],
    conv_torso: str = "nature",
) -> nn.Module:
    """Frames: the Nature torso with its 512-unit layer; MinAtar maps (``"minatar"``, ``"minatar_same"``):
    the MinAtar convolution with a ``hidden_sizes[0]`` layer; ``"flatten"`` and vectors: an MLP of
    ``hidden_sizes``."""
    if len(observation_shape) == 3 and conv_torso in ("minatar", "minatar_same"):
        return build_torso(observation_shape, hidden_sizes[0] if hidden_sizes else None, conv=conv_torso)
    return build_torso(observation_shape, 512, tuple(hidden_sizes), conv=conv_torso, activation=activation)


# --- action heads ---------------------------------------------------------------------------------


class CategoricalPolicyHead(nn.Module):
    """Linear logits -> ``Categorical``; ``mode`` is the most likely action."""

    def __init__(self, input_size: int, n_actions: int) -> None:
        super().__init__()
        self.linear = nn.Linear(input_size, n_actions)

    def forward(self, features: torch.Tensor) -> Distribution:
        return Categorical(logits=self.linear(features), validate_args=False)


class GaussianHead(nn.Module):
    """Linear mean and a state-independent log-std -> diagonal ``Normal`` over the action vector."""

    def __init__(self, input_size: int, action_dim: int, initial_log_std: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(input_size, action_dim)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(initial_log_std)))

    def forward(self, features: torch.Tensor) -> Distribution:
        mean = self.linear(features)
        std = self.log_std.exp().expand_as(mean)
        return Independent(Normal(mean, std, validate_args=False), 1, validate_args=False)


def action_head(input_size: int, action_space: gym.Space) -> CategoricalPolicyHead | GaussianHead:
    """The head for ``action_space``: categorical for ``Discrete``, Gaussian for a 1-D ``Box``."""
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalPolicyHead(input_size, int(action_space.n))
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return GaussianHead(input_size, int(action_space.shape[0]))
    raise ValueError(f"no policy head for action space {action_space}: expected Discrete or a 1-D Box")


def _init_heads(head: nn.Module, value: nn.Linear) -> None:
    orthogonal_init_(head.linear, 0.01)
    orthogonal_init_(value, 1.0)


# --- feed-forward actor-critic --------------------------------------------------------------------


class ActorCritic(nn.Module):
    """``forward(observation [..., *obs]) -> (distribution over actions [...], value [...])``.

    Frames: shared Nature torso (``hidden_sizes`` unused); MinAtar maps: the shared MinAtar torso
    (``conv_torso``). Vectors and ``conv_torso="flatten"``: separate policy and value MLPs of
    ``hidden_sizes`` with ``activation`` (tanh in Schulman et al. 2017).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: type[nn.Module] = nn.Tanh,
        conv_torso: str = "nature",
    ) -> None:
        super().__init__()
        shape = tuple(observation_space.shape)
        self.pi_torso = _torso(shape, hidden_sizes, activation, conv_torso)
        # Convolutions are shared by policy and value (Mnih et al. 2016); MLPs are not (Schulman et al. 2017).
        self.shared = len(shape) == 3 and conv_torso != "flatten"
        self.v_torso = None if self.shared else _torso(shape, hidden_sizes, activation, conv_torso)
        self.pi_head = action_head(self.pi_torso.output_size, action_space)
        self.v_head = nn.Linear(self.pi_torso.output_size, 1)
        orthogonal_init_(self, math.sqrt(2.0))
        _init_heads(self.pi_head, self.v_head)

    def forward(self, observation: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        pi_features = self.pi_torso(observation)
        v_features = pi_features if self.v_torso is None else self.v_torso(observation)
        return self.pi_head(pi_features), self.v_head(v_features).squeeze(-1)

    def value(self, observation: torch.Tensor) -> torch.Tensor:
        features = self.pi_torso(observation) if self.v_torso is None else self.v_torso(observation)
        return self.v_head(features).squeeze(-1)


# --- recurrent actor-critic -----------------------------------------------------------------------


class RecurrentActorCritic(nn.Module):
    """Torso -> LSTM -> policy and value heads, with resets inside a sequence.

    ``forward(observation [T, B, *obs], prev_action [T, B, *act], prev_reward [T, B], state, reset [T, B])
    -> (distribution [T, B], value [T, B], end_states)``: ``state`` is the (h, c) before step 0
    (``NamedArrays(h=[B, H], c=[B, H])``); ``reset[t]`` zeroes it before step t (the step starts a
    new episode; the sampler zeroed it there too). ``end_states`` is ``NamedArrays(h=[T, B, H],
    c=[T, B, H])`` holding the state after step t wherever a segment ends there (``t = T - 1`` or
    ``reset[t + 1]``) and zeros elsewhere: ``end_states[-1]`` is the state after the batch, and
    ``end_states[t]`` after a truncated step t continues that episode for its bootstrap value.

    Each env column is cut at its resets into segments that run through one ``nn.LSTM`` call as a
    packed batch (the first segment of a column from ``state``, the others from zeros), so a
    sequence costs one fused LSTM pass, not a Python loop over time steps.

    The LSTM input is ``[features, previous action (one-hot for discrete), previous reward]`` as in
    the recurrent agents of rlpyt (``models/pg/atari_lstm_model.py``) and R2D2.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: tuple[int, ...] = (64,),
        lstm_size: int = 128,
        activation: type[nn.Module] = nn.Tanh,
        conv_torso: str = "nature",
    ) -> None:
        super().__init__()
        self.torso = _torso(tuple(observation_space.shape), hidden_sizes, activation, conv_torso)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.action_size = int(action_space.n) if self.discrete else int(action_space.shape[0])
        self.lstm_size = int(lstm_size)
        self.lstm = nn.LSTM(self.torso.output_size + self.action_size + 1, self.lstm_size)
        self.pi_head = action_head(self.lstm_size, action_space)
        self.v_head = nn.Linear(self.lstm_size, 1)
        orthogonal_init_(self.torso, math.sqrt(2.0))
        _init_heads(self.pi_head, self.v_head)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> NamedArrays:
        zeros = torch.zeros(batch_size, self.lstm_size, device=device)
        return NamedArrays(h=zeros, c=zeros.clone())

    def _lstm_input(self, observation, prev_action, prev_reward) -> torch.Tensor:
        features = self.torso(observation)
        if self.discrete:
            action = F.one_hot(prev_action.long(), self.action_size).to(features.dtype)
        else:
            action = prev_action.to(features.dtype)
        return torch.cat([features, action, prev_reward.to(features.dtype).unsqueeze(-1)], dim=-1)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        state: NamedArrays,
        reset: torch.Tensor,
    ) -> tuple[Distribution, torch.Tensor, NamedArrays]:
        T, B = reset.shape
        if tuple(prev_reward.shape) != (T, B) or tuple(observation.shape[:2]) != (T, B):
            raise ValueError(
                f"RecurrentActorCritic: observation {tuple(observation.shape)}, prev_reward "
                f"{tuple(prev_reward.shape)} and reset {tuple(reset.shape)} must share [T, B]"
            )
        x = self._lstm_input(observation, prev_action, prev_reward)
        end_h = x.new_zeros(T, B, self.lstm_size)
        end_c = x.new_zeros(T, B, self.lstm_size)
        if not reset[1:].any():  # one segment per column: the common case
            keep = (~reset[0]).to(x.dtype).unsqueeze(-1)
            out, (h, c) = self.lstm(x, ((state.h * keep)[None], (state.c * keep)[None]))
            end_h[-1], end_c[-1] = h[0], c[0]
        else:
            out, end_h, end_c = self._segments(x, state, reset, end_h, end_c)
        return self.pi_head(out), self.v_head(out).squeeze(-1), NamedArrays(h=end_h, c=end_c)

    def _segments(self, x, state, reset, end_h, end_c):
        """Run every reset-free segment of every column as one packed LSTM batch."""
        T, B = reset.shape
        starts = reset.clone()
        starts[0] = True
        seg_b, seg_t = starts.T.nonzero(as_tuple=True)  # segment starts, column by column: [S] each
        next_start = torch.full_like(seg_t, T)
        same_column = seg_b[1:] == seg_b[:-1]
        next_start[:-1] = torch.where(same_column, seg_t[1:], T)
        lengths = next_start - seg_t
        steps = torch.arange(int(lengths.max()), device=x.device)
        time_index = (seg_t[None] + steps[:, None]).clamp(max=T - 1)  # [L, S]
        padded = x[time_index, seg_b[None].expand_as(time_index)]  # [L, S, F]
        first = seg_t == 0
        keep = (first & ~reset[0, seg_b]).to(x.dtype).unsqueeze(-1)
        h0, c0 = state.h[seg_b] * keep, state.c[seg_b] * keep
        packed = nn.utils.rnn.pack_padded_sequence(padded, lengths.cpu(), enforce_sorted=False)
        out_packed, (h, c) = self.lstm(packed, (h0[None], c0[None]))
        out_padded, _ = nn.utils.rnn.pad_packed_sequence(out_packed, total_length=padded.shape[0])
        valid = steps[:, None] < lengths[None]
        out = x.new_empty(T, B, self.lstm_size)
        out[time_index[valid], seg_b[None].expand_as(time_index)[valid]] = out_padded[valid]
        end_t = next_start - 1
        end_h[end_t, seg_b], end_c[end_t, seg_b] = h[0], c[0]
        return out, end_h, end_c

    def value(self, observation, prev_action, prev_reward, state: NamedArrays) -> torch.Tensor:
        """V of one step [B] from ``state`` [B, H] (no reset): bootstrap values."""
        x = self._lstm_input(observation, prev_action, prev_reward)
        out, _ = self.lstm(x[None], (state.h[None], state.c[None]))
        return self.v_head(out[0]).squeeze(-1)


# --- off-policy continuous control ----------------------------------------------------------------


def _mlp(input_size: int, hidden_sizes: tuple[int, ...], output_size: int) -> Layers:
    torso = MlpTorso(input_size, tuple(hidden_sizes), nn.ReLU)
    return Layers(torso, nn.Linear(torso.output_size, output_size))


class ValueNetwork(nn.Module):
    """V(s): ReLU MLP ``[..., D] -> [...]``."""

    def __init__(self, observation_dim: int, hidden_sizes: tuple[int, ...] = (256, 256)) -> None:
        super().__init__()
        self.net = _mlp(observation_dim, hidden_sizes, 1)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation).squeeze(-1)


class StateActionQNetwork(nn.Module):
    """Q(s, a): ReLU MLP on ``[observation, action]`` -> ``[...]``."""

    def __init__(
        self, observation_dim: int, action_dim: int, hidden_sizes: tuple[int, ...] = (256, 256)
    ) -> None:
        super().__init__()
        self.net = _mlp(observation_dim + action_dim, hidden_sizes, 1)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observation.to(action.dtype), action], dim=-1)).squeeze(-1)


class DeterministicPolicy(nn.Module):
    """mu(s) = center + scale * tanh(MLP(s)): the DDPG/TD3 actor (Lillicrap et al. 2016, Sec. 7;
    Fujimoto et al. 2018, Sec. 6.1: 400-300 ReLU units, tanh output scaled to the action range)."""

    def __init__(self, observation_dim: int, action_space: gym.spaces.Box, hidden_sizes=(400, 300)) -> None:
        super().__init__()
        low, high = _box_bounds(action_space)
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("scale", (high - low) / 2)
        self.net = _mlp(observation_dim, tuple(hidden_sizes), int(action_space.shape[0]))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.center + self.scale * torch.tanh(self.net(observation.to(torch.float32)))


class TanhGaussianPolicy(nn.Module):
    """SAC's squashed Gaussian policy (Haarnoja et al. 2018, Appendix C):
    ``a = center + scale * tanh(u)``, ``u ~ N(mean(s), std(s)^2)`` with mean and log-std from one
    ReLU MLP, log-std clamped to [-20, 2].

    ``forward(observation, deterministic=False, noise=None, with_log_prob=True) -> (action, log_prob)``:
    a reparameterised sample ``u = mean + std * noise`` (or ``center + scale * tanh(mean)`` when
    deterministic) and its log-density [...]. ``noise`` [..., A] is standard normal, a fresh
    ``randn`` when not given; the acting agent passes each env's own draws. ``with_log_prob=False``
    returns ``(action, None)``: acting discards the log-density, which costs about as much as the
    network's three layers (docs/results/core_measurements.md, models/policies.py).
    """

    def __init__(self, observation_dim: int, action_space: gym.spaces.Box, hidden_sizes=(256, 256)) -> None:
        super().__init__()
        low, high = _box_bounds(action_space)
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("scale", (high - low) / 2)
        self.action_dim = int(action_space.shape[0])
        self.net = _mlp(observation_dim, tuple(hidden_sizes), 2 * self.action_dim)

    def forward(
        self,
        observation: torch.Tensor,
        deterministic: bool = False,
        noise: torch.Tensor | None = None,
        with_log_prob: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mean, log_std = self.net(observation.to(torch.float32)).chunk(2, dim=-1)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        if deterministic:
            pre_tanh = mean
        else:
            noise = torch.randn_like(mean) if noise is None else noise
            if noise.shape != mean.shape:
                shapes = f"noise {tuple(noise.shape)} != mean {tuple(mean.shape)}"
                raise ValueError(f"TanhGaussianPolicy: {shapes}")
            pre_tanh = mean + log_std.exp() * noise
        if not with_log_prob:
            return self.squash(pre_tanh), None
        # The log-density before the action: autograd sums the gradients reaching ``pre_tanh`` in
        # reverse order of creation, so this order keeps the updates bit-identical to earlier runs.
        log_prob = tanh_gaussian_log_prob(pre_tanh, mean, log_std, self.scale)
        return self.squash(pre_tanh), log_prob

    def squash(self, pre_tanh: torch.Tensor) -> torch.Tensor:
        """``center + scale * tanh(u)``: the action box's point for a pre-tanh sample [..., A]."""
        return self.center + self.scale * torch.tanh(pre_tanh)
