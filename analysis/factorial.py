"""Effects of a designed ablation (a plan with ``design``, protocol/design.py): each switch's main effect,
the two-factor-interaction alias groups, and a check that the switches add up.

Every arm of the design is the base setting with some of the ablate setting's deviations switched on
(the plan record's ``ablation.design``: each arm's row of -1 off / +1 on). A main effect is the mean
response of the arms with the switch on minus the mean of those with it off, each arm weighing the
same (its mean over its seeds): with equal seeds per arm it is the mean of the runs with the switch
on minus off; with unequal seeds (a study stopped part-way) the columns stay orthogonal. In
contrast form, effect = (2/M) sum_a x_a ybar_a over the M arms, the two-level factorial's effect
estimate (Montgomery, *Design and Analysis of Experiments*, 8th ed., 2013, section 6.2 and 8.2).

Uncertainty, per response:

* the pooled within-arm variance s^2 (df = runs - arms), as the model of a replicated design assumes
  one run-to-run variance for all arms: SE of a contrast sum_a c_a ybar_a is s sqrt(sum_a c_a^2 / n_a),
  2 s / sqrt(N) for a main effect over N runs (``repro.power.effect_se``), and its t statistic with
  df degrees of freedom gives the p-value, two-sided or one-sided per switch (``alternatives``), the
  main effects adjusted together for multiplicity (``correction``: Holm, Bonferroni,
  Benjamini-Hochberg or none; the pre-registered analysis names which);
* the t interval at 1 - ``alpha`` from the same SE and df, not adjusted for multiplicity: the
  interval the two-sided t test inverts, so it excludes 0 exactly when that test rejects at
  ``alpha`` (a bootstrap over three seeds an arm gave intervals narrower than the test's:
  analysis/intervals.py).

Responses: each game's raw final return (the per-game tables' unit), and ``AGGREGATE``: a run's
mean over the design's games of its normalised score (the study's ``normalised`` column, the scores
its IQMs use). A factorial needs a linear response to split a difference into effects, so the
aggregate is a per-run mean, not the IQM over runs x games: with one game it is that game's
normalised score. Runs of a seed that lacks one of the games are left out of the aggregate.

Two-factor interactions that share a column (``protocol.design.Design.alias_groups``) are estimated as
one contrast, the sum of their effects; main effects are clear of them (every design with both
endpoints has resolution IV or more, protocol/design.py). The additivity check compares the all-on
arm's observed mean with the value the main effects predict there, grand mean + sum of effects / 2
(each switch at +1, coefficient effect/2): their difference is the sum of every interaction at that
corner, a linear contrast with the same SE, t and bootstrap interval as an effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis.markdown import ci_text, fmt, md_table
from analysis.multiple import adjust
from protocol.design import Design
from protocol.registration import CORRECTIONS

AGGREGATE = "aggregate"
ALTERNATIVES = ("two-sided", "greater", "less")
EFFECT_COLUMNS = [
    "response", "kind", "effect", "switch", "estimate", "se", "ci_low", "ci_high", "t", "df",
    "alternative", "p", "p_adjusted", "reject", "runs", "arms",
]  # fmt: skip
ADDITIVITY_COLUMNS = [
    "response", "observed", "predicted", "difference", "se", "ci_low", "ci_high", "t", "df", "p",
]  # fmt: skip


@dataclass(frozen=True)
class FactorialAnalysis:
    """``effects``: ``EFFECT_COLUMNS``, per response its main effects (``kind`` "main", ``effect`` the
    letter) in letter order, then the interaction alias groups (``kind`` "interaction", ``effect``
    "AB = CG = ..."); ``additivity``: ``ADDITIVITY_COLUMNS``, one row per response; ``switches``:
    letter -> switch name; the test settings it was made with."""

    effects: pd.DataFrame
    additivity: pd.DataFrame
    switches: dict[str, str]
    alpha: float
    correction: str
    skipped: tuple[str, ...] = ()  # responses left out: a design arm had no run


def design_of(record: Mapping[str, Any]) -> tuple[Design, dict[str, np.ndarray]]:
    """The ``Design`` and ``{arm: row}`` of an ablation record's ``design`` (``repro.ablation.
    design_record``)."""
    entry = record["design"]
    names = tuple(s["name"] for s in entry["switches"])
    design = Design(entry["kind"], names, tuple(entry["generators"]))
    return design, {arm: np.asarray(row, int) for arm, row in entry["arms"].items()}


def responses(final: pd.DataFrame, arms: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """``{response: {arm: runs}}``: each game's raw ``score`` per arm, and ``AGGREGATE`` (module doc)."""
    runs = final[final.arm.isin(list(arms))]
    out: dict[str, dict[str, np.ndarray]] = {}
    for env in sorted(set(runs.env)):
        game = runs[runs.env == env]
        out[env] = {arm: game[game.arm == arm].sort_values("seed").score.to_numpy(float) for arm in arms}
    games = sorted(set(runs.env))
    wide = runs.pivot_table(index=["arm", "seed"], columns="env", values="normalised", aggfunc="mean")
    wide = wide.reindex(columns=games).dropna()
    mean = wide.mean(axis=1)
    out[AGGREGATE] = {arm: mean[mean.index.get_level_values("arm") == arm].to_numpy(float) for arm in arms}
    return out


def contrasts(runs: Mapping[str, np.ndarray], weights: np.ndarray, alpha: float = 0.05) -> pd.DataFrame:
    """Estimate, SE, df, t and t interval of each contrast ``weights[:, j]`` (one weight per arm of
    ``runs``, in its order) of the arm means (module doc); SE, t and CI are NaN without replication."""
    arms = list(runs)
    n = np.array([len(runs[a]) for a in arms])
    means = np.array([runs[a].mean() for a in arms])
    estimate = means @ weights
    df = int(n.sum() - len(arms))
    squares = sum(float(((runs[a] - m) ** 2).sum()) for a, m in zip(arms, means))
    se = np.sqrt(squares / df * ((weights**2) / n[:, None]).sum(axis=0)) if df > 0 else np.nan * estimate
    half = stats.t.ppf(1 - alpha / 2, df) * se if df > 0 else np.nan * estimate
    low, high = estimate - half, estimate + half
    with np.errstate(divide="ignore", invalid="ignore"):
        t = estimate / se
    return pd.DataFrame({"estimate": estimate, "se": se, "ci_low": low, "ci_high": high, "t": t, "df": df})


def _p(t: float, df: int, alternative: str) -> float:
    if not np.isfinite(t):
        return np.nan
    if alternative == "greater":
        return float(stats.t.sf(t, df))
    if alternative == "less":
        return float(stats.t.cdf(t, df))
    return float(2 * stats.t.sf(abs(t), df))


def factorial_effects(
    final: pd.DataFrame,
    record: Mapping[str, Any],
    alpha: float = 0.05,
    correction: str = "holm",
    alternatives: str | Mapping[str, str] = "two-sided",
) -> FactorialAnalysis:
    """The ``FactorialAnalysis`` of ``final`` (complete runs: arm, env, seed, score, normalised) under
    the ablation ``record``'s design. ``alternatives``: one for every main effect, or per switch (its
    name or letter; unnamed switches two-sided): "greater" tests that switching it on raises the
    response. ``reject``: the main effect's adjusted p at most ``alpha``. A response where a design
    arm has no run is left out (``skipped``): the effects need every arm."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction {correction!r}: expected one of {', '.join(CORRECTIONS)}")
    design, rows = design_of(record)
    letters = design.letters
    switches = dict(zip(letters, design.switches))
    alt = {c: _alternative(alternatives, c, switches[c]) for c in letters}
    x = np.stack([rows[a] for a in rows])  # [arms, switches]
    m = len(rows)
    groups = design.alias_groups
    interactions = [g for g in groups if len(g[0]) == 2]
    columns = [x[:, letters.index(c)] for c in letters] + [
        x[:, letters.index(g[0][0])] * x[:, letters.index(g[0][1])] for g in interactions
    ]
    on = np.flatnonzero((x > 0).all(axis=1))[0]
    # observed all-on mean - (grand mean + sum of main effects / 2), as weights on the arm means
    corner = -(1 + x.sum(axis=1)) / m
    corner[on] += 1
    weights = np.column_stack([2 * c / m for c in columns] + [corner])
    effect_rows, additivity_rows, skipped = [], [], []
    for response, runs in responses(final, rows).items():
        if any(len(r) == 0 for r in runs.values()):
            skipped.append(response)
            continue
        table = contrasts(runs, weights, alpha)
        n = sum(len(r) for r in runs.values())
        mains = []
        for i, c in enumerate(letters):
            r = table.iloc[i]
            p = _p(r.t, int(r.df), alt[c])
            mains.append([response, "main", c, switches[c], *r[:6], alt[c], p])
        adjusted = adjust([row[-1] for row in mains], correction).to_numpy()
        effect_rows += [row + [q, bool(q <= alpha), n, m] for row, q in zip(mains, adjusted)]
        for j, g in enumerate(interactions):
            r = table.iloc[len(letters) + j]
            names = " = ".join(" x ".join(switches[c] for c in pair) for pair in g)
            p = _p(r.t, int(r.df), "two-sided")
            row = [response, "interaction", " = ".join(g), names, *r[:6], "two-sided", p]
            effect_rows.append(row + [np.nan, False, n, m])
        r = table.iloc[-1]
        observed = runs[list(rows)[on]].mean()
        additivity_rows.append(
            [response, observed, observed - r.estimate, *r[:6], _p(r.t, int(r.df), "two-sided")]
        )
    # df comes through each contrast's row of floats: whole again
    effects = pd.DataFrame(effect_rows, columns=EFFECT_COLUMNS).astype({"df": int})
    additivity = pd.DataFrame(additivity_rows, columns=ADDITIVITY_COLUMNS).astype({"df": int})
    return FactorialAnalysis(effects, additivity, switches, alpha, correction, tuple(skipped))


def _alternative(alternatives: str | Mapping[str, str], letter: str, name: str) -> str:
    chosen = (
        alternatives
        if isinstance(alternatives, str)
        else alternatives.get(name, alternatives.get(letter, "two-sided"))
    )
    if chosen not in ALTERNATIVES:
        raise ValueError(f"alternative {chosen!r} for {name}: expected one of {', '.join(ALTERNATIVES)}")
    return chosen


def factorial_path(csv: Path) -> Path:
    """Where ``python -m analysis study --csv PATH`` writes a designed ablation's effects: beside PATH."""
    return csv.with_name(f"{csv.stem}_factorial.csv")


def factorial_lines(found: FactorialAnalysis | None, scale: float = 1.0, unit: str = "") -> list[str]:
    """The study summary's sections of a designed ablation: per response the main effects, the
    interaction alias groups and the additivity check. ``scale`` and ``unit``: how the aggregate's
    normalised scores show (the study's); games show in raw returns."""
    if found is None or found.additivity.empty:
        return []
    lines = [
        "## Designed ablation: main effects",
        "",
        "Each switch's main effect (averaged over the other switches): the mean of the arms with it on "
        f"minus those with it off (analysis/factorial.py); estimate [{1 - found.alpha:.0%} t interval, "
        "not adjusted], standard error and t from the variance pooled within arms, p as the alternative "
        f"says, adjusted over the main effects of each response ({found.correction}), rejected at adjusted "
        f"p <= {found.alpha:g}. Games in raw returns; {AGGREGATE}: a run's normalised score{unit} averaged "
        "over the games.",
        "",
    ]
    if found.skipped:
        lines += [f"Left out (a design arm has no run): {', '.join(found.skipped)}.", ""]
    head = ["effect", "switch", "estimate [CI]", "SE", "t (df)", "alternative", "p", "p adjusted"]
    head.append("rejected")
    for response, table in found.effects.groupby("response", sort=False):
        k = scale if response == AGGREGATE else 1.0
        rows = [
            [r.effect, r.switch, ci_text(r.estimate, r.ci_low, r.ci_high, k), fmt(r.se * k),
             f"{fmt(r.t)} ({r.df})", r.alternative, fmt(r.p), fmt(r.p_adjusted), fmt(r.reject)]
            for r in table[table.kind == "main"].itertuples()
        ]  # fmt: skip
        lines += [f"### {response}", "", *md_table(head, rows), ""]
        inter = table[table.kind == "interaction"]
        if len(inter):
            rows = [
                [r.effect, r.switch, ci_text(r.estimate, r.ci_low, r.ci_high, k), fmt(r.se * k), fmt(r.p)]
                for r in inter.itertuples()
            ]
            lines += [
                "Two-factor interactions, each alias group as one estimate (the sum of its interactions; "
                "exploratory, p two-sided and unadjusted):",
                "",
                *md_table(["alias group", "switches", "estimate [CI]", "SE", "p"], rows),
                "",
            ]
    rows = []
    for r in found.additivity.itertuples():
        k = scale if r.response == AGGREGATE else 1.0
        difference = ci_text(r.difference, r.ci_low, r.ci_high, k)
        cells = [fmt(r.observed * k), fmt(r.predicted * k), difference, f"{fmt(r.t)} ({r.df})", fmt(r.p)]
        rows.append([r.response, *cells])
    return lines + [
        "## Designed ablation: additivity",
        "",
        "The all-on arm (the ablate setting) observed against the main effects' prediction there (grand "
        "mean + half the sum of the main effects): the difference is the sum of the interactions at that "
        "corner; p two-sided.",
        "",
        *md_table(["response", "observed", "predicted", "difference [CI]", "t (df)", "p"], rows),
        "",
    ]
