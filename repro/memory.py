"""A replay or a model larger than this machine's memory, refused while planning
(``repro.plans.check_model_fits``): a job would otherwise grow until the kernel kills it, or fail at
numpy's or torch's allocation, and be retried.
"""

from __future__ import annotations

import os
import re
from typing import Any

from algorithms.configs import ConfigError
from protocol.limits import gib
from repro.settings import COMMAND_LINE

# How torch's CPU allocator says that one tensor did not fit (c10's alloc_cpu.cpp).
_ALLOCATION_FAILED = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


class ReplayTooLarge(ConfigError):
    """A replay larger than this machine's memory: a ``ConfigError`` that a caller may add a hint to
    (what this machine can run instead)."""


def physical_memory() -> int:
    """Bytes of physical memory of this machine (POSIX ``sysconf``)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


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
        f"'{config.env.id}' needs at least {gib(need)} of memory; this machine has {gib(have)}"
    )


def model_too_large(arm: str, config: Any, setting: Any, error: RuntimeError) -> ConfigError | None:
    """The one line for a model whose build failed at torch's CPU allocator (``error``), naming the
    ``--set`` keys of its algorithm as given (``--set key=value``) and the memory its failed tensor
    alone needed; ``None`` for any other ``RuntimeError``."""
    found = _ALLOCATION_FAILED.search(str(error))
    if found is None:
        return None
    entries = setting.entries.items() if setting is not None else ()
    given = [e.source for k, e in entries if k.startswith("algo.") and e.origin == COMMAND_LINE]
    where = "".join(f"{source}: " for source in given)
    need, have = gib(int(found.group(1))), gib(physical_memory())
    return ConfigError(
        f"{where}setting '{arm}' on env '{config.env.id}' builds a model larger than this machine's memory: "
        f"one of its tensors alone needs {need}; this machine has {have}"
    )
