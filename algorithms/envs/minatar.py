"""MinAtar (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for Thorough and Reproducible
Reinforcement Learning Experiments", arXiv:1903.03176) behind the gymnasium API and Contract 1.

The games come from the ``minatar`` package (GPL-3.0), used as a dependency and pinned in
``constraints.txt``; nothing of it is copied here. Each game is a 10x10 grid with one boolean
channel per kind of object, stepped in pure Python in microseconds, so a whole Atari-style study
fits a CPU.

Published settings, the defaults of ``MinAtarEnv`` (as the authors' reference agent
``examples/dqn.py`` of kenjyoung/MinAtar runs the games, and as the repository's README says its
results were made):

* all 6 actions (the README: the published results use the full action set; Dopamine's MinAtar
  agents, Obando-Ceron & Castro 2021, do too); ``full_action_space=False`` keeps the game's minimal
  set (``Environment.minimal_action_set``, the package's ``-v1`` gym ids);
* sticky actions with probability 0.1 (``Environment``'s default, which ``examples/dqn.py`` keeps),
  drawn from the same seeded stream as the game's own randomness;
* difficulty ramping on (the package's default, kept by ``examples/dqn.py``);
* no episode cap in training (``examples/dqn.py`` has none; Freeway ends itself after 2,500 steps);
  ``max_episode_steps`` adds a time limit reported as ``truncated``. Evaluation caps episodes with
  ``SamplerConfig.eval_max_steps``.

Observations are channels first, ``[C, 10, 10]`` booleans (MinAtar's ``state()`` is ``[10, 10, C]``).
A frame is an env step: MinAtar has no frame skip, and Young & Tian's "frames" are env steps.

Seeding: ``reset(seed=s)`` seeds one ``numpy.random.RandomState`` shared, as MinAtar's
``Environment.seed`` shares it, between the sticky-action draws and the game, then resets the game,
so an episode is a function of the seed and the actions. Later resets continue that stream.
MinAtar's ``reset`` keeps the last action, so a sticky repeat on an episode's first step repeats
the previous episode's last action (every version since 1.0.1).

What changed between ``minatar`` versions, where it moves results (read from the package's git
history; the pin is 1.0.15, the first released version whose ``Environment.seed`` this module needs
is 1.0.13):

* 1.0.5: ``state()`` returns booleans instead of floats.
* 1.0.6: with ``difficulty_ramping=False`` Asterix and Seaquest still ramped (an operator-precedence
  bug), fixed; the default, ramping on, is unchanged.
* 1.0.7: a Seaquest crash when one bullet hit two submarines, fixed.
* 1.0.8: the seed also drives the sticky actions (one ``RandomState`` shared with the game), so a
  seed gives other episodes than in 1.0.1-1.0.7.
* 1.0.10: gym ids ``MinAtar/<Game>-v0`` (all 6 actions) and ``-v1`` (minimal set), no time limit.
* 1.0.11: Seaquest's oxygen fix: the game ends when oxygen reaches 0, one step earlier than before,
  and the gauge no longer shows full on the last step. The README warns that Seaquest results
  before 1.0.11 (the published curves among them) may not match later versions.
* 1.0.12: the gym 0.26 API (five-tuple ``step``, ``reset(seed)``).
* 1.0.13: seeding reworked: ``Environment.seed(s)`` replaces the ``random_seed`` argument, and the
  games draw with ``rand`` / ``randint`` instead of ``choice``: same distributions, other episodes
  for a given seed than in 1.0.12 and before.
* 1.0.14: gymnasium instead of gym. 1.0.15: the version number only.

Why the games are loaded from their files and wrapped here rather than through ``minatar.Environment``:
importing the ``minatar`` package runs ``minatar/environment.py``, which imports matplotlib and
seaborn (for ``display_state``) inside a bare ``except:``. That import takes ~1.7 s, and a
``KeyboardInterrupt`` raised while it runs (a Ctrl-C, or the SIGINT a job gets when its scheduler
dies) is swallowed there: the job runs on as if never stopped (docs/results/run_integrity.md). The
game modules ``minatar/environments/<game>.py`` import only numpy; ``_game_module`` executes one of
them without the package's ``__init__``, and ``MinAtarEnv`` does what ``Environment`` does around a
game (the sticky-action draw before each step, the seed shared with the game), which
tests/test_minatar_startup.py checks observation for observation against ``minatar.Environment``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
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
        if game not in MINATAR_GAMES.values():
            raise ValueError(f"MinAtarEnv: unknown game {game!r}; one of {sorted(MINATAR_GAMES.values())}")
        self._game = _game_module(game).Env(ramping=difficulty_ramping)
        # As ``Environment.__init__``: the sticky draws have their own stream until a seed joins them.
        self._random = np.random.RandomState()
        self._sticky_prob = sticky_action_prob
        self._last_action = 0
        self.game = game
        self._actions = list(range(N_ACTIONS)) if full_action_space else list(self._game.minimal_action_set())
        self._max_steps = max_episode_steps
        self._steps = 0
        h, w, c = self._game.state_shape()
        self.observation_space = gym.spaces.Box(0, 1, shape=(c, h, w), dtype=bool)
        self.action_space = gym.spaces.Discrete(len(self._actions))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with the game as (name, attributes): pickling the game object itself would name
        its class, and pickle imports a class's module to check it, which here runs the ``minatar``
        package's ``__init__`` (see the module docstring). A checkpoint pickles the envs
        (``algorithms.resume``)."""
        state = self.__dict__.copy()
        state["_game"] = (self.game, vars(self._game).copy())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        game, attributes = state["_game"]
        if game not in MINATAR_GAMES.values():
            raise ValueError(f"MinAtarEnv: unknown game {game!r} in pickled state")
        cls = _game_module(game).Env
        state["_game"] = cls.__new__(cls)
        state["_game"].__dict__.update(attributes)
        self.__dict__.update(state)

    def _observation(self) -> np.ndarray:
        return np.ascontiguousarray(self._game.state().transpose(2, 0, 1))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._random = np.random.RandomState(int(seed))
            self._game.random = self._random
        self._game.reset()
        self._steps = 0
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        # ``Environment.act``: one draw every step, then the previous action repeats with the sticky
        # probability; the last action survives ``reset``.
        action = self._actions[int(action)]
        if self._random.rand() < self._sticky_prob:
            action = self._last_action
        self._last_action = action
        reward, terminated = self._game.act(action)
        self._steps += 1
        truncated = not terminated and self._max_steps is not None and self._steps >= self._max_steps
        return self._observation(), float(reward), bool(terminated), bool(truncated), {}


def _game_module(game: str):
    """The module ``minatar.environments.<game>``, executed from its file without running the
    ``minatar`` package's ``__init__`` (which imports the plotting libraries: see the module doc).
    It is entered in ``sys.modules`` under its own name, so a game pickles and unpickles by
    reference as usual, and a later ``import minatar`` shares it."""
    name = f"minatar.environments.{game}"
    if name not in sys.modules:
        package = importlib.util.find_spec("minatar")  # a top-level spec: found, not executed
        path = Path(package.submodule_search_locations[0], "environments", f"{game}.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


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
