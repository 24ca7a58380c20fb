"""A replay larger than this machine's memory, refused while planning (``repro.plans.check_model_fits``):
a job would otherwise grow until the kernel kills it, or fail at numpy's allocation, and be retried.
"""

from __future__ import annotations

import os
from typing import Any

from algorithms.configs import ConfigError


class ReplayTooLarge(ConfigError):
    """A replay larger than this machine's memory: a ``ConfigError`` that a caller may add a hint to
    (what this machine can run instead)."""


def physical_memory() -> int:
    """Bytes of physical memory of this machine (POSIX ``sysconf``)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_replay_memory(
    arm: str, config: Any, setting: Any, observation_space: Any, action_space: Any
) -> None:
    """``ConfigError`` naming where ``algo.replay_size_steps`` was set, its value and both sizes when
    the arm's replay needs more than all of this machine's memory (``registry.replay_bytes``, a
    lower bound: such a job cannot run here whatever else runs beside it)."""
    from algorithms import registry

    need = registry.replay_bytes(config.algo, config.algo_config, observation_space, action_space)
    have = physical_memory()
    if need is None or need <= have:
        return
    entry = setting.entries.get("algo.replay_size_steps") if setting is not None else None
    where = f"{entry.file}: " if entry is not None and entry.file else f"setting '{arm}': "
    raise ReplayTooLarge(
        f"{where}algo.replay_size_steps={config.algo_config.replay_size_steps:,} on env "
        f"'{config.env.id}' needs at least {_gib(need)} of memory; this machine has {_gib(have)}"
    )
