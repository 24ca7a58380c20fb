"""A plan's frozen endpoints tested as frozen.

A plan's ``[analysis]`` section (``protocol.registration``) is frozen in the experiment
(``preregistration.json``) before the first job of a seed set starts; ``analysis.preregistered`` reads it
back and labels every result pre-registered or exploratory. Here its endpoints are tested, each
labelled with ``analysis.preregistered.result_label``.

**Endpoints.** Each frozen endpoint is tested on the confirmatory seeds, and again on the replication
seeds with a verdict of its own; the two sets are read pooled only where the frozen section says
``pool = true``. Tests: a game's difference of mean final returns with Welch's test and its t
interval, or with a Mann-Whitney test (exact for small samples) and the shift interval it inverts
(``rank_shift_interval``); an aggregate metric's difference of normalised scores with the stratified
bootstrap's standard error on t (``analysis.intervals.bootstrap_t``, its p from the same t); a main
effect with the pooled-variance t of ``analysis.factorial``; one- or two-sided as frozen, each 95%
interval the one the two-sided test inverts (it excludes 0 exactly when that test rejects at 0.05);
p adjusted across the endpoints of one seed set with the frozen correction (``analysis.multiple``);
an endpoint *holds* when its adjusted p is at most the frozen alpha.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from rliable import metrics
from scipy import stats

from analysis import aggregate, equivalence, intervals
from analysis.ablation import rank_test
from analysis.curves import EVAL_SOURCE, runs_text
from analysis.factorial import AGGREGATE, factorial_effects
from analysis.multiple import adjust
from analysis.preregistered import EXPLORATORY, PRE, Registration, frozen_reading, result_label
from protocol.plan_args import seeds_text
from protocol.registration import AnalysisSection, Endpoint
from protocol.stats import stratified_resamples

ENDPOINT_COLUMNS = [
    "endpoint", "kind", "seed_set", "seeds", "runs", "estimate", "ci_low", "ci_high", "ci_level", "test",
    "sides", "p", "p_adjusted", "correction", "alpha", "holds", "result", "margin", "score", "label", "why",
]  # fmt: skip
CI_LEVEL = 0.95  # the interval of game, aggregate and effect endpoints
ALTERNATIVE = {"two": "two-sided", "greater": "greater", "less": "less"}
METRIC_NAMES = {"iqm": "IQM", "median": "Median", "mean": "Mean", "optimality_gap": "Optimality gap"}


def rank_shift_interval(cand: np.ndarray, base: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
    """The shifts d for which the two-sided rank test (``rank_test``) of ``cand - d`` against ``base``
    does not reject at ``1 - level``: the interval the test inverts (Hodges & Lehmann 1963, "Estimates
    of location based on rank tests", Annals of Mathematical Statistics 34(2); Bauer 1972, JASA 67). The
    statistic changes only at the pairwise differences, so the test runs once inside each gap between
    them; an end is infinite where the test cannot reject that far out (3 runs a side: never at 0.05)."""
    edges = np.unique(np.subtract.outer(cand, base).ravel())
    bounds = np.concatenate([[-np.inf], edges, [np.inf]])
    probes = np.concatenate([[edges[0] - 1], (edges[:-1] + edges[1:]) / 2, [edges[-1] + 1]])
    kept = [i for i, d in enumerate(probes) if rank_test(pd.Series(cand - d), pd.Series(base)) > 1 - level]
    if not kept:
        return float("nan"), float("nan")
    return float(bounds[kept[0]]), float(bounds[kept[-1] + 1])


def equivalence_endpoint(endpoint: Endpoint, scores: pd.DataFrame, alpha: float) -> dict[str, Any]:
    """``estimate, ci_low, ci_high, ci_level, p, runs`` and the ``welch`` difference of one equivalence
    endpoint on ``scores`` (the runs of one seed set, ``arm, env, seed, score``, of the endpoint's score
    source): the candidate's runs on its game against the baseline arm's or the published reference;
    the interval at the level that agrees with the test (``analysis.equivalence``)."""
    on = scores[(scores.env == endpoint.game) & scores.arm.isin([endpoint.candidate, endpoint.baseline])]
    cand = on[on.arm == endpoint.candidate].score.to_numpy(float)
    if endpoint.reference is not None:
        base = equivalence.Reference(
            endpoint.reference, endpoint.reference_sd, endpoint.reference_n, endpoint.reference_source
        )
    else:
        base = on[on.arm == endpoint.baseline].score.to_numpy(float)
    w = equivalence.welch(cand, base)
    level = equivalence.interval_level(alpha)
    if w is None:
        return {"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "ci_level": level, "p": np.nan,
                "runs": on, "welch": None}  # fmt: skip
    lo, hi = w.interval(level)
    p = equivalence.test_p(w, endpoint.test, endpoint.sides, endpoint.margin)
    return {"estimate": w.estimate, "ci_low": lo, "ci_high": hi, "ci_level": level, "p": p, "runs": on,
            "welch": w}  # fmt: skip


def test_endpoint(endpoint: Endpoint, final: pd.DataFrame, reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """``estimate, ci_low, ci_high, p, runs`` of one game or aggregate endpoint on ``final`` (the runs
    of one seed set: ``arm, env, seed, score, normalised``)."""
    pair = final[final.arm.isin([endpoint.baseline, endpoint.candidate])]
    if endpoint.kind == "game":
        on = pair[pair.env == endpoint.game]
        cand = on[on.arm == endpoint.candidate].score.to_numpy(float)
        base = on[on.arm == endpoint.baseline].score.to_numpy(float)
        if min(len(cand), len(base)) < 2:
            return {"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "runs": on}
        # the interval the test inverts, two-sided at CI_LEVEL (analysis.intervals)
        if endpoint.test == "welch":
            p = stats.ttest_ind(cand, base, equal_var=False, alternative=ALTERNATIVE[endpoint.sides]).pvalue
            lo, hi = equivalence.welch(cand, base).interval(CI_LEVEL)
        else:
            p = rank_test(pd.Series(cand), pd.Series(base), ALTERNATIVE[endpoint.sides])
            lo, hi = rank_shift_interval(cand, base)
        return {"estimate": cand.mean() - base.mean(), "ci_low": lo, "ci_high": hi, "p": float(p), "runs": on}
    matrices, _, left_out = aggregate.score_matrices(pair)
    used = pair.merge(left_out[["arm", "env", "seed"]], how="left", indicator=True)
    used = used[used["_merge"] == "left_only"]
    if len(matrices) < 2 or matrices[endpoint.candidate].shape[0] < 2:
        return {"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "runs": used}
    cand, base = matrices[endpoint.candidate], matrices[endpoint.baseline]
    rng = np.random.default_rng(seed)
    draws_c, draws_b = stratified_resamples(cand, reps, rng), stratified_resamples(base, reps, rng)
    if endpoint.metric == "probability_of_improvement":
        point = aggregate.probability_of_improvement(matrices, endpoint.candidate, endpoint.baseline) - 0.5
        draws = [metrics.probability_of_improvement(c, b) - 0.5 for c, b in zip(draws_c, draws_b)]
        parts = [(np.array(draws), *cand.shape)]
    else:
        metric = aggregate.METRIC_ROWS[METRIC_NAMES[endpoint.metric]]
        point = float(metric(cand[None])[0] - metric(base[None])[0])
        parts = [(metric(draws_c), *cand.shape), (-metric(draws_b), *base.shape)]
    lo, hi, se, df = intervals.bootstrap_t(point, parts)
    return {"estimate": point, "ci_low": lo, "ci_high": hi, "p": intervals.t_p(point, se, df, endpoint.sides),
            "runs": used}  # fmt: skip


def factorial_options(reg: Registration) -> dict[str, Any]:
    """``analysis.factorial.factorial_effects``'s alpha, correction and per-switch alternatives from
    the frozen section's effect endpoints; {} (its defaults) without a frozen section."""
    if not reg.frozen:
        return {}
    section = reg.section
    sides = {e.switch: ALTERNATIVE[e.sides] for e in section.endpoints if e.kind == "effect"}
    return {"alpha": section.alpha, "correction": section.correction, "alternatives": sides}


def _effect_endpoints(
    endpoints: list[Endpoint], on: pd.DataFrame, record: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """``test_endpoint``'s results for the design's main-effect endpoints: the effect's estimate, its
    interval and its t test's p as the endpoint's sides say, on the runs of one seed set."""
    if not endpoints:
        return []
    if record is None or "design" not in record:
        raise ValueError("an effect endpoint needs a designed ablation's runs (plan.json has no design)")
    sides = {e.switch: ALTERNATIVE[e.sides] for e in endpoints}
    found = factorial_effects(on, record, correction="none", alternatives=sides)
    mains = found.effects[found.effects.kind == "main"].set_index(["response", "switch"])
    design_runs = on[on.arm.isin(list(record["design"]["arms"]))]
    out = []
    for e in endpoints:
        key = (e.game or AGGREGATE, e.switch)
        runs = design_runs[design_runs.env == e.game] if e.game else design_runs
        if key not in mains.index:
            out.append({"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "runs": runs})
            continue
        r = mains.loc[key]
        out.append({"estimate": r.estimate, "ci_low": r.ci_low, "ci_high": r.ci_high, "p": r.p, "runs": runs})
    return out


def _seed_sets(section: AnalysisSection, present: set[int]) -> list[tuple[str, tuple[int, ...]]]:
    sets = [("confirmatory", section.seeds)]
    if section.replication_seeds:
        sets.append(("replication", section.replication_seeds))
        if section.pool:
            sets.append(("pooled", section.seeds + section.replication_seeds))
    return [(name, seeds) for name, seeds in sets if present & set(seeds)]


def endpoint_table(
    reg: Registration,
    final: pd.DataFrame,
    metadata: pd.DataFrame,
    record: dict[str, Any] | None = None,
    reps: int = 2000,
    seed: int = 0,
    training: pd.DataFrame | None = None,
    unevaluated: pd.DataFrame | None = None,
    curves: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``ENDPOINT_COLUMNS``: every frozen endpoint on each seed set that has runs (module doc), p
    adjusted across the endpoints of one set; ``result`` the endpoint's reading ("holds", "not shown",
    or an equivalence verdict with its margin). ``record``: the plan record's ablation entry, which an
    effect endpoint's design comes from; ``training``: each complete run's last-100-episode training
    return (``analysis.published.last_training_returns``), which an equivalence endpoint with
    ``score = "training"`` compares; ``unevaluated``: the complete runs without an evaluation when
    others have one (``analysis.curves.unevaluated_runs``), which leave the endpoints scored by the
    final evaluation untested: their score source is part of the freeze. An endpoint without the runs
    to test is "not tested", never "not shown", and exploratory; ``curves``: every run's score at
    each evaluation (``analysis.curves.Scores.curves``), which a change endpoint reads. Secondary
    endpoints keep their own p. Empty without a frozen section."""
    if not reg.frozen:
        return pd.DataFrame(columns=ENDPOINT_COLUMNS)
    section = reg.section
    effects = [e for e in section.endpoints if e.kind == "effect"]
    sources = {"evaluation": final, "training": training if training is not None else final.iloc[:0]}
    rows = []
    present = {int(s) for t in sources.values() for s in t.seed}
    for name, seeds in _seed_sets(section, present):
        on = final[final.seed.isin(seeds)]
        block = []
        tested = dict(zip([e.name for e in effects], _effect_endpoints(effects, on, record)))
        for endpoint in section.endpoints:
            source = endpoint.score if endpoint.kind == "equivalence" else "evaluation"
            scores = sources[source]
            scores = scores[scores.seed.isin(seeds)]
            if source == "evaluation" and unevaluated is not None and len(unevaluated):
                found = {"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan,
                         "runs": scores.iloc[:0], "untested": _unevaluated_text(unevaluated)}  # fmt: skip
            elif endpoint.kind == "equivalence":
                found = equivalence_endpoint(endpoint, scores, section.alpha)
            elif endpoint.kind == "change":
                found = change_endpoint(endpoint, curves if curves is not None else final.iloc[:0], seeds)
            else:
                found = tested.get(endpoint.name) or test_endpoint(endpoint, on, reps, seed)
            untested = found.get("untested") or (_shortfall(endpoint, scores) if np.isnan(found["p"]) else "")
            reading = frozen_reading(section, endpoint)
            label, why = result_label(reg, reading, found["runs"], metadata)
            if untested and not reg.blocked:  # an altered record is said first: it voids everything
                label, why = EXPLORATORY, untested
            if name == "pooled" and label == PRE:
                why += "; pooled as the frozen section allows"
            block.append({
                "endpoint": endpoint.name, "kind": endpoint.kind, "seed_set": name,
                "seeds": _seeds_text(found["runs"]), "runs": len(found["runs"]),
                "estimate": found["estimate"], "ci_low": found["ci_low"], "ci_high": found["ci_high"],
                "ci_level": found.get("ci_level", CI_LEVEL), "test": endpoint.test, "sides": endpoint.sides,
                "p": found["p"], "correction": reading.correction, "alpha": section.alpha,
                "margin": endpoint.margin, "score": endpoint.score if endpoint.kind == "equivalence" else "",
                "label": label, "why": why, "welch": found.get("welch"), "untested": untested,
                "gap_from": found.get("gap_from", np.nan), "secondary": endpoint.secondary,
            })  # fmt: skip
        if not block:
            continue
        frame = pd.DataFrame(block)
        primary = ~frame.secondary
        frame["p_adjusted"] = frame.p
        frame.loc[primary, "p_adjusted"] = adjust(frame.p[primary], section.correction).to_numpy()
        frame["holds"] = frame.p_adjusted <= section.alpha
        frame["result"] = [
            _result(e, r, section.alpha) for e, r in zip(section.endpoints, frame.itertuples())
        ]
        rows.append(frame)
    if not rows:
        return pd.DataFrame(columns=ENDPOINT_COLUMNS)
    return pd.concat(rows, ignore_index=True)[ENDPOINT_COLUMNS]


def change_endpoint(endpoint: Endpoint, curves: pd.DataFrame, seeds: tuple[int, ...]) -> dict[str, Any]:
    """A change endpoint on the runs of one seed set: each run's evaluation at ``to_steps`` less its
    evaluation at ``from_steps``, the candidate's changes against the baseline's by Welch's t, with
    the t interval the two-sided test inverts (module doc); ``gap_from``: the arms' gap at
    ``from_steps``, which says whether a change widens the gap or narrows it. Runs without an
    evaluation at both steps leave it untested."""
    evaluated = curves[(curves.source == EVAL_SOURCE) & curves.seed.isin(seeds)] if len(curves) else curves
    on = evaluated[
        (evaluated.env == endpoint.game) & evaluated.arm.isin([endpoint.candidate, endpoint.baseline])
    ]
    at = on[on.env_steps.isin([endpoint.from_steps, endpoint.to_steps])]
    wide = at.pivot_table(index=["arm", "env", "seed"], columns="env_steps", values="score").reset_index()
    runs = on[["arm", "env", "seed"]].drop_duplicates()
    missing = len(runs) - int(
        wide.reindex(columns=[endpoint.from_steps, endpoint.to_steps]).notna().all(axis=1).sum()
    )
    nothing = {"estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "runs": runs}
    if missing:
        steps = f"{endpoint.from_steps:,} or {endpoint.to_steps:,} env steps"
        return {**nothing, "untested": f"not tested: {missing} run(s) lack an evaluation at {steps}"}
    wide["score"] = wide[endpoint.to_steps] - wide[endpoint.from_steps]
    cand, base = (wide[wide.arm == arm] for arm in (endpoint.candidate, endpoint.baseline))
    if min(len(cand), len(base)) < 2:
        return nothing
    gap_from = cand[endpoint.from_steps].mean() - base[endpoint.from_steps].mean()
    change = cand.score.to_numpy(float), base.score.to_numpy(float)
    p = stats.ttest_ind(*change, equal_var=False, alternative=ALTERNATIVE[endpoint.sides]).pvalue
    lo, hi = equivalence.welch(*change).interval(CI_LEVEL)
    return {"estimate": change[0].mean() - change[1].mean(), "ci_low": lo, "ci_high": hi, "p": float(p),
            "runs": runs, "gap_from": gap_from}  # fmt: skip


def _change_text(row: Any) -> str:
    """How a change endpoint reads: the gap grows (the change has the gap's sign), shrinks (the
    opposite sign), or no change detected, with the gap it started from."""
    start = f"gap {row.gap_from:+.3g} at the first evaluation"
    if not row.holds:
        return f"no change detected ({start})"
    widens = np.sign(row.estimate) == np.sign(row.gap_from)
    return f"the gap {'grows' if widens else 'shrinks'} ({start})"


def _unevaluated_text(runs: pd.DataFrame) -> str:
    return (
        f"not tested: its frozen score is the final evaluation, and {len(runs)} complete run(s) have "
        f"none ({runs_text(runs, 3)})"
    )


def _shortfall(endpoint: Endpoint, scores: pd.DataFrame) -> str:
    """Why an endpoint could not be tested: the arms it names with fewer than 2 runs on its game."""
    on = scores[scores.env == endpoint.game] if endpoint.game else scores
    where = f" on {endpoint.game}" if endpoint.game else ""
    short = [
        f"arm {arm!r} has {int((on.arm == arm).sum())} run(s){where}"
        for arm in (endpoint.candidate, endpoint.baseline)
        if arm is not None and (on.arm == arm).sum() < 2
    ]
    return f"not tested: {'; '.join(short) if short else 'fewer than 2 runs a side'}"


def _result(endpoint: Endpoint, row: Any, alpha: float) -> str:
    """How an endpoint's row reads: "not tested" with why, an equivalence verdict with its margin,
    else "holds" or "not shown"."""
    if row.untested:
        return row.untested
    if endpoint.kind == "change":
        return _change_text(row)
    if endpoint.kind != "equivalence":
        return "holds" if row.holds else "not shown"
    name = equivalence.verdict(row.welch, endpoint.test, endpoint.sides, alpha, bool(row.holds))
    return equivalence.verdict_text(name, endpoint.margin)


def _seeds_text(runs: pd.DataFrame) -> str:
    return seeds_text(sorted({int(s) for s in runs.seed})) if len(runs) else "–"
