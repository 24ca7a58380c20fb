"""Agents for Q-value policy gradients on continuous actions: DDPG/TD3 and SAC.

Both act for the first ``random_steps`` env steps of a run with actions drawn uniformly from the
action box ("a purely exploratory policy", Fujimoto et al. 2018, Sec. 6.1), which removes the
dependence of early data on the initial policy. After that:

* ``DeterministicAgent`` (DDPG, TD3): ``mu(s) + N(0, (exploration_std * half-width)^2)``, clipped
  to the box (Fujimoto et al. 2018, Sec. 6.1 and Table 3: Gaussian N(0, 0.1) for actions in
  [-1, 1], instead of DDPG's Ornstein-Uhlenbeck noise); ``mu(s)`` in ``eval`` mode.
* ``SquashedGaussianAgent`` (SAC): a sample of the tanh-Gaussian policy; ``center + scale *
  tanh(mean)`` in ``eval`` mode (Haarnoja et al. 2018, Sec. 6: "we use the mean action").

Uniform actions, Gaussian noise and the policy's sample noise come from each env's own random
stream (``Agent.uniform`` / ``Agent.normal``), so every sampling mode draws the same.

``agent.model`` is the policy only: it is what samplers run and what parameter syncs copy. The
critics and target networks belong to the algorithm.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from algorithms.agents.base import Agent
from algorithms.arrays import NamedArrays


class _BoxAgent(Agent):
    def __init__(
        self, model: nn.Module, observation_space: gym.Space, action_space: gym.Space, random_steps: int
    ):
        if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
            raise ValueError(f"{type(self).__name__} needs a 1-D Box action space, got {action_space}")
        if random_steps < 0:
            raise ValueError(f"random_steps must be >= 0, got {random_steps}")
        super().__init__(model, observation_space, action_space)
        self.random_steps = int(random_steps)
        self.low = torch.as_tensor(action_space.low, dtype=torch.float32)
        self.high = torch.as_tensor(action_space.high, dtype=torch.float32)

    def exploring_uniformly(self) -> bool:
        return self.mode == "sample" and self.env_steps < self.random_steps

    def uniform_actions(self, batch_size: int, device: torch.device) -> torch.Tensor:
        low, high = self.low.to(device), self.high.to(device)
        return low + (high - low) * self.uniform(batch_size, low.shape[0], device=device)


class DeterministicAgent(_BoxAgent):
    """DDPG/TD3 actor ``model(observation) -> action`` with Gaussian exploration noise."""

    def __init__(
        self,
        model: nn.Module,
        observation_space: gym.Space,
        action_space: gym.Space,
        exploration_std: float,
        random_steps: int,
    ) -> None:
        super().__init__(model, observation_space, action_space, random_steps)
        if exploration_std < 0:
            raise ValueError(f"exploration_std must be >= 0, got {exploration_std}")
        self.exploration_std = float(exploration_std)

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        if self.exploring_uniformly():
            return self.uniform_actions(observation.shape[0], observation.device), NamedArrays(), None
        action = self.model(observation)
        if self.mode == "sample":
            low, high = self.low.to(action.device), self.high.to(action.device)
            noise = self.normal(*action.shape, device=action.device) * self.exploration_std * (high - low) / 2
            action = torch.maximum(torch.minimum(action + noise, high), low)
        return action, NamedArrays(), None


class SquashedGaussianAgent(_BoxAgent):
    """SAC actor ``model(observation, deterministic) -> (action, log_prob)``."""

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        if self.exploring_uniformly():
            return self.uniform_actions(observation.shape[0], observation.device), NamedArrays(), None
        # The log-density is not reported (no agent_info): skip computing it.
        if self.mode == "eval":
            action, _ = self.model(observation, deterministic=True, with_log_prob=False)
        else:
            noise = self.normal(observation.shape[0], self.low.shape[0], device=observation.device)
            action, _ = self.model(observation, noise=noise, with_log_prob=False)
        return action, NamedArrays(), None
