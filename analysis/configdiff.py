"""Configuration differences between the arms of an experiment, from the runs' ``config.json``.

A key belongs to an arm's configuration when every run of the arm agrees on its value; keys that
vary inside an arm (the seed, the env id) describe runs, not arms, and are left out. The diff lists
the arm-level keys whose values differ between arms (a key one arm lacks shows as ``None``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.runs import flatten

ABSENT = "(absent)"


def _arm_flats(configs: dict[tuple[str, str, int], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for (arm, _, _), config in sorted(configs.items()):
        by_arm.setdefault(arm, []).append(flatten(config))
    return by_arm


def arm_configs(configs: dict[tuple[str, str, int], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm, the flattened keys on which all of the arm's runs agree (absent counts as a value)."""
    out = {}
    for arm, flats in _arm_flats(configs).items():
        keys = sorted(set().union(*flats))
        out[arm] = {
            k: flats[0].get(k, ABSENT) for k in keys if len({repr(f.get(k, ABSENT)) for f in flats}) == 1
        }
    return out


def config_diff(configs: dict[tuple[str, str, int], dict[str, Any]]) -> pd.DataFrame:
    """Rows ``key, <arm 1>, <arm 2>, ...`` for the arm-level keys whose values differ between arms."""
    flats = _arm_flats(configs)
    per_arm = arm_configs(configs)
    arms = sorted(per_arm)
    all_keys = set().union(*(set().union(*f) for f in flats.values())) if flats else set()
    run_level = {k for arm in arms for k in set().union(*flats[arm]) if k not in per_arm[arm]}
    rows = []
    for key in sorted(all_keys - run_level):
        values = [per_arm[arm].get(key, ABSENT) for arm in arms]
        if len({repr(v) for v in values}) > 1:
            rows.append({"key": key, **dict(zip(arms, values))})
    return pd.DataFrame(rows, columns=["key", *arms])
