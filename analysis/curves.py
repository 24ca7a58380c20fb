"""Final scores and learning curves of an experiment's complete runs, raw and normalised.

Where a score comes from (stated in every table as ``source``). One quantity for the whole
experiment, so that every section of a report, and the curve beside a final score, mean the same:

* when every complete run evaluated (``eval.csv``), the mean return over the evaluation episodes at
  each evaluation: the final score is its last evaluation, the curve its evaluations;
* otherwise, for every run, ``return_mean`` of the training episodes per progress row
  (``progress.csv``; exploration included): the final score is its last row, the curve its rows.

Runs that evaluated only at the end have a one-point curve of the final score; ``training_curves``
keeps their training returns, which a report may show as what they are (another quantity).

Normalisation (``normalised`` column; ``analysis.scores``): human-normalised when every env of the
experiment is an Atari-57 game; DQN-normalised (1 = Young & Tian's DQN at 5M frames) when every env
is a MinAtar game in the MinAtar reference table; reference-normalised (0 = random play, 1 = the
published reference) with bounds given by the caller (``reports build --bounds FILE``) or, for the
gymnasium envs of ``data/gym_reference_scores.csv``, the shipped table; only when none of these covers
every env, min-max per env over every score of the experiment (0 = the lowest, 1 = the highest seen
on that env, all arms together), a stated fallback that makes envs comparable within this experiment
only: it yields no verdict (``Scores.comparable``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.runs import KEYS, Experiment
from analysis.scores import (
    Bounds,
    DqnRandomTable,
    atari_game,
    gym_reference_bounds,
    human_random_table,
    is_minatar,
    minatar_reference_table,
)

EVAL_SOURCE = "eval.csv: mean return of the evaluation episodes"
TRAIN_SOURCE = "progress.csv: return_mean of training episodes"
TRAIN_RETURN_COLUMN = "return_mean"


@dataclass(frozen=True)
class Scores:
    """``final``: one row per complete run (``arm, env, seed, env_steps, frames, score, normalised,
    source``); ``curves``: one row per run and log point (same columns)."""

    final: pd.DataFrame
    curves: pd.DataFrame
    normalisation: str  # what ``normalised`` means, for the report
    # "human" (Atari-57), "dqn" (MinAtar), "reference" (per-env bounds: random play and a published
    # score) or "min-max" (within the experiment)
    reference: str
    # Training returns of runs whose score curve has one point (evaluated once): another quantity.
    training_curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    bounds: Bounds | None = None  # the bounds behind "reference"

    @property
    def human_normalised(self) -> bool:
        return self.reference == "human"

    @property
    def comparable(self) -> bool:
        """Whether the normalised scores rest on bounds fixed outside the experiment (all but
        min-max), so that a verdict and a detectable difference mean something."""
        return self.reference != "min-max"

    @property
    def label(self) -> str:
        """What the ``normalised`` column is, for axis labels and tables."""
        return {
            "human": "human-normalised score",
            "dqn": "DQN-normalised score",
            "reference": "reference-normalised score",
        }.get(self.reference, "min-max-normalised score")

    @property
    def percent(self) -> bool:
        """Whether reports print ``normalised`` as a percentage (of human, of DQN at 5M frames, of the
        reference above random play); the min-max fallback stays a fraction."""
        return self.comparable

    @property
    def scale(self) -> float:
        """Factor from ``normalised`` to the printed number."""
        return 100.0 if self.percent else 1.0

    @property
    def unit(self) -> str:
        """Unit of a printed normalised score, for headers: " (%)" or none."""
        return " (%)" if self.percent else ""

    @property
    def difference_unit(self) -> str:
        """Unit of a printed difference of normalised scores."""
        return " percentage points" if self.percent else ""


# Columns of every points table, the final scores and the curves (``_tidy``).
POINT_COLUMNS = KEYS + ["env_steps", "frames", "score", "source"]


def _no_points() -> pd.DataFrame:
    """An empty points table: an experiment whose runs have logged nothing yet (a report built while
    its jobs start) or whose tables lack the columns a score needs."""
    return pd.DataFrame(columns=POINT_COLUMNS)


def _eval_points(eval_table: pd.DataFrame) -> pd.DataFrame:
    if eval_table.empty or not {"return", "env_steps", "frames"} <= set(eval_table):
        return _no_points()
    points = eval_table.groupby(KEYS + ["env_steps"], as_index=False).agg(
        frames=("frames", "max"), score=("return", "mean")
    )
    return points.assign(source=EVAL_SOURCE)


def _train_points(progress: pd.DataFrame) -> pd.DataFrame:
    if progress.empty or not {TRAIN_RETURN_COLUMN, "env_steps", "frames"} <= set(progress):
        return _no_points()
    points = progress[KEYS + ["env_steps", "frames", TRAIN_RETURN_COLUMN]].rename(
        columns={TRAIN_RETURN_COLUMN: "score"}
    )
    return points.dropna(subset=["score"]).assign(source=TRAIN_SOURCE)


def _select(points: pd.DataFrame, runs: pd.DataFrame, inside: bool) -> pd.DataFrame:
    """Rows of ``points`` whose run is (``inside``) or is not among ``runs`` (``arm, env, seed``)."""
    merged = points.merge(runs[KEYS].assign(_listed=True), on=KEYS, how="left")
    mask = merged._listed.eq(True) if inside else merged._listed.isna()
    return merged[mask].drop(columns="_listed")


def _last_point(points: pd.DataFrame) -> pd.DataFrame:
    return points.sort_values("env_steps").groupby(KEYS, as_index=False).tail(1)


def _tidy(points: pd.DataFrame) -> pd.DataFrame:
    return points[POINT_COLUMNS].sort_values(KEYS + ["env_steps"]).reset_index(drop=True)


def _points(exp: Experiment) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(score points, training points) of the complete runs: the score points are evaluations when
    every complete run evaluated, else training returns (module doc)."""
    complete = exp.complete[KEYS].drop_duplicates()
    # Complete runs' rows only, before any arithmetic: a corrupt run's table may hold text.
    evals = _eval_points(_select(exp.eval, complete, inside=True))
    train = _train_points(_select(exp.progress, complete, inside=True))
    every_run_evaluated = len(complete) > 0 and len(evals[KEYS].drop_duplicates()) == len(complete)
    return (evals if every_run_evaluated else train), train


def unevaluated_runs(exp: Experiment) -> pd.DataFrame:
    """``arm, env, seed`` of the complete runs without an evaluation when others have one: the runs
    that made every score a training return (module doc); empty when the source is the same for all."""
    complete = exp.complete[KEYS].drop_duplicates()
    evaluated = _eval_points(_select(exp.eval, complete, inside=True))[KEYS].drop_duplicates()
    if evaluated.empty:
        return complete.iloc[:0].reset_index(drop=True)
    return _select(complete, evaluated, inside=False).reset_index(drop=True)


def runs_text(runs: pd.DataFrame, shown: int) -> str:
    """The first ``shown`` runs (``arm, env, seed``) as ``arm/env/seedN``, and how many more."""
    listed = ", ".join(f"{r.arm}/{r.env}/seed{r.seed}" for r in runs.head(shown).itertuples())
    return listed + (f" and {len(runs) - shown} more" if len(runs) > shown else "")


def source_switch_sentence(exp: Experiment) -> str | None:
    """What a page says on top when ``unevaluated_runs`` switched every score to training returns."""
    runs = unevaluated_runs(exp)
    if runs.empty:
        return None
    return (
        f"Score source: every score on this page is a training return, not the final evaluation, because "
        f"{len(runs)} of {len(exp.complete)} complete runs have no evaluation ({runs_text(runs, 5)}); frozen "
        "endpoints scored by the final evaluation are not tested."
    )


def raw_scores(exp: Experiment) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(final, curves) in raw returns for the complete runs of ``exp``: one source for every run,
    the final score the curve's last point (module doc)."""
    points, _ = _points(exp)
    return _tidy(_last_point(points)), _tidy(points)


def training_curves(exp: Experiment) -> pd.DataFrame:
    """Training returns of the runs whose score curve is one evaluation (module doc); empty when the
    score already is the training return."""
    points, train = _points(exp)
    if points.empty or (points.source == TRAIN_SOURCE).all():
        return _tidy(train.iloc[:0])
    n_points = points.groupby(KEYS).size().rename("n").reset_index()
    return _tidy(_select(train, n_points[n_points.n == 1], inside=True))


def _minatar_reference(envs: list[str]) -> tuple[DqnRandomTable | None, str]:
    """The MinAtar table when every env is a MinAtar game in it; else None and why not."""
    if not envs:
        return None, "no complete run has a score yet"
    if not all(is_minatar(e) for e in envs):
        return None, "not every env is an Atari-57 or MinAtar game"
    try:
        table = minatar_reference_table()
    except FileNotFoundError as e:
        return None, f"the MinAtar reference table is absent ({e.filename})"
    absent = [e for e in envs if e not in table.scores.index]
    if absent:
        return None, f"{absent} not in the MinAtar reference table {table.path}"
    return table, ""


def score_tables(exp: Experiment, table: str = "r2d2", bounds: Bounds | None = None) -> Scores:
    """Final scores and curves of the complete runs, with a ``normalised`` column (see module doc);
    ``bounds`` (``analysis.scores.read_bounds``) come before the shipped gymnasium table."""
    final, curves = raw_scores(exp)
    training = training_curves(exp)
    envs = sorted(set(final.env) | set(curves.env))
    games = {env: atari_game(env) for env in envs}
    if envs and all(games.values()):
        hr = human_random_table(table)
        for frame in (final, curves):
            frame["normalised"] = [hr.normalise(games[e], s).item() for e, s in zip(frame.env, frame.score)]
        return Scores(
            final, curves, f"human-normalised (1 = human); table: {hr.description}", "human", training
        )
    minatar, why_not = _minatar_reference(envs)
    if minatar is not None:
        for frame in (final, curves):
            frame["normalised"] = [minatar.normalise(e, s).item() for e, s in zip(frame.env, frame.score)]
        return Scores(
            final,
            curves,
            f"DQN-normalised (1 = Young & Tian 2019's DQN at 5M frames; MinAtar has no human scores); "
            f"table: {minatar.description}",
            "dqn",
            training,
        )
    for candidate in [bounds] if bounds is not None else [gym_reference_bounds()]:
        absent = candidate.covers(envs)
        if envs and not absent:
            for frame in (final, curves):
                frame["normalised"] = [
                    candidate.normalise(e, s).item() for e, s in zip(frame.env, frame.score)
                ]
            return Scores(
                final,
                curves,
                f"reference-normalised (0 = random play, 1 = the reference score); {candidate.description}",
                "reference",
                training,
                candidate,
            )
        why_not += f"; {absent} not in the bounds of {candidate.path}"
    both = pd.concat([final[["env", "score"]], curves[["env", "score"]]])
    lo = both.groupby("env").score.min()
    span = (both.groupby("env").score.max() - lo).replace(0.0, 1.0)
    for frame in (final, curves):
        frame["normalised"] = (frame.score - frame.env.map(lo)) / frame.env.map(span)
    return Scores(
        final,
        curves,
        "FALLBACK: min-max per env within this experiment (0 = lowest, 1 = highest score seen on that env, "
        f"all arms), comparable within this experiment only and never used for a verdict: {why_not}; give "
        "bounds per env with reports build --bounds FILE",
        "min-max",
        training,
    )


def resample_curves(
    curves: pd.DataFrame, column: str, n_points: int = 25, grid_per: tuple[str, ...] = ("env", "arm")
) -> pd.DataFrame:
    """Each run's ``column`` linearly interpolated onto a common env-step grid.

    The grid spans the steps every run covers (from the latest first log point to the earliest last
    one), so no run is extrapolated. ``grid_per`` names the columns that get a grid of their own: by
    default each arm on each env (for per-env curves); ``()`` gives one grid for all runs (for
    aggregates across envs and comparisons between arms at equal steps).
    Returns ``arm, env, seed, point, env_steps, frames, value``.
    """
    columns = KEYS + ["point", "env_steps", "frames", "value"]
    groups = curves.groupby(list(grid_per)) if grid_per else [(None, curves)]
    rows = []
    for _, group in groups:
        spans = group.groupby(KEYS).env_steps.agg(["min", "max"])
        if spans.empty or spans["max"].min() < spans["min"].max():
            continue
        lo, hi = spans["min"].max(), spans["max"].min()
        grid = np.linspace(lo, hi, n_points) if hi > lo else np.array([hi], dtype=float)
        for (arm, env, seed), run in group.groupby(KEYS):
            run = run.sort_values("env_steps")
            frames_per_step = (run.frames / run.env_steps.where(run.env_steps > 0)).dropna()
            skip = float(frames_per_step.iloc[-1]) if len(frames_per_step) else 1.0
            value = np.interp(grid, run.env_steps.to_numpy(float), run[column].to_numpy(float))
            rows.append(
                pd.DataFrame(
                    {
                        "arm": arm,
                        "env": env,
                        "seed": seed,
                        "point": np.arange(len(grid)),
                        "env_steps": grid,
                        "frames": grid * skip,
                        "value": value,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)
