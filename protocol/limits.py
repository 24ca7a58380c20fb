"""Upper bounds of the size-like command-line options (``--reps``, ``--jobs``, ``--episodes``, ...).

A value past its bound is refused before any work starts, in one line naming the option, the bound,
where the bound comes from and what the value would take (memory, where memory is what runs out),
instead of the command growing until the kernel kills it with no word (``--reps 1000000000`` took
~20 GB). Each command defines its options' ``Limit`` beside the option; this module holds the shape
of the check and of the line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from algorithms.configs import ConfigError

# Episodes a command plays one after another (``repro evaluate``, ``analysis.random_scores``): 100
# times the 100 a random-play reference score is measured on, so a larger count is a typo.
MAX_EPISODES = 10_000
MAX_EPISODES_WHY = "100 times the 100 episodes a reference score is measured on"


def gib(n: float) -> str:
    """``n`` bytes in GiB, as every memory figure of a refusal is written."""
    return f"{n / 2**30:,.1f} GiB"


@dataclass(frozen=True)
class Limit:
    """The most ``option`` may be, ``why`` that many (its source), and ``cost``: what a value would
    take, in words (``"its resamples would take 14.9 GiB for each run"``)."""

    option: str
    most: int
    why: str
    cost: Callable[[int], str]


def check_limit(limit: Limit, value: int) -> None:
    """``ConfigError`` (one line, the CLI's exit 2) when ``value`` is past ``limit.most``."""
    if value > limit.most:
        raise ConfigError(
            f"{limit.option} {value:,} is over its limit of {limit.most:,} ({limit.why}): {limit.cost(value)}"
        )
