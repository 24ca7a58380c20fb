"""MinAtar (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for Thorough and Reproducible
Reinforcement Learning Experiments", arXiv:1903.03176) behind the gymnasium API and Contract 1.

The games come from the ``minatar`` package (GPL-3.0), used as a dependency and pinned in
``constraints.txt``; nothing of it is copied here. Each game is a 10x10 grid with one boolean
channel per kind of object, stepped in pure Python in microseconds, so a whole Atari-style study
fits a CPU.

Published settings, the defaults of ``MinAtarEnv``:

* all 6 actions (Young & Tian 2019, Sec. 3: "the action space is the same for all games";
  Dopamine's MinAtar agents, Obando-Ceron & Castro 2021, use them too); ``full_action_space=False``
  keeps the game's minimal set (``Environment.minimal_action_set``, MinAtar's ``-v1`` gym ids);
* sticky actions with probability 0.1 (Young & Tian 2019, Sec. 3; the package's default), drawn
  from the same seeded stream as the game's own randomness;
* difficulty ramping on (the package's default, as in the paper's experiments);
* no episode cap in training (the paper has none); ``max_episode_steps`` adds a time limit reported
  as ``truncated``. Evaluation caps episodes with ``SamplerConfig.eval_max_steps``.

Observations are channels first, ``[C, 10, 10]`` booleans (MinAtar's ``state()`` is ``[10, 10, C]``).
A frame is an env step: MinAtar has no frame skip, and Young & Tian's "frames" are env steps.

Seeding: ``reset(seed=s)`` seeds one ``numpy.random.RandomState`` that MinAtar's ``Environment.seed``
shares between its sticky-action draws and the game, then resets the game, so an episode is a
function of the seed and the actions. Later resets continue that stream.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# EnvConfig.id of each game -> the minatar package's game name.
MINATAR_GAMES: dict[str, str] = {
    "minatar_asterix": "asterix",
    "minatar_breakout": "breakout",
    "minatar_freeway": "freeway",
    "minatar_seaquest": "seaquest",
    "minatar_space_invaders": "space_invaders",
}
N_ACTIONS = 6  # every MinAtar game: no-op, left, up, right, down, fire
GYM_NAMESPACE = "rlrepro"


class MinAtarEnv(gym.Env):
    """One MinAtar game, channels first, with Contract 1's terminated / truncated split."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        game: str,
        sticky_action_prob: float = 0.1,
        full_action_space: bool = True,
        difficulty_ramping: bool = True,
        max_episode_steps: int | None = None,
    ) -> None:
        from minatar import Environment

        if game not in MINATAR_GAMES.values():
            raise ValueError(f"MinAtarEnv: unknown game {game!r}; one of {sorted(MINATAR_GAMES.values())}")
        self._game = Environment(
            game, sticky_action_prob=sticky_action_prob, difficulty_ramping=difficulty_ramping
        )
        self.game = game
        self._actions = list(range(N_ACTIONS)) if full_action_space else list(self._game.minimal_action_set())
        self._max_steps = max_episode_steps
        self._steps = 0
        h, w, c = self._game.state_shape()
        self.observation_space = gym.spaces.Box(0, 1, shape=(c, h, w), dtype=bool)
        self.action_space = gym.spaces.Discrete(len(self._actions))

    def _observation(self) -> np.ndarray:
        return np.ascontiguousarray(self._game.state().transpose(2, 0, 1))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._game.seed(int(seed))
        self._game.reset()
        self._steps = 0
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward, terminated = self._game.act(self._actions[int(action)])
        self._steps += 1
        truncated = not terminated and self._max_steps is not None and self._steps >= self._max_steps
        return self._observation(), float(reward), bool(terminated), bool(truncated), {}


def gym_id(env_id: str) -> str:
    """The gymnasium id ``register_envs`` gives the game ``env_id`` (``rlrepro/minatar_breakout-v0``)."""
    return f"{GYM_NAMESPACE}/{env_id}-v0"


def register_envs() -> None:
    """Register every game with gymnasium as ``rlrepro/minatar_<game>-v0`` (published defaults; the
    keyword arguments of ``MinAtarEnv`` pass through ``gym.make``). Explicit, because gymnasium 1.x no
    longer loads plugins' entry points; registering twice is harmless."""
    for env_id, game in MINATAR_GAMES.items():
        if gym_id(env_id) not in gym.envs.registry:
            gym.register(gym_id(env_id), entry_point=MinAtarEnv, kwargs={"game": game})
