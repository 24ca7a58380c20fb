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
learn whatever its interval: cut episodes score on another scale (a cut Pong episode of an untrained
agent scores about half of human, measured on `make reproduce-r2d1 PROFILE=smoke` runs of Pong).
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
    minatar_published_curves,
    minatar_reference_table,
    published_at,
    r2d2_published_scores,
)

LEARNING_COLUMNS = [
    "arm", "iqm", "ci_low", "ci_high", "eval_cap", "learned", "reference_iqm", "share_of_reference",
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


def arm_caps(exp: Experiment, scores: Scores) -> dict[str, int]:
    """Arm -> the cap its capped runs' evaluations stopped at (``capped_runs``)."""
    return {run[0]: cap for run, cap in sorted(capped_runs(exp, scores).items())}


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
