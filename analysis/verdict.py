"""The verdict of a two-arm experiment, and how small a difference it could have detected.

Arm A is the baseline (``rlpyt_r2d1_minatar_published``), arm B the candidate
(``r2d1_minatar_corrected``); ``matrices`` are ``analysis.aggregate.score_matrices`` output,
``[runs, games]`` of normalised final scores per arm, the same games and run count for both.

Verdict (``two_arm_verdict``): the IQM difference IQM(B) - IQM(A) over runs x games, with its 95%
interval from the model that holds at a few seeds (``analysis.intervals.bootstrap_t``: the stratified
bootstrap's standard error, runs resampled within each game and each arm independently, with a t
quantile on the arms' degrees of freedom; Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge
of the Statistical Precipice", NeurIPS, for the stratified bootstrap), and beside it P(B > A),
rliable's probability of improvement (``analysis.aggregate.probability_of_improvement``: the chance
that a run of B beats a run of A on a game drawn at random; 0.5 = no difference) as an estimate
without an interval: its percentile bootstrap over a few runs is no 95% interval (three runs that all
beat three others give P = 1 [1, 1]).

B is called better only when the IQM difference's interval lies above 0, A only when it lies below;
otherwise the difference is not detected, and the sentence gives the interval.

Power (``power_statement``): the smallest IQM difference detected with probability ``power`` by that
rule, on the model the interval uses: the IQM difference over its standard error ``se`` (the widened
bootstrap SD of the observed runs, which carries each game's seed-to-seed spread of both arms) is
about t with the interval's Welch-Satterthwaite degrees of freedom ``df``, and a shift of every run of
B by ``delta`` moves the IQM difference by exactly ``delta`` and leaves ``se`` unchanged, so the
two-sided test at ``alpha`` detects it with the noncentral t's probability
(``protocol.stats.power_at``); the detectable difference solves that for ``power`` (2.87 ``se`` at
80%, alpha 0.05 and 40 df, e.g. 5 games x 5 seeds a side; 2.80 on the normal distribution).

Learning check (``arm_levels``, ``learning_sentence``): each arm's IQM with the same interval; on every
comparable scale random play is 0 (human-, DQN- and reference-normalised scores all subtract random
play), so an arm whose interval reaches 0 has not been shown to learn, and the verdict's first sentence
says so: a difference between agents that play at random level is no answer to which algorithm is
better.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.aggregate import probability_of_improvement
from analysis.intervals import bootstrap_t
from protocol.stats import ALPHA, POWER, detectable_difference, iqm_rows, stratified_resamples


def iqm_difference(
    candidate: np.ndarray, baseline: np.ndarray, reps: int = 2000, seed: int = 0
) -> dict[str, float]:
    """IQM(candidate) - IQM(baseline) over ``[runs, games]`` matrices, with the 95% interval, standard
    error and degrees of freedom of ``analysis.intervals.bootstrap_t`` (module doc). ``ci_low``,
    ``ci_high``, ``se`` and ``df`` are NaN with one run per game: there is no spread to resample."""
    candidate, baseline = np.asarray(candidate, float), np.asarray(baseline, float)
    if candidate.shape != baseline.shape or candidate.ndim != 2:
        raise ValueError(
            f"need two [runs, games] matrices of one shape, got {candidate.shape}, {baseline.shape}"
        )
    point = float(iqm_rows(candidate[None])[0] - iqm_rows(baseline[None])[0])
    n, games = candidate.shape
    rng = np.random.default_rng(seed)
    parts = [(iqm_rows(stratified_resamples(m, reps, rng)), n, games) for m in (candidate, baseline)]
    lo, hi, se, df = bootstrap_t(point, parts) if n > 1 else (np.nan,) * 4
    return {"value": point, "ci_low": lo, "ci_high": hi, "se": se, "df": df}


@dataclass(frozen=True)
class ArmLevel:
    """One arm's level of normalised final scores with its 95% interval (NaN with one run): ``value``
    its IQM over the games of a verdict (``arm_levels``), or with ``env`` its mean over that env's
    complete runs (``analysis.learning.env_levels``); ``cap``: the harness's cap on evaluation episodes
    where final evaluations stopped at it (their returns are cut short, not on random play's scale);
    ``learned``: the interval lies above random play (0) and the evaluations were whole."""

    arm: str
    value: float
    ci_low: float
    ci_high: float
    cap: int | None = None
    env: str | None = None

    @property
    def learned(self) -> bool:
        return bool(self.ci_low > 0) and self.cap is None


def arm_levels(
    matrices: dict[str, np.ndarray], reps: int = 2000, seed: int = 0, caps: dict[str, int] | None = None
) -> list[ArmLevel]:
    """``ArmLevel`` of each arm of ``matrices`` (``[runs, games]``), in their order; ``caps``: arm ->
    the cap its final evaluation episodes stopped at (``analysis.learning.capped_runs``)."""
    caps = caps or {}
    out = []
    for arm, scores in matrices.items():
        scores = np.asarray(scores, float)
        point = float(iqm_rows(scores[None])[0])
        if scores.shape[0] < 2:
            out.append(ArmLevel(arm, point, np.nan, np.nan, caps.get(arm)))
            continue
        resampled = iqm_rows(stratified_resamples(scores, reps, np.random.default_rng(seed)))
        lo, hi, _, _ = bootstrap_t(point, [(resampled, *scores.shape)])
        out.append(ArmLevel(arm, point, lo, hi, caps.get(arm)))
    return out


def learning_sentence(levels: Sequence[ArmLevel], scale: float = 1.0, unit: str = "") -> str | None:
    """The sentence a verdict opens with when an arm has not been shown to learn: a level of it (on an
    env, or over games) whose interval includes random play, 0, that has no interval, or whose final
    evaluations were cut at the harness's cap, their returns no lower bound
    (``analysis.learning.cut_bound``); None when every arm has. With one arm it says so of that arm
    alone: there is no comparison to qualify."""
    arms = list(dict.fromkeys(level.arm for level in levels))
    untrained = [level for level in levels if not level.learned]
    if not untrained:
        return None
    names = list(dict.fromkeys(level.arm for level in untrained))

    def level_text(level: ArmLevel) -> str:
        who = f"{level.arm} on {level.env}" if level.env else level.arm
        if level.cap is not None:
            return (
                f"{who}: final evaluation episodes stopped at the harness's cap of {level.cap} steps, "
                "where a cut return is no lower bound of the whole episode's, so its scores are not on "
                "random play's scale"
            )
        if np.isnan(level.ci_low):
            runs = "one seed" if level.env else "one seed per game"
            return f"{who} {_num(level.value, scale)}{unit} ({runs}: no interval)"
        return f"{who} {_interval(level.value, level.ci_low, level.ci_high, scale)}{unit}"

    levels_text = "; ".join(level_text(level) for level in untrained)
    why = "a level with 95% CI including random play, 0, or evaluations cut short"
    if len(arms) == 1:  # nothing to compare: the learning check alone
        return f"{names[0]} has not been shown to learn at this budget ({why}: {levels_text})."
    learned_somewhere = {level.arm for level in levels if level.learned}
    # An interval that includes random play shows no learning; it does not show its absence, so no
    # branch calls an arm untrained.
    if partly := [a for a in names if a in learned_somewhere]:  # per-env levels: learned on other envs
        fully = [a for a in names if a not in learned_somewhere]
        head = (
            f"{' and '.join(fully)} {'has' if len(fully) == 1 else 'have'} not been shown to learn at this "
            "budget; "
            if fully
            else ""
        )
        return (
            f"{head}{' and '.join(partly)} {'is' if len(partly) == 1 else 'are'} not shown to learn on every "
            f"game: the comparison there is with agents not shown to be trained ({why}: {levels_text})."
        )
    if len(names) == len(arms):
        subject = "Neither arm has" if len(arms) == 2 else "No arm has"
        return (
            f"{subject} been shown to learn at this budget: the comparison is between agents not shown to be "
            f"trained ({why}: {levels_text})."
        )
    verb = "has" if len(names) == 1 else "have"
    agents = "an agent" if len(names) == 1 else "agents"
    return (
        f"{' and '.join(names)} {verb} not been shown to learn at this budget: the comparison is with "
        f"{agents} not shown to be trained ({why}: {levels_text})."
    )


def order_arms(
    arms: Sequence[str], plan: dict[str, Any] | None = None, baseline: str | None = None
) -> tuple[str, str]:
    """``(baseline, candidate)`` of a two-arm experiment: ``baseline`` when given; else the order of the
    plan's arm list (``plan["arms"]`` or ``plan["plan"]["arms"]``; plans list the published arm first,
    as ``repro/configs/plans/r2d1_minatar_published_vs_corrected.toml`` does); else the one arm whose
    name contains "published"; else alphabetical order."""
    arms = sorted(arms)
    if len(arms) != 2:
        raise ValueError(f"a verdict compares two arms, got {arms}")
    if baseline is not None:
        if baseline not in arms:
            raise ValueError(f"baseline arm {baseline!r} is not one of {arms}")
        return baseline, next(a for a in arms if a != baseline)
    listed = (plan or {}).get("arms") or ((plan or {}).get("plan") or {}).get("arms")
    if isinstance(listed, list) and set(arms) <= set(listed):
        first, second = sorted(arms, key=listed.index)
        return first, second
    published = [a for a in arms if "published" in a]
    if len(published) == 1:
        return published[0], next(a for a in arms if a != published[0])
    return arms[0], arms[1]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _num(value: float, scale: float = 1.0, signed: bool = False) -> str:
    return f"{value * scale:{'+' if signed else ''}.3g}"


def _interval(value: float, lo: float, hi: float, scale: float = 1.0, signed: bool = False) -> str:
    return f"{_num(value, scale, signed)} [{_num(lo, scale, signed)}, {_num(hi, scale, signed)}]"


@dataclass(frozen=True)
class Verdict:
    """A two-arm comparison: P(candidate > baseline) and the IQM difference, both with 95% CIs;
    ``winner`` is the better arm or None; ``sentence`` says so in words."""

    baseline: str
    candidate: str
    n_games: int
    n_runs: int  # per game and arm
    poi: dict[str, float]  # value, ci_low, ci_high
    iqm_difference: dict[str, float]  # value, ci_low, ci_high, se
    winner: str | None
    sentence: str  # opens with the learning check when an arm is not shown to learn
    levels: tuple[ArmLevel, ...] = ()  # baseline's, candidate's IQMs over the verdict's runs
    lead: str | None = None  # the learning check it opens with (``learning_sentence``)


def two_arm_verdict(
    matrices: dict[str, np.ndarray],
    baseline: str,
    candidate: str,
    reps: int = 2000,
    seed: int = 0,
    label: str = "normalised score",
    scale: float = 1.0,
    unit: str = "",
    caps: dict[str, int] | None = None,
    learning: Sequence[ArmLevel] | None = None,
) -> Verdict:
    """The verdict of ``candidate`` (B) against ``baseline`` (A) (module doc); ``caps`` as ``arm_levels``
    takes them. ``label``, ``scale`` and ``unit`` only format the sentence (a score normalised in
    percent: 100, " percentage points"). The sentence opens with ``learning_sentence`` of ``learning``
    (each arm's level per env from that env's complete runs, ``analysis.learning.env_levels``, so that
    balancing the arms for the verdict never changes whether an arm learned), else of the arms' IQMs
    over the verdict's own runs."""
    found = _two_arm_verdict(matrices, baseline, candidate, reps, seed, label, scale, unit)
    levels = arm_levels({arm: matrices[arm] for arm in (baseline, candidate)}, reps, seed, caps)
    checked = [x for x in learning if x.arm in (baseline, candidate)] if learning is not None else levels
    lead = learning_sentence(checked, scale, _level_unit(unit))
    sentence = f"{lead} {found.sentence}" if lead else found.sentence
    return dataclasses.replace(found, sentence=sentence, levels=tuple(levels), lead=lead)


def _level_unit(unit: str) -> str:
    """The unit of a level (an IQM) given the unit of a difference: percent for percentage points."""
    return "%" if unit.strip() == "percentage points" else unit


def with_caveat(found: Verdict, caveat: str) -> Verdict:
    """``found`` with ``caveat`` as the sentence after its learning check (first when there is none):
    whether the arms learned comes before anything else about the comparison."""
    lead = found.lead
    rest = (
        found.sentence[len(lead) :].lstrip() if lead and found.sentence.startswith(lead) else found.sentence
    )
    return dataclasses.replace(found, sentence=" ".join(p for p in (lead, caveat, rest) if p))


def _two_arm_verdict(
    matrices: dict[str, np.ndarray],
    baseline: str,
    candidate: str,
    reps: int,
    seed: int,
    label: str,
    scale: float,
    unit: str,
) -> Verdict:
    b, a = matrices[candidate], matrices[baseline]
    n_runs, n_games = a.shape
    diff = iqm_difference(b, a, reps=reps, seed=seed)
    poi = {"value": probability_of_improvement(matrices, candidate, baseline)}
    scope = f"over {_count(n_games, 'game')} x {_count(n_runs, 'seed')} per arm"
    p_text = f"P({candidate} > {baseline}) = {_num(poi['value'])} (an estimate, no interval)"
    d_text = f"the IQM {label} difference {candidate} - {baseline} = "
    if n_runs < 2:
        sentence = (
            f"No difference between {candidate} and {baseline} can be shown: with one seed per game and arm "
            f"there is no spread to put an interval on ({scope}, {d_text}"
            f"{_num(diff['value'], scale, signed=True)}{unit}, P({candidate} > {baseline}) = "
            f"{_num(poi['value'])})."
        )
        return Verdict(baseline, candidate, n_games, n_runs, poi, diff, None, sentence)
    d_text += _interval(diff["value"], diff["ci_low"], diff["ci_high"], scale, signed=True) + unit
    above, below = diff["ci_low"] > 0, diff["ci_high"] < 0
    if above or below:
        winner, loser = (candidate, baseline) if above else (baseline, candidate)
        sentence = (
            f"{winner} is better than {loser} {scope}: {d_text} (95% CI {'above' if above else 'below'} "
            f"0); {p_text}."
        )
    else:
        winner = None
        sentence = (
            f"No difference between {candidate} and {baseline} was detected {scope}: {d_text} (95% CI "
            f"including 0); {p_text}."
        )
    return Verdict(baseline, candidate, n_games, n_runs, poi, diff, winner, sentence)


RULE = (
    "B is better only when the 95% interval of the IQM difference (the stratified bootstrap's standard "
    "error with a t quantile, analysis/intervals.py) lies above 0, A only when it lies below; otherwise no "
    "difference was detected. P(B > A), rliable's probability of improvement, is shown as an estimate: "
    "a percentile bootstrap of a few runs is no 95% interval"
)
METHOD = (
    "t with the interval's degrees of freedom: the standard error se of the IQM difference is the SD of "
    "its stratified bootstrap over the observed runs (each game's seed-to-seed spread, both arms), widened "
    "by sqrt(n / (n - 1)) for n seeds, and its df the Welch-Satterthwaite df of analysis/intervals.py; a "
    "two-sided t test at level alpha detects a shift delta of every run with the noncentral t's "
    "probability of passing the critical values at delta / se"
)


@dataclass(frozen=True)
class PowerStatement:
    """The smallest IQM difference the experiment detects with probability ``power`` (module doc);
    ``method`` says how it was computed."""

    detectable: float  # NaN with one run per game
    se: float
    power: float
    alpha: float
    sentence: str
    method: str = METHOD


def power_statement(
    verdict: Verdict,
    power: float = POWER,
    alpha: float = ALPHA,
    label: str = "normalised score",
    scale: float = 1.0,
    unit: str = "",
) -> PowerStatement:
    """How small an IQM difference ``verdict``'s games and seeds could detect (module doc)."""
    se = verdict.iqm_difference["se"]
    scope = f"With {_count(verdict.n_games, 'game')} x {_count(verdict.n_runs, 'seed')} per arm"
    if np.isnan(se):
        return PowerStatement(
            np.nan, se, power, alpha, f"{scope} there is no seed-to-seed spread to estimate power from."
        )
    if se == 0:
        # Every seed of both arms scored the same on each game (e.g. every evaluation capped at the
        # same return): the t of the difference has no spread to work with, and "any difference is
        # detected" would claim a precision the runs never showed.
        return PowerStatement(
            np.nan,
            se,
            power,
            alpha,
            f"{scope} every seed scored the same on each game: with no seed-to-seed spread the smallest "
            "detectable difference cannot be estimated (more seeds or a longer budget would show one).",
        )
    df = verdict.iqm_difference["df"]
    detectable = detectable_difference(se, power, alpha, df)
    observed = verdict.iqm_difference["value"]
    ratio = detectable / se
    size = f"{_num(detectable, scale)}{unit} ({ratio:.2f} standard errors of {_num(se, scale)}{unit})"
    relation = "at least" if abs(observed) >= detectable else "smaller than"
    sentence = (
        f"{scope}, the smallest IQM {label} difference detected with {power:.0%} power "
        f"(two-sided t on {df:.0f} df, alpha {alpha:.2g}) is {size}; the observed difference, "
        f"{_num(observed, scale, signed=True)}{unit}, is {relation} that in size."
    )
    return PowerStatement(detectable, se, power, alpha, sentence)
