"""Algorithm name -> module: algorithms are found by a rule, not listed by hand.

An algorithm is a module that follows docs/ARCHITECTURE.md, Contract 4: it exports ``Config`` (a
frozen, validated dataclass), ``build_agent(config, observation_space, action_space) -> Agent`` and
``Algo(config, agent, counters_frameskip, batch_spec)`` (``CONTRACT``). Its name is either

* ``<name>``, for the module ``algorithms/algos/<name>.py``: every module of that package whose top
  level binds at least one contract name (by ``def``, ``class``, assignment or import: ``rainbow.py``
  imports C51's ``Algo`` and ``build_agent``) is an algorithm named after its file, and a module
  binding none (``base.py``: pieces the algorithms share) is not. Adding an algorithm is adding its
  file; ``ALGORITHMS`` maps the names found to module paths. Or
* a dotted module path (``mypkg.toy``) for an algorithm outside this package, imported as such: its
  package must be importable (on ``PYTHONPATH`` for ``python -m repro`` and its jobs).

The package directory is listed with ``pkgutil`` and each module's top level read with ``ast`` when
``ALGORITHMS`` is first needed; a module is imported only when its algorithm is used, so importing
this module, or listing the algorithms, does not import torch models. A module that lacks a contract
name is a ``ValueError`` naming the module and what it lacks; an unknown name is a ``ValueError``
listing the known names.

``AgentFactory`` is the picklable recipe parallel samplers send to ``spawn`` workers so that each
worker builds its own copy of the agent (Contract 2).
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import algorithms.algos

if TYPE_CHECKING:
    import gymnasium as gym

    from algorithms.agents.base import Agent

CONTRACT = ("Config", "build_agent", "Algo")
PACKAGE = algorithms.algos.__name__


def top_level_names(path: Path) -> set[str]:
    """The names the top level of the module at ``path`` binds, read from its source (not imported)."""
    names: set[str] = set()
    for node in ast.parse(path.read_bytes(), filename=str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


@functools.cache
def _algorithms() -> dict[str, str]:
    found = {}
    for info in pkgutil.iter_modules(algorithms.algos.__path__):
        path = Path(info.module_finder.path) / f"{info.name}.py"
        if not info.ispkg and top_level_names(path) & set(CONTRACT):
            found[info.name] = f"{PACKAGE}.{info.name}"
    return found


def __getattr__(name: str) -> Any:
    # ALGORITHMS is built on first access (PEP 562), so importing this module reads no source file.
    # The dict is the one every lookup uses: a test may add a module of its own to it.
    if name == "ALGORITHMS":
        return _algorithms()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _unknown(name: str, why: str = "") -> ValueError:
    return ValueError(f"unknown algorithm {name!r}{why}; known: {', '.join(sorted(_algorithms()))}")


def algo_module(name: str) -> ModuleType:
    """The module implementing algorithm ``name`` (a name in ``ALGORITHMS`` or a dotted module path),
    checked to export every ``CONTRACT`` name; ``ValueError`` otherwise."""
    if "." not in name:
        if name not in _algorithms():
            raise _unknown(name)
        path = _algorithms()[name]
    elif all(part.isidentifier() for part in name.split(".")):
        path = name
    else:
        raise _unknown(name, " (not a dotted module path)")
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as e:
        # Only the named module (or a package above it) missing makes the name unknown; a module
        # that exists but fails to import one of its own dependencies raises as it is.
        if e.name is None or not (path == e.name or path.startswith(e.name + ".")):
            raise
        raise _unknown(name, f" (no module named {e.name!r})") from None
    missing = [attr for attr in CONTRACT if not hasattr(module, attr)]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)} (docs/ARCHITECTURE.md, Contract 4)")
    return module


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


# Bytes of a step's reward (float32) and its terminated, truncated and episode-start flags in every
# replay's ring (``algorithms.replay.ring``).
RING_STEP_BYTES = 4 + 3


def replay_bytes(name: str, config: Any, observation_space: gym.Space, action_space: gym.Space) -> int | None:
    """At least the bytes the replay of algorithm ``name`` with ``config`` (one with
    ``replay_size_steps``) allocates: each env step's observation (``observation_bytes_per_step``),
    action, reward and flags, and what the algorithm's storage and selector add per step
    (``Algo.replay_step_bytes``); stored recurrent states come on top. ``None`` for an algorithm
    without replay."""
    import numpy as np

    from algorithms.replay.observations import observation_bytes_per_step

    steps = getattr(config, "replay_size_steps", None)
    if not isinstance(steps, int):
        return None
    action = np.asarray(action_space.sample())
    per_step = observation_bytes_per_step(observation_space.sample()) + action.nbytes + RING_STEP_BYTES
    extra = getattr(algo_module(name).Algo, "replay_step_bytes", None)
    return int(steps * (per_step + (extra(config, action) if extra is not None else 0)))


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
