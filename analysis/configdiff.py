"""Configuration differences between the arms of an experiment, from the runs' ``config.json``.

A key belongs to an arm's configuration when every run of the arm agrees on its value; keys that
vary inside an arm (the seed, the env id) describe runs, not arms, and are left out. The diff lists
the arm-level keys whose values differ between arms (a key one arm lacks shows as ``None``).

Values in effect: a Config class may declare that one field sets the value another field has in
effect (R2D1's ``swap_priority_exponents`` runs ``priority_alpha = 0.9`` as 0.6). A run records
those at its start in metadata.json (``algorithms.rundir.declared_effective_values``), since this
layer imports no Config class. ``run_effective_values`` reads them back from the experiment's
metadata table; given to ``config_diff``, such a key's value is an ``InEffect`` (stated and used),
so two arms that state the same value but run different ones differ in the diff.

Values from the command line: a run records in config.json's ``origins`` where each value that no
settings file gave came from (``python -m repro run --set algo.learning_rate=1e-3``: origin "command
line"). Those records describe values, not configurations, so they are left out of the diff and
listed by ``origins_table`` (per arm, key, value and source).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from algorithms.rundir import EFFECTIVE_VALUES_KEY, ORIGINS_KEY, RESULT_NEUTRAL_KEYS
from analysis.markdown import fmt
from analysis.runs import flatten
from protocol.plan_args import seeds_text

ABSENT = "(absent)"
# Keys that differ between the runs of one arm and env by design: the seed, and the options that change
# what a run shows, not what it computes.
PER_RUN_KEYS = ("runner.seed", *RESULT_NEUTRAL_KEYS)
# A run's own seed recorded inside other values: a key named ``seed`` (a seed handed on to a library,
# as the SB3 record's ``sb3.ppo_kwargs.seed``) or a ``seed=N`` argument of a recorded call (its
# ``sb3.env``, ``make_atari_env(..., seed=1)``). Masked before the runs of a cell are compared, so that
# such a value differs only where it is not the run's own seed.
SEED_MARK = "<seed>"
RunKey = tuple[str, str, int]
# Per run, flattened config key -> (value in effect, why).
Effective = dict[RunKey, dict[str, tuple[Any, str]]]


@dataclass(frozen=True)
class InEffect:
    """A config value as the run used it: ``stated`` in config.json, ``value`` in effect, and why."""

    stated: Any
    value: Any
    reason: str


def run_effective_values(metadata: pd.DataFrame) -> Effective:
    """Per run (``arm, env, seed``), the values in effect recorded in its metadata.json, from the
    flattened metadata table (columns ``effective_values.<key>.value`` / ``.reason``); runs that
    recorded none are left out."""
    prefix, value_end, reason_end = EFFECTIVE_VALUES_KEY + ".", ".value", ".reason"
    keys = sorted(
        c[len(prefix) : -len(value_end)]
        for c in metadata.columns
        if c.startswith(prefix) and c.endswith(value_end) and c[: -len(value_end)] + reason_end in metadata
    )
    out: Effective = {}
    for row in metadata.to_dict("records"):
        recorded = {
            key: (row[prefix + key + value_end], row[prefix + key + reason_end])
            for key in keys
            if isinstance(row[prefix + key + reason_end], str)  # NaN where this run recorded no such key
        }
        if recorded:
            out[(row["arm"], row["env"], int(row["seed"]))] = recorded
    return out


def _run_flat(config: dict[str, Any], effective: dict[str, tuple[Any, str]]) -> dict[str, Any]:
    flat = flatten({k: v for k, v in config.items() if k != ORIGINS_KEY})
    for key, (value, reason) in effective.items():
        flat[key] = InEffect(flat.get(key, ABSENT), value, reason)
    return flat


def _arm_flats(
    configs: dict[RunKey, dict[str, Any]], effective: Effective | None = None
) -> dict[str, list[dict[str, Any]]]:
    effective = effective or {}
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for run, config in sorted(configs.items()):
        by_arm.setdefault(run[0], []).append(_run_flat(config, effective.get(run, {})))
    return by_arm


def arm_configs(
    configs: dict[RunKey, dict[str, Any]], effective: Effective | None = None
) -> dict[str, dict[str, Any]]:
    """Per arm, the flattened keys on which all of the arm's runs agree (absent counts as a value;
    a value in effect that differs from the stated one is an ``InEffect``)."""
    out = {}
    for arm, flats in _arm_flats(configs, effective).items():
        keys = sorted(set().union(*flats))
        out[arm] = {
            k: flats[0].get(k, ABSENT) for k in keys if len({repr(f.get(k, ABSENT)) for f in flats}) == 1
        }
    return out


def config_diff(configs: dict[RunKey, dict[str, Any]], effective: Effective | None = None) -> pd.DataFrame:
    """Rows ``key, <arm 1>, <arm 2>, ...`` for the arm-level keys whose values differ between arms;
    with ``effective`` (``run_effective_values``), keys are compared as the runs used them."""
    flats = _arm_flats(configs, effective)
    per_arm = arm_configs(configs, effective)
    arms = sorted(per_arm)
    all_keys = set().union(*(set().union(*f) for f in flats.values())) if flats else set()
    run_level = {k for arm in arms for k in set().union(*flats[arm]) if k not in per_arm[arm]}
    rows = []
    for key in sorted(all_keys - run_level):
        values = [per_arm[arm].get(key, ABSENT) for arm in arms]
        if len({repr(v) for v in values}) > 1:
            rows.append({"key": key, **dict(zip(arms, values))})
    return pd.DataFrame(rows, columns=["key", *arms])


def shown(value: Any) -> str:
    """A config value as a table or a sentence shows it: one a run used in place of the stated one
    shows both, marked."""
    if isinstance(value, InEffect):
        return f"{fmt(value.value)} in effect (stated {fmt(value.stated)})"
    return fmt(value)


def _seed_masked(key: str, value: Any, seed: int) -> Any:
    """``value`` with the run's own ``seed`` in it replaced by ``SEED_MARK`` (see there)."""
    if key.rsplit(".", 1)[-1] == "seed" and not isinstance(value, bool) and value == seed:
        return SEED_MARK
    if isinstance(value, str):
        return re.sub(rf"\bseed={seed}\b", f"seed={SEED_MARK}", value)
    return value


def mixed_configs(configs: dict[RunKey, dict[str, Any]], effective: Effective | None = None) -> pd.DataFrame:
    """Rows ``arm, env, key, values``: each key on which the runs of one arm on one env disagree (but
    the seed, the run's own seed recorded in other keys (``SEED_MARK``) and ``RESULT_NEUTRAL_KEYS``), as
    after ``--rerun-changed`` on some of its seeds or a profile edited between two invocations: the
    arm's results mix two configurations. ``values`` gives each value with the seeds that ran it
    (``0.001 (seeds 0,2); 0.0001 (seed 1)``)."""
    effective = effective or {}
    by_cell: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
    for run, config in sorted(configs.items()):
        by_cell.setdefault(run[:2], []).append((run[2], _run_flat(config, effective.get(run, {}))))
    rows = []
    for (arm, env), runs in by_cell.items():
        for key in sorted(set().union(*(flat for _, flat in runs)) - set(PER_RUN_KEYS)):
            seeds: dict[str, list[int]] = {}
            for seed, flat in runs:
                seeds.setdefault(shown(_seed_masked(key, flat.get(key, ABSENT), seed)), []).append(seed)
            if len(seeds) > 1:
                values = "; ".join(
                    f"{value} ({'seed' if len(s) == 1 else 'seeds'} {seeds_text(s)})"
                    for value, s in seeds.items()
                )
                rows.append({"arm": arm, "env": env, "key": key, "values": values})
    return pd.DataFrame(rows, columns=["arm", "env", "key", "values"])


def mixed_config_lines(mixed: pd.DataFrame) -> list[str]:
    """One line per arm of ``mixed_configs``, naming the keys and values its runs differ in."""
    return [
        f"Arm {arm}: its runs differ in config, so its results mix configurations: "
        + "; ".join(f"{r.key} on {r.env}: {r.values}" for r in rows.itertuples())
        + "."
        for arm, rows in mixed.groupby("arm", sort=True)
    ]


def effective_table(configs: dict[RunKey, dict[str, Any]], effective: Effective) -> pd.DataFrame:
    """Rows ``arm, key, stated, in_effect, reason, runs``: each distinct value in effect per arm and
    key, with the number of runs that recorded it (runs of an arm that disagree give several rows)."""
    counts: dict[tuple[str, str, str, str, str], int] = {}
    cells: dict[tuple[str, str, str, str, str], InEffect] = {}
    for run, config in sorted(configs.items()):
        for key, cell in _run_flat(config, effective.get(run, {})).items():
            if isinstance(cell, InEffect):
                ident = (run[0], key, repr(cell.stated), repr(cell.value), cell.reason)
                counts[ident] = counts.get(ident, 0) + 1
                cells[ident] = cell
    rows = [
        {"arm": ident[0], "key": ident[1], "stated": cell.stated, "in_effect": cell.value,
         "reason": cell.reason, "runs": counts[ident]}
        for ident, cell in cells.items()
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["arm", "key", "stated", "in_effect", "reason", "runs"])


def origins_table(configs: dict[RunKey, dict[str, Any]]) -> pd.DataFrame:
    """Rows ``arm, key, value, origin, source, runs``: each value a run's config.json records an
    origin for (``--set`` on the command line), per arm, with the number of runs that recorded it."""
    counts: dict[tuple[str, str, str, str, str], int] = {}
    for run, config in sorted(configs.items()):
        origins = config.get(ORIGINS_KEY)
        if not isinstance(origins, dict):
            continue
        flat = flatten({k: v for k, v in config.items() if k != ORIGINS_KEY})
        for key, record in origins.items():
            if isinstance(record, dict):
                ident = (
                    run[0],
                    key,
                    repr(flat.get(key, ABSENT)),
                    str(record.get("origin")),
                    str(record.get("source")),
                )
                counts[ident] = counts.get(ident, 0) + 1
    rows = [
        {"arm": arm, "key": key, "value": value, "origin": origin, "source": source, "runs": n}
        for (arm, key, value, origin, source), n in counts.items()
    ]
    return pd.DataFrame(rows, columns=["arm", "key", "value", "origin", "source", "runs"])
