"""A study's results as data: the tidy result table (CSV) and a markdown summary for ``docs/results``.

``python -m analysis study runs/<experiment> --csv docs/results/<experiment>.csv --markdown
docs/results/<experiment>.md`` writes both. The markdown opens with the two-arm verdict and the
power statement (``analysis.verdict``), then the aggregates with 95% stratified-bootstrap CIs
(``analysis.aggregate``), then the per-game table (against Young & Tian's published DQN for MinAtar,
R2D2's Table 4 for Atari), and it records the command and date that produced it: measured figures
live in ``docs/results`` with their provenance, not as prose in code. With ``--replication
runs/<other>`` (the same arms on fresh seeds) the summary adds the other experiment's verdict beside
this one's, and the verdict of both seed sets pooled (``replication_lines``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis import aggregate, verdict
from analysis.ablation import (
    EFFECT_COLUMNS,
    EXACT_SPLITS,
    GAME_EFFECT_COLUMNS,
    PLANNED_DIFFERENCE,
    ablation_record,
    deviation_effects,
    deviation_games,
    verdict_arms,
)
from analysis.confirmatory import (
    ENDPOINT_COLUMNS,
    EXPLORATORY,
    Registration,
    endpoint_table,
    factorial_options,
    registration,
    run_label,
)
from analysis.curves import Scores, score_tables
from analysis.factorial import FactorialAnalysis, factorial_effects, factorial_lines
from analysis.learning import (
    arm_caps,
    arm_cut_bounds,
    cut_bounds,
    cut_legend,
    cut_short_note,
    learning_table,
    marked,
    metric_bound,
    smoke_sentence,
)
from analysis.markdown import ci_text, fmt, md_table
from analysis.published import TRAINING_LAST, minatar_like_for_like, minatar_training_final, our_protocol
from analysis.robust import Robustness, balanced_runs, carried_sentence, middle_sentence, robust_verdict
from analysis.runs import Experiment, load_experiment
from analysis.scores import is_minatar, minatar_published_curves
from protocol.plan_args import format_seeds

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


def learning_checks(
    exp: Experiment,
    scores: Scores,
    reps: int = 2000,
    seed: int = 0,
    caps: dict[str, int] | None = None,
    reg: Registration | None = None,
) -> Checks:
    """``Checks`` of the experiment's final scores; empty for the min-max fallback (no fixed scale).
    ``caps``: ``learning.arm_caps`` of the experiment, when the caller has them already; ``reg``: its
    frozen analysis (``analysis.confirmatory``), whose alpha, correction and sides a designed
    ablation's effects take."""
    reg = reg or Registration()
    matrices, games = aggregate.arm_matrices(scores.final)
    if not matrices or not scores.comparable:
        return Checks(scores)
    caps = arm_caps(exp, scores) if caps is None else caps
    learning, reference = learning_table(scores, matrices, games, reps, seed, caps)
    levels = [
        verdict.ArmLevel(r.arm, r.iqm, r.ci_low, r.ci_high, None if pd.isna(r.eval_cap) else int(r.eval_cap))
        for r in learning.itertuples()
    ]
    lead = verdict.learning_sentence(levels, scores.scale, "%" if scores.percent else "")
    note = None
    if scores.reference == "dqn" and (training := minatar_training_final(exp, scores)) is not None:
        learning, note = _like_for_like_share(learning, training, games)
    record = ablation_record(exp.plan)
    if not record:
        return Checks(
            scores, learning, reference, lead, cut_short=cut_short_note(exp, scores), share_note=note
        )
    if "design" in record:  # its arms are design points, not one deviation each: no leave-one-out table
        found = factorial_effects(scores.final, record, reps=reps, seed=seed, **factorial_options(reg))
        cut = cut_short_note(exp, scores)
        return Checks(scores, learning, reference, lead, cut_short=cut, factorial=found, share_note=note)
    effects = deviation_effects(scores.final, record, reps, seed)
    games = deviation_games(scores.final, record, list(effects.arm))
    return Checks(scores, learning, reference, lead, effects, cut_short_note(exp, scores), games, note)


def _like_for_like_share(
    learning: pd.DataFrame, training: pd.DataFrame, games: list[str]
) -> tuple[pd.DataFrame, str]:
    """The learning table's share of a training-return reference (Young & Tian's curves) computed like
    for like (``analysis.published``): each arm's IQM of normalised last-100-episode training returns
    over the same games, divided by the reference's IQM; the greedy IQM stays beside it."""
    matrices, _ = aggregate.arm_matrices(training[training.env.isin(games)])
    iqm = {arm: float(stats.trim_mean(m.ravel(), 0.25)) for arm, m in matrices.items()}
    learning = learning.assign(training_iqm=learning.arm.map(iqm))
    learning["share_of_reference"] = learning.training_iqm / learning.reference_iqm
    return learning, (
        "The reference's protocol is a training return (analysis/published.py), so 'share of reference' "
        f"divides each arm's IQM of its own training returns ({TRAINING_LAST}; column 'training IQM') "
        "by the reference's IQM, never the greedy evaluations' IQM."
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
    registration: Registration = field(default_factory=Registration)  # ``analysis.confirmatory``
    endpoints: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ENDPOINT_COLUMNS))
    robustness: Robustness | None = None  # the verdict's, ``analysis.robust``
    label: tuple[str, str] = (EXPLORATORY, "")  # the verdict's and aggregates' ``run_label``
    bounds: dict[tuple[str, str], str] = field(default_factory=dict)  # ``learning.cut_bounds``

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


def _per_game(exp: Experiment, scores: Scores, reps: int, seed: int) -> tuple[pd.DataFrame, str]:
    envs = set(scores.final.env)
    if any(is_minatar(e) for e in envs):
        try:
            curves = minatar_published_curves()
        except FileNotFoundError as e:
            return aggregate.per_game_summary(
                scores.final, reps, seed
            ), f"no published curves: {e.filename} is absent"
        try:
            return minatar_like_for_like(exp, scores, curves, reps, seed), ""
        except ValueError as e:
            return aggregate.per_game_summary(scores.final, reps, seed), str(e)
    published = aggregate.compare_with_published(scores.final, reps=reps, seed=seed)
    if len(published):
        return published, ""
    return aggregate.per_game_summary(scores.final, reps, seed), "no published scores for these envs"


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
    correction = reg.section.correction if reg.frozen else "holm"
    if (pair := verdict_arms(scores.final, exp.plan, baseline)) is not None:
        a, b, pair_matrices, pair_games = pair
        found, power, checked = robust_verdict(
            scores.final, pair_matrices, pair_games, a, b, reps, seed, correction, **_units(scores), caps=caps
        )
    per_game, note = _per_game(exp, scores, reps, seed)
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
        checks=learning_checks(exp, scores, reps, seed, caps, reg),
        caps=caps,
        registration=reg,
        endpoints=endpoint_table(reg, scores.final, exp.metadata, ablation_record(exp.plan), reps, seed),
        robustness=checked,
        label=run_label(reg, balanced_runs(scores.final), exp.metadata),
        bounds=cut_bounds(exp, scores),
    )


def _units(scores: Scores) -> dict[str, object]:
    """How a verdict formats its numbers: label, scale and difference unit of ``scores``."""
    return {"label": scores.label, "scale": scores.scale, "unit": scores.difference_unit}


def verdict_seeds(study: Study) -> list[int]:
    """The seeds of the runs the study's verdict compares: its two arms' complete runs, less those
    left out to balance the two (``aggregate.score_matrices``)."""
    if study.verdict is None:
        return []
    final = study.scores.final
    pair = final[final.arm.isin([study.verdict.baseline, study.verdict.candidate])]
    return _balanced_seeds(pair, aggregate.score_matrices(pair)[2])


def _balanced_seeds(pair: pd.DataFrame, left_out: pd.DataFrame) -> list[int]:
    """The seeds of ``pair``'s runs that its balanced score matrices keep (``left_out``: the runs
    ``aggregate.score_matrices`` left out of them)."""
    out = set(zip(left_out.arm, left_out.env, left_out.seed))
    return sorted({int(s) for a, e, s in zip(pair.arm, pair.env, pair.seed) if (a, e, s) not in out})


def check_replication(study: Study, replication: Study) -> None:
    """``ValueError`` naming the replication's experiment unless both have a verdict of the same two
    arms, in the same order."""
    if study.verdict is None:
        raise ValueError(
            f"{study.experiment.path}: no verdict to replicate (two arms, or an ablation's endpoints)"
        )
    found, again = study.verdict, replication.verdict
    if again is None:
        raise ValueError(
            f"{replication.experiment.path}: no verdict of {found.baseline} and {found.candidate}"
        )
    if (again.baseline, again.candidate) != (found.baseline, found.candidate):
        raise ValueError(
            f"{replication.experiment.path}: its verdict compares {again.baseline} and {again.candidate}, "
            f"not {found.baseline} and {found.candidate}"
        )
    shared = sorted(set(verdict_seeds(study)) & set(verdict_seeds(replication)))
    if shared:
        raise ValueError(
            f"{replication.experiment.path}: seeds {format_seeds(shared)} are also the study's: a "
            "replication runs other seeds"
        )


def with_replication_base(study: Study, replication: Study) -> Study:
    """``study`` with its per-game deviation table (``deviation_games``) taking the base arm's runs
    on the replication's seeds into its range and rank test: a replication runs the base arm on
    other seeds, and more base runs make each test sharper (4 runs against 10 go down to p = 2/1001)."""
    record = ablation_record(study.experiment.plan)
    if not record or study.effect_games.empty:
        return study
    games = deviation_games(
        study.scores.final, record, list(study.effects.arm), more_base=replication.scores.final
    )
    return replace(study, checks=replace(study.checks, effect_games=games))


def pooled_verdict(
    study: Study, replication: Study, seed: int = 0
) -> tuple[verdict.Verdict, list[int], Robustness]:
    """The verdict of the study's two arms on the complete runs of both experiments together (their
    seeds differ: ``check_replication``), balanced as any verdict is (``aggregate.score_matrices``),
    the seeds it compares, and its robustness across games (``analysis.robust``)."""
    arms = [study.verdict.baseline, study.verdict.candidate]
    finals = [s.scores.final for s in (study, replication)]
    pair = pd.concat([final[final.arm.isin(arms)] for final in finals], ignore_index=True)
    matrices, games, left_out = aggregate.score_matrices(pair)
    caps = {
        arm: min(c[arm] for c in (study.caps, replication.caps) if arm in c)
        for arm in {**study.caps, **replication.caps}
    }
    correction = study.registration.section.correction if study.registration.frozen else "holm"
    found, _, checked = robust_verdict(
        pair, matrices, games, *arms, study.reps, seed, correction, **_units(study.scores), caps=caps
    )
    return found, _balanced_seeds(pair, left_out), checked


def pooling_allowed(study: Study) -> bool:
    """Whether the study's frozen ``[analysis]`` section says its seed sets may be read pooled."""
    return study.registration.frozen and study.registration.section.pool


def replication_lines(study: Study, replication: Study, pool: bool = False) -> list[str]:
    """The verdict on other seeds beside the study's (``check_replication`` first): each arm's IQM,
    P(B > A) and the IQM difference with their 95% CIs, and whether the two verdicts agree. The verdict
    of both seed sets pooled only where the study's frozen section allows it (``pooling_allowed``) or
    ``pool`` asks for it, which then labels it exploratory: pooling chosen after the data is."""
    allowed = pooling_allowed(study)
    pool = pool or allowed
    runs = [study, replication]
    scale, unit = study.scores.scale, study.scores.difference_unit
    a, b = study.verdict.baseline, study.verdict.candidate
    pooled, pooled_seeds, pooled_robustness = pooled_verdict(study, replication) if pool else (None, [], None)
    verdicts = [study.verdict, replication.verdict] + ([pooled] if pool else [])
    in_units = f" ({unit.strip()})" if unit else ""

    def level(v: verdict.Verdict, arm: str) -> str:
        found = next(x for x in v.levels if x.arm == arm)
        return ci_text(found.iqm, found.ci_low, found.ci_high, scale)

    rows = [
        ["experiment", *(f"`{s.experiment.path}`" for s in runs), *(["both"] if pool else [])],
        [
            "seeds",
            *(format_seeds(verdict_seeds(s)) for s in runs),
            *([format_seeds(pooled_seeds)] if pool else []),
        ],
        ["games x runs per game and arm", *(f"{v.n_games} x {v.n_runs}" for v in verdicts)],
        [f"IQM of {a}{study.scores.unit}", *(level(v, a) for v in verdicts)],
        [f"IQM of {b}{study.scores.unit}", *(level(v, b) for v in verdicts)],
        [f"P({b} > {a})", *(ci_text(v.poi["value"], v.poi["ci_low"], v.poi["ci_high"]) for v in verdicts)],
        [
            f"IQM difference {b} - {a}{in_units}",
            *(
                ci_text(
                    v.iqm_difference["value"], v.iqm_difference["ci_low"], v.iqm_difference["ci_high"], scale
                )
                for v in verdicts
            ),
        ],
        ["better arm (verdict rule)", *(v.winner or "neither" for v in verdicts)],
    ]
    first, again = verdicts[:2]
    same_sign = np.sign(first.iqm_difference["value"]) == np.sign(again.iqm_difference["value"])
    signs = f"The IQM differences have {'the same' if same_sign else 'opposite'} signs"
    low, high = again.iqm_difference["ci_low"], again.iqm_difference["ci_high"]
    if np.isnan([low, high]).any():
        # One seed per game has no seed-to-seed spread to resample: no interval, so no verdict to
        # compare (the verdict rule needs both intervals).
        sentence = (
            f"The replication cannot test the study's verdict yet: with {again.n_runs} run per game and "
            f"arm it has no confidence interval (that needs at least 2 seeds). {signs}."
        )
    else:
        if first.winner == again.winner:
            said = f"both find {first.winner} better" if first.winner else "neither finds a better arm"
            sentence = f"The replication agrees with the study: {said}."
        else:
            sentence = (
                f"The replication does not agree with the study: the study's verdict is "
                f"{first.winner or 'neither arm better'}, the replication's "
                f"{again.winner or 'neither arm better'}."
            )
        where = "inside" if low <= first.iqm_difference["value"] <= high else "outside"
        sentence += f" {signs}, and the study's lies {where} the replication's 95% CI."
    if again.n_games < first.n_games:
        sentence += (
            f" The replication has both arms complete on {again.n_games} of the study's {first.n_games} "
            "games so far, so its IQMs are over those games only."
        )
    if pool:
        power = verdict.power_statement(pooled, **_units(study.scores))
        found = f"find {pooled.winner} better" if pooled.winner else "find neither arm better"
        label = (
            "as the frozen [analysis] section allows"
            if allowed
            else "**exploratory**: no frozen [analysis] section allows pooling, so this reading was chosen "
            "after the data"
        )
        carried = carried_sentence(pooled_robustness, study.scores.scale, unit)
        pooled_sentence = (
            f"Pooled ({label}), the two seed sets ({pooled.n_games} games x {pooled.n_runs} runs per game "
            f"and arm) {found} by the verdict rule.{' ' + carried if carried else ''} {power.sentence}"
        )
    else:
        pooled_sentence = (
            "The two seed sets are not pooled: no frozen [analysis] section allows it (`--pool` shows "
            "the pooled reading, labelled exploratory)."
        )
    return [
        "## Replication on fresh seeds",
        "",
        f"The verdict of {a} (A) and {b} (B) recomputed from the runs of `{replication.experiment.path}` "
        "(the same arms and games on other seeds), beside this study's, with a verdict of its own.",
        "",
        sentence,
        "",
        pooled_sentence,
        "",
        *md_table(["", "study", "replication", *(["pooled"] if pool else [])], rows),
        "",
        *(
            robustness_block(pooled_robustness, study.scores, "The pooled verdict across games")
            if pool
            else []
        ),
    ]


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
        rows = [
            [r.arm, r.env, fmt(r.n_runs), fmt(r.frames),
             marked(ci_text(r.eval_score, r.eval_ci_low, r.eval_ci_high), bounds.get((r.arm, r.env))),
             ci_text(r.score, r.ci_low, r.ci_high),
             ci_text(r.normalised, r.normalised_ci_low, r.normalised_ci_high, scale),
             ci_text(r.published, r.published_low, r.published_high), fmt(r.published_in_ci), fmt(r.overlap)]
            for r in table.itertuples()
        ]  # fmt: skip
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
            "Final raw score per arm and game (our final evaluation) next to R2D2's Table 4 (Kapturowski et "
            "al. 2019, ~10B frames; its protocol: final evaluation score, 30 random no-op starts, mean of 3 "
            "seeds)."
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
        intro = "Final raw score per arm and env (mean over seeds, 95% bootstrap CI)."
    notes = [f"Note: {study.per_game_note}.", ""] if study.per_game_note else []
    legend = _legend_lines(bounds.values())
    return ["## Per game", "", intro, "", *notes, *md_table(columns, rows), "", *legend]


def registration_lines(study: Study) -> list[str]:
    """Whether an analysis was frozen before the data (``analysis.confirmatory``), its endpoints tested
    as frozen on each seed set, and the label of everything else on the page; changes on top."""
    reg, label = study.registration, study.label
    if not reg.frozen:
        return [
            f"**Exploratory.** {label[1].capitalize()} (repro/preregister.py): every result on this page is "
            "exploratory.",
            "",
        ]
    lines = [f"**Changed after runs existed.** {note}" for note in reg.notes if "changed" in note]
    lines += [f"**Note.** {note}" for note in reg.notes if "changed" not in note]
    lines = [x for note in lines for x in (note, "")]
    section = reg.section
    freezes = [
        [name, e["seeds"], f"`{str(e['hash'])[:12]}`", f"`{str(e['commit'])[:12]}`", e["frozen_at"],
         "yes (--allow-dirty)" if e.get("dirty") else "no"]
        for name, e in reg.freezes.items()
    ]  # fmt: skip
    lines += [
        "## Analysis fixed before the data",
        "",
        f"The plan's `[analysis]` section, frozen before the first job of each seed set (correction "
        f"{section.correction} across the endpoints of one seed set, alpha {section.alpha:g}; the "
        f"replication is {'pooled with' if section.pool else 'never pooled with'} the confirmatory "
        "seeds). A result is pre-registered when every run it uses started after the freeze, from the "
        "frozen commit.",
        "",
        *md_table(["seed set", "seeds", "section hash", "commit", "frozen at", "dirty tree"], freezes),
        "",
    ]
    if section.rationale:
        lines += [f"Rationale (frozen): {section.rationale}", ""]
    rows = [
        [r.endpoint, r.seed_set, r.seeds, fmt(r.runs), ci_text(r.estimate, r.ci_low, r.ci_high),
         f"{r.test}, {r.sides}", fmt(r.p), fmt(r.p_adjusted), "holds" if r.holds else "not shown", r.label]
        for r in study.endpoints.itertuples()
    ]  # fmt: skip
    if rows:
        lines += [
            "Each frozen endpoint on each seed set (estimate: candidate minus baseline, raw returns for a "
            "game, normalised points for an aggregate, 95% bootstrap CI; p of the frozen test and sides, "
            "adjusted across the endpoints of the seed set; 'holds' when the adjusted p is at most alpha):",
            "",
            *md_table(
                [
                    "endpoint",
                    "seed set",
                    "seeds",
                    "runs",
                    "estimate [95% CI]",
                    "test",
                    "p",
                    "adjusted p",
                    "result",
                    "label",
                ],
                rows,
            ),  # fmt: skip
            "",
        ]
        why = sorted({f"{r.endpoint} ({r.seed_set}): {r.why}" for r in study.endpoints.itertuples()
                      if r.label == EXPLORATORY})  # fmt: skip
        lines += [f"Exploratory because: {'; '.join(why)}.", ""] if why else []
    lines += [
        f"The verdict, aggregates and tables below use every complete run: **{label[0]}** ({label[1]}).",
        "",
    ]
    return lines


def robustness_lines(study: Study) -> list[str]:
    """The study's verdict across games (``robustness_block``)."""
    if study.robustness is None:
        return []
    return robustness_block(study.robustness, study.scores, "The verdict across games")


def robustness_block(r: Robustness, scores: Scores, title: str) -> list[str]:
    """A verdict across games (``analysis.robust``): each game's effect and test, the verdict with
    each game left out, and which games make up each arm's IQM middle half."""
    scale, unit = scores.scale, scores.difference_unit
    games = [
        [row.env, fmt(row.baseline_mean), fmt(row.candidate_mean), f"{row.difference:+.3g}", fmt(row.p),
         fmt(row.p_adjusted)]
        for row in r.games.itertuples()
    ]  # fmt: skip
    loo = [
        [row.left_out, ci_text(row.difference, row.ci_low, row.ci_high, scale),
         ci_text(row.poi, row.poi_low, row.poi_high), row.winner or "neither"]
        for row in r.leave_one_out.itertuples()
    ]  # fmt: skip
    correction = r.games.correction.iloc[0] if len(r.games) else "holm"
    lines = [
        f"## {title}",
        "",
        f"Each game's own effect ({r.candidate} - {r.baseline}, mean final return), its two-sided "
        f"Mann-Whitney p and the p adjusted across the {len(games)} games ({correction}):",
        "",
        *md_table(
            [
                "game",
                f"{r.baseline} mean",
                f"{r.candidate} mean",
                "difference",
                "p",
                f"adjusted p ({correction})",
            ],
            games,
        ),  # fmt: skip
        "",
    ]
    if loo:
        in_units = f" ({unit.strip()})" if unit else ""
        lines += [
            "The verdict recomputed with each game left out (same rule, same bootstrap):",
            "",
            *md_table(
                [
                    "left out",
                    f"IQM difference{in_units} [95% CI]",
                    f"P({r.candidate} > {r.baseline})",
                    "better arm",
                ],
                loo,
            ),  # fmt: skip
            "",
        ]
    carried = (
        f"Leaving out {' or '.join(r.carried_by)} (one at a time) removes the verdict's resolution."
        if r.carried_by
        else "No single game's removal changes the verdict."
    )
    return lines + [carried, "", middle_sentence(r), ""]


def learning_lines(study: Study) -> list[str]:
    """The learning check: each arm's IQM against random play (0) and the published reference; an
    arm's IQM from cut evaluations carries its mark (``learning.arm_cut_bounds``)."""
    if study.learning.empty:
        return []
    scale, unit = study.scores.scale, study.scores.unit
    training = "training_iqm" in study.learning
    arm_bounds = arm_cut_bounds(study.bounds)
    rows = [
        [r.arm, fmt(r.runs), marked(ci_text(r.iqm, r.ci_low, r.ci_high, scale), arm_bounds.get(r.arm)),
         fmt(r.eval_cap), fmt(r.learned),
         *([fmt(r.training_iqm * scale)] if training else []), fmt(r.reference_iqm * scale),
         fmt(r.share_of_reference)]
        for r in study.learning.itertuples()
    ]  # fmt: skip
    columns = [
        "arm",
        "runs per game",
        f"IQM{unit} [95% CI]",
        "evaluations cut at (steps)",
        "shown to learn (above random play, whole episodes)",
        *([f"training IQM{unit}"] if training else []),
        f"reference IQM{unit}",
        "share of reference",
    ]
    return [
        "## Learning check",
        "",
        f"Each arm's IQM of final {study.scores.label} over the games of the aggregates, from all of its "
        f"own runs there (widened 95% stratified-bootstrap CI, analysis/verdict.py); random play is 0; "
        f"the reference is "
        f"{study.learning_reference}, its IQM over the same games.",
        "",
        *md_table(columns, rows),
        "",
        *([f"Note: {study.cut_short}", ""] if study.cut_short else []),
        *([study.share_note, ""] if study.share_note else []),
        *_legend_lines(arm_bounds.values()),
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
         fmt(r.detectable * scale), fmt(r.power_at_planned)]
        for r in study.effects.itertuples()
    ]  # fmt: skip
    columns = [
        "deviation", "keys", f"IQM difference to the base{in_units} [95% CI]", f"standard error{in_units}",
        f"detectable with 80% power{in_units}", f"power at {PLANNED_DIFFERENCE * scale:g}{unit}",
    ]  # fmt: skip
    base = study.effects.base.iloc[0]
    return [
        "## Each deviation's effect",
        "",
        f"IQM difference of each leave-one-out arm to {base} (the arm with that one deviation switched "
        "on, minus the base), ordered by size; widened 95% stratified-bootstrap CIs; the smallest "
        "difference this design detects with 80% power (two-sided, alpha 0.05), and its power against "
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
    if exp.plan is not None and "error" in exp.plan:
        lines += [
            f"Plan file unusable (expected runs and arm order not taken from it): {exp.plan['error']}.",
            "",
        ]
    if csv_path:
        lines += [f"Tidy result table (one row per run): `{csv_path}`.", ""]
        if not study.effects.empty:
            lines += [f"Deviation table: `{effects_path(Path(csv_path))}`.", ""]
    lines += registration_lines(study)
    if (smoke := smoke_sentence(exp.plan)) is not None:
        lines += [f"**{smoke}**", ""]
    if study.verdict is not None and study.power is not None:
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
            f"{study.runs_per_game} runs per game and arm; point estimate [95% stratified-bootstrap CI] "
            f"(rliable, {study.reps} resamples); optimality gap: lower is better.",
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
    lines += ["## Runs not used", "", *(unused or ["None."]), ""]
    return "\n".join(lines)
