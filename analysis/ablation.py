"""Each deviation's own effect in an ablation experiment (a plan with ``ablate``, repro/plans.py):
the IQM difference of every leave-one-out arm to the base arm, with the verdict's 95% bootstrap-t
interval (``analysis.verdict.iqm_difference``), the smallest difference the design detects with 80%
power on t with that interval's degrees of freedom (``protocol.stats.detectable_difference``) and the
power it has against ``PLANNED_DIFFERENCE``; ordered by the size of the effect.

``deviation_games`` breaks each deviation down by game, in raw returns: the arm's mean final
return, the base's on the same seeds, the base's range over all of its seeds, and a rank test of
the arm's runs against all of the base's (``rank_test``, exact at a study's run counts). With few
runs the test is coarse (4 runs against 5 cannot go below p = 2/126 = 0.016) and a study makes one
per arm and game, so a single small p is a lead for the next seeds to test, not a finding; its
Benjamini-Hochberg q over every test of the table (``false_discovery_q``) is what survives the
number of tests.

The plan record (``plan.json``) names the base arm and each deviation arm's keys (``ablation``); an
experiment without one has no deviation table. Each comparison uses the runs of its two arms alone
(balanced on those two), so a study run in pieces reports every arm pair that is complete while
other arms are still part-way.

An ablation's endpoints (the ablate setting's arm and the base) are also what its verdict compares
(``verdict_arms``), as the two-arm plan of the same two settings would.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis import aggregate, verdict
from protocol.plan_args import DEVIATION_INFIX
from protocol.stats import detectable_difference, power_at

# The IQM difference a study is planned to detect, in normalised-score units (10 points of a score
# normalised in percent): the default of the seed planner (repro/power.py) too.
PLANNED_DIFFERENCE = 0.10
EFFECT_COLUMNS = [
    "base", "arm", "deviation", "keys", "difference", "ci_low", "ci_high", "se", "df", "detectable",
    "power_at_planned",
]  # fmt: skip


GAME_EFFECT_COLUMNS = [
    "base", "arm", "deviation", "env", "runs", "score", "base_score", "difference", "base_runs", "base_low",
    "base_high", "p_rank", "q_rank",
]  # fmt: skip


def ablation_record(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``ablation`` entry of the experiment's plan record, or None."""
    for entry in (plan or {}).get("plans", []):
        if isinstance(entry, dict) and isinstance(entry.get("ablation"), dict):
            return entry["ablation"]
    return None


def verdict_arms(
    final: pd.DataFrame, plan: dict[str, Any] | None = None, baseline: str | None = None
) -> tuple[str, str, dict[str, np.ndarray], list[str]] | None:
    """``(A, B, matrices, games)`` of the experiment's verdict: a two-arm experiment's arms in
    ``verdict.order_arms``'s order, or an ablation's endpoints (the ablate setting's arm as A, the base
    as B, or ``baseline`` as A), with their score matrices balanced on the two alone
    (``aggregate.score_matrices``); None for any other experiment or when the two share no game."""
    arms = sorted(set(final.arm))
    record = ablation_record(plan)
    if len(arms) == 2:
        a, b = verdict.order_arms(arms, plan, baseline)
    elif record is not None and {record["ablate"], record["base"]} <= set(arms):
        endpoints = [record["ablate"], record["base"]]
        a, b = verdict.order_arms(endpoints, {"arms": endpoints}, baseline)
    else:
        return None
    matrices, games, _ = aggregate.score_matrices(final[final.arm.isin([a, b])])
    return (a, b, matrices, games) if len(matrices) == 2 else None


def deviation_effects(
    final: pd.DataFrame,
    record: dict[str, Any],
    reps: int = 2000,
    seed: int = 0,
    planned: float = PLANNED_DIFFERENCE,
) -> pd.DataFrame:
    """``EFFECT_COLUMNS``, one row per deviation arm of ``final`` (complete runs' normalised scores)
    that shares a game with the base arm (named in ``base``), largest absolute difference first;
    empty when the base arm is absent."""
    base = record["base"]
    prefix = f"{base}{DEVIATION_INFIX}"
    rows = []
    for arm, keys in record.get("deviations", {}).items():
        matrices, _, _ = aggregate.score_matrices(final[final.arm.isin([arm, base])])
        if set(matrices) != {arm, base}:
            continue
        diff = verdict.iqm_difference(matrices[arm], matrices[base], reps=reps, seed=seed)
        se = diff["se"]
        known = np.isfinite(se) and se > 0
        rows.append(
            [
                base,
                arm,
                arm.removeprefix(prefix),
                ", ".join(keys),
                diff["value"],
                diff["ci_low"],
                diff["ci_high"],
                se,
                diff["df"],
                detectable_difference(se, df=diff["df"]) if known else np.nan,
                power_at(planned, se, df=diff["df"]) if known else np.nan,
            ]
        )
    table = pd.DataFrame(rows, columns=EFFECT_COLUMNS)
    order = table.difference.abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)


def deviation_games(
    final: pd.DataFrame,
    record: dict[str, Any],
    order: list[str] | None = None,
    more_base: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``GAME_EFFECT_COLUMNS``, one row per deviation arm and game it shares with the base arm on at
    least one seed: the arm's mean final ``score`` (raw return) over those seeds, the base's mean on
    the same seeds, their difference, the base's lowest and highest run over all of its seeds on
    the game, and ``rank_test`` of the arm's runs on those seeds against all of the base's.
    ``order``: deviation arms first in this order (e.g. the effects table's), the rest by name.
    ``more_base``: the base arm's runs on other seeds (a replication's): they join the base's range
    and the rank test, not the means on shared seeds. ``q_rank``: ``false_discovery_q`` of the
    table's ``p_rank``."""
    base = record["base"]
    prefix = f"{base}{DEVIATION_INFIX}"
    base_runs = final[final.arm == base]
    all_base = base_runs if more_base is None else pd.concat([base_runs, more_base[more_base.arm == base]])
    arms = [a for a in record.get("deviations", {}) if a in set(final.arm)]
    rank = {arm: i for i, arm in enumerate(order or [])}
    arms.sort(key=lambda arm: (rank.get(arm, len(rank)), arm))
    rows = []
    for arm in arms:
        runs = final[final.arm == arm]
        for env in sorted(set(runs.env) & set(base_runs.env)):
            mine, theirs = runs[runs.env == env], base_runs[base_runs.env == env]
            seeds = sorted(set(mine.seed) & set(theirs.seed))
            if not seeds:
                continue
            shared = mine[mine.seed.isin(seeds)].score
            score = float(shared.mean())
            base_score = float(theirs[theirs.seed.isin(seeds)].score.mean())
            every = all_base[all_base.env == env].score
            low, high = float(every.min()), float(every.max())
            p_rank = rank_test(shared, every)
            rows.append(
                [
                    base,
                    arm,
                    arm.removeprefix(prefix),
                    env,
                    len(seeds),
                    score,
                    base_score,
                    score - base_score,
                    len(every),
                    low,
                    high,
                    p_rank,
                ]
            )
    table = pd.DataFrame(rows, columns=GAME_EFFECT_COLUMNS[:-1])
    return table.assign(q_rank=false_discovery_q(table.p_rank))


def false_discovery_q(p: pd.Series) -> pd.Series:
    """Benjamini-Hochberg adjusted p (q) of each test among all of ``p``'s finite entries
    (``scipy.stats.false_discovery_control``): calling every test with q <= a discovery keeps the
    expected share of false discoveries at most a. A study's per-game table holds one test per arm
    and game (40 for eight deviations on five games), so a p of 0.01 alone is no finding; NaN stays
    NaN."""
    q = pd.Series(math.nan, index=p.index, dtype=float)
    finite = p.notna()
    if finite.any():
        q[finite] = stats.false_discovery_control(p[finite].to_numpy(dtype=float), method="bh")
    return q


# Up to this many splits of the pooled runs the rank test enumerates them all (5 runs against 10:
# 3,003 splits, 0.03 s; 7 against 10: 19,448); beyond (10 against 10 took 3 s), scipy's normal
# approximation, close at such sizes.
EXACT_SPLITS = 20_000


def rank_test(runs: pd.Series, base_runs: pd.Series, alternative: str = "two-sided") -> float:
    """p of the Mann-Whitney U test of ``runs`` against ``base_runs`` (``alternative``: scipy's,
    "greater" for ``runs`` tending higher), two-sided by default. Exact where the
    splits of the pooled runs number at most ``EXACT_SPLITS``: every split is enumerated
    (``scipy.stats.PermutationMethod`` with unlimited resamples), so ties are handled exactly and the
    result is the same on every call; beyond, scipy's normal approximation with its tie correction.
    Two-sided is twice the smaller one-sided p, at most 1 (scipy's convention). NaN where a side has
    fewer than two runs."""
    if min(len(runs), len(base_runs)) < 2:
        return float("nan")
    splits = math.comb(len(runs) + len(base_runs), len(runs))
    method = stats.PermutationMethod(n_resamples=np.inf) if splits <= EXACT_SPLITS else "asymptotic"
    return float(stats.mannwhitneyu(runs, base_runs, alternative=alternative, method=method).pvalue)
