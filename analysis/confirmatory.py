"""Every result labelled pre-registered or exploratory, and a plan's frozen endpoints tested as frozen.

A plan's ``[analysis]`` section (``protocol.registration``) is frozen in the experiment
(``preregistration.json``) before the first job of a seed set starts. Here it is read back:

* **Labels** (``result_label``, the one labelling function of the study, the report and the markdown).
  A result is *pre-registered* only when it is a frozen endpoint read exactly as frozen (the same
  test, sides, correction and family of endpoints adjusted together), a section was frozen for its seed
  set, and every run it uses started after that freeze, from the frozen commit, from a clean tree (or
  one the freeze allowed dirty, which the label says). Every other reading of the same runs (a verdict,
  an aggregate, a per-game test, an effects table adjusted over another family) is *exploratory (not a
  frozen endpoint)*; a frozen endpoint's runs that fail the check are exploratory with the reason
  counted: no freeze, runs started before it, another commit, a dirty tree, seeds outside the frozen
  sets (seeds added after a look). Runs are checked from their own ``metadata.json`` (start time and
  commit of their first start). The record itself is checked first (``protocol.freeze_check``): a
  record edited after its freeze, or one that cannot be checked, makes nothing pre-registered, and a
  reading with analysis code other than the frozen code is exploratory.
* **Endpoints.** Each frozen endpoint is tested on the confirmatory seeds, and again on the replication
  seeds with a verdict of its own; the two sets are read pooled only where the frozen section says
  ``pool = true``. Tests: a game's difference of mean final returns with Welch's test and its t
  interval, or with a Mann-Whitney test (exact for small samples) and the shift interval it inverts
  (``rank_shift_interval``); an aggregate metric's difference of normalised scores with the stratified
  bootstrap's standard error on t (``analysis.intervals.bootstrap_t``, its p from the same t); a main
  effect with the pooled-variance t of ``analysis.factorial``; one- or two-sided as frozen, each 95%
  interval the one the two-sided test inverts (it excludes 0 exactly when that test rejects at 0.05);
  p adjusted across the endpoints of one seed set with the frozen correction (``analysis.multiple``);
  an endpoint *holds* when its adjusted p is at most the frozen alpha.
* **Changes.** A section frozen again with another hash for the same seed set, or a plan file whose
  section no longer matches the freeze, is said on top of every summary and report: the analysis
  then uses the first freeze, and only the runs that started after it count as pre-registered.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rliable import metrics
from scipy import stats

from algorithms.configs import ConfigError
from analysis import aggregate, equivalence, intervals
from analysis.ablation import rank_test
from analysis.curves import EVAL_SOURCE, runs_text
from analysis.factorial import AGGREGATE, factorial_effects
from analysis.multiple import adjust
from analysis.runs import run_starts
from protocol.files import PLANS_DIR, read_toml
from protocol.freeze_check import RecordCheck, check_record, parse_time
from protocol.plan_args import seeds_text
from protocol.registration import (
    RECORD_FILE,
    AnalysisSection,
    Endpoint,
    parse_section,
    plan_file,
    plan_label,
    read_record,
    section_hash,
)
from protocol.stats import stratified_resamples

PRE = "pre-registered"
EXPLORATORY = "exploratory"
ALTERED = "freeze record altered"
UNVERIFIED = "freeze record unverified"
ENDPOINT_COLUMNS = [
    "endpoint", "kind", "seed_set", "seeds", "runs", "estimate", "ci_low", "ci_high", "ci_level", "test",
    "sides", "p", "p_adjusted", "correction", "alpha", "holds", "result", "margin", "score", "label", "why",
]  # fmt: skip
CI_LEVEL = 0.95  # the interval of game, aggregate and effect endpoints
ALTERNATIVE = {"two": "two-sided", "greater": "greater", "less": "less"}
METRIC_NAMES = {"iqm": "IQM", "median": "Median", "mean": "Mean", "optimality_gap": "Optimality gap"}


@dataclass(frozen=True)
class Registration:
    """What an experiment's ``preregistration.json`` says: the first freeze of each seed set, the
    section they froze (None without a freeze), the notes every summary shows on top, and what the
    record's checks found (``protocol.freeze_check``)."""

    freezes: dict[str, dict[str, Any]] = field(default_factory=dict)  # seed set -> its first freeze
    section: AnalysisSection | None = None
    notes: tuple[str, ...] = ()
    check: RecordCheck = field(default_factory=RecordCheck)
    statements: tuple[str, ...] = ()  # shown on top, in bold: a record altered, a section changed

    @property
    def frozen(self) -> bool:
        return self.section is not None

    @property
    def blocked(self) -> str | None:
        """Why nothing is pre-registered whatever the runs: the record fails its checks."""
        if self.check.altered:
            return f"{ALTERED}: {'; '.join(self.check.altered)}"
        if self.check.unverified:
            return f"{UNVERIFIED}: {'; '.join(self.check.unverified)}"
        return None

    def code_reason(self, seed_set: str) -> str | None:
        """Why the ``seed_set``'s endpoints are not read with the frozen code (None: they are)."""
        changed = self.check.code_changed.get(seed_set, ())
        if changed is None:
            return "the frozen analysis code is unknown here (its commit is not in this repository)"
        if changed:
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            return f"analysis code changed since the freeze ({shown})"
        return None

    def code_line(self) -> str:
        """How the reading code compares with the frozen code, for the top of a page."""
        entry = self.freezes.get("confirmatory") or next(iter(self.freezes.values()))
        reason = self.code_reason(str(entry.get("seed_set")))
        commit = str(entry.get("commit"))[:12]
        if reason is None:
            return (
                f"The analysis code reading these runs is the frozen code (commit {commit}): files identical."
            )
        return (
            f"The reading is not the frozen one: {reason}. Its endpoints are exploratory here; read them "
            f"as frozen from a checkout of the frozen commit: git worktree add --detach ../frozen-{commit} "
            f"{commit}, then this command from there."
        )


def _plan_path(freeze: dict[str, Any], plan: dict[str, Any] | None) -> Path:
    """The plan file a freeze came from: the one it names, else (records written before freezes named
    it) the shipped plan of the experiment's plan record."""
    if freeze.get("plan"):
        return plan_file(str(freeze["plan"]))
    names = [p.get("plan") for p in (plan or {}).get("plans", []) if isinstance(p, dict)]
    return PLANS_DIR / f"{names[0]}.toml" if names else PLANS_DIR


def registration(exp_path: Path, metadata: pd.DataFrame, plan: dict[str, Any] | None = None) -> Registration:
    """The experiment's ``Registration`` (module doc); ``metadata``: its runs' metadata table; ``plan``:
    its plan record (plan.json), which names the plan file of a freeze that does not."""
    record = read_record(exp_path)
    if not record:
        return Registration()
    check = check_record(exp_path, record, plan_label(_plan_path({}, plan)))
    failed = [(ALTERED, a) for a in check.altered] or [(UNVERIFIED, u) for u in check.unverified]
    statements = [f"{what.capitalize()}: {why}; nothing here is pre-registered." for what, why in failed]
    entries = [e for e in record if isinstance(e, dict) and isinstance(e.get("section"), dict)]
    origin = next(
        (e for e in entries if e.get("seed_set") == "confirmatory"), entries[0] if entries else None
    )
    if origin is None:
        return Registration(statements=tuple(statements), check=check)
    try:
        section = parse_section(origin["section"], f"{exp_path / RECORD_FILE}", None, None, None)
    except ConfigError as e:
        statements.append(f"{ALTERED.capitalize()}: {e}; nothing here is pre-registered.")
        return Registration(statements=tuple(statements), check=RecordCheck((*check.altered, str(e))))
    first: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name = entry.get("seed_set")
        if name not in first:
            first[name] = entry
        elif entry.get("hash") != first[name].get("hash"):
            started = _started_before(metadata, parse_time(entry.get("frozen_at")))
            statements.append(
                f"Changed after runs existed: the [analysis] section of the {name} seeds was frozen again "
                f"with a changed section ({str(entry.get('hash'))[:12]}, {entry.get('frozen_at')}) after "
                f"the first freeze ({str(first[name].get('hash'))[:12]}, {first[name].get('frozen_at')}), "
                f"when {started} run(s) had already started; results use the first freeze."
            )
    notes = _plan_notes(_plan_path(origin, plan), section)
    for name, entry in first.items():
        if entry.get("dirty"):
            notes.append(
                f"The {name} seeds were frozen from a tree with uncommitted changes or an uncommitted plan "
                f"(--allow-dirty) at {str(entry.get('commit'))[:12]}: their code is not exactly that "
                "commit, and the freeze is checked by its own hash only."
            )
    reg = Registration(first, section, tuple(notes), check)
    (statements if reg.code_reason(str(origin.get("seed_set"))) else notes).append(reg.code_line())
    return replace(reg, notes=tuple(notes), statements=tuple(statements))


def _plan_notes(plan_path: Path, section: AnalysisSection) -> list[str]:
    """What the plan file in this checkout says against the frozen section."""
    if not plan_path.is_file():
        return [f"The plan file {plan_path} is not here: whether its section changed since is unknown."]
    try:
        now = read_toml(plan_path).get("analysis")
    except ConfigError as e:
        return [f"The plan file {plan_path} cannot be read now ({e}); results use the frozen one."]
    if now is None or section_hash(now) != section.hash:
        return [
            f"The plan file {plan_path} no longer holds the frozen [analysis] section (frozen "
            f"{section.hash[:12]}, now {section_hash(now)[:12] if now else 'none'}); results use the "
            "frozen one."
        ]
    return []


def freeze_rows(reg: Registration, metadata: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The table of freezes a page shows: each seed set's freeze, whether the reading code is the
    frozen code, and when the reading was fixed against the set's first run."""
    header = ["seed set", "seeds", "section hash", "commit", "frozen at", "dirty tree", "reading code",
              "frozen vs first run"]  # fmt: skip
    rows = []
    for name, e in reg.freezes.items():
        reason = reg.code_reason(name)
        rows.append([
            name, str(e.get("seeds")), str(e.get("hash"))[:12], str(e.get("commit"))[:12],
            str(e.get("frozen_at")), "yes (--allow-dirty)" if e.get("dirty") else "no",
            "frozen code" if reason is None else reason,
            _first_run_text(reg, name, metadata, parse_time(e.get("frozen_at"))),
        ])  # fmt: skip
    return header, rows


def _first_run_text(reg: Registration, name: str, metadata: pd.DataFrame, frozen: dt.datetime | None) -> str:
    """When the ``name`` seeds' first run started, against their freeze: before any data, or not."""
    if metadata.empty or "start_time" not in metadata or frozen is None:
        return "no runs yet"
    starts = [
        s for seed, t in zip(metadata.seed, metadata.start_time)
        if reg.section.seed_set(int(seed)) == name and (s := parse_time(t)) is not None
    ]  # fmt: skip
    if not starts:
        return "no runs yet"
    first = min(starts)
    minutes = abs((first - frozen).total_seconds()) / 60
    if first >= frozen:
        return (
            f"frozen {minutes:.0f} min before the first run started ({first.isoformat(timespec='seconds')})"
        )
    before = sum(s < frozen for s in starts)
    return (
        f"frozen {minutes:.0f} min after the first run started; {before} of {len(starts)} runs started before"
    )


def _started_before(metadata: pd.DataFrame, when: dt.datetime | None) -> int:
    if when is None or metadata.empty or "start_time" not in metadata:
        return 0
    return sum(1 for t in metadata.start_time if (s := parse_time(t)) is not None and s < when)


def run_label(reg: Registration, runs: pd.DataFrame, metadata: pd.DataFrame) -> tuple[str, str]:
    """``(label, why)`` of a result that uses ``runs`` (``arm, env, seed``): pre-registered only when
    every run belongs to a frozen seed set and started after its freeze, from its commit, clean, and
    every later start it records (``run_starts``) was from that commit too."""
    if reg.blocked:
        return EXPLORATORY, reg.blocked
    if not reg.frozen:
        return EXPLORATORY, "no [analysis] section was frozen before these runs"
    if runs.empty:
        return EXPLORATORY, "no runs"
    meta = runs[["arm", "env", "seed"]].merge(metadata, on=["arm", "env", "seed"], how="left")
    counts: dict[str, int] = {}
    dirty_allowed = False
    sets = set()
    for row in meta.itertuples(index=False):
        name = reg.section.seed_set(int(row.seed))
        sets.add(name)
        entry = reg.freezes.get(name) if name else None
        later = run_starts(row)[1:]  # the starts after the first, which the run records
        if entry is None:
            reason = "seeds outside the frozen seed sets" if name is None else f"{name} seeds never frozen"
        elif (start := parse_time(getattr(row, "start_time", None))) is None:
            reason = "no recorded start time"
        elif start < parse_time(entry["frozen_at"]):
            reason = "started before the freeze"
        elif str(getattr(row, "git_commit", "")) != entry["commit"]:
            reason = "another commit than the frozen one"
        elif getattr(row, "git_dirty", False) is True and not entry.get("dirty"):
            reason = "a tree with uncommitted changes"
        elif any("git_commit" in s and s["git_commit"] != entry["commit"] for s in later):
            reason = "resumed from another commit than the frozen one"
        elif any(s.get("git_dirty") is True and not entry.get("dirty") for s in later):
            reason = "resumed from a tree with uncommitted changes"
        else:
            dirty_allowed |= bool(entry.get("dirty"))
            continue
        counts[reason] = counts.get(reason, 0) + 1
    if counts:
        why = "; ".join(f"{n} of {len(meta)} runs: {reason}" for reason, n in counts.items())
        return EXPLORATORY, why
    if code := next((r for name in sorted(sets) if (r := reg.code_reason(name))), None):
        return EXPLORATORY, code
    return PRE, "frozen before every run, same commit" + (", dirty tree allowed" if dirty_allowed else "")


NOT_AN_ENDPOINT = "not a frozen endpoint"


@dataclass(frozen=True)
class Reading:
    """How a result was read: the frozen endpoint it claims to be (``endpoint``; None: it reads none),
    with the test, sides, correction and family (the names of the endpoints adjusted together) it was
    read with. A verdict, an aggregate, a per-game test or an effects table read from the same runs is
    ``Reading()``: no endpoint."""

    endpoint: str | None = None
    test: str | None = None
    sides: str | None = None
    correction: str | None = None
    family: tuple[str, ...] = ()


def frozen_reading(section: AnalysisSection, endpoint: Endpoint) -> Reading:
    """How the freeze says ``endpoint`` is read: its test and sides, adjusted with the section's
    correction across its family, or alone (no correction) when it is secondary."""
    if endpoint.secondary:
        return Reading(endpoint.name, endpoint.test, endpoint.sides, "none", (endpoint.name,))
    return Reading(endpoint.name, endpoint.test, endpoint.sides, section.correction, section.family)


def result_label(
    reg: Registration, reading: Reading, runs: pd.DataFrame, metadata: pd.DataFrame
) -> tuple[str, str]:
    """``(label, why)`` of a result, the one labelling function of the study, the report and the
    markdown: *pre-registered* only when ``reading`` is a frozen endpoint read exactly as frozen (same
    test, sides, correction and family) and its ``runs`` pass ``run_label``; every other reading of
    the same runs is exploratory, ``why`` saying what differs ("not a frozen endpoint"). Nothing is
    pre-registered when the freeze record fails its checks (``Registration.blocked``)."""
    if reg.blocked:
        return EXPLORATORY, reg.blocked
    if not reg.frozen:
        return EXPLORATORY, "no [analysis] section was frozen before these runs"
    section = reg.section
    frozen = {e.name: e for e in section.endpoints}
    if reading.endpoint not in frozen:
        return EXPLORATORY, NOT_AN_ENDPOINT
    kept_reading = frozen_reading(section, frozen[reading.endpoint])
    asked = (reading.test, reading.sides, reading.correction, sorted(reading.family))
    kept = (kept_reading.test, kept_reading.sides, kept_reading.correction, sorted(kept_reading.family))
    differs = [what for what, a, b in zip(("test", "sides", "correction", "family"), asked, kept) if a != b]
    if differs:
        return EXPLORATORY, f"{NOT_AN_ENDPOINT} as read: another {', '.join(differs)} than the frozen one"
    return run_label(reg, runs, metadata)


def label_text(label: tuple[str, str]) -> str:
    """A label as pages show it: "pre-registered", or "exploratory (why)"."""
    return label[0] if label[0] == PRE else f"{label[0]} ({label[1]})"


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
