"""The report's reading of the study: the registration (pre-registered or exploratory), the two-arm
verdict, the learning checks and the effects of the ablation arms."""

from __future__ import annotations

import pandas as pd

from analysis import verdict
from analysis.ablation import PLANNED_DIFFERENCE, ablation_record, verdict_arms
from analysis.confirmatory import endpoint_table
from analysis.curves import Scores, unevaluated_runs
from analysis.learning import arm_caps, cut_legend, cut_text, marked
from analysis.markdown import ci_text, fmt
from analysis.preregistered import Reading, Registration, freeze_rows, result_label
from analysis.published import last_training_returns
from analysis.robust import balanced_runs, middle_sentence, robust_verdict
from analysis.runs import Experiment
from analysis.study import Checks
from analysis.study_markdown import (
    ENDPOINT_HEADER,
    ENDPOINT_INTERVALS,
    PRE_RULE,
    effect_game_intro,
    effect_game_table,
    endpoint_cells,
)
from reports import figures
from reports.cut_notes import LEVEL_INTERVALS
from reports.page import Figure, Section, Table, frame_table
from reports.score_sections import robustness_tables


def registration_section(exp: Experiment, scores: Scores, reg: Registration, reps: int) -> Section:
    """The page's first section: whether an analysis was frozen before the data, its changes, and its
    endpoints tested as frozen (``analysis.confirmatory``)."""
    if not reg.frozen:
        return Section(
            "analysis-plan",
            "Analysis plan: none frozen",
            statements=list(reg.statements)
            or [
                "Exploratory: no [analysis] section was frozen in this experiment before its runs "
                "(repro/preregister.py), so every result on this page is exploratory."
            ],
        )
    section = Section(
        "analysis-plan",
        "Analysis fixed before the data",
        f"The plan's [analysis] section (correction {reg.section.correction}, alpha {reg.section.alpha:g}), "
        f"frozen before the first job of each seed set. {PRE_RULE}",
        statements=list(reg.statements),
        notes=list(reg.notes),
    )
    section.tables.append(Table("analysis-freezes", *freeze_rows(reg, exp.metadata)))
    endpoints = endpoint_table(
        reg,
        scores.final,
        exp.metadata,
        ablation_record(exp.plan),
        reps,
        training=last_training_returns(exp),
        unevaluated=unevaluated_runs(exp),
        curves=scores.curves,
    )
    section.tables.append(
        Table(
            "analysis-endpoints",
            [*ENDPOINT_HEADER, "why"],
            [[*endpoint_cells(r), r.why] for r in endpoints.itertuples()],
            "Each frozen endpoint on each seed set: candidate minus baseline (raw returns for a game, "
            f"normalised points for an aggregate) with {ENDPOINT_INTERVALS}; p of the frozen test adjusted "
            "across the set's endpoints.",
        )
    )
    return section


def verdict_section(
    exp: Experiment,
    scores: Scores,
    reps: int,
    baseline: str | None,
    reg: Registration,
    levels: tuple[verdict.ArmLevel, ...] = (),
) -> Section | None:
    """The verdict and power statement of a two-arm experiment or of an ablation's endpoints
    (``analysis.ablation.verdict_arms``), labelled pre-registered or exploratory, with the verdict
    across games (``analysis.robust``); None for any other experiment. ``levels``: the learning check's
    (``analysis.learning.env_levels``), which the verdict opens with."""
    pair = verdict_arms(scores.final, exp.plan, baseline)
    if pair is None:
        return None
    a, b, matrices, games = pair
    if not scores.comparable:
        return Section(
            "verdict",
            "Verdict",
            f"Arm A (baseline) {a}, arm B {b}.",
            statements=[
                "No verdict: the scores are normalised within this experiment (min-max fallback), so a "
                "difference between the arms has no fixed scale and no detectable difference is computed. "
                "Give per-env score bounds with reports build --bounds FILE."
            ],
            notes=[f"Normalisation: {scores.normalisation}."],
        )
    scale, diff_unit = scores.scale, scores.difference_unit
    in_units = f" ({diff_unit.strip()})" if diff_unit else ""
    correction = reg.section.correction if reg.frozen else "holm"
    found, power, checked = robust_verdict(
        scores.final, matrices, games, a, b, reps, 0, correction, scores.label, scale, diff_unit,
        arm_caps(exp, scores), list(levels) or None,
    )  # fmt: skip
    label, why = result_label(reg, Reading(), balanced_runs(scores.final), exp.metadata)
    section = Section(
        "verdict",
        f"Verdict ({label})",
        f"Arm A (baseline) {a}, arm B {b}; final scores, {scores.normalisation}; {len(games)} envs common "
        f"to both arms, {found.n_runs} runs per env and arm; {label}: {why}.",
        statements=[found.sentence, power.sentence],
    )
    diff = found.iqm_difference
    section.tables.append(
        Table(
            "verdict-table",
            ["statistic", "estimate [95% CI]"],
            [
                [f"P({b} > {a}) (an estimate, no interval)", fmt(found.poi["value"])],
                [
                    f"IQM difference {b} - {a}{in_units}",
                    ci_text(diff["value"], diff["ci_low"], diff["ci_high"], scale),
                ],
                [f"standard error of the IQM difference{in_units}", fmt(diff["se"] * scale)],
                [
                    f"smallest IQM difference detected with {power.power:.0%} power, two-sided alpha "
                    f"{power.alpha:.2g}{in_units}",
                    fmt(power.detectable * scale),
                ],
            ],
        )
    )
    section.tables += robustness_tables(checked, scale, in_units)
    section.notes.append(
        f"Leaving out {' or '.join(checked.carried_by)} (one at a time) removes the verdict's resolution."
        if checked.carried_by
        else "No single game's removal changes the verdict."
    )
    section.notes.append(middle_sentence(checked))
    section.notes.append(f"Rule: {verdict.RULE} (analysis/verdict.py).")
    section.notes.append(f"Power: {power.method}.")
    section.notes.append(
        "A is the --baseline arm when given, else the plan's first arm (an ablation's: the setting it "
        "ablates), else the arm named 'published'."
    )
    return section


def learning_section(study: Checks, bounds: dict[tuple[str, str], str]) -> Section | None:
    """Each arm's level on each env against random play and the published reference
    (``analysis.learning``). Its sentence for arms not shown to learn is the verdict's first
    (``build_report``), not repeated here; ``bounds``: ``analysis.learning.cut_bounds``."""
    if study.learning.empty:
        return None
    scale, unit = study.scores.scale, study.scores.unit
    frame = study.learning.assign(
        mean_ci=[
            marked(ci_text(r.mean, r.ci_low, r.ci_high, scale), bounds.get((r.arm, r.env)))
            for r in study.learning.itertuples()
        ],
        cut=[cut_text(r.runs_cut, r.runs, r.eval_cap) for r in study.learning.itertuples()],
        reference_shown=study.learning.reference * scale,
        training=study.learning.get("training_mean", float("nan")) * scale,
    )
    columns = [("arm", "arm"), ("env", "env"), ("runs", "runs"), (f"mean{unit} [95% CI]", "mean_ci"),
               ("final evaluations cut at the cap", "cut"),
               ("shown to learn (above random play, whole episodes)", "learned"),
               *([(f"training mean{unit}", "training")] if "training_mean" in frame else []),
               (f"reference{unit}", "reference_shown"),
               ("share of reference", "share_of_reference")]  # fmt: skip
    return Section(
        "learning",
        "Learning check",
        f"Each arm's mean final {study.scores.label} on each env from every complete run of the arm there "
        "(95% t interval): a run added or missing on another env never changes it; random play is 0; the "
        f"reference is {study.learning_reference}.",
        tables=[frame_table("learning-table", frame, columns)],
        notes=([study.cut_short] if study.cut_short else [])
        + ([study.share_note] if study.share_note else [])
        + cut_legend(set(bounds.values()))
        + [LEVEL_INTERVALS],
    )


def effects_section(study: Checks) -> Section | None:
    """Each deviation's effect on the IQM of an ablation experiment (``analysis.ablation``)."""
    effects = study.effects
    if effects.empty:
        return None
    scores = study.scores
    scale, unit = scores.scale, scores.difference_unit
    in_units = f" ({unit.strip()})" if unit else ""
    frame = effects.assign(
        difference_ci=[ci_text(r.difference, r.ci_low, r.ci_high, scale) for r in effects.itertuples()],
        se_shown=effects.se * scale,
        detectable_shown=effects.detectable * scale,
    )
    columns = [("deviation", "deviation"), ("keys", "keys"),
               (f"IQM difference to the base{in_units} [95% CI]", "difference_ci"),
               (f"standard error{in_units}", "se_shown"),
               (f"detectable with 80% power{in_units}", "detectable_shown"),
               (f"power at {PLANNED_DIFFERENCE * scale:g}{unit}", "power_at_planned")]  # fmt: skip
    base = effects.base.iloc[0]
    label = f"IQM difference to {base}{in_units}"
    return Section(
        "deviations",
        "Each deviation's effect",
        f"The base arm {base} with one deviation switched on, minus the base: IQM difference of final "
        f"{scores.label}, 95% bootstrap-t CI (the stratified bootstrap's standard error on t), ordered by "
        "size; dotted lines: the smallest difference detected with 80% power (two-sided t test on the "
        "interval's degrees of freedom, alpha 0.05).",
        figures=[
            Figure("fig-deviations", figures.deviation_effects(effects, label, scale), "deviation effects")
        ],
        tables=[frame_table("deviations-table", frame, columns), *_effect_game_tables(study.effect_games)],
    )


def _effect_game_tables(games: pd.DataFrame) -> list[Table]:
    """Each deviation's effect per game in raw returns (``analysis.study.effect_game_table``)."""
    if games.empty:
        return []
    columns, rows = effect_game_table(games)
    return [Table("deviation-games-table", columns, rows, effect_game_intro(games))]
