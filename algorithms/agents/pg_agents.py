"""Agents for on-policy policy gradients (A2C, PPO): feed-forward and recurrent actor-critics.

Both sample from the policy in ``sample`` mode and take its most likely action (argmax, or the
Gaussian mean) in ``eval`` mode, and report ``agent_info`` with the ``value`` and the ``log_prob``
of the action at sampling time, which PPO's ratio and value clipping need. Continuous actions are
sampled from an unbounded Gaussian and clipped to the action box before the environment sees them
(as Stable-Baselines3 and OpenAI Baselines do); the unclipped sample is kept as
``agent_info.pre_clip_action`` because the log-probability belongs to it. The recurrent agent also
reports ``agent_info.prev_state``, the LSTM state before each step (Contract 3). Samples use the
per-env random streams of ``Agent.uniform`` / ``Agent.normal``: a categorical action by inverse CDF
of one uniform, a Gaussian one as ``mean + std * z`` with one standard normal per action dimension.

Algorithms use three methods on a batch ``NamedArrays`` in Contract 3's layout:

* ``evaluate(batch) -> (log_prob, entropy, value)`` under the current parameters, with gradients:
  ``evaluate_actions(self.model, batch, recurrent)``, the function the losses call with the model
  they are given. Leading dims are ``[N]`` rows for the feed-forward agent and ``[T, b]`` whole env
  columns for the recurrent one, whose state starts from ``prev_state[0]`` and is reset after every
  episode end.
* ``next_values(samples) -> [T, B]``: V of the state each step led to, for GAE: ``value[t + 1]``,
  V(bootstrap) after the batch, V(final_observation) where truncated (Pardo et al. 2018), and
  anything where terminated (masked by the return computation).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from algorithms.agents.base import Agent
from algorithms.arrays import NamedArrays
from algorithms.functional.advantages import next_state_values
from algorithms.models.policies import ActorCritic, RecurrentActorCritic


def categorical_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The action ``a`` with ``cdf(a - 1) <= u < cdf(a)`` for probabilities ``probs`` [..., A] and
    uniforms ``u`` [...] on [0, 1): a sample of ``Categorical(probs)`` (inverse transform sampling,
    Devroye 1986, "Non-Uniform Random Variate Generation", Sec. III.2.1). Returns int64 [...]."""
    if probs.shape[:-1] != u.shape:
        raise ValueError(f"categorical_inverse_cdf: probs {tuple(probs.shape)} vs u {tuple(u.shape)}")
    cdf = probs.cumsum(dim=-1)
    action = torch.searchsorted(cdf, u.unsqueeze(-1).to(cdf.dtype), right=True).squeeze(-1)
    # The float cdf may end just below 1: a u above it takes the last action.
    return action.clamp_(max=probs.shape[-1] - 1)


def policy_action(batch: NamedArrays) -> torch.Tensor:
    """The action whose log-probability the agent reported: unclipped for Gaussian policies."""
    if "pre_clip_action" in batch.agent_info:
        return batch.agent_info.pre_clip_action
    return batch.action


def recurrent_outputs(model: Any, batch: NamedArrays) -> tuple[Any, torch.Tensor, Any]:
    """A recurrent actor-critic ``model`` over a [T, b] batch from its stored initial state, reset
    after episode ends: (policy distribution, value, end states)."""
    done = batch.terminated | batch.truncated
    reset = torch.cat([torch.zeros_like(done[:1]), done[:-1]], dim=0)
    return model(
        batch.observation, batch.prev_action, batch.prev_reward, batch.agent_info.prev_state[0], reset
    )


def evaluate_actions(
    model: Any, batch: NamedArrays, recurrent: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log pi(a|s), entropy, V(s)) of the actions of ``batch`` under ``model`` (an ``ActorCritic``, or
    with ``recurrent`` a ``RecurrentActorCritic`` run over whole env columns), with gradients."""
    if recurrent:
        dist, value, _ = recurrent_outputs(model, batch)
    else:
        dist, value = model(batch.observation)
    return dist.log_prob(policy_action(batch)), dist.entropy(), value


class _PgAgentBase(Agent):
    def __init__(
        self, model: ActorCritic | RecurrentActorCritic, observation_space: gym.Space, action_space: gym.Space
    ) -> None:
        super().__init__(model, observation_space, action_space)
        self.continuous = isinstance(action_space, gym.spaces.Box)
        if self.continuous:
            self._low = torch.as_tensor(action_space.low, dtype=torch.float32)
            self._high = torch.as_tensor(action_space.high, dtype=torch.float32)

    def _sample(self, dist) -> torch.Tensor:
        """One action per env from ``dist`` (batch shape [B] or [1, B]), drawn from the env's stream."""
        n_envs = dist.batch_shape.numel()
        if self.continuous:
            z = self.normal(n_envs, *dist.event_shape).view(*dist.batch_shape, *dist.event_shape)
            return dist.mean + dist.stddev * z
        return categorical_inverse_cdf(dist.probs, self.uniform(n_envs).view(dist.batch_shape))

    def _act(self, dist, value: torch.Tensor) -> tuple[torch.Tensor, NamedArrays]:
        action = dist.mode if self.mode == "eval" else self._sample(dist)
        info = NamedArrays(value=value, log_prob=dist.log_prob(action))
        if self.continuous:
            info = info.replace(pre_clip_action=action)
            low, high = self._low.to(action.device), self._high.to(action.device)
            action = torch.maximum(torch.minimum(action, high), low)
        return action, info

    @torch.no_grad()
    def next_values(self, samples: NamedArrays) -> torch.Tensor:
        """V of the state after each step of a [T, B] batch (``next_state_values``)."""
        value = samples.agent_info.value
        done = samples.terminated | samples.truncated
        final_value = torch.zeros_like(value)
        truncated = samples.truncated & ~samples.terminated
        if truncated.any():  # rare (time limits): evaluate only those rows
            final_value[truncated] = self.final_values(samples, truncated)
        return next_state_values(value, self.bootstrap_values(samples.bootstrap), done, final_value)


class PgAgent(_PgAgentBase):
    """Feed-forward actor-critic agent over an ``ActorCritic`` model (categorical or Gaussian)."""

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        dist, value = self.model(observation)
        action, info = self._act(dist, value)
        return action, info, None

    def evaluate(self, batch: NamedArrays) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return evaluate_actions(self.model, batch, recurrent=False)

    def final_values(self, samples: NamedArrays, truncated: torch.Tensor) -> torch.Tensor:
        """V of the final observations of the ``truncated`` steps."""
        return self.model.value(samples.final_observation[truncated])

    def bootstrap_values(self, bootstrap: NamedArrays) -> torch.Tensor:
        """V of the inputs after the batch [B]."""
        return self.model.value(bootstrap.observation)


class RecurrentPgAgent(_PgAgentBase):
    """Recurrent actor-critic agent over a ``RecurrentActorCritic``; state ``NamedArrays(h, c)`` [B, H]."""

    recurrent = True

    def initial_state(self, batch_size: int) -> NamedArrays:
        return self.model.initial_state(batch_size, self.device)

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        if state is None:
            state = self.initial_state(observation.shape[0])
        no_reset = torch.zeros(1, observation.shape[0], dtype=torch.bool, device=observation.device)
        dist, value, end_states = self.model(
            observation[None], prev_action[None], prev_reward[None], state, no_reset
        )
        action, info = self._act(dist, value)
        return action[0], info[0].replace(prev_state=state), end_states[0]

    def evaluate(self, batch: NamedArrays) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return evaluate_actions(self.model, batch, recurrent=True)

    def final_values(self, samples: NamedArrays, truncated: torch.Tensor) -> torch.Tensor:
        # V(final_observation[t]) continues the episode from the state after step t, with step t's
        # action and reward as the previous ones.
        _, _, end_states = recurrent_outputs(self.model, samples)
        return self.model.value(
            samples.final_observation[truncated],
            samples.action[truncated],
            samples.reward[truncated],
            end_states[truncated],
        )

    def bootstrap_values(self, bootstrap: NamedArrays) -> torch.Tensor:
        return self.model.value(
            bootstrap.observation, bootstrap.prev_action, bootstrap.prev_reward, bootstrap.agent_state
        )


def actor_critic_agent(config: Any, observation_space: gym.Space, action_space: gym.Space) -> PgAgent:
    """The actor-critic agent of a policy-gradient config (A2C's and PPO's share the fields read here:
    ``recurrent``, ``hidden_sizes``, ``lstm_size``, ``conv_torso``): recurrent (LSTM) when
    ``config.recurrent``."""
    if config.recurrent:
        model = RecurrentActorCritic(
            observation_space,
            action_space,
            config.hidden_sizes,
            config.lstm_size,
            conv_torso=config.conv_torso,
        )
        return RecurrentPgAgent(model, observation_space, action_space)
    return PgAgent(
        ActorCritic(observation_space, action_space, config.hidden_sizes, conv_torso=config.conv_torso),
        observation_space,
        action_space,
    )
