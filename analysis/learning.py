"""Whether each arm learned: its level against random play and against a published reference at the
same frames, the check every verdict opens with (``analysis.verdict.learning_sentence``).

On every comparable scale random play is 0 (``analysis.curves``: human-, DQN- and reference-normalised
scores subtract random play). The reference, per env, on the same scale:

* MinAtar: Young & Tian's (2019) DQN learning curve read at the frames the runs reached
  (``analysis.scores.published_at``, never extrapolated: NaN outside the read-off points);
* Atari-57: R2D2's Table 4 score, from about 10B frames (a ratio far below 1 may only mean a
  smaller budget; the note says so);
* gymnasium envs: the published reference score of the bounds table, 1 by construction (the zoo's or
  CleanRL's trained agents, ``analysis/data/gym_reference_scores.csv``).

``learning_table`` gives per arm its IQM with the verdict's widened 95% interval, whether that interval
lies above random play, and the reference's IQM over the same games. An arm whose final evaluation
episodes stopped at the harness's cap (``capped_runs``: the smoke profile's 200 steps) is not shown to
learn whatever its interval (``arm_caps``): cut episodes score on another scale (a cut Pong episode of
an untrained agent scores about half of human, measured on `make reproduce-r2d1 PROFILE=smoke` runs of
Pong). Except where a cut return can only be lower than the whole episode's
(``cut_returns_are_lower_bounds``: MinAtar): there a level shown above random play stands.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from analysis import verdict
from analysis.curves import EVAL_SOURCE, Scores
from analysis.runs import KEYS, Experiment
from analysis.scores import (
    atari_game,
    human_random_table,
    is_minatar,
    minatar_published_curves,
    minatar_reference_table,
    published_at,
    r2d2_published_scores,
)

LEARNING_COLUMNS = [
    "arm", "runs", "iqm", "ci_low", "ci_high", "eval_cap", "learned", "reference_iqm", "share_of_reference",
]  # fmt: skip


def capped_runs(exp: Experiment, scores: Scores) -> dict[tuple[str, str, int], int]:
    """``{(arm, env, seed): cap}`` of the runs whose final evaluation episodes stopped at the harness's
    cap (``sampler.eval_max_steps``, e.g. the smoke profile's 200 steps) instead of the env's own end:
    their returns are cut short, on another scale than random play and the reference, which ran whole
    episodes."""
    if (
        exp.eval.empty
        or not {"length", "env_steps"} <= set(exp.eval)
        or EVAL_SOURCE not in set(scores.final.source)
    ):
        return {}
    last = exp.eval.merge(scores.final[KEYS + ["env_steps"]], on=KEYS + ["env_steps"])
    capped = {}
    for run, g in last.groupby(KEYS):
        cap = exp.configs.get(run, {}).get("sampler", {}).get("eval_max_steps")
        if isinstance(cap, int) and (g.length >= cap).any():
            capped[run] = cap
    return capped


def cut_returns_are_lower_bounds(env: str) -> bool:
    """Whether an evaluation episode cut at the cap returns at most what the whole episode would:
    MinAtar's games only ever add reward (each game's ``act`` adds 1 per event, ``r+=1``, in
    minatar/environments/*.py), so random play's and the reference's whole episodes score at least as
    much on the same policy. Atari's rewards can be negative (Pong: -1 per point lost)."""
    return is_minatar(env)


def cut_short_note(exp: Experiment, scores: Scores) -> str | None:
    """What a summary says of the runs whose final evaluations stopped at the harness's cap (None:
    none did): how many, at which cap, and whether their returns are lower bounds."""
    capped = capped_runs(exp, scores)
    if not capped:
        return None
    caps = ", ".join(str(c) for c in sorted(set(capped.values())))
    bounded = [run for run in capped if cut_returns_are_lower_bounds(run[1])]
    runs = ", ".join(f"{arm}/{env}/seed{seed}" for arm, env, seed in sorted(capped))
    said = (
        f"{len(capped)} of {len(scores.final)} runs ended final evaluation episodes at the harness's cap "
        f"(sampler.eval_max_steps = {caps} steps) before the env's own end ({runs})"
    )
    if len(bounded) == len(capped):
        return (
            f"{said}: their returns are lower bounds of whole episodes' (the env only adds reward), so an "
            "arm's level stands as a lower bound."
        )
    return (
        f"{said}: their returns are cut short, not on the scale of random play and the reference, which "
        "played whole episodes."
    )


def arm_caps(exp: Experiment, scores: Scores) -> dict[str, int]:
    """Arm -> the cap its capped runs' evaluations stopped at (``capped_runs``), from the runs whose cut
    returns are not lower bounds (``cut_returns_are_lower_bounds``): such an arm is not shown to learn."""
    capped = sorted(capped_runs(exp, scores).items())
    return {arm: cap for (arm, env, _), cap in capped if not cut_returns_are_lower_bounds(env)}


def reference_levels(scores: Scores, table: str = "r2d2") -> tuple[dict[str, float], str]:
    """``({env: normalised reference}, what the reference is)`` for the envs of ``scores.final`` (NaN
    where nothing was published there); empty for the min-max fallback."""
    final = scores.final
    frames = final.groupby("env").frames.median()
    if scores.reference == "dqn":
        curves = minatar_published_curves()
        curves = curves[curves.algo.str.lower() == "dqn"]
        minatar = minatar_reference_table()
        levels = {
            env: float(minatar.normalise(env, published_at(curves[curves.env == env], f)["return"]))
            for env, f in frames.items()
        }
        return levels, "Young & Tian's (2019) DQN at the same frames (read off the paper's curves)"
    if scores.reference == "human":
        published = r2d2_published_scores().set_index("game").r2d2_score
        hr = human_random_table(table)
        levels = {}
        for env in frames.index:
            game = atari_game(env)
            known = game in published.index
            levels[env] = float(hr.normalise(game, published[game])) if known else np.nan
        return levels, "R2D2's Table 4 score (about 10B frames, not these frames)"
    if scores.reference == "reference" and scores.bounds is not None:
        return {
            env: 1.0 for env in frames.index
        }, f"the published reference score ({scores.bounds.path.name})"
    return {}, "none (scores normalised within the experiment)"


def learning_table(
    scores: Scores,
    matrices: dict[str, np.ndarray],
    games: list[str],
    reps: int = 2000,
    seed: int = 0,
    caps: dict[str, int] | None = None,
) -> tuple[pd.DataFrame, str]:
    """``(LEARNING_COLUMNS per arm, what the reference is)`` for ``matrices`` (``[runs, games]``,
    ``analysis.aggregate.score_matrices``); ``caps``: ``arm_caps``."""
    references, what = reference_levels(scores)
    values = np.array([references.get(g, np.nan) for g in games], float)
    reference_iqm = (
        float(stats.trim_mean(values, proportiontocut=0.25))
        if len(values) and np.isfinite(values).all()
        else np.nan
    )
    rows = []
    for level in verdict.arm_levels(matrices, reps, seed, caps):
        share = level.iqm / reference_iqm if np.isfinite(reference_iqm) and reference_iqm > 0 else np.nan
        rows.append(
            [
                level.arm,
                matrices[level.arm].shape[0],
                level.iqm,
                level.ci_low,
                level.ci_high,
                level.cap,
                level.learned,
                reference_iqm,
                share,
            ]
        )
    return pd.DataFrame(rows, columns=LEARNING_COLUMNS), what
