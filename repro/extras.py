"""Optional dependencies: which envs need which extra, checked before any job starts.

Box2D is not in the base install (``pyproject.toml``'s ``box2d`` extra; gymnasium's LunarLander,
BipedalWalker and CarRacing need it); MuJoCo and the Atari emulator are, but a user may have removed
them or installed the package without its dependencies. A plan whose envs need a module that does
not import is refused while it is expanded (``check_extras``): one line naming the env, the setting
and the command that installs the extra, exit 2, nothing written; without it the first job would
fail deep inside gymnasium (``DependencyNotInstalled``) after the others had started.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from algorithms.configs import ConfigError


@dataclass(frozen=True)
class Extra:
    name: str  # the extra of pyproject.toml
    module: str  # what must import
    what: str

    @property
    def install(self) -> str:
        return f"pip install -c constraints.txt -e '.[{self.name}]'"


EXTRAS = {
    "box2d": Extra("box2d", "Box2D", "Box2D (gymnasium's box2d envs)"),
    "mujoco": Extra("mujoco", "mujoco", "MuJoCo (gymnasium's mujoco envs)"),
    "atari": Extra("atari", "ale_py", "the Arcade Learning Environment (ale-py)"),
}
# gymnasium registers each env with an entry point in the package of its simulator.
_GYM_PACKAGES = {"gymnasium.envs.box2d": "box2d", "gymnasium.envs.mujoco": "mujoco"}


def needed_extra(env: Any) -> Extra | None:
    """The extra an ``EnvConfig`` needs beyond the base install's always-present pieces, or None."""
    if env.kind == "atari":
        return EXTRAS["atari"]
    if env.kind != "gym":
        return None
    import gymnasium

    try:
        entry_point = gymnasium.spec(env.id).entry_point
    except gymnasium.error.Error:  # an unknown id: EnvConfig's own check names it
        return None
    if not isinstance(entry_point, str):
        return None
    return next((EXTRAS[x] for pkg, x in _GYM_PACKAGES.items() if entry_point.startswith(pkg + ".")), None)


def is_installed(extra: Extra) -> bool:
    return importlib.util.find_spec(extra.module) is not None


def check_extras(arm: str, env: Any) -> None:
    """A ``ConfigError`` of one line when ``env`` (of setting ``arm``) needs an extra that is not
    installed, naming the command that installs it."""
    extra = needed_extra(env)
    if extra is not None and not is_installed(extra):
        raise ConfigError(
            f"env '{env.id}' (setting '{arm}') needs {extra.what}, which is not installed: {extra.install}"
        )
