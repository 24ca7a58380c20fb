"""A study's results as data: the tidy result table (CSV) and a markdown summary for ``docs/results``.

``python -m analysis study runs/<experiment> --csv docs/results/<experiment>.csv --markdown
docs/results/<experiment>.md`` writes both. The markdown opens with the two-arm verdict and the
power statement (``analysis.verdict``), then the aggregates with 95% stratified-bootstrap CIs
(``analysis.aggregate``), then the per-game table (against Young & Tian's published DQN for MinAtar,
R2D2's Table 4 for Atari), and it records the command and date that produced it: measured figures
live in ``docs/results`` with their provenance, not as prose in code. With ``--replication
runs/<other>`` (the same arms on fresh seeds) the summary adds the other experiment's verdict beside
this one's, and the verdict of both seed sets pooled (``replication_lines``). This module holds the
study as data; ``analysis.study_markdown`` writes the summary, ``analysis.replication`` the
replication's part of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import aggregate, verdict
from analysis.ablation import (
    EFFECT_COLUMNS,
    GAME_EFFECT_COLUMNS,
    ablation_record,
    deviation_effects,
    deviation_games,
    verdict_arms,
)
from analysis.confirmatory import ENDPOINT_COLUMNS, endpoint_table, factorial_options
from analysis.curves import Scores, score_tables, unevaluated_runs
from analysis.factorial import FactorialAnalysis, factorial_effects
from analysis.interruptions import resumed_runs
from analysis.learning import (
    arm_caps,
    capped_runs,
    cut_bounds,
    cut_short_note,
    env_caps,
    env_levels,
    learning_table,
    smoke_sentence,
)
from analysis.preregistered import EXPLORATORY, Reading, Registration, registration, result_label
from analysis.published import (
    TRAINING_LAST,
    last_training_returns,
    minatar_like_for_like,
    minatar_training_final,
    our_protocol,
)
from analysis.robust import Robustness, balanced_runs, robust_verdict
from analysis.runs import Experiment, load_experiment
from analysis.scores import is_minatar, minatar_published_curves

RESULT_COLUMNS = [
    "arm",
    "env",
    "seed",
    "env_steps",
    "frames",
    "final_return",
    "normalised",
    "source",
    "protocol",
]


def effects_path(csv: Path) -> Path:
    """Where ``python -m analysis study --csv PATH`` writes an ablation's deviation table: beside PATH."""
    return csv.with_name(f"{csv.stem}_deviations.csv")


def result_table(scores: Scores) -> pd.DataFrame:
    """One row per complete run: ``RESULT_COLUMNS``; ``final_return`` is the mean return of the last
    evaluation (``source`` says when a run had none and its last training returns stand in)."""
    table = scores.final.rename(columns={"score": "final_return"})
    table = table.assign(protocol=table.source.map(our_protocol))[RESULT_COLUMNS]
    return table.sort_values(["arm", "env", "seed"]).reset_index(drop=True)


@dataclass(frozen=True)
class Checks:
    """What every summary states beside the verdict: each arm's level against random play and the
    published reference (``analysis.learning``; ``learning_lead``: ``verdict.learning_sentence`` of
    every arm), and an ablation's deviation effects (``analysis.ablation``)."""

    scores: Scores | None = None
    learning: pd.DataFrame = field(default_factory=pd.DataFrame)
    learning_reference: str = ""
    learning_lead: str | None = None
    effects: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EFFECT_COLUMNS))
    cut_short: str | None = None  # analysis.learning.cut_short_note
    effect_games: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=GAME_EFFECT_COLUMNS))
    share_note: str | None = None  # how ``share_of_reference`` matches the reference's protocol
    factorial: FactorialAnalysis | None = None  # a designed ablation's effects (analysis.factorial)
    levels: tuple[verdict.ArmLevel, ...] = ()  # ``learning.env_levels``, what ``learning_lead`` reads


def learning_checks(
    exp: Experiment, scores: Scores, reps: int = 2000, seed: int = 0, reg: Registration | None = None
) -> Checks:
    """``Checks`` of the experiment's final scores; empty for the min-max fallback (no fixed scale).
    ``reg``: its frozen analysis (``analysis.preregistered``), whose alpha, correction and sides a
    designed ablation's effects take."""
    reg = reg or Registration()
    if scores.final.empty or not scores.comparable:
        return Checks(scores)
    levels = env_levels(scores.final, env_caps(exp, scores))
    learning, reference = learning_table(scores, levels, capped_runs(exp, scores))
    lead = verdict.learning_sentence(levels, scores.scale, "%" if scores.percent else "")
    note = None
    if scores.reference == "dqn" and (training := minatar_training_final(exp, scores)) is not None:
        learning, note = _like_for_like_share(learning, training)
    record = ablation_record(exp.plan)
    cut = cut_short_note(exp, scores)
    if not record:
        return Checks(scores, learning, reference, lead, cut_short=cut, share_note=note, levels=tuple(levels))
    if "design" in record:  # its arms are design points, not one deviation each: no leave-one-out table
        found = factorial_effects(scores.final, record, **factorial_options(reg))
        return Checks(scores, learning, reference, lead, cut_short=cut, factorial=found, share_note=note,
                      levels=tuple(levels))  # fmt: skip
    effects = deviation_effects(scores.final, record, reps, seed)
    games = deviation_games(scores.final, record, list(effects.arm))
    return Checks(scores, learning, reference, lead, effects, cut, games, note, levels=tuple(levels))


def _like_for_like_share(learning: pd.DataFrame, training: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The learning table's share of a training-return reference (Young & Tian's curves) computed like
    for like (``analysis.published``): each arm's mean normalised last-100-episode training return on
    each env, divided by the reference there; the greedy mean stays beside it."""
    means = training.groupby(["arm", "env"]).normalised.mean()
    keys = list(zip(learning.arm, learning.env))
    learning = learning.assign(training_mean=[means.get(k, float("nan")) for k in keys])
    learning["share_of_reference"] = learning.training_mean / learning.reference
    return learning, (
        "The reference's protocol is a training return (analysis/published.py), so 'share of reference' "
        f"divides each arm's mean of its own training returns ({TRAINING_LAST}; column 'training mean') "
        "by the reference, never the greedy evaluations' mean."
    )


@dataclass(frozen=True)
class Study:
    """Everything the summary shows; ``verdict`` and ``power`` are None unless exactly two arms share
    an env, or the experiment is an ablation whose endpoints share one (``ablation.verdict_arms``);
    ``per_game`` is ``aggregate.compare_with_minatar_published`` for MinAtar envs,
    ``aggregate.compare_with_published`` for Atari-57 games, else ``aggregate.per_game_summary``."""

    experiment: Experiment
    scores: Scores
    reps: int
    games: list[str]
    runs_per_game: int
    left_out: pd.DataFrame
    aggregates: pd.DataFrame
    verdict: verdict.Verdict | None
    power: verdict.PowerStatement | None
    per_game: pd.DataFrame
    per_game_note: str
    checks: Checks = field(default_factory=lambda: Checks())
    caps: dict[str, int] = field(default_factory=dict)  # ``learning.arm_caps``
    registration: Registration = field(default_factory=Registration)  # ``analysis.preregistered``
    endpoints: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ENDPOINT_COLUMNS))
    robustness: Robustness | None = None  # the verdict's, ``analysis.robust``
    label: tuple[str, str] = (EXPLORATORY, "")  # every reading but the endpoints': ``result_label``
    bounds: dict[tuple[str, str], str] = field(default_factory=dict)  # ``learning.cut_bounds``
    resumed: pd.DataFrame = field(default_factory=pd.DataFrame)  # ``interruptions.resumed_runs``

    @property
    def learning(self) -> pd.DataFrame:
        return self.checks.learning

    @property
    def learning_reference(self) -> str:
        return self.checks.learning_reference

    @property
    def learning_lead(self) -> str | None:
        return self.checks.learning_lead

    @property
    def effects(self) -> pd.DataFrame:
        return self.checks.effects

    @property
    def cut_short(self) -> str | None:
        return self.checks.cut_short

    @property
    def effect_games(self) -> pd.DataFrame:
        return self.checks.effect_games

    @property
    def share_note(self) -> str | None:
        return self.checks.share_note


def _per_game(exp: Experiment, scores: Scores) -> tuple[pd.DataFrame, str]:
    envs = set(scores.final.env)
    if any(is_minatar(e) for e in envs):
        try:
            curves = minatar_published_curves()
        except FileNotFoundError as e:
            return aggregate.per_game_summary(scores.final), f"no published curves: {e.filename} is absent"
        try:
            return minatar_like_for_like(exp, scores, curves), ""
        except ValueError as e:
            return aggregate.per_game_summary(scores.final), str(e)
    published = aggregate.compare_with_published(scores.final)
    if len(published):
        return published, ""
    return aggregate.per_game_summary(scores.final), "no published scores for these envs"


def run_study(
    experiment_dir: Path | str,
    baseline: str | None = None,
    reps: int = 2000,
    seed: int = 0,
    table: str = "r2d2",
) -> Study:
    """Scores, aggregates, verdict, power and per-game table of the experiment's complete runs."""
    exp = load_experiment(experiment_dir)
    scores = score_tables(exp, table)
    matrices, games, left_out = aggregate.score_matrices(scores.final)
    found = power = checked = None
    caps = arm_caps(exp, scores)
    reg = registration(exp.path, exp.metadata, exp.plan)
    checks = learning_checks(exp, scores, reps, seed, reg)
    correction = reg.section.correction if reg.frozen else "holm"
    # a smoke run tests the pipeline: its comparison would name a winner from noise (SMOKE_COMPARISON)
    pair = None if smoke_sentence(exp.plan) else verdict_arms(scores.final, exp.plan, baseline)
    if pair is not None:
        a, b, pair_matrices, pair_games = pair
        found, power, checked = robust_verdict(
            scores.final,
            pair_matrices,
            pair_games,
            a,
            b,
            reps,
            seed,
            correction,
            **score_units(scores),
            caps=caps,
            learning=list(checks.levels) or None,
        )
    per_game, note = _per_game(exp, scores)
    return Study(
        experiment=exp,
        scores=scores,
        reps=reps,
        games=games,
        runs_per_game=next(iter(matrices.values())).shape[0] if matrices else 0,
        left_out=left_out,
        aggregates=aggregate.aggregate_metrics(matrices, reps=reps, seed=seed)
        if matrices
        else pd.DataFrame(),
        verdict=found,
        power=power,
        per_game=per_game,
        per_game_note=note,
        checks=checks,
        caps=caps,
        registration=reg,
        endpoints=endpoint_table(
            reg,
            scores.final,
            exp.metadata,
            ablation_record(exp.plan),
            reps,
            seed,
            last_training_returns(exp),
            unevaluated_runs(exp),
            scores.curves,
        ),
        robustness=checked,
        label=result_label(reg, Reading(), balanced_runs(scores.final), exp.metadata),
        bounds=cut_bounds(exp, scores),
        resumed=resumed_runs(exp),
    )


def score_units(scores: Scores) -> dict[str, object]:
    """How a verdict formats its numbers: label, scale and difference unit of ``scores``."""
    return {"label": scores.label, "scale": scores.scale, "unit": scores.difference_unit}
