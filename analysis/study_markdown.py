"""A study's markdown summary for ``docs/results`` (``study_markdown``; ``analysis.study`` holds the
study as data): verdict and power, aggregates, per-game tables, pre-registered endpoints, the
verdict across games, learning checks, effects of the ablation arms, and the provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis import aggregate, verdict
from analysis.ablation import EXACT_SPLITS, PLANNED_DIFFERENCE
from analysis.configdiff import mixed_config_lines, mixed_configs, run_effective_values
from analysis.curves import source_switch_sentence
from analysis.factorial import factorial_lines
from analysis.interruptions import resumed_lines
from analysis.learning import (
    SMOKE_COMPARISON,
    arm_cut_bounds,
    cut_legend,
    cut_text,
    marked,
    metric_bound,
    smoke_sentence,
)
from analysis.markdown import ci_text, fmt, md_table
from analysis.preregistered import EXPLORATORY, freeze_rows
from analysis.published import TRAINING_LAST, like_for_like_rows, our_final_score
from analysis.replication import replication_lines
from analysis.robust import robustness_block
from analysis.study import Checks, Study, effects_path


def _per_game_lines(study: Study) -> list[str]:
    """The per-game table; a figure of an arm and env with cut evaluations carries its mark."""
    table, scale, bounds = study.per_game, study.scores.scale, study.bounds
    norm = f"{study.scores.label}{study.scores.unit} [95% CI]"
    base = ["arm", "env", "runs", "frames", "final return [95% CI]"]
    if "published_source" in table:
        columns = ["arm", "env", "runs", "frames", "greedy evaluation [95% CI]",
                   "training return, last 100+ episodes [95% CI]", f"training return, {norm}",
                   "published DQN training return at these frames [reading range]", "published inside our CI",
                   "our CI overlaps the reading range"]  # fmt: skip
        rows = like_for_like_rows(table, bounds, scale)
        protocols = "; ".join(sorted(set(table.published_protocol.dropna())))
        intro = (
            "Young & Tian's (2019) DQN learning curve is a training return, so it is compared with ours "
            "under "
            f"its protocol (analysis/published.py): ours, {TRAINING_LAST}; theirs, {protocols}. The curve is "
            "read at our frame count, interpolated between the points read off the paper's figure; the "
            "bracket is the reading uncertainty; '–' where our frame count lies outside the read-off points "
            "(never extrapolated). The greedy evaluation is shown beside it and compared with nothing: no "
            "greedy figure was published. What our logs cannot match is the exploration: our runs train "
            "under their own arm's policy (R2D1: one epsilon per actor), DQN's under epsilon 0.1. Sources "
            f"of the published values: {'; '.join(sorted(set(table.published_source.dropna())))}."
        )
    elif "game" in table:
        columns = base + ["R2D2 (Table 4)", "ratio", "R2D2 inside our CI"]
        rows = [
            [r.arm, r.env, fmt(r.n_runs), fmt(r.frames),
             marked(ci_text(r.score, r.ci_low, r.ci_high), bounds.get((r.arm, r.env))),
             fmt(r.published), fmt(r.ratio), fmt(r.published_in_ci)]
            for r in table.itertuples()
        ]  # fmt: skip
        intro = (
            f"Final raw score per arm and game ({our_final_score(study.scores.final)}) next to R2D2's "
            "Table 4 (Kapturowski et al. 2019, ~10B frames; its protocol: final evaluation score, 30 random "
            "no-op starts, mean of 3 seeds)."
        )
    else:
        columns = base + [norm]
        rows = [
            [r.arm, r.env, fmt(r.n_runs), fmt(r.frames),
             marked(ci_text(r.score, r.ci_low, r.ci_high), bounds.get((r.arm, r.env))),
             marked(ci_text(r.normalised, r.normalised_ci_low, r.normalised_ci_high, scale),
                    bounds.get((r.arm, r.env)))]
            for r in table.itertuples()
        ]  # fmt: skip
        intro = "Final raw score per arm and env (mean over seeds, 95% t interval)."
    notes = [f"Note: {study.per_game_note}.", ""] if study.per_game_note else []
    legend = _legend_lines(bounds.values())
    return ["## Per game", "", intro, "", *notes, *md_table(columns, rows), "", *legend]


def registration_lines(study: Study) -> list[str]:
    """Whether an analysis was frozen before the data (``analysis.confirmatory``), its endpoints tested
    as frozen on each seed set, and the label of everything else on the page; changes on top."""
    reg, label = study.registration, study.label
    if not reg.frozen:
        return [
            *[x for note in reg.statements for x in (f"**{note}**", "")],
            f"**Exploratory.** {label[1].capitalize()} (repro/preregister.py): every result on this page is "
            "exploratory.",
            "",
        ]
    lines = [f"**{note}**" for note in reg.statements] + [f"**Note.** {note}" for note in reg.notes]
    lines = [x for note in lines for x in (note, "")]
    section = reg.section
    header, freezes = freeze_rows(reg, study.experiment.metadata)
    lines += [
        "## Analysis fixed before the data",
        "",
        f"The plan's `[analysis]` section, frozen before the first job of each seed set (correction "
        f"{section.correction} across the endpoints of one seed set, alpha {section.alpha:g}; the "
        f"replication is {'pooled with' if section.pool else 'never pooled with'} the confirmatory "
        f"seeds). {PRE_RULE}",
        "",
        *md_table(header, freezes),
        "",
    ]
    if section.rationale:
        lines += [f"Rationale (frozen): {section.rationale}", ""]
    rows = [endpoint_cells(r) for r in study.endpoints.itertuples()]
    if rows:
        lines += [
            "Each frozen endpoint on each seed set (estimate: candidate minus baseline, raw returns for a "
            f"game, normalised points for an aggregate, with {ENDPOINT_INTERVALS}; p of the frozen test and "
            "sides, adjusted across the endpoints of the seed set; 'holds' when the adjusted p is at most "
            "alpha):",
            "",
            *md_table(ENDPOINT_HEADER, rows),
            "",
        ]
        why = sorted({f"{r.endpoint} ({r.seed_set}): {r.why}" for r in study.endpoints.itertuples()
                      if r.label == EXPLORATORY})  # fmt: skip
        lines += [f"Exploratory because: {'; '.join(why)}.", ""] if why else []
    lines += [f"Every result below this table is **{label[0]}** ({label[1]}).", ""]
    return lines


# Which interval an endpoint shows (analysis.confirmatory): the one its test inverts.
ENDPOINT_INTERVALS = (
    "its 95% CI, the interval its two-sided test inverts (Welch's t; the rank test's shift interval, "
    "infinite where 3 runs a side cannot reject; the pooled t of a design effect; the bootstrap's "
    "standard error on t for an aggregate), or for an equivalence endpoint the t interval at the level "
    "that agrees with its test, beside its margin"
)

# How a result earns its label (``analysis.preregistered.result_label``), as the study and report say it.
PRE_RULE = (
    "A result is pre-registered only when it is a frozen endpoint read as frozen (its test, sides, "
    "correction and family of endpoints) and every run it uses started after the freeze, from the frozen "
    "commit; every other reading of the same runs is exploratory (not a frozen endpoint)."
)


def robustness_lines(study: Study) -> list[str]:
    """The study's verdict across games (``robustness_block``)."""
    if study.robustness is None:
        return []
    return robustness_block(study.robustness, study.scores, "The verdict across games")


def learning_lines(study: Study) -> list[str]:
    """The learning check: each arm's mean on each env from that env's complete runs, against random
    play (0) and the published reference; a figure from cut evaluations carries its mark."""
    if study.learning.empty:
        return []
    scale, unit = study.scores.scale, study.scores.unit
    training = "training_mean" in study.learning
    rows = [
        [r.arm, r.env, fmt(r.runs),
         marked(ci_text(r.mean, r.ci_low, r.ci_high, scale), study.bounds.get((r.arm, r.env))),
         cut_text(r.runs_cut, r.runs, r.eval_cap), fmt(r.learned),
         *([fmt(r.training_mean * scale)] if training else []),
         fmt(r.reference * scale), fmt(r.share_of_reference)]
        for r in study.learning.itertuples()
    ]  # fmt: skip
    columns = [
        "arm", "env", "runs", f"mean{unit} [95% CI]", "final evaluations cut at the cap",
        "shown to learn (above random play, whole episodes)", *([f"training mean{unit}"] if training else []),
        f"reference{unit}", "share of reference",
    ]  # fmt: skip
    return [
        "## Learning check",
        "",
        f"Each arm's mean final {study.scores.label} on each env, from every complete run of the arm there "
        "(95% t interval, analysis/intervals.py): a run added or missing on another env never changes it; "
        f"random play is 0; the reference is {study.learning_reference}.",
        "",
        *md_table(columns, rows),
        "",
        *([f"Note: {study.cut_short}", ""] if study.cut_short else []),
        *([study.share_note, ""] if study.share_note else []),
        *_legend_lines(set(study.bounds.values())),
    ]


def _legend_lines(bounds) -> list[str]:
    """``learning.cut_legend`` of ``bounds`` as markdown lines (none for uncut figures)."""
    return [line for sentence in cut_legend(bounds) for line in (sentence, "")]


def effect_lines(study: Study | Checks) -> list[str]:
    """Each deviation's effect on the IQM, largest first (``analysis.ablation``)."""
    if study.effects.empty:
        return []
    scale, unit = study.scores.scale, study.scores.difference_unit
    in_units = f" ({unit.strip()})" if unit else ""
    rows = [
        [r.deviation, r.keys, ci_text(r.difference, r.ci_low, r.ci_high, scale), fmt(r.se * scale),
         f"{r.df:.0f}", fmt(r.detectable * scale), fmt(r.power_at_planned)]
        for r in study.effects.itertuples()
    ]  # fmt: skip
    columns = [
        "deviation", "keys", f"IQM difference to the base{in_units} [95% CI]", f"standard error{in_units}",
        "df", f"detectable with 80% power{in_units}", f"power at {PLANNED_DIFFERENCE * scale:g}{unit}",
    ]  # fmt: skip
    base = study.effects.base.iloc[0]
    return [
        "## Each deviation's effect",
        "",
        f"IQM difference of each leave-one-out arm to {base} (the arm with that one deviation switched "
        "on, minus the base), ordered by size; 95% bootstrap-t CIs (the stratified bootstrap's standard "
        "error on t); the smallest difference this design detects with 80% power (two-sided t test on "
        "the interval's degrees of freedom, alpha 0.05), and its power against "
        "the planned difference.",
        "",
        *md_table(columns, rows),
        "",
    ]


def effect_game_table(games: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Columns and display rows of ``analysis.ablation.deviation_games``: one row per deviation, one
    column per game, each cell the arm's mean final return, its difference to the base and the rank
    test's p and q; the first row the base's range over all of its runs."""
    envs = sorted(set(games.env))
    base = games.base.iloc[0]
    spread = games.drop_duplicates("env").set_index("env")
    rows = [
        [f"{base}: range over its runs", "–"]
        + [
            f"[{fmt(spread.base_low[e])}, {fmt(spread.base_high[e])}] ({fmt(spread.base_runs[e])} runs)"
            for e in envs
        ]
    ]
    for deviation, g in games.groupby("deviation", sort=False):
        by_env = g.set_index("env")
        cells = [
            f"{fmt(by_env.score[e])} ({by_env.difference[e]:+.3g}; p {fmt(by_env.p_rank[e])}, "
            f"q {fmt(by_env.q_rank[e])})"
            if e in by_env.index
            else "–"
            for e in envs
        ]
        rows.append([deviation, ", ".join(str(n) for n in sorted(set(g.runs)))] + cells)
    return ["deviation", "runs per game"] + envs, rows


def effect_game_intro(games: pd.DataFrame) -> str:
    base = games.base.iloc[0]
    return (
        f"Final raw return of each leave-one-out arm per game (mean over the seeds it shares with {base}) "
        f"and, in brackets, its difference to {base}'s mean on those seeds and p, the two-sided "
        f"Mann-Whitney test of the arm's runs against all of {base}'s runs on the game (exact up to "
        f"{EXACT_SPLITS:,} splits of the pooled runs; '–' with fewer than two runs a side); the first "
        f"row is {base}'s lowest and highest run and how many runs the tests use (a replication's "
        "seeds included when given). One test per arm and game: "
        "with no effect anywhere, about one in twenty of them falls below 0.05, so a small p names an "
        "effect for the next seeds to test. q is the Benjamini-Hochberg adjusted p over all "
        f"{games.p_rank.notna().sum()} tests of this table: the effects with q at most 0.05 are the "
        "findings at a false discovery rate of 5%."
    )


def effect_game_lines(study: Study | Checks) -> list[str]:
    """Each deviation's effect per game in raw returns (``analysis.ablation.deviation_games``)."""
    games = study.effect_games
    if games.empty:
        return []
    columns, rows = effect_game_table(games)
    return [
        "## Each deviation's effect per game",
        "",
        effect_game_intro(games),
        "",
        *md_table(columns, rows),
        "",
    ]


def study_markdown(
    study: Study,
    command: str,
    date: str,
    csv_path: str | None = None,
    replication: Study | None = None,
    pool: bool = False,
) -> str:
    """The summary page (module doc); ``command`` and ``date`` record how and when it was produced;
    ``replication``: the same arms on other seeds, read pooled too with ``pool`` (``replication_lines``)."""
    exp, scores = study.experiment, study.scores
    lines = [f"# Study {exp.name}", ""]
    provenance = f"Produced by `{command}` on {date}, from {len(exp.complete)} complete runs of {exp.path}"
    if "git_commit" in exp.metadata:
        commits = ", ".join(sorted({str(c)[:12] for c in exp.metadata.git_commit.dropna()}))
        dirty = "git_dirty" in exp.metadata and exp.metadata.git_dirty.eq(True).any()
        provenance += (
            f" (code: git commit {commits or 'not recorded'}{', with uncommitted changes' if dirty else ''})"
        )
    lines += [provenance + ".", ""]
    if switched := source_switch_sentence(exp):
        lines += [f"**{switched}**", ""]
    if exp.plan is not None and "error" in exp.plan:
        lines += [
            f"Plan file unusable (expected runs and arm order not taken from it): {exp.plan['error']}.",
            "",
        ]
    mixed = mixed_configs(exp.configs, run_effective_values(exp.metadata))
    lines += [x for line in mixed_config_lines(mixed) for x in (f"**Runs differ in config.** {line}", "")]
    if csv_path:
        lines += [f"Tidy result table (one row per run): `{csv_path}`.", ""]
        if not study.effects.empty:
            lines += [f"Deviation table: `{effects_path(Path(csv_path))}`.", ""]
    lines += registration_lines(study)
    if (smoke := smoke_sentence(exp.plan)) is not None:
        lead = [study.learning_lead, ""] if study.learning_lead else []
        lines += [f"**{smoke}**", "", f"**{SMOKE_COMPARISON}**", "", *lead]
    elif study.verdict is not None and study.power is not None:
        lines += [
            f"**Verdict ({study.label[0]}).** {study.verdict.sentence}",
            "",
            f"**Power.** {study.power.sentence} Method: {study.power.method}.",
            "",
            f"Rule: {verdict.RULE} (analysis/verdict.py).",
            "",
            *robustness_lines(study),
        ]
    else:
        lead = f"{study.learning_lead} " if study.learning_lead else ""
        lines += [
            f"{lead}No verdict: a verdict compares exactly two arms, or an ablation's two endpoints, with an "
            "env in common.",
            "",
        ]
    lines += [f"Scores: {scores.normalisation}.", ""]
    if replication is not None:
        lines += replication_lines(study, replication, pool)
    lines += learning_lines(study) + effect_lines(study) + effect_game_lines(study)
    lines += factorial_lines(study.checks.factorial, scores.scale, scores.unit)
    lines += ["## Aggregates", ""]
    if study.aggregates.empty:
        lines += ["No env was run to completion by every arm: no aggregate.", ""]
    else:
        lines += [
            f"Final {scores.label} over runs x games: {len(study.games)} games common to all arms, "
            f"{study.runs_per_game} runs per game and arm; point estimate [95% CI: the stratified "
            f"bootstrap's standard error, {study.reps} resamples, with a t quantile, analysis/intervals.py]; "
            "optimality gap: lower is better.",
            "",
        ]
        table = study.aggregates.set_index(["arm", "metric"])
        by_arm = arm_cut_bounds(study.bounds)
        rows = [
            [arm]
            + [
                marked(
                    ci_text(*table.loc[(arm, m), ["value", "ci_low", "ci_high"]], scores.scale),
                    metric_bound(m, by_arm.get(arm)),
                )
                for m in aggregate.METRICS
            ]
            for arm in dict.fromkeys(study.aggregates.arm)
        ]
        lines += [*md_table(["arm"] + [m + scores.unit for m in aggregate.METRICS], rows), ""]
        lines += _legend_lines(by_arm.values())
        lines += ["The median is an estimate without an interval (analysis/aggregate.py, NO_INTERVAL).", ""]
        if len(study.left_out):
            dropped = ", ".join(f"{r.arm}/{r.env}/seed{r.seed}" for r in study.left_out.itertuples())
            lines += [f"Left out of these aggregates to balance the arms and envs: {dropped}.", ""]
    if not scores.final.empty:
        lines += _per_game_lines(study)
    unused = (
        [f"- {r.arm}/{r.env}/seed{r.seed}: {r.reason}" for r in exp.skipped.itertuples()]
        + [f"- {r.arm}/{r.env}/seed{r.seed}: expected, no run directory" for r in exp.missing.itertuples()]
        + [
            f"- {r.arm}/{r.env}/seed{r.seed}: complete, left out of the aggregates (equal seeds per arm)"
            for r in study.left_out.itertuples()
        ]
    )
    lines += resumed_lines(study.resumed)
    lines += ["## Runs not used", "", *(unused or ["None."]), ""]
    return "\n".join(lines)


ENDPOINT_HEADER = ["endpoint", "seed set", "seeds", "runs", "estimate [CI]", "test", "p", "adjusted p",
                   "result", "label"]  # fmt: skip


def endpoint_cells(r: Any) -> list[str]:
    """One row of ``analysis.confirmatory.endpoint_table`` as the study and the report show it
    (``ENDPOINT_HEADER``): an equivalence endpoint's interval with its level and margin, its score
    source with its test."""
    interval = ci_text(r.estimate, r.ci_low, r.ci_high)
    test = f"{r.test}, {r.sides}"
    if r.kind == "equivalence":
        margin = f"±{r.margin:g}" if r.test == "tost" else f"{r.margin:g}, {r.sides}"
        interval += f" ({r.ci_level:.0%} CI; margin {margin})"
        test += f", {r.score} return"
    return [r.endpoint, r.seed_set, r.seeds, fmt(r.runs), interval, test, fmt(r.p), fmt(r.p_adjusted),
            r.result, r.label]  # fmt: skip
