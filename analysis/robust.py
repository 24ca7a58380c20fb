"""How robust a two-arm verdict is across games: each game's own effect and test, the verdict with each
game left out, and which games the IQM's middle half is made of.

An interquartile mean over runs x games trims a quarter of the pooled runs from each end. With few
games that trims whole games: on MinAtar's five, an arm whose one game scores far above the others
keeps none of that game's runs in its middle half, while the other arm may keep all of them; and an
aggregate verdict can rest on one game alone. So every verdict is shown beside

* each game's difference of means (candidate - baseline, raw final returns), its two-sided
  Mann-Whitney p (``analysis.ablation.rank_test``: exact for small samples) and the p adjusted across
  the games (Holm by default: the verdict's question is whether *some* game differs, a family-wise
  question; a plan's frozen ``[analysis]`` section may name another correction);
* the verdict recomputed with each game left out (``analysis.verdict.two_arm_verdict``, the same rule
  and bootstrap); a game whose removal takes the verdict's resolution away *carries* the verdict, and
  the verdict's first sentence then says so;
* how many of each arm's runs per game fall inside the middle half the IQM averages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import aggregate, verdict
from analysis.ablation import rank_test
from analysis.curves import Scores
from analysis.markdown import ci_text, fmt, md_table
from analysis.multiple import adjust

GAME_COLUMNS = ["env", "baseline_mean", "candidate_mean", "difference", "p", "p_adjusted", "correction"]
LEAVE_OUT_COLUMNS = ["left_out", "difference", "ci_low", "ci_high", "poi", "winner"]
MIDDLE_COLUMNS = ["arm", "env", "runs", "in_middle_half"]


@dataclass(frozen=True)
class Robustness:
    """``games``: ``GAME_COLUMNS`` per game; ``leave_one_out``: ``LEAVE_OUT_COLUMNS`` per game left out;
    ``middle``: ``MIDDLE_COLUMNS``, per arm and game; ``carried_by``: the games whose removal takes the
    verdict's resolution away (empty when the verdict resolves nothing or needs no single game)."""

    baseline: str
    candidate: str
    games: pd.DataFrame
    leave_one_out: pd.DataFrame
    middle: pd.DataFrame
    carried_by: tuple[str, ...]
    resolved: bool


def middle_half(matrix: np.ndarray) -> np.ndarray:
    """Boolean ``[runs, games]`` mask of the entries the IQM averages: the pooled runs ranked, the
    lowest and highest quarter trimmed (``scipy.stats.trim_mean(x, 0.25)``, rliable's IQM, trims
    int(0.25 n) from each end); ties are broken by position, as a stable sort does."""
    flat = np.asarray(matrix, float).ravel()
    cut = int(0.25 * flat.size)
    keep = np.zeros(flat.size, bool)
    keep[np.argsort(flat, kind="stable")[cut : flat.size - cut]] = True
    return keep.reshape(np.shape(matrix))


def robustness(
    final: pd.DataFrame,
    matrices: dict[str, np.ndarray],
    games: list[str],
    found: verdict.Verdict,
    reps: int = 2000,
    seed: int = 0,
    correction: str = "holm",
) -> Robustness:
    """The ``Robustness`` of ``found``, the verdict of ``matrices`` (``[runs, games]`` of normalised
    scores, ``games`` their column order); ``final``: the runs' raw final scores (``score`` column)."""
    a, b = found.baseline, found.candidate
    rows = []
    for env in games:
        on = final[final.env == env]
        base, cand = on[on.arm == a].score, on[on.arm == b].score
        rows.append([env, base.mean(), cand.mean(), cand.mean() - base.mean(), rank_test(cand, base)])
    table = pd.DataFrame(rows, columns=GAME_COLUMNS[:5])
    table["p_adjusted"] = adjust(table.p, correction)
    table["correction"] = correction
    out, carried = [], []
    for i, env in enumerate(games):
        if len(games) < 2:
            break
        rest = {arm: np.delete(m, i, axis=1) for arm, m in matrices.items() if arm in (a, b)}
        again = verdict.two_arm_verdict(rest, a, b, reps, seed)
        d, p = again.iqm_difference, again.poi
        out.append([env, d["value"], d["ci_low"], d["ci_high"], p["value"], again.winner])
        if found.winner is not None and again.winner != found.winner:
            carried.append(env)
    middle = [
        [arm, env, int(m.shape[0]), int(mask[:, j].sum())]
        for arm in (a, b)
        for m, mask in [(matrices[arm], middle_half(matrices[arm]))]
        for j, env in enumerate(games)
    ]
    return Robustness(
        a,
        b,
        table,
        pd.DataFrame(out, columns=LEAVE_OUT_COLUMNS),
        pd.DataFrame(middle, columns=MIDDLE_COLUMNS),
        tuple(carried),
        found.winner is not None,
    )


def carried_sentence(r: Robustness, scale: float = 1.0, unit: str = "") -> str | None:
    """The sentence a verdict opens with when single games carry it (``Robustness.carried_by``)."""
    if not r.carried_by:
        return None
    loo = r.leave_one_out.set_index("left_out")
    parts = [
        f"without {env} the IQM difference is {loo.difference[env] * scale:+.3g} "
        f"[{loo.ci_low[env] * scale:+.3g}, {loo.ci_high[env] * scale:+.3g}]{unit} and the verdict rule "
        f"finds {loo.winner[env] or 'neither arm'} better"
        for env in r.carried_by
    ]
    one = len(r.carried_by) == 1
    return f"{'One game carries' if one else 'Single games carry'} this verdict: " + "; ".join(parts) + "."


def middle_sentence(r: Robustness) -> str:
    """Which games each arm's IQM middle half is made of, in one sentence."""
    parts = []
    for arm, g in r.middle.groupby("arm", sort=False):
        cells = ", ".join(f"{row.env} {row.in_middle_half}/{row.runs}" for row in g.itertuples())
        parts.append(f"{arm}: {cells}")
    return "Runs inside each arm's IQM middle half, per game: " + "; ".join(parts) + "."


def balanced_runs(final: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``final`` that ``aggregate.score_matrices`` keeps (equal seeds per arm and game)."""
    _, games, left_out = aggregate.score_matrices(final)
    merged = final.merge(left_out[["arm", "env", "seed"]], how="left", indicator=True)
    kept = merged[(merged["_merge"] == "left_only") & merged.env.isin(games)]
    return kept.drop(columns="_merge")


def robust_verdict(
    final: pd.DataFrame,
    matrices: dict[str, np.ndarray],
    games: list[str],
    baseline: str,
    candidate: str,
    reps: int = 2000,
    seed: int = 0,
    correction: str = "holm",
    label: str = "normalised score",
    scale: float = 1.0,
    unit: str = "",
    caps: dict[str, int] | None = None,
    learning: list[verdict.ArmLevel] | None = None,
) -> tuple[verdict.Verdict, verdict.PowerStatement, Robustness]:
    """The two-arm verdict (``analysis.verdict.two_arm_verdict``, opening with the learning check of
    ``learning`` when given), its power statement and its ``Robustness``; when single games carry the
    verdict, its first sentence says so."""
    found = verdict.two_arm_verdict(
        matrices, baseline, candidate, reps, seed, label, scale, unit, caps, learning
    )
    pair = balanced_runs(final[final.arm.isin([baseline, candidate])])
    checked = robustness(pair, matrices, games, found, reps, seed, correction)
    lead = carried_sentence(checked, scale, unit)
    if lead:
        found = verdict.with_caveat(found, lead)
    power = verdict.power_statement(found, label=label, scale=scale, unit=unit)
    return found, power, checked


def robustness_block(r: Robustness, scores: Scores, title: str) -> list[str]:
    """A verdict across games (``analysis.robust``): each game's effect and test, the verdict with
    each game left out, and which games make up each arm's IQM middle half."""
    scale, unit = scores.scale, scores.difference_unit
    games = [
        [row.env, fmt(row.baseline_mean), fmt(row.candidate_mean), f"{row.difference:+.3g}", fmt(row.p),
         fmt(row.p_adjusted)]
        for row in r.games.itertuples()
    ]  # fmt: skip
    loo = [
        [row.left_out, ci_text(row.difference, row.ci_low, row.ci_high, scale),
         fmt(row.poi), row.winner or "neither"]
        for row in r.leave_one_out.itertuples()
    ]  # fmt: skip
    correction = r.games.correction.iloc[0] if len(r.games) else "holm"
    lines = [
        f"## {title}",
        "",
        f"Each game's own effect ({r.candidate} - {r.baseline}, mean final return), its two-sided "
        f"Mann-Whitney p and the p adjusted across the {len(games)} games ({correction}):",
        "",
        *md_table(
            [
                "game",
                f"{r.baseline} mean",
                f"{r.candidate} mean",
                "difference",
                "p",
                f"adjusted p ({correction})",
            ],
            games,
        ),  # fmt: skip
        "",
    ]
    if loo:
        in_units = f" ({unit.strip()})" if unit else ""
        lines += [
            "The verdict recomputed with each game left out (same rule, same bootstrap):",
            "",
            *md_table(
                [
                    "left out",
                    f"IQM difference{in_units} [95% CI]",
                    f"P({r.candidate} > {r.baseline})",
                    "better arm",
                ],
                loo,
            ),  # fmt: skip
            "",
        ]
    carried = (
        f"Leaving out {' or '.join(r.carried_by)} (one at a time) removes the verdict's resolution."
        if r.carried_by
        else "No single game's removal changes the verdict."
    )
    return lines + [carried, "", middle_sentence(r), ""]
