"""Published comparisons like for like: each published figure is compared with our number computed
under the protocol behind it, from our own logs, and every comparison names both protocols.

* **Young & Tian 2019's MinAtar DQN curves** (``data/minatar_published_curves.csv``, algo ``dqn``)
  are *training* returns: a moving average of the last 100 training episodes, under DQN's own
  epsilon-greedy exploration (epsilon 0.1 after the first 105k frames; data/SOURCES.md). Our side of
  that comparison is the training return of the same last 100 (or more) episodes at the same frame
  count, from ``progress.csv`` (``last_training_returns``), never the greedy evaluation. What cannot be
  matched from our logs is the exploration: our runs train under their own arm's policy (R2D1: one
  epsilon per actor), and that is named beside the figure.
* **R2D2's Table 4** (``data/r2d2_atari57_scores.csv``) is a final evaluation score (30 random no-op
  starts, mean of 3 seeds): our side is the final evaluation (``eval.csv``).

The data files carry the protocol as a column (``protocol``), and so do our result tables
(``analysis.study.result_table``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import aggregate
from analysis.curves import EVAL_SOURCE, TRAIN_SOURCE, Scores
from analysis.learning import marked
from analysis.markdown import ci_text, fmt
from analysis.runs import KEYS, Experiment
from analysis.scores import is_minatar, minatar_reference_table

LAST_EPISODES = 100  # Young & Tian's moving-average window (data/SOURCES.md)
OUR_PROTOCOL = {
    EVAL_SOURCE: "final evaluation: mean return of the evaluation episodes (eval.csv)",
    TRAIN_SOURCE: "training return: return_mean of the last progress row (progress.csv)",
}
TRAINING_LAST = (
    f"training return: mean of the last {LAST_EPISODES} or more training episodes at the final frame count "
    "(progress.csv), under the arm's own exploration"
)


def our_protocol(source: str) -> str:
    """The protocol of one of our final scores, from its ``source`` (``analysis.curves``)."""
    return OUR_PROTOCOL.get(source, source)


def our_final_score(final: pd.DataFrame) -> str:
    """What our side of a comparison with a published final evaluation is, from the final scores'
    ``source`` column (``analysis.curves``): the final evaluation, or the training return that stands
    in for it when some run has none, which is not a published evaluation's protocol."""
    if (final.source == EVAL_SOURCE).all():
        return "our final evaluation"
    return "our last training return, standing in for a final evaluation some runs lack: not R2D2's protocol"


def last_training_returns(exp: Experiment, episodes: int = LAST_EPISODES) -> pd.DataFrame:
    """Per complete run: the mean training return over its last ``episodes`` or more training episodes
    at its last progress row, ``KEYS + [frames, score, episodes]``. Progress rows average the episodes
    finished since the previous row (``return_mean`` over ``episodes_logged``), so the rows are taken
    from the last backwards until they hold ``episodes`` episodes and averaged weighted by their
    episode counts; a run with fewer episodes in all uses all of them (its ``episodes`` says so)."""
    complete = exp.complete[KEYS]
    progress = exp.progress.merge(complete, on=KEYS) if len(exp.progress) else exp.progress
    rows = []
    needed = {"return_mean", "episodes_logged", "frames"}
    if progress.empty or not needed <= set(progress.columns):
        return pd.DataFrame(columns=[*KEYS, "frames", "score", "episodes"])
    for key, run in progress.groupby(KEYS, sort=True):
        run = run.sort_values("frames").dropna(subset=["return_mean"])
        run = run[run.episodes_logged > 0]
        if run.empty:
            continue
        counts = run.episodes_logged.to_numpy(float)[::-1]
        taken = int(np.searchsorted(np.cumsum(counts), episodes) + 1)
        last = run.iloc[::-1].iloc[:taken]
        weights = last.episodes_logged.to_numpy(float)
        score = float(np.average(last.return_mean.to_numpy(float), weights=weights))
        rows.append([*key, float(run.frames.iloc[-1]), score, int(weights.sum())])
    return pd.DataFrame(rows, columns=[*KEYS, "frames", "score", "episodes"])


def minatar_training_final(exp: Experiment, scores: Scores) -> pd.DataFrame | None:
    """``scores.final``'s shape (``arm, env, seed, frames, score, normalised, source``) with each
    MinAtar run's last-100-episode training return as its score (``last_training_returns``), DQN-
    normalised as the final scores are (NaN for a game the reference table lacks): our side of a
    comparison with Young & Tian's curves. None when no run is of a MinAtar game."""
    found = last_training_returns(exp)
    found = found[found.env.map(is_minatar).astype(bool)].reset_index(drop=True)
    if found.empty and not any(is_minatar(e) for e in scores.final.env):
        return None
    table = minatar_reference_table()
    found["normalised"] = [
        table.normalise(e, s).item() if e in table.scores.index else np.nan
        for e, s in zip(found.env, found.score)
    ]
    return found.assign(source=TRAINING_LAST)


def minatar_like_for_like(exp: Experiment, scores: Scores, curves: pd.DataFrame) -> pd.DataFrame:
    """Per arm and MinAtar game: our last-100-episode training return (mean over seeds, 95% t
    interval) against Young & Tian's DQN curve at the same frames
    (``aggregate.compare_with_minatar_published``), with our greedy final evaluation beside it
    (``eval_score, eval_ci_low, eval_ci_high``, not compared) and both protocols as columns
    (``our_protocol``, ``published_protocol``)."""
    training = minatar_training_final(exp, scores)
    if training is None or training.empty:
        raise ValueError(
            f"{exp.path}: no run logged training returns (progress.csv return_mean, episodes_logged), so "
            "nothing compares with Young & Tian's training-return curves"
        )
    table = aggregate.compare_with_minatar_published(training, curves)
    greedy = aggregate.per_game_summary(scores.final)[["arm", "env", "score", "ci_low", "ci_high"]]
    greedy = greedy.rename(
        columns={"score": "eval_score", "ci_low": "eval_ci_low", "ci_high": "eval_ci_high"}
    )
    protocols = curves[curves.algo == "dqn"].groupby("env").protocol.first()
    table = table.merge(greedy, on=["arm", "env"], how="left")
    return table.assign(our_protocol=TRAINING_LAST, published_protocol=table.env.map(protocols))


def like_for_like_rows(comparison: pd.DataFrame, bounds: dict, scale: float) -> list[list[str]]:
    """The cells of ``minatar_like_for_like``'s table, one row per arm and env, as the study page and
    the report show it: counts, our greedy evaluation (with its cut mark from ``bounds``), our training
    return raw and normalised by ``scale``, the published reading and the two agreement flags."""
    return [
        [r.arm, r.env, fmt(r.n_runs), fmt(r.frames),
         marked(ci_text(r.eval_score, r.eval_ci_low, r.eval_ci_high), bounds.get((r.arm, r.env))),
         ci_text(r.score, r.ci_low, r.ci_high),
         ci_text(r.normalised, r.normalised_ci_low, r.normalised_ci_high, scale),
         ci_text(r.published, r.published_low, r.published_high), fmt(r.published_in_ci), fmt(r.overlap)]
        for r in comparison.itertuples()
    ]  # fmt: skip
