"""A minimal algorithm module (Contract 4) for the training-loop tests: not for learning anything.

``ProbeAgent`` is a linear softmax policy over discrete actions. With ``recurrent=True`` it carries a
state ``count`` [B] that grows by one per step (reset by the sampler at episode ends through
``Agent.reset_state``) and reports the count *before* the step as ``agent_info.prev_state``, so a
test can read the number of steps since the episode started off every sample. ``Algo`` takes one
Adam step per batch on a policy-gradient surrogate ``-mean(log pi(a|s) * r)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from algorithms.agents.base import Agent
from algorithms.arrays import NamedArrays
from algorithms.learners.common import OptInfo


@dataclass(frozen=True)
class Config:
    learning_rate: float = 0.01
    recurrent: bool = False


class ProbeAgent(Agent):
    def __init__(self, observation_space, action_space, recurrent: bool) -> None:
        model = nn.Linear(int(observation_space.shape[0]), int(action_space.n))
        super().__init__(model, observation_space, action_space)
        self.recurrent = recurrent

    def initial_state(self, batch_size: int) -> NamedArrays | None:
        if not self.recurrent:
            return None
        return NamedArrays(count=torch.zeros(batch_size, device=self.device))

    def logits(self, observation: torch.Tensor) -> torch.Tensor:
        return self.model(observation.to(torch.float32))

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward, state):
        logits = self.logits(observation)
        if self.mode == "eval":
            action = logits.argmax(dim=-1)
        else:
            action = torch.distributions.Categorical(logits=logits).sample()
        info = NamedArrays(logits=logits)
        if not self.recurrent:
            return action, info, None
        return action, info.replace(prev_state=state), NamedArrays(count=state.count + 1)


def build_agent(config: Config, observation_space, action_space) -> ProbeAgent:
    return ProbeAgent(observation_space, action_space, config.recurrent)


class Algo:
    def __init__(self, config: Config, agent: ProbeAgent, counters_frameskip: int, batch_spec) -> None:
        self.agent = agent
        self.optimizer = torch.optim.Adam(agent.model.parameters(), lr=config.learning_rate)

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        device = self.agent.device
        logits = self.agent.logits(samples.observation.to(device))
        log_prob = torch.distributions.Categorical(logits=logits).log_prob(samples.action.to(device))
        loss = -(log_prob * samples.reward.to(device)).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        n = samples.reward.numel()
        return OptInfo(updates=1, samples_trained=n, samples_replayed=n, diagnostics={"loss": loss.item()})

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
