"""The same arms on fresh seeds (``python -m analysis study A --replication B``): the study's verdict
beside the other experiment's, and the verdict of both seed sets pooled where the frozen analysis
allows it (``replication_lines``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from analysis import aggregate, verdict
from analysis.ablation import ablation_record, deviation_games
from analysis.markdown import ci_text, fmt, md_table
from analysis.robust import Robustness, carried_sentence, robust_verdict, robustness_block
from analysis.study import Study, score_units
from protocol.plan_args import format_seeds


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
        pair, matrices, games, *arms, study.reps, seed, correction, **score_units(study.scores), caps=caps
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
        return ci_text(found.value, found.ci_low, found.ci_high, scale)

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
        [f"P({b} > {a})", *(fmt(v.poi["value"]) for v in verdicts)],
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
        power = verdict.power_statement(pooled, **score_units(study.scores))
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
