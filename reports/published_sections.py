"""The report's comparison with published scores: R2D2's for Atari games, Young & Tian's DQN curves
for MinAtar."""

from __future__ import annotations

from analysis import aggregate
from analysis.curves import Scores
from analysis.learning import arm_cut_bounds, cut_legend, marked
from analysis.markdown import ci_text, fmt
from analysis.published import TRAINING_LAST, like_for_like_rows, minatar_like_for_like, our_final_score
from analysis.runs import Experiment
from analysis.scores import is_minatar, minatar_published_curves, minatar_reference_table
from reports import figures
from reports.cut_notes import cut_caption
from reports.page import Figure, Section, Table, frame_table


def minatar_published_section(
    exp: Experiment, scores: Scores, bounds: dict[tuple[str, str], str]
) -> Section | None:
    """Per MinAtar env and arm: our training return next to Young & Tian's DQN curve (a training
    return) at our frame count, our greedy evaluation beside it (``analysis.published``); ``bounds``:
    the cut marks of the greedy evaluations (``analysis.learning.cut_bounds``)."""
    if not any(is_minatar(env) for env in scores.final.env.unique()):
        return None
    section = Section(
        "published-minatar",
        "Comparison with published MinAtar results (Young & Tian 2019, DQN)",
        "The published DQN learning curve (Young & Tian 2019, arXiv:1903.03176) is a training return, so "
        f"our side is too: {TRAINING_LAST} (mean over seeds, 95% t interval). The curve is read at the "
        "frame count our runs reached (a MinAtar frame is an env step), linearly interpolated between the "
        "points read off the paper's figure; the range in brackets is the figure-reading uncertainty. Not "
        "extrapolated: '–' where our frame count lies outside the read-off points. Our greedy evaluation "
        "is shown beside it and compared with nothing (no greedy figure was published); our runs train "
        "under their own exploration (R2D1: one epsilon per actor), DQN's under epsilon 0.1.",
    )
    try:
        curves = minatar_published_curves()
    except FileNotFoundError as e:
        section.notes.append(f"no published MinAtar curves: {e.filename} is absent")
        return section
    try:
        comparison = minatar_like_for_like(exp, scores, curves)
    except ValueError as e:
        section.notes.append(str(e))
        return section
    scale, unit = scores.scale, scores.unit
    rows = like_for_like_rows(comparison, bounds, scale)
    section.tables.append(
        Table(
            "minatar-published-table",
            [
                "arm",
                "env",
                "runs",
                "frames",
                "greedy evaluation [95% CI]",
                "training return [95% CI]",
                f"training return, {scores.label}{unit} [95% CI]",
                "published DQN at these frames [reading range]",
                "published inside our CI",
                "our CI overlaps the reading range",
            ],
            rows,
        )  # fmt: skip
    )
    # One protocol and source per game, not per row: as columns their prose made the table wider
    # than a 1280 px page and each row many lines tall.
    per_env = comparison.drop_duplicates("env").dropna(subset=["published_source"])
    section.notes += [f"{r.env}: {r.published_protocol}; {r.published_source}." for r in per_env.itertuples()]
    section.notes += cut_legend(bounds.values())
    if scores.reference == "dqn":
        reference = minatar_reference_table().scores
        section.tables.append(
            Table(
                "minatar-reference-table",
                [
                    "env",
                    "random",
                    "random source",
                    "DQN at 5M frames [reading range]",
                    "frames",
                    "DQN source",
                ],
                [
                    [
                        env,
                        fmt(r.random),
                        r.random_source,
                        ci_text(r.dqn_5m, r.dqn_5m_low, r.dqn_5m_high),
                        fmt(r.frames),
                        r.dqn_5m_source,
                    ]
                    for env, r in reference.loc[sorted(set(scores.final.env))].iterrows()
                ],  # fmt: skip
                "the normalisation: DQN-normalised score = (score - random) / (DQN at 5M - random)",
            )
        )
    return section


def published_section(
    scores: Scores, colours: dict[str, str], bounds: dict[tuple[str, str], str]
) -> Section | None:
    comparison = aggregate.compare_with_published(scores.final)
    if comparison.empty:  # no Atari-57 game among the envs
        return None
    comparison["score_shown"] = [
        marked(fmt(v), bounds.get((arm, env)))
        for arm, env, v in zip(comparison.arm, comparison.env, comparison.score)
    ]
    section = Section(
        "published",
        "Comparison with published scores (R2D2)",
        f"Our final raw score ({our_final_score(scores.final)}; mean over seeds, 95% t interval) next to "
        "R2D2's Table 4 (Kapturowski et al. 2019; its final evaluation, mean of 3 seeds after about 10 "
        "billion frames). A ratio well below 1 at a much smaller frame budget says little about the "
        "algorithm.",
    )
    columns = [
        ("arm", "arm"),
        ("game", "game"),
        ("runs", "n_runs"),
        ("frames", "frames"),
        ("our score", "score_shown"),
        ("CI low", "ci_low"),
        ("CI high", "ci_high"),
        ("R2D2", "published"),
        ("ratio", "ratio"),
        ("R2D2 inside our CI", "published_in_ci"),
    ]
    section.tables.append(frame_table("published-table", comparison, columns))
    section.figures.append(
        Figure(
            "fig-published",
            figures.published_ratios(comparison, colours),
            "ratio to R2D2",
            cut_caption(arm_cut_bounds(bounds)),
        )
    )
    section.notes += cut_legend(bounds.values())
    return section
