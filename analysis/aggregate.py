"""Aggregates over runs x games (rliable's metrics) with intervals that hold at a few seeds.

Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS
2021: report interval estimates, not point estimates; the interquartile mean (IQM) is robust to
outlier games and more efficient than the median; the stratified bootstrap resamples runs within
each game. The intervals of the metrics are ``analysis.intervals.bootstrap_t`` (the stratified
bootstrap's standard error with a t quantile: a percentile interval of a few runs is too narrow),
seeded, so a report is reproducible; the performance profiles keep rliable's percentile bands.

Score matrices are ``[runs, games]`` per arm. rliable needs the same number of runs for every game,
so ``score_matrices`` keeps the first ``n`` seeds of each game, ``n`` being the smallest seed count
over games and arms, and returns the runs it left out.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from rliable import library as rly
from rliable import metrics

from analysis.intervals import bootstrap_t, mean_interval
from analysis.scores import (
    R2D2_PUBLISHED_MEAN_HNS_PERCENT,
    R2D2_PUBLISHED_MEDIAN_HNS_PERCENT,
    atari_game,
    human_random_table,
    is_minatar,
    minatar_published_curves,
    published_at,
    r2d2_published_scores,
)
from protocol.stats import CI_SIZE, iqm_rows, stratified_resamples

METRICS: dict[str, Callable[[np.ndarray], float]] = {
    "IQM": metrics.aggregate_iqm,
    "Median": metrics.aggregate_median,
    "Mean": metrics.aggregate_mean,
    # gamma = 1: the distance below the reference (human for Atari-57, DQN at 5M frames for MinAtar)
    "Optimality gap": metrics.aggregate_optimality_gap,
}


def _interval_estimates(
    score_dict: dict, func: Callable[..., np.ndarray], reps: int, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """rliable's stratified bootstrap, reproducible: rliable 1.2 draws its resampling indices from the
    global ``np.random`` (``StratifiedBootstrap.update_indices``) and ignores ``random_state``, so the
    global state is seeded for the call and restored afterwards."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        return rly.get_interval_estimates(score_dict, func, reps=reps, confidence_interval_size=CI_SIZE)
    finally:
        np.random.set_state(saved)


def _balanced(table: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows of the games every arm ran, keeping the ``n`` lowest seeds of each (arm, game), ``n`` the
    smallest seed count of any (arm, game); and the game order."""
    if table.empty:
        return table, []
    games = sorted(set.intersection(*(set(g.env) for _, g in table.groupby("arm"))))
    if not games:
        return table.iloc[:0], []
    used = table[table.env.isin(games)]
    seeds = used[["arm", "env", "seed"]].drop_duplicates()
    n = int(seeds.groupby(["arm", "env"]).size().min())
    kept = seeds.sort_values("seed").groupby(["arm", "env"]).head(n)
    return used.merge(kept, on=["arm", "env", "seed"]), games


def score_matrices(
    final: pd.DataFrame, column: str = "normalised"
) -> tuple[dict[str, np.ndarray], list[str], pd.DataFrame]:
    """``{arm: [runs, games]}`` over the games every arm ran, the game order, and the runs left out."""
    kept, games = _balanced(final)
    matrices = {
        arm: np.stack(
            [g[g.env == game].sort_values("seed")[column].to_numpy(float) for game in games], axis=1
        )
        for arm, g in kept.groupby("arm")
    }
    merged = final.merge(kept[["arm", "env", "seed"]], on=["arm", "env", "seed"], how="left", indicator=True)
    return matrices, games, merged[merged["_merge"] == "left_only"].drop(columns="_merge")


def arm_matrices(final: pd.DataFrame, column: str = "normalised") -> tuple[dict[str, np.ndarray], list[str]]:
    """``{arm: [runs, games]}`` over the games every arm ran, each arm with all of its own runs there
    (its ``n`` lowest seeds per game, ``n`` its smallest seed count on any of them), and the game order.
    Unlike ``score_matrices`` the arms' run counts may differ: an arm's own level then uses every run
    it has, where a comparison between arms needs them balanced."""
    games = _balanced(final)[1]
    used = final[final.env.isin(games)]
    return {arm: score_matrices(g, column)[0][arm] for arm, g in used.groupby("arm")}, games


# Each metric of ``METRICS`` on every resample ``[reps, runs, games]`` at once, as rliable defines it
# (rliable/metrics.py): IQM, mean and optimality gap (gamma = 1) over runs x games pooled, the median
# over the games' mean scores.
METRIC_ROWS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "IQM": iqm_rows,
    "Median": lambda x: np.median(x.mean(axis=1), axis=1),
    "Mean": lambda x: x.reshape(len(x), -1).mean(axis=1),
    "Optimality gap": lambda x: (1 - np.minimum(x, 1)).reshape(len(x), -1).mean(axis=1),
}


# The median of a few games' means moves in steps as games swap places, and no bootstrap of a few runs
# covers it (the t interval on its bootstrap SE held the true median in 88% of 5-game x 3-seed normal
# draws, tests/test_intervals.py): shown as an estimate only.
NO_INTERVAL = ("Median",)


def aggregate_metrics(matrices: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> pd.DataFrame:
    """IQM, median, mean and optimality gap per arm with 95% intervals that hold at a few seeds: the
    stratified bootstrap's standard error with a t quantile (``analysis.intervals.bootstrap_t``; NaN
    with one run per game, and for the median, ``NO_INTERVAL``).

    Returns ``arm, metric, value, ci_low, ci_high``."""
    rows = []
    for arm, scores in matrices.items():
        draws = stratified_resamples(np.asarray(scores, float), reps, np.random.default_rng(seed))
        for name, metric in METRIC_ROWS.items():
            point = float(metric(np.asarray(scores, float)[None])[0])
            lo, hi, _, _ = bootstrap_t(point, [(metric(draws), *scores.shape)])
            if name in NO_INTERVAL:
                lo = hi = np.nan
            rows.append({"arm": arm, "metric": name, "value": point, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def performance_profiles(
    matrices: dict[str, np.ndarray], taus: np.ndarray | None = None, reps: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Score distributions (fraction of runs x games with score > tau) with 95% CIs (Agarwal et al.
    2021, Sec. 4: run-score profiles). Returns ``arm, tau, fraction, ci_low, ci_high``."""
    if taus is None:
        top = max(float(np.max(m)) for m in matrices.values())
        taus = np.linspace(min(0.0, min(float(np.min(m)) for m in matrices.values())), max(top, 1.0), 41)
    profiles, cis = _interval_estimates(
        matrices, lambda scores: rly.score_distributions(scores, taus), reps, seed
    )
    return pd.concat(
        pd.DataFrame(
            {
                "arm": arm,
                "tau": taus,
                "fraction": profiles[arm],
                "ci_low": cis[arm][0],
                "ci_high": cis[arm][1],
            }
        )
        for arm in matrices
    ).reset_index(drop=True)


def probability_of_improvement(matrices: dict[str, np.ndarray], x: str, y: str) -> float:
    """P(X > Y): the probability that a run of arm ``x`` beats a run of arm ``y`` on a random game,
    averaged over games (Mann-Whitney U per game; Agarwal et al. 2021, Sec. 4). An estimate without an
    interval: its percentile bootstrap over a few runs is no 95% interval (``analysis.intervals``)."""
    return float(metrics.probability_of_improvement(matrices[x], matrices[y]))


def sample_efficiency(resampled: pd.DataFrame, reps: int = 500, seed: int = 0) -> pd.DataFrame:
    """IQM over runs x envs at each point of a common env-step grid (``analysis.curves.resample_curves``
    with ``grid_per=()``), with the 95% intervals of ``aggregate_metrics``. Returns ``arm, env_steps, frames,
    iqm, ci_low, ci_high``."""
    kept, games = _balanced(resampled)
    if not games:
        return pd.DataFrame(columns=["arm", "env_steps", "frames", "iqm", "ci_low", "ci_high"])
    grid = kept.groupby("point")[["env_steps", "frames"]].mean()
    cube = {  # arm -> [runs, games, points]
        arm: np.stack(
            [
                g[g.env == game].pivot(index="seed", columns="point", values="value").to_numpy(float)
                for game in games
            ],
            axis=1,
        )
        for arm, g in kept.groupby("arm")
    }

    frames = []
    for arm, scores in cube.items():  # each point's IQM and its interval, as aggregate_metrics gives them
        runs, n_games, _ = scores.shape
        rows = np.random.default_rng(seed).integers(0, runs, (reps, runs, n_games))
        draws = scores[rows, np.arange(n_games)]  # [reps, runs, games, points]
        bands = [
            bootstrap_t(float(iqm_rows(scores[None, ..., t])[0]), [(iqm_rows(draws[..., t]), runs, n_games)])
            for t in range(scores.shape[2])
        ]
        frames.append(
            pd.DataFrame(
                {
                    "arm": arm,
                    "env_steps": grid.env_steps.to_numpy(),
                    "frames": grid.frames.to_numpy(),
                    "iqm": iqm_rows(np.moveaxis(scores, 2, 0)),
                    "ci_low": [b[0] for b in bands],
                    "ci_high": [b[1] for b in bands],
                }
            )
        )
    return pd.concat(frames).reset_index(drop=True)


def curve_bands(resampled: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, env) learning curve: mean over seeds with its 95% t interval at each grid point
    (``analysis.intervals.mean_interval``).
    Input from ``analysis.curves.resample_curves``; returns ``arm, env, env_steps,
    frames, mean, ci_low, ci_high, n_runs``."""
    out = []
    for (arm, env), g in resampled.groupby(["arm", "env"]):
        table = g.pivot(index="seed", columns="point", values="value")
        lo, hi = mean_interval(table.to_numpy(float))
        x = g.groupby("point")[["env_steps", "frames"]].mean().loc[table.columns]
        out.append(
            pd.DataFrame(
                {
                    "arm": arm,
                    "env": env,
                    "env_steps": x.env_steps.to_numpy(),
                    "frames": x.frames.to_numpy(),
                    "mean": table.mean(axis=0).to_numpy(),
                    "ci_low": lo,
                    "ci_high": hi,
                    "n_runs": len(table),
                }
            )
        )
    columns = ["arm", "env", "env_steps", "frames", "mean", "ci_low", "ci_high", "n_runs"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=columns)


SUMMARY_COLUMNS = ["arm", "env", "n_runs", "frames", "score", "ci_low", "ci_high"]
NORMALISED_SUMMARY_COLUMNS = ["normalised", "normalised_ci_low", "normalised_ci_high"]


def per_game_summary(final: pd.DataFrame) -> pd.DataFrame:
    """Per arm and env: runs, frames (the most any seed reached), the mean final raw score with its 95%
    t interval (``analysis.intervals.mean_interval``), and, when ``final`` has a ``normalised`` column,
    its mean with its t interval. Returns ``SUMMARY_COLUMNS`` (+ ``NORMALISED_SUMMARY_COLUMNS``)."""
    values = ["score", "normalised"] if "normalised" in final else ["score"]
    columns = SUMMARY_COLUMNS + (NORMALISED_SUMMARY_COLUMNS if "normalised" in final else [])
    rows = []
    for (arm, env), g in final.groupby(["arm", "env"]):
        table = g.sort_values("seed")[values].to_numpy(float)
        lo, hi = mean_interval(table)
        mean = table.mean(axis=0)
        rows.append(
            [arm, env, len(g), int(g.frames.max())]
            + [x for i in range(len(values)) for x in (float(mean[i]), float(lo[i]), float(hi[i]))]
        )
    return pd.DataFrame(rows, columns=columns)


def compare_with_published(final: pd.DataFrame) -> pd.DataFrame:
    """Per arm and Atari game: our final raw score (mean over seeds, 95% t interval), R2D2's Table 4
    score, their ratio, and whether the published score lies inside our CI.

    R2D2's scores come from about 10 billion frames of training (Kapturowski et al. 2019, Sec. 3); the
    ``frames`` column says how far our runs went, so a ratio far below 1 may only mean a smaller budget.
    """
    published = r2d2_published_scores().set_index("game").r2d2_score
    games = final.env.map(atari_game)
    summary = per_game_summary(final[games.isin(published.index)])
    summary["game"] = summary.env.map(atari_game)
    summary["published"] = summary.game.map(published).astype(float)
    summary["ratio"] = (summary.score / summary.published.where(summary.published != 0)).astype(float)
    summary["published_in_ci"] = (summary.ci_low <= summary.published) & (
        summary.published <= summary.ci_high
    )
    columns = SUMMARY_COLUMNS[:2] + ["game"] + SUMMARY_COLUMNS[2:] + ["published", "ratio", "published_in_ci"]
    return summary[columns]


def compare_with_minatar_published(
    final: pd.DataFrame,
    curves: pd.DataFrame | None = None,
    algo: str = "dqn",
) -> pd.DataFrame:
    """Per arm and MinAtar env: our final raw return (mean over seeds, 95% t interval) next to the
    published ``algo`` curve (matched case-insensitively; default Young & Tian 2019's DQN) read at the
    frame count our runs reached, interpolated between its read-off points, with the figure-reading
    range and the source of the points used (``analysis.scores.published_at``; NaN where our frame
    count lies outside the read-off range). ``curves``: ``analysis.scores.minatar_published_curves()``
    by default. ``published_in_ci``: the published value lies inside our CI; ``overlap``: our CI and
    the reading range share a point (None where nothing was published at our frame count).

    Returns ``SUMMARY_COLUMNS`` (+ normalised ones when ``final`` has them) and ``algo, published,
    published_low, published_high, published_source, published_in_ci, overlap``."""
    minatar = final[final.env.map(is_minatar)]
    summary = per_game_summary(minatar)
    if len(summary):
        curves = minatar_published_curves() if curves is None else curves
        curves = curves[curves.algo.str.lower() == algo.lower()]
    rows = []
    for row in summary.itertuples(index=False):
        at = published_at(curves[curves.env == row.env], row.frames)
        known = not np.isnan(at["return"])
        rows.append(
            {
                "algo": algo,
                "published": at["return"],
                "published_low": at["return_low"],
                "published_high": at["return_high"],
                "published_source": at["source"],
                "published_in_ci": bool(row.ci_low <= at["return"] <= row.ci_high) if known else None,
                "overlap": bool(row.ci_low <= at["return_high"] and at["return_low"] <= row.ci_high)
                if known
                else None,
            }
        )
    published = ["algo", "published", "published_low", "published_high", "published_source",
                 "published_in_ci", "overlap"]  # fmt: skip
    return pd.concat([summary, pd.DataFrame(rows, columns=published)], axis=1)


def r2d2_self_check(table: str = "r2d2") -> dict[str, float]:
    """R2D2's own Table 4 scores through our normalisation and aggregation (one 'run' per game: the
    published mean of 3 seeds), next to the paper's Table 1 aggregates (median 1920.6%, mean 4024.9%).

    ``median_rounding_bound`` is how far the median may move from Table 4 printing scores to 0.1: half
    a digit of the median game's score, in normalised points (data/SOURCES.md, "Rounding")."""
    hr = human_random_table(table)
    published = r2d2_published_scores()
    hns = np.array([hr.normalise(g, s).item() for g, s in zip(published.game, published.r2d2_score)]) * 100
    matrix = hns[None, :]
    median = float(metrics.aggregate_median(matrix))
    median_game = published.game.iloc[int(np.argsort(hns)[len(hns) // 2])]
    random, human = hr.scores.loc[median_game, ["random", "human"]]
    return {
        "median": median,
        "mean": float(metrics.aggregate_mean(matrix)),
        "published_median": R2D2_PUBLISHED_MEDIAN_HNS_PERCENT,
        "published_mean": R2D2_PUBLISHED_MEAN_HNS_PERCENT,
        "median_game": median_game,
        "median_rounding_bound": 0.05 * 100 / abs(human - random),
        "n_games": len(hns),
    }
