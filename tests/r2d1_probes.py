"""A memory probe for R2D1 tests, driven without a sampler, producing Contract 3 batches.

Episodes last ``length`` steps. The first observation shows a cue (+1 or -1) and a start flag;
later observations are blank. The last step pays 1 if the action names the cue (1 for +1, 0 for
-1) and terminates. Only an agent that remembers the cue can be right more than half the time.
"""

import gymnasium as gym
import numpy as np
import torch

from algorithms.arrays import NamedArrays

OBS = gym.spaces.Box(-1, 1, (2,), np.float32)
ACT = gym.spaces.Discrete(2)


class MemoryProbe:
    def __init__(self, num_envs: int, length: int, seed: int) -> None:
        self.B, self.length = num_envs, length
        self.rng = np.random.default_rng(seed)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.cue = self.rng.choice([-1.0, 1.0], num_envs)

    def observation(self) -> np.ndarray:
        obs = np.zeros((self.B, 2), np.float32)
        first = self.t == 0
        obs[first, 0] = self.cue[first]
        obs[first, 1] = 1.0
        return obs

    def step(self, action: np.ndarray):
        last = self.t == self.length - 1
        reward = np.where(last, (action == (self.cue > 0)).astype(np.float32), 0.0).astype(np.float32)
        final = self.observation()
        self.t = np.where(last, 0, self.t + 1)
        self.cue = np.where(last, self.rng.choice([-1.0, 1.0], self.B), self.cue)
        return reward, last, final


class Driver:
    """Steps an agent on ``MemoryProbe`` envs and returns [T, B] batches (Contract 3 fields)."""

    def __init__(self, agent, num_envs: int, length: int = 4, seed: int = 0) -> None:
        self.agent, self.env = agent, MemoryProbe(num_envs, length, seed)
        B = num_envs
        self.obs = torch.from_numpy(self.env.observation())
        self.prev_action = torch.zeros(B, dtype=torch.long)
        self.prev_reward = torch.zeros(B)
        self.state = agent.initial_state(B)

    def sample(self, T: int) -> NamedArrays:
        rows = []
        for _ in range(T):
            action, info, next_state = self.agent.step(
                self.obs, self.prev_action, self.prev_reward, self.state
            )
            reward, done, final = self.env.step(action.numpy())
            done_t = torch.from_numpy(done)
            rows.append(
                NamedArrays(
                    observation=self.obs,
                    action=action,
                    reward=torch.from_numpy(reward),
                    terminated=done_t,
                    truncated=torch.zeros_like(done_t),
                    final_observation=torch.from_numpy(final),
                    prev_action=self.prev_action,
                    prev_reward=self.prev_reward,
                    agent_info=info,
                )
            )
            self.obs = torch.from_numpy(self.env.observation())
            self.prev_action = torch.where(done_t, 0, action)
            self.prev_reward = torch.where(done_t, 0.0, torch.from_numpy(reward))
            self.state = self.agent.reset_state(next_state, done_t)
        batch = NamedArrays({k: _stack([r[k] for r in rows]) for k in rows[0].fields})
        return batch.replace(
            bootstrap=NamedArrays(
                observation=self.obs,
                prev_action=self.prev_action,
                prev_reward=self.prev_reward,
                agent_state=self.state,
            )
        )


def _stack(items):
    if isinstance(items[0], NamedArrays):
        return NamedArrays({k: _stack([it[k] for it in items]) for k in items[0].fields})
    return torch.stack(items)
