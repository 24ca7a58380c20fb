"""A minimal replay-based algorithm for the asynchronous-runner tests: not for learning anything.

It follows Contract 4 and its async extension: ``append_samples`` stores each step's (observation,
action, reward) in a ring, ``learn(n)`` runs ``n`` Adam steps regressing a linear Q(s, a) on
the reward of ``batch_size`` replayed steps (once ``learning_starts_steps`` steps are stored), and
``optimize`` is both for the synchronous runner. Each update reports ``burnin_steps`` extra
replayed steps per sample, as a recurrent algorithm's burn-in would, so both replay-ratio
countings differ and can each be targeted.

Tests register it as ``"probe_replay"`` with ``monkeypatch`` (the registry stays as shipped for
every other test); the runner's ``spawn``-ed sampler process registers it when it unpickles the
agent factory's ``Config`` (``Config.__reduce__``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from algorithms import registry
from algorithms.agents.base import Agent
from algorithms.arrays import NamedArrays
from algorithms.learners.common import OptInfo


def _unpickle_config(cls: type, fields: dict) -> Config:
    """Rebuild a probe config in another process, registering its algorithm there."""
    registry.ALGORITHMS.setdefault(cls.registry_name, cls.__module__)
    return cls(**fields)


@dataclass(frozen=True)
class Config:
    registry_name: ClassVar[str] = "probe_replay"
    learning_rate: float = 0.01
    batch_size: int = 16
    learning_starts_steps: int = 64
    capacity_steps: int = 4096
    burnin_steps: int = 1  # extra replayed (not trained) steps per sample
    updates_per_batch: int = 1  # synchronous optimize only

    def __reduce__(self) -> tuple:
        return _unpickle_config, (type(self), dataclasses.asdict(self))


class ProbeQAgent(Agent):
    """Greedy on a linear Q, with uniformly random actions 20% of the time in sample mode."""

    def __init__(self, observation_space, action_space) -> None:
        super().__init__(
            nn.Linear(int(observation_space.shape[0]), int(action_space.n)), observation_space, action_space
        )

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        q = self.model(observation.to(torch.float32))
        action = q.argmax(dim=-1)
        if self.mode == "sample":
            explore = torch.rand(len(action)) < 0.2
            action = torch.where(explore, torch.randint(0, q.shape[-1], action.shape), action)
        return action, NamedArrays(q=q), None


def build_agent(config: Config, observation_space, action_space) -> ProbeQAgent:
    return ProbeQAgent(observation_space, action_space)


class Algo:
    diagnostic_keys = ("loss",)  # the progress columns, fixed before the first call (Contract 4)

    def __init__(self, config: Config, agent: ProbeQAgent, counters_frameskip: int, batch_spec) -> None:
        self.config = config
        self.agent = agent
        self.optimizer = torch.optim.Adam(agent.model.parameters(), lr=config.learning_rate)
        obs_dim = int(agent.observation_space.shape[0])
        self.observation = np.zeros((config.capacity_steps, obs_dim), np.float32)
        self.action = np.zeros(config.capacity_steps, np.int64)
        self.reward = np.zeros(config.capacity_steps, np.float32)
        self.env_steps = 0
        self.rng = np.random.default_rng(0)

    def append_samples(self, samples: NamedArrays) -> None:
        n = samples.reward.numel()
        idx = (self.env_steps + np.arange(n)) % self.config.capacity_steps
        self.observation[idx] = samples.observation.reshape(n, -1).numpy()
        self.action[idx] = samples.action.reshape(n).numpy()
        self.reward[idx] = samples.reward.reshape(n).numpy()
        self.env_steps += n

    @property
    def warm(self) -> bool:
        return self.env_steps >= self.config.learning_starts_steps

    def learn(self, n_updates: int) -> OptInfo:
        if not self.warm:
            return OptInfo(diagnostics=dict.fromkeys(self.diagnostic_keys, float("nan")))
        stored = min(self.env_steps, self.config.capacity_steps)
        losses = []
        for _ in range(n_updates):
            idx = self.rng.integers(0, stored, self.config.batch_size)
            q = self.agent.model(torch.from_numpy(self.observation[idx]))
            q_a = q.gather(1, torch.from_numpy(self.action[idx])[:, None]).squeeze(1)
            loss = ((q_a - torch.from_numpy(self.reward[idx])) ** 2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        trained = n_updates * self.config.batch_size
        return OptInfo(
            updates=n_updates,
            samples_trained=trained,
            samples_replayed=trained * (1 + self.config.burnin_steps),
            diagnostics={"loss": float(np.mean(losses))},
        )

    def optimize(self, env_steps: int, samples: NamedArrays) -> OptInfo:
        self.append_samples(samples)
        return self.learn(self.config.updates_per_batch)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "env_steps": self.env_steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.env_steps = int(state["env_steps"])
