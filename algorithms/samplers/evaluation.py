"""Evaluation sampling: whole episodes in the agent's ``eval`` mode on separate environments.

Episodes are collected in rounds: every round resets all ``n_envs`` envs and runs them until each
env that still owes an episode has finished one, or hit the ``max_steps`` cap (then its return so
far is recorded, as Machado et al. 2018, Sec. 5 cap evaluation episodes). Env i owes
``n_episodes // n_envs`` episodes, plus one if ``i < n_episodes % n_envs``. Rounds keep the
estimate unbiased: taking the first n episodes to finish across parallel envs would over-sample
short episodes.

The agent is shared with training: ``evaluate`` switches it to ``eval`` mode and to the eval envs'
ranks and random streams (separate from training's, so evaluating never shifts a training draw),
and restores its mode, step count, ranks and streams afterwards. Its recurrent state and previous
action/reward are kept here, per round, through the same ``EnvStepper`` the samplers use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from algorithms.samplers.stepper import EnvStepper, record_example

if TYPE_CHECKING:
    from collections.abc import Callable

    import gymnasium as gym

    from algorithms.agents.base import Agent, RankStreams
    from algorithms.envs.config import EnvConfig


class EvalSampler:
    """Runs eval-mode episodes of ``agent`` on ``n_envs`` envs seeded with ``seed``; the agent draws
    from ``streams`` (the global torch RNG when None); ``wrap``, as ``make_vec_env`` takes it."""

    def __init__(
        self,
        env_config: EnvConfig,
        agent: Agent,
        n_envs: int,
        seed: int,
        max_steps: int,
        streams: RankStreams | None = None,
        wrap: Callable[[gym.Env], gym.Env] | None = None,
    ) -> None:
        from algorithms.envs.factory import make_vec_env

        if n_envs < 1:
            raise ValueError(f"EvalSampler: n_envs must be >= 1, got {n_envs}")
        if max_steps < 1:
            raise ValueError(f"EvalSampler: max_steps must be >= 1, got {max_steps}")
        self.agent = agent
        self.max_steps = int(max_steps)
        self.streams = streams
        self.env = make_vec_env(env_config, n_envs, seed, wrap=wrap)
        self._stepper = EnvStepper(self.env, agent, np.arange(n_envs))
        self._action_example = record_example(self.env.observation_space, self.env.action_space, agent).action

    def evaluate(self, n_episodes: int, env_steps: int) -> list[dict[str, Any]]:
        """``n_episodes`` episodes as dicts ``episode`` (0-based), ``return`` (raw), ``length``.

        ``env_steps`` is the training step count the agent is evaluated at (for schedules).
        """
        if n_episodes < 0:
            raise ValueError(f"EvalSampler.evaluate: n_episodes must be >= 0, got {n_episodes}")
        n_envs = self.env.num_envs
        owed = np.full(n_envs, n_episodes // n_envs) + (np.arange(n_envs) < n_episodes % n_envs)
        agent = self.agent
        saved = (agent.mode, agent.env_steps, agent.env_ranks, agent.global_batch, agent.streams)
        agent.set_env_ranks(np.arange(n_envs), n_envs, self.streams)
        agent.set_mode("eval", env_steps)
        episodes: list[dict[str, Any]] = []
        try:
            while owed.any():
                for env_index, ret, length in self._round(owed > 0):
                    episodes.append({"episode": len(episodes), "return": ret, "length": length})
                    owed[env_index] -= 1
        finally:
            mode, steps, ranks, global_batch, streams = saved
            agent.set_mode(mode, steps)
            agent.set_env_ranks(ranks, global_batch, streams)
        return episodes

    @torch.no_grad()
    def _round(self, active: np.ndarray) -> list[tuple[int, float, int]]:
        """One episode on each ``active`` env: (env index, raw return, length) in finishing order."""
        self._stepper.reset(self._action_example)
        raw_return = np.zeros(len(active))
        results = []
        waiting = active.copy()
        for _ in range(self.max_steps):
            record, _ = self._stepper.step()
            raw_return += np.asarray(record.env_info.raw_reward)
            # A game's end is where the env reports its length (life losses under episodic life are not).
            ended = waiting & (np.asarray(record.env_info.episode_length) > 0)
            for i in np.flatnonzero(ended):
                info = record.env_info
                results.append((int(i), float(info.episode_return[i]), int(info.episode_length[i])))
            waiting &= ~ended
            if not waiting.any():
                return results
        # Cap reached: record the episodes still running with the return they have so far.
        results.extend((int(i), float(raw_return[i]), self.max_steps) for i in np.flatnonzero(waiting))
        return results

    def state_dict(self) -> dict[str, Any] | None:
        """The eval envs' state and streams' positions between evaluations (each round resets the
        envs, continuing their random streams); None where the envs cannot save theirs."""
        env = self.env.state_dict()
        if env is None:
            return None
        return {"env": env, "streams": None if self.streams is None else self.streams.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state["env"])
        if state["streams"] is not None:
            self.streams.load_state_dict(state["streams"])

    def close(self) -> None:
        self.env.close()
