"""Probe data for the DQN-family tests: a two-step chain with known Q-values, as Contract 3 batches;
and a replay learner's loss on a batch as its single run computes it (``single_loss``)."""

import gymnasium as gym
import numpy as np
import torch

from algorithms.arrays import NamedArrays

OBS = gym.spaces.Box(0, 1, (2,), np.float32)
ACT = gym.spaces.Discrete(2)
A_STATE, B_STATE = [1.0, 0.0], [0.0, 1.0]


def chain_samples(T: int, B: int, rng: np.random.Generator) -> NamedArrays:
    """A two-step probe: state A -> (any action, reward 0) -> state B -> (action 1: reward 1, action 0:
    reward 0) -> terminal. Q*(B, 1) = 1, Q*(B, 0) = 0, Q*(A, a) = gamma for both actions."""
    obs = np.zeros((T, B, 2), np.float32)
    action = rng.integers(0, 2, (T, B))
    reward = np.zeros((T, B), np.float32)
    terminated = np.zeros((T, B), bool)
    in_b = (np.arange(T)[:, None] + np.arange(B)[None]) % 2 == 1
    obs[~in_b] = A_STATE
    obs[in_b] = B_STATE
    reward[in_b] = (action[in_b] == 1).astype(np.float32)
    terminated[in_b] = True
    zeros = torch.zeros(T, B)
    return NamedArrays(
        observation=torch.from_numpy(obs),
        action=torch.from_numpy(action),
        reward=torch.from_numpy(reward),
        terminated=torch.from_numpy(terminated),
        truncated=torch.zeros(T, B, dtype=torch.bool),
        final_observation=torch.from_numpy(obs),
        prev_action=torch.zeros(T, B, dtype=torch.long),
        prev_reward=zeros,
        agent_info=NamedArrays(q=torch.zeros(T, B, 2)),
        bootstrap=NamedArrays(
            observation=torch.from_numpy(obs[0]), prev_action=torch.zeros(B, dtype=torch.long)
        ),
    )


def single_loss(algo, batch: NamedArrays, measure: bool = True):
    """``algo``'s loss on ``batch`` with the mode a single run's gradient step gives it."""
    mode = algo.loss_mode(algo.config, batch, measure=measure, traced=False)
    return algo.loss_fn(algo.config, algo.model, algo.target_model, batch, mode)
