"""The report's score sections: learning curves, aggregates with their 95% CIs, performance profiles,
probability of improvement, and the verdict's robustness tables."""

from __future__ import annotations

import itertools

import pandas as pd

from analysis import aggregate
from analysis.ablation import ablation_record
from analysis.curves import Scores, resample_curves
from analysis.intervals import mean_interval
from analysis.learning import arm_cut_bounds, cut_legend, marked, metric_bound
from analysis.markdown import ci_text, fmt
from analysis.robust import Robustness
from analysis.runs import Experiment
from reports import figures
from reports.cut_notes import LEVEL_INTERVALS, bounds_table, cut_caption, left_out_notes
from reports.page import Figure, Section, Table


def curves_section(scores: Scores, colours: dict[str, str], bounds: dict[tuple[str, str], str]) -> Section:
    sources = ", ".join(sorted(scores.curves.source.unique())) if len(scores.curves) else "none"
    section = Section(
        "learning-curves",
        "Learning curves",
        f"Raw score per env, the quantity of the final score, mean over seeds with its 95% t interval "
        f"band. Source: {sources}.",
    )
    bands = aggregate.curve_bands(resample_curves(scores.curves, "score"))
    if bands.empty:
        section.notes.append(
            "no run has a learning curve (no progress rows with return_mean and no evaluations)"
        )
        return section
    section.figures.append(
        Figure(
            "fig-learning-curves",
            figures.learning_curves(bands, colours, "return"),
            "learning curves per env",
        )
    )
    rows = []
    for (arm, env), g in scores.final.groupby(["arm", "env"]):
        lo, hi = mean_interval(g.score.to_numpy(float))
        norm = g.normalised.to_numpy(float)
        rows.append(
            [
                arm,
                env,
                fmt(len(g)),
                fmt(int(g.env_steps.max())),
                marked(ci_text(g.score.mean(), lo, hi), bounds.get((arm, env))),
                marked(fmt(norm.mean() * scores.scale), bounds.get((arm, env))),
            ]
        )
    section.tables.append(
        Table(
            "final-table",
            [
                "arm",
                "env",
                "runs",
                "env steps",
                "final score [95% CI]",
                f"{scores.label}{scores.unit} (mean)",
            ],
            rows,
            "final score per arm and env, the last point of each curve above: "
            + ", ".join(sorted(scores.final.source.unique())),
        )
    )
    section.notes += cut_legend(bounds.values())
    if not scores.training_curves.empty:
        training = aggregate.curve_bands(resample_curves(scores.training_curves, "score"))
        if not training.empty:
            section.figures.append(
                Figure(
                    "fig-training-curves",
                    figures.learning_curves(training, colours, "training return"),
                    "training returns per env",
                    "The runs evaluated once, at the end, so the curves above are single points. These are "
                    "the returns of the training episodes (progress.csv, exploration included): another "
                    "quantity than the final score, shown for the shape of learning only.",
                )
            )
    return section


def _poi_pairs(exp: Experiment, arms: list[str]) -> list[tuple[str, str]]:
    """The (X, Y) of each P(X > Y) shown: in an ablation, every other arm against the base (each
    ordered pair of ten arms would be 90 rows); otherwise each ordered pair of arms."""
    record = ablation_record(exp.plan)
    if record is not None and record["base"] in arms:
        return [(arm, record["base"]) for arm in arms if arm != record["base"]]
    return list(itertools.permutations(arms, 2))


def aggregate_sections(
    exp: Experiment, scores: Scores, colours: dict[str, str], reps: int, bounds: dict[tuple[str, str], str]
) -> tuple[list[Section], pd.DataFrame]:
    label = scores.label
    matrices, games, left_out = aggregate.score_matrices(scores.final)
    agg = Section(
        "aggregates",
        "Aggregate metrics",
        f"Final scores, {scores.normalisation}. IQM, median, mean and optimality gap over runs x envs "
        f"({len(games)} envs common to all arms, {next(iter(matrices.values())).shape[0] if matrices else 0} "
        f"runs per env and arm) with 95% intervals: the stratified bootstrap's standard error ({reps} "
        "resamples) with a t quantile, analysis/intervals.py.",
    )
    if not games:
        agg.notes.append("no env was run to completion by every arm: no aggregate")
        return [agg], left_out
    if next(iter(matrices.values())).shape[0] == 1:
        agg.notes.append("one run per env and arm: no spread to put an interval on")
    scale, unit = scores.scale, scores.unit
    metrics = aggregate.aggregate_metrics(matrices, reps=reps)
    shown = metrics.assign(
        value=metrics.value * scale, ci_low=metrics.ci_low * scale, ci_high=metrics.ci_high * scale
    )
    table = shown.pivot(index="arm", columns="metric").swaplevel(axis=1)
    by_arm = arm_cut_bounds(bounds)
    rows = [
        [arm]
        + [
            marked(
                ci_text(*(table.loc[arm, (m, k)] for k in ("value", "ci_low", "ci_high"))),
                metric_bound(m, by_arm.get(arm)),
            )
            for m in aggregate.METRICS
        ]
        for arm in table.index
    ]
    agg.tables.append(
        Table(
            "aggregate-table",
            ["arm"] + [m + unit for m in aggregate.METRICS],
            rows,
            "point estimate [95% CI]; optimality gap: lower is better",
        )
    )
    agg.figures.append(
        Figure(
            "fig-aggregates",
            figures.interval_estimates(shown, colours, label + unit),
            "aggregates",
            cut_caption(by_arm),
        )
    )
    agg.notes += cut_legend(by_arm.values()) + left_out_notes(left_out) + [LEVEL_INTERVALS]
    if scores.bounds is not None:
        agg.tables.append(bounds_table(scores.bounds, games))
    if not scores.comparable:
        agg.notes.append(
            "These scores are normalised within this experiment (the fallback): a one-arm experiment "
            "scores 1 on every env by construction. Give per-env bounds (reports build --bounds FILE) "
            "for scores that mean something across experiments."
        )

    profile = Section(
        "performance-profiles",
        "Performance profiles",
        "Fraction of runs (all envs) whose final score exceeds tau, with 95% CIs (Agarwal et al. 2021).",
    )
    profiles = aggregate.performance_profiles(matrices, reps=max(200, reps // 4))
    profile.figures.append(
        Figure(
            "fig-profiles",
            figures.performance_profiles(profiles, colours, label + " tau"),
            "performance profiles",
            cut_caption(by_arm),
        )
    )
    sections = [agg, profile]
    arms = sorted(matrices)
    if len(arms) >= 2:
        poi = Section(
            "probability-of-improvement",
            "Probability of improvement",
            "P(X > Y): chance that a run of X scores above a run of Y on an env drawn at random "
            "(Mann-Whitney per env, averaged), an estimate without an interval: a percentile bootstrap "
            "of a few runs is no 95% interval (analysis/intervals.py). 0.5 = no difference.",
        )
        pois = pd.DataFrame(
            [
                {"x": x, "y": y, "value": aggregate.probability_of_improvement(matrices, x, y)}
                for x, y in _poi_pairs(exp, arms)
            ]
        )
        poi.tables.append(
            Table(
                "poi-table",
                ["comparison", "P(X > Y)"],
                [[f"P({r.x} > {r.y})", fmt(r.value)] for r in pois.itertuples()],
            )
        )
        poi.figures.append(
            Figure("fig-poi", figures.probability_of_improvement(pois), "probability of improvement")
        )
        sections.append(poi)
    efficiency = Section(
        "sample-efficiency",
        "Sample efficiency",
        f"IQM of the {label} over runs x envs along training with the aggregates' 95% intervals, on a common "
        "env-step grid (each run's curve interpolated, never extrapolated). The same quantity as the "
        f"aggregates ({', '.join(sorted(scores.curves.source.unique()))}): where every run ends at the "
        "same env step, the curve's last point is the aggregates' IQM.",
    )
    resampled = resample_curves(scores.curves, "normalised", grid_per=())
    if resampled.point.nunique() >= 2:
        curves = aggregate.sample_efficiency(resampled, reps=max(200, reps // 4))
        curves = curves.assign(
            iqm=curves.iqm * scale, ci_low=curves.ci_low * scale, ci_high=curves.ci_high * scale
        )
        efficiency.figures.append(
            Figure(
                "fig-sample-efficiency",
                figures.sample_efficiency(curves, colours, "IQM " + label + unit),
                "sample efficiency",
            )
        )
    else:
        efficiency.notes.append(
            "the runs share fewer than two points of the final score's quantity (evaluations only at the "
            "end): no curve"
        )
    sections.append(efficiency)
    return sections, left_out


def robustness_tables(r: Robustness, scale: float, in_units: str) -> list[Table]:
    """The verdict across games (``analysis.robust``): each game's effect and test, and the verdict
    with each game left out."""
    correction = r.games.correction.iloc[0] if len(r.games) else "holm"
    games = Table(
        "verdict-games",
        ["game", f"{r.baseline} mean", f"{r.candidate} mean", "difference", "p (Mann-Whitney)",
         f"adjusted p ({correction})"],
        [[row.env, fmt(row.baseline_mean), fmt(row.candidate_mean), f"{row.difference:+.3g}", fmt(row.p),
          fmt(row.p_adjusted)] for row in r.games.itertuples()],
        f"Each game's own effect ({r.candidate} - {r.baseline}, mean final return), two-sided, adjusted "
        "across the games.",
    )  # fmt: skip
    loo = Table(
        "verdict-leave-one-out",
        ["left out", f"IQM difference{in_units} [95% CI]", f"P({r.candidate} > {r.baseline})", "better arm"],
        [[row.left_out, ci_text(row.difference, row.ci_low, row.ci_high, scale),
          fmt(row.poi), row.winner or "neither"]
         for row in r.leave_one_out.itertuples()],
        "The verdict recomputed with each game left out (same rule, same bootstrap).",
    )  # fmt: skip
    return [games] + ([loo] if len(r.leave_one_out) else [])
