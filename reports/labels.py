"""Sweep arms labelled by what differs (the ``--set`` values that made them), for the report's
figures and tables."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from analysis.ablation import ablation_record
from analysis.configdiff import origins_table
from analysis.runs import Experiment

# The prefix of a --set value's source in config.json's origins (repro.settings.command_line_entries).
SET_SOURCE = "--set "


def sweep_labels(exp: Experiment) -> dict[str, str]:
    """Arm -> what tells it apart from the other arms (``learning_rate=1e-4``): its ``--set`` values
    (config.json's origins) that not every arm shares; an arm with none keeps its name. Empty (no
    relabelling) for fewer than two arms, an ablation (its record names arms), or labels that would
    not be unique."""
    if len(exp.arms) < 2 or ablation_record(exp.plan) is not None:
        return {}
    origins = origins_table(exp.configs)
    sets = {arm: set() for arm in exp.arms}
    for row in origins.itertuples():
        if row.source.startswith(SET_SOURCE) and row.arm in sets:
            key, _, text = row.source.removeprefix(SET_SOURCE).partition("=")
            sets[row.arm].add((key, text))
    if not any(sets.values()):
        return {}
    common = set.intersection(*sets.values())
    labels = {
        arm: ", ".join(f"{key.rpartition('.')[2]}={text}" for key, text in sorted(pairs - common)) or arm
        for arm, pairs in sets.items()
    }
    return labels if len(set(labels.values())) == len(labels) else {}


def relabelled(exp: Experiment, labels: dict[str, str]) -> Experiment:
    """``exp`` with its arms renamed by ``labels`` in every table, its configs and its plan record."""
    if not labels:
        return exp

    def frame(table: pd.DataFrame) -> pd.DataFrame:
        return table.assign(arm=table.arm.map(lambda a: labels.get(a, a))) if "arm" in table else table

    def names(value: Any) -> Any:
        return [labels.get(a, a) for a in value] if isinstance(value, list) else value

    plan = exp.plan
    if plan is not None and "error" not in plan:
        plan = {
            **plan,
            "arms": names(plan.get("arms")),
            "plans": [
                {**p, "arms": names(p.get("arms"))} for p in plan.get("plans", []) if isinstance(p, dict)
            ],
            "jobs": [{**j, "arm": labels.get(j.get("arm"), j.get("arm"))} for j in plan.get("jobs", [])],
        }
    return dataclasses.replace(
        exp,
        runs=frame(exp.runs), config=frame(exp.config), metadata=frame(exp.metadata),
        progress=frame(exp.progress), eval=frame(exp.eval), skipped=frame(exp.skipped),
        missing=frame(exp.missing),
        configs={(labels.get(a, a), e, s): c for (a, e, s), c in exp.configs.items()},
        plan=plan,
    )  # fmt: skip


def labels_note(labels: dict[str, str]) -> list[str]:
    """What ran's note of the arms shown by their labels, with their run directories."""
    renamed = [
        f"{label}: {arm}/" for arm, label in sorted(labels.items(), key=lambda x: x[1]) if label != arm
    ]
    if not renamed:
        return []
    return [
        "Arms are labelled by the --set values that tell them apart; their run directories: "
        + "; ".join(renamed)
    ]
