"""The names and specs a plan and the command line give: arm and env names (they name directories),
lists of them, seed specs (``--seeds``, ``SEEDS``, a plan's ``seeds``) and an ablation arm's
deviation as ``run-job --deviation`` passes it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from algorithms.configs import MAX_SEED, ConfigError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# Seeds per (arm, env): rliable's own studies use up to 100 runs per task (Agarwal et al. 2021); a
# thousand is far past any study, and more is a typo that would plan (and record) a huge grid.
MAX_SEEDS = 1000
# Seeds kept for checks of this harness by others (the project's rule): a count never reaches them, so
# ``--seeds 300`` cannot run them unasked; a range or list that names them runs them.
RESERVED_SEEDS = range(200, 300)
# An ablation arm's name: the base setting, this infix, the deviations it turns on (repro.ablation).
DEVIATION_INFIX = "_with_"


def check_arm_name(arm: str, where: str) -> None:
    """An arm is a setting's name or a path to its ``.toml`` file; the name (the file's stem) names
    the arm's directory, so it must be a plain name: ``...toml`` would make the arm ``..``."""
    name = Path(arm).stem if arm.endswith(".toml") else arm
    if not NAME.match(name):
        raise ConfigError(
            f"{where}: {arm!r} gives the arm name {name!r}, which is not a valid directory name"
        )


def parse_list(text: str | Sequence[str] | None, what: str, paths: bool = False) -> tuple[str, ...] | None:
    """``"pong, qbert"`` (or the values of a repeated option) -> ``("pong", "qbert")``; empty or None
    -> None (use the plan's own). ``paths``: an item may also be a path to a ``.toml`` file (arms)."""
    if text is None:
        return None
    texts = [text] if isinstance(text, str) else list(text)
    items = tuple(t.strip() for part in texts for t in part.split(",") if t.strip())
    if not items:
        return None
    for item in items:
        if paths and item.endswith(".toml"):
            check_arm_name(item, what)
        elif not NAME.match(item):
            raise ConfigError(f"{what}: {item!r} is not a valid name")
    if len(set(items)) != len(items):
        raise ConfigError(f"{what}: duplicate entries in {', '.join(texts)!r}")
    return items


_COUNT = re.compile(r"^\d+$")
_RANGE = re.compile(r"^(\d+)-(\d+)$")


def parse_seeds(spec: Any, what: str = "--seeds", first_seed: int = 0) -> tuple[int, ...]:
    """The seeds of a seed spec, the one reading of ``--seeds``, ``SEEDS`` and a plan's ``seeds``:
    ``3`` (a count: seeds 0, 1, 2, or counted from ``first_seed``, which a plan sets to keep a study
    on fresh seeds), ``100-104`` (a range, both ends included) or ``1,5,9`` (a list of seeds and
    ranges), a range or list read as written; a sequence of seeds is checked as such. A spec that is
    none of these, a range that goes down, a repeated seed, more than ``MAX_SEEDS`` seeds or a count
    that reaches ``RESERVED_SEEDS`` is a ``ConfigError`` of one line naming ``what`` and the spec."""
    if isinstance(spec, tuple | list):  # seeds already read
        spec = format_seeds(list(spec)) if spec else ""
    text = str(spec).strip()

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{what} {text!r}: {why}")

    if _COUNT.match(text) and not isinstance(spec, bool):
        count = int(text)
        if count < 1:
            raise bad("a count of seeds must be at least 1")
        if count > MAX_SEEDS:
            raise bad(f"{count} seeds; at most {MAX_SEEDS}")
        counted = range(first_seed, first_seed + count)
        if counted[-1] > MAX_SEED:
            raise bad(f"seed {counted[-1]} is past the largest seed, {MAX_SEED} (2**32 - 1)")
        if set(counted) & set(RESERVED_SEEDS):
            kept = f"{RESERVED_SEEDS[0]}-{RESERVED_SEEDS[-1]}"
            raise bad(
                f"a count of {count} from seed {first_seed} reaches seeds {kept}, which are kept for "
                "outside checks; name them as a range to run them"
            )
        return tuple(counted)
    seeds: list[int] = []
    for item in text.split(","):
        item = item.strip()
        found = _RANGE.match(item)
        if found:
            first, last = int(found.group(1)), int(found.group(2))
            if last < first:
                raise bad(f"the range {item} goes down (write {last}-{first})")
            if last - first + 1 + len(seeds) > MAX_SEEDS:
                raise bad(f"more than {MAX_SEEDS} seeds")
            seeds.extend(range(first, last + 1))
        elif _COUNT.match(item) and "," in text:
            seeds.append(int(item))
        else:
            raise bad(
                f"{item!r} is not a seed; give a count (3: seeds 0..2), a range (100-104) or a list (1,5,9)"
            )
    if len(seeds) > MAX_SEEDS:
        raise bad(f"{len(seeds)} seeds; at most {MAX_SEEDS}")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise bad(f"seed {repeated[0]} is listed twice")
    if seeds and max(seeds) > MAX_SEED:
        raise bad(f"seed {max(seeds)} is past the largest seed, {MAX_SEED} (2**32 - 1)")
    return tuple(seeds)


def seeds_from(first: int, count: int) -> tuple[int, ...]:
    """``count`` seeds from ``first`` on, stepping over ``RESERVED_SEEDS``: the seeds a planner picks
    (a power plan's count), which says the seeds it picked rather than refuse."""
    picked = [s for s in range(first, first + count + len(RESERVED_SEEDS)) if s not in RESERVED_SEEDS]
    return tuple(picked[:count])


def format_seeds(seeds: Sequence[int]) -> str:
    """A seed spec ``parse_seeds`` reads back as ``seeds``: runs of three or more as ranges, others
    listed: ``(0, 1, 2)`` -> ``"0-2"``, ``(1, 5, 9)`` -> ``"1,5,9"``; one seed k is ``"k-k"``, since
    ``"7"`` reads as a count."""
    parts, i = [], 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        if j - i >= 2 or len(seeds) == 1:
            parts.append(f"{seeds[i]}-{seeds[j]}")
        else:
            parts.extend(str(s) for s in seeds[i : j + 1])
        i = j + 1
    return ",".join(parts)


def seeds_text(seeds: Sequence[int]) -> str:
    """Seeds as a reader reads them: ``format_seeds``'s spec, but one seed as itself ("7", not "7-7")."""
    return str(seeds[0]) if len(seeds) == 1 else format_seeds(seeds)


def seeds_label(value: Any) -> str | None:
    """A seed spec as a reader reads it (``seeds_text``); None when ``value`` is no valid spec."""
    try:
        return seeds_text(parse_seeds(value))
    except ConfigError:
        return None


def parse_deviation(text: str) -> tuple[str, str, tuple[str, ...]]:
    """``run-job --deviation SETTING:NAME:KEY,KEY`` -> ``Arm.deviation``."""
    setting, name, keys = text.split(":", 2)
    return setting, name, tuple(keys.split(","))


def format_deviation(deviation: tuple[str, str, tuple[str, ...]]) -> str:
    """``Arm.deviation`` as ``run-job --deviation`` takes it (``parse_deviation``)."""
    setting, name, keys = deviation
    return f"{setting}:{name}:{','.join(keys)}"
