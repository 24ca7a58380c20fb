"""Algorithm name -> module: the one explicit table every layer looks algorithms up in.

Each module named here follows docs/ARCHITECTURE.md, Contract 4: it exports ``Config`` (a frozen,
validated dataclass), ``build_agent(config, observation_space, action_space) -> Agent`` and
``Algo(config, agent, counters_frameskip, batch_spec)``. Adding an algorithm is one line in
``ALGORITHMS``; nothing else dispatches on algorithm names (STYLE.md 8: a registry, not if/elif).

Modules are imported on first use, so importing this table does not import torch models.

``AgentFactory`` is the picklable recipe parallel samplers send to ``spawn`` workers so that each
worker builds its own copy of the agent (Contract 2).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium as gym

    from algorithms.agents.base import Agent

ALGORITHMS: dict[str, str] = {
    "dqn": "algorithms.algos.dqn",
    "c51": "algorithms.algos.c51",
    "rainbow": "algorithms.algos.rainbow",
    "r2d1": "algorithms.algos.r2d1",
    "a2c": "algorithms.algos.a2c",
    "ppo": "algorithms.algos.ppo",
    "ddpg": "algorithms.algos.ddpg",
    "td3": "algorithms.algos.td3",
    "sac": "algorithms.algos.sac",
}


def algo_module(name: str) -> ModuleType:
    """The module implementing algorithm ``name``; ``ValueError`` for a name not in ``ALGORITHMS``."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}")
    return importlib.import_module(ALGORITHMS[name])


def config_class(name: str) -> type:
    """The ``Config`` dataclass of algorithm ``name``."""
    return algo_module(name).Config


def build_agent(name: str, config: Any, observation_space: gym.Space, action_space: gym.Space) -> Agent:
    """Build algorithm ``name``'s agent (and its model) for one env's spaces."""
    cls = config_class(name)
    if not isinstance(config, cls):
        raise TypeError(
            f"algo_config for {name!r} must be {cls.__module__}.{cls.__name__}, got {type(config).__name__}"
        )
    return algo_module(name).build_agent(config, observation_space, action_space)


def check_replay(name: str, config: Any, num_envs: int, observation_space: gym.Space) -> None:
    """``ValueError`` when algorithm ``name``'s replay, built for ``num_envs`` envs of this observation
    space, could not hold one training item. An algorithm with a replay whose size can be too small
    says so with ``Algo.check_replay(config, num_envs, observation)``; one without has nothing to check."""
    check = getattr(algo_module(name).Algo, "check_replay", None)
    if check is not None:
        check(config, num_envs, observation_space.sample())


@dataclass(frozen=True)
class AgentFactory:
    """Picklable recipe for an agent: call it in any process to build a fresh copy.

    Samplers that run the policy in worker processes send this instead of the agent itself, then
    copy parameters in with ``agent.load_state_dict``. Building seeds nothing: a worker's copy
    starts from whatever its torch RNG gives and must be synced before it acts.
    """

    algo: str
    config: Any
    observation_space: Any
    action_space: Any

    def __call__(self) -> Agent:
        return build_agent(self.algo, self.config, self.observation_space, self.action_space)

    def __reduce__(self) -> tuple:
        # Frame spaces as scalars: a worker's spawn data then fits a pipe buffer (``compact_space``).
        from algorithms.envs.base import compact_space

        spaces = (compact_space(self.observation_space), compact_space(self.action_space))
        return (_agent_factory, (self.algo, self.config, *spaces))


def _agent_factory(algo: str, config: Any, observation_space: Any, action_space: Any) -> AgentFactory:
    from algorithms.envs.base import expand_space

    return AgentFactory(algo, config, expand_space(observation_space), expand_space(action_space))
