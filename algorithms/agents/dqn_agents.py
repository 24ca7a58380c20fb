"""Epsilon-greedy agents for the DQN family and R2D1.

``EpsilonGreedyAgent`` acts greedily on a feed-forward Q-network's values (the expected value of the
return distribution for C51 and Rainbow) except with probability epsilon, where it takes a uniform
random action; epsilons are per environment (``epsilon.py``). ``R2D1Agent`` does the same with the
recurrent model and carries its (h, c) state; it reports the state *before* each step as
``agent_info.prev_state`` so sequence replay can store it (stored-state replay, Kapturowski et al.
2019, Sec. 3), and the Q-values it acted on (``agent_info.q``): R2D1 computes the initial
priorities of new sequences from them (R2D2, Sec. 2.3: actors compute priorities from their own
Q-values). The feed-forward agent reports nothing (no feed-forward algorithm reads its Q-values)
and skips the network where every env explores: a one-env actor early in Nature DQN's schedule
(epsilon 1 -> 0.1 over 250k steps) needs no forward pass on most steps. Reporting Q-values would
make the samples depend on which steps skipped the net, i.e. on how a sampling mode splits the
envs; without them every mode records the same.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from algorithms.agents.base import Agent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.arrays import NamedArrays
from algorithms.models.heads import expected_q
from algorithms.models.r2d1_model import R2D1Model


class EpsilonGreedyAgent(Agent):
    """Epsilon-greedy over ``model(observation)``: Q-values ``[B, A]``, or logits ``[B, A, N]`` when
    ``support`` (the ``[N]`` atom values) is given."""

    def __init__(
        self,
        model: nn.Module,
        observation_space: gym.Space,
        action_space: gym.Space,
        epsilon: EpsilonSchedule,
        support: torch.Tensor | None = None,
    ) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"{type(self).__name__} needs a Discrete action space, got {action_space}")
        super().__init__(model, observation_space, action_space)
        self.epsilon = epsilon
        self._epsilons_key: tuple | None = None
        self._epsilons = np.zeros(0, dtype=np.float32)
        self._final_epsilons = np.zeros(0)
        self.n_actions = int(action_space.n)
        self.support = support

    def epsilons(self, batch_size: int) -> np.ndarray:
        """The epsilon of each of the ``batch_size`` envs in the current mode (0 in ``train``), float32
        (what the exploration coins are compared with)."""
        if self.mode == "eval":
            return np.full(batch_size, self.epsilon.eval, dtype=np.float32)
        if self.mode == "train":
            return np.zeros(batch_size, dtype=np.float32)
        if len(self.env_ranks) == batch_size:
            ranks, n_envs = self.env_ranks, max(self.global_batch, batch_size)
        else:  # set_env_ranks was not called: this copy acts for all envs
            ranks, n_envs = np.arange(batch_size), batch_size
        # Computed again only when they can change: per step while annealing, else once per rank set;
        # the values annealed to, once per rank set.
        annealing = self.env_steps < self.epsilon.decay_steps
        ranks_key = (ranks.tobytes(), n_envs)
        key = (ranks_key, self.env_steps if annealing else -1)
        if key != self._epsilons_key:
            if self._epsilons_key is None or self._epsilons_key[0] != ranks_key:
                self._final_epsilons = self.epsilon.final_epsilons(ranks, n_envs)
            self._epsilons_key = key
            self._epsilons = self.epsilon.sample_epsilons(
                self.env_steps, ranks, n_envs, self._final_epsilons
            ).astype(np.float32)
        return self._epsilons

    def to_q(self, model_output: torch.Tensor) -> torch.Tensor:
        """Q-values from the model's output (the distribution's mean for categorical models)."""
        if self.support is None:
            return model_output
        return expected_q(model_output, self.support.to(model_output.device))

    def exploration(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(explore [B] bool, random actions [B]) for this step, with each env's epsilon.

        Each env draws two uniforms per step from its own stream (``Agent.uniform``): the explore
        coin and the random action, ``floor(u * A)``; greedy or not, the draws are the same.
        """
        eps = self.epsilons(batch_size)
        coin, pick = self.uniform(batch_size, 2, device="cpu").numpy().T
        # float32 u * A can round up to A for u just below 1: clamp into range. In numpy: torch ops
        # on tiny arrays cost more (docs/results/core_measurements.md, agents/dqn_agents.py).
        random_actions = np.minimum((pick * self.n_actions).astype(np.int64), self.n_actions - 1)
        return coin < eps, random_actions

    def select_action(
        self, q: torch.Tensor, exploration: tuple[np.ndarray, np.ndarray] | None = None
    ) -> torch.Tensor:
        """Greedy ``argmax q`` [B], replaced by a uniform random action with each env's epsilon
        (``exploration``: this step's draws, if already taken)."""
        explore, random_actions = self.exploration(q.shape[0]) if exploration is None else exploration
        return torch.from_numpy(np.where(explore, random_actions, q.argmax(dim=-1).cpu().numpy()))

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        exploration = self.exploration(observation.shape[0])
        explore, random_actions = exploration
        if explore.all():  # no env acts greedily: the Q-values would go unused
            return torch.from_numpy(random_actions), NamedArrays(), None
        q = self.to_q(self.model(observation.to(self.device)))
        return self.select_action(q, exploration), NamedArrays(), None


class R2D1Agent(EpsilonGreedyAgent):
    """Epsilon-greedy over the recurrent R2D1 model; the state is ``NamedArrays(h, c)`` of ``[B, H]``."""

    recurrent = True

    def __init__(
        self,
        model: R2D1Model,
        observation_space: gym.Space,
        action_space: gym.Space,
        epsilon: EpsilonSchedule,
    ) -> None:
        super().__init__(model, observation_space, action_space, epsilon)

    def initial_state(self, batch_size: int) -> NamedArrays:
        return self.model.initial_state(batch_size)

    @torch.no_grad()
    def q_values(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        state: NamedArrays | None,
    ) -> tuple[torch.Tensor, NamedArrays]:
        """Q-values [B, A] (on CPU) and the next state for one step, as ``step`` computes them."""
        if state is None:
            state = self.initial_state(observation.shape[0])
        with torch.inference_mode():
            q, h, c = self.model.act(
                observation,
                prev_action,
                prev_reward,
                state["h"].to(observation.device),
                state["c"].to(observation.device),
            )
        return q.cpu(), NamedArrays(h=h.cpu(), c=c.cpu())

    def step(self, observation, prev_action, prev_reward, state):
        """Acting: ``R2D1Model.act`` under ``torch.inference_mode``; the state is kept on the CPU."""
        if state is None:
            state = self.initial_state(observation.shape[0])
        q, next_state = self.q_values(observation, prev_action, prev_reward, state)
        return self.select_action(q), NamedArrays(q=q, prev_state=state), next_state
