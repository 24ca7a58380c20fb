"""The equivalence endpoint (analysis/equivalence.py, kind "equivalence" of protocol/registration.py):
its arithmetic against scipy's and statsmodels' tests, its error rate at the margin, the agreement of
its interval with its test, its verdicts on synthetic runs, and its bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.weightstats import ttost_ind

from algorithms.configs import ConfigError
from algorithms.rundir import run_path
from analysis import equivalence
from analysis.equivalence import Reference, welch
from analysis.published import last_training_returns
from analysis.runs import load_experiment
from analysis.study import run_study
from analysis.study_markdown import study_markdown
from analysis.synthetic import write_run
from protocol.registration import parse_section
from reports.build import build_report
from repro.plans import expand, load_plan, plan_analysis
from repro.preregister import freeze
from repro.record import plan_record

REPO = Path(__file__).resolve().parents[1]
OURS, PEER = "ppo_atari_zoo", "sb3_ppo_atari_zoo"


def _endpoint(**changes) -> dict:
    table = {"name": "pong", "kind": "equivalence", "game": "pong", "candidate": OURS, "baseline": PEER,
             "score": "training", "test": "tost", "sides": "two", "margin": 5.0}  # fmt: skip
    return {k: v for k, v in {**table, **changes}.items() if v is not None}


def _section(*endpoints: dict) -> dict:
    endpoints = list(endpoints or [_endpoint()])
    return {"alpha": 0.05, "correction": "holm", "seeds": "0-2", "endpoints": endpoints}


def _parsed(raw: dict):
    return parse_section(raw, "plan.toml", [OURS, PEER], ["pong", "breakout"])


# --- arithmetic ----------------------------------------------------------------------------------------


def test_welch_tost_matches_statsmodels_and_scipy():
    rng = np.random.default_rng(1)
    for n_a, n_b in [(3, 2), (3, 3), (5, 10)]:
        a, b = rng.normal(1.0, 2.0, n_a), rng.normal(0.0, 1.0, n_b)
        w = welch(a, b)
        p_tost, lower, upper = ttost_ind(a, b, -1.5, 1.5, usevar="unequal")
        assert np.isclose(equivalence.test_p(w, "tost", "two", 1.5), p_tost)
        assert np.isclose(w.p_greater(-1.5), lower[1]) and np.isclose(w.p_less(1.5), upper[1])
        assert np.isclose(w.df, lower[2])
        plain = stats.ttest_ind(a, b, equal_var=False)
        assert np.allclose(w.interval(0.95), tuple(plain.confidence_interval(0.95)))


def test_a_published_reference_is_welch_from_its_summary_or_a_one_sample_test():
    a = np.array([10.0, 12.0, 15.0])
    w = welch(a, Reference(11.0, 2.0, 5))
    found = stats.ttest_ind_from_stats(a.mean(), a.std(ddof=1), 3, 11.0 + 1.0, 2.0, 5, equal_var=False,
                                       alternative="less")  # fmt: skip
    assert np.isclose(w.p_less(1.0), found.pvalue)
    fixed = welch(a, Reference(11.0))
    assert np.isclose(fixed.df, 2) and np.isclose(
        fixed.p_greater(-1.0), stats.ttest_1samp(a, 10.0, alternative="greater").pvalue
    )
    assert welch(a[:1], Reference(11.0)) is None and welch(np.ones(3), np.ones(3)) is None


@pytest.mark.parametrize("sizes", [(3, 2), (3, 3), (5, 5), (10, 10)])
def test_tost_rejects_at_most_alpha_of_the_time_when_the_difference_is_at_the_margin(sizes):
    rng = np.random.default_rng(sum(sizes))
    draws, margin, alpha = 2000, 1.0, 0.05
    hits = 0
    for _ in range(draws):
        a, b = rng.normal(margin, 1.0, sizes[0]), rng.normal(0.0, 1.0, sizes[1])
        hits += equivalence.test_p(welch(a, b), "tost", "two", margin) <= alpha
    # At the margin, TOST's size is at most alpha (Schuirmann 1987); 3 binomial SEs of slack.
    assert hits / draws <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / draws)


def test_the_interval_inside_the_margins_exactly_when_tost_holds():
    rng = np.random.default_rng(7)
    alpha, margin = 0.05, 1.0
    for _ in range(500):
        w = welch(rng.normal(rng.uniform(-1, 1), 1.0, 4), rng.normal(0.0, 1.0, 3))
        lo, hi = w.interval(equivalence.interval_level(alpha))
        assert (equivalence.test_p(w, "tost", "two", margin) <= alpha) == (-margin < lo and hi < margin)
        p_ni = equivalence.test_p(w, "noninferiority", "greater", margin)
        assert (p_ni <= alpha) == (lo > -margin)
        assert (equivalence.test_p(w, "noninferiority", "less", margin) <= alpha) == (hi < margin)


def test_verdicts_name_equivalent_different_and_not_shown():
    eq = welch(np.array([0.1, -0.1, 0.05, 0.0]), np.array([0.02, -0.02, 0.0]))
    far = welch(np.array([10.1, 9.9, 10.0]), np.array([0.1, -0.1, 0.0]))
    wide = welch(np.array([-8.0, 9.0, 1.0]), np.array([5.0, -6.0, 0.0]))
    assert equivalence.verdict(eq, "tost", "two", 0.05, True) == equivalence.EQUIVALENT
    assert equivalence.verdict(far, "tost", "two", 0.05, False) == equivalence.DIFFERENT
    assert equivalence.verdict(wide, "tost", "two", 0.05, False) == equivalence.NOT_SHOWN
    assert equivalence.verdict(far, "noninferiority", "less", 0.05, False) == equivalence.INFERIOR
    assert equivalence.verdict(wide, "noninferiority", "greater", 0.05, False) == (
        equivalence.NOT_SHOWN_NON_INFERIOR
    )
    assert equivalence.verdict_text(equivalence.EQUIVALENT, 5.0) == "equivalent within ±5"


# --- the endpoint on synthetic runs ----------------------------------------------------------------------


def _experiment(tmp_path: Path, section: dict, skills: dict[str, float], noise: dict[str, float]) -> Path:
    """The section frozen, then runs of both arms on Pong, seeds 0-2, at their skills (a fraction of
    the human-random range) and noise; their training returns are what the endpoint reads."""
    exp = tmp_path / "exp"
    freeze(exp, tmp_path / "plan.toml", _parsed(section), [0, 1, 2], allow_dirty=True, code_dir=REPO)
    for arm, skill in skills.items():
        for seed in range(3):
            write_run(
                run_path(tmp_path, "exp", arm, "pong", seed), config={"algo": "ppo", "env": {"id": "pong"}},
                skill=skill, env="pong", seed=seed, n_steps=100_000, n_logs=4, noise=noise[arm],
                stream=[len(arm), seed],
            )  # fmt: skip
    (exp / "plan.json").write_text(json.dumps({"arms": [OURS], "plans": []}))
    return exp


def _row(exp: Path) -> pd.Series:
    table = run_study(exp, reps=200).endpoints
    assert len(table) == 1
    return table.iloc[0]


def test_equal_arms_are_equivalent_within_the_margin_pre_registered(tmp_path):
    exp = _experiment(tmp_path, _section(), {OURS: 0.9, PEER: 0.9}, {OURS: 0.01, PEER: 0.01})
    row = _row(exp)
    assert row.holds and row.result == "equivalent within ±5" and row.label == "pre-registered"
    assert row.ci_level == pytest.approx(0.90) and -5 < row.ci_low < row.ci_high < 5 and row.runs == 6
    text = study_markdown(run_study(exp, reps=200), "cmd", "today")
    assert "(90% CI; margin ±5)" in text and "equivalent within ±5" in text and "training return" in text
    html = build_report(exp, tmp_path / "report.html", reps=100).read_text()
    assert "equivalent within ±5" in html


def test_a_shifted_arm_is_different_and_a_noisy_one_not_shown_equivalent(tmp_path):
    shifted = _row(_experiment(tmp_path / "a", _section(), {OURS: 0.6, PEER: 0.9}, {OURS: 0.01, PEER: 0.01}))
    assert not shifted.holds and shifted.result == "different" and shifted.estimate < -5
    noisy = _row(_experiment(tmp_path / "b", _section(), {OURS: 0.9, PEER: 0.9}, {OURS: 0.3, PEER: 0.3}))
    assert not noisy.holds and noisy.result == "not shown equivalent"
    assert noisy.ci_low < -5 or noisy.ci_high > 5


def test_non_inferiority_to_a_published_value(tmp_path):
    probe = _experiment(tmp_path / "probe", _section(), {OURS: 0.9}, {OURS: 0.01})
    ours = last_training_returns(load_experiment(probe)).score.mean()  # the same runs as below
    # The published value above our mean, but by less than the margin: non-inferior, not equivalent.
    published = _endpoint(
        baseline=None, reference=float(ours) + 2.0, reference_sd=1.0, reference_n=5,
        reference_source="a paper", test="noninferiority", sides="greater",
    )  # fmt: skip
    exp2 = _experiment(tmp_path / "ni", _section(published), {OURS: 0.9}, {OURS: 0.01})
    row = _row(exp2)
    assert row.holds and row.result == "non-inferior within 5" and row.runs == 3
    assert row.ci_level == pytest.approx(0.90) and row.ci_low > -5
    assert row.estimate == pytest.approx(-2.0, abs=1e-9)
    below = {**published, "reference": float(ours) + 6.0}
    row = _row(_experiment(tmp_path / "below", _section(below), {OURS: 0.9}, {OURS: 0.01}))
    assert not row.holds and row.result == "inferior"


def test_too_few_runs_are_not_tested(tmp_path):
    exp = _experiment(tmp_path, _section(), {OURS: 0.9}, {OURS: 0.01})
    row = _row(exp)
    assert not row.holds and row.result.startswith("not tested")


# --- bad input -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"margin": 0.0}, "'margin': expected a finite number above 0, got 0.0"),
        ({"margin": -1.0}, "'margin': expected a finite number above 0"),
        ({"margin": float("nan")}, "'margin': expected a finite number above 0, got nan"),
        ({"margin": float("inf")}, "'margin': expected a finite number above 0, got inf"),
        ({"margin": "5"}, "'margin': expected float, got str"),
        ({"margin": None}, "kind 'equivalence' needs 'margin'"),
        ({"reference": 20.0}, "exactly one of 'baseline' (an arm) or 'reference'"),
        ({"baseline": None}, "exactly one of 'baseline' (an arm) or 'reference'"),
        ({"reference_sd": 1.0}, "'reference_sd': a published reference's key, but the endpoint has a"),
        ({"baseline": None, "reference": float("nan")}, "'reference': expected a finite number, got nan"),
        ({"baseline": None, "reference": 20.0, "reference_sd": 1.0}, "'reference_n' is missing"),
        ({"baseline": None, "reference": 20.0, "reference_n": 3}, "'reference_sd' is missing"),
        ({"baseline": None, "reference": 2.0, "reference_sd": -1.0, "reference_n": 3}, "deviation >= 0"),
        ({"baseline": None, "reference": 2.0, "reference_sd": 1.0, "reference_n": 1}, "2 runs, got 1"),
        ({"score": "best"}, "'score': 'best' is not one of evaluation, training"),
        ({"sides": "greater"}, "a TOST tests both margins"),
        ({"test": "noninferiority"}, "non-inferiority is one-sided"),
        ({"test": "welch"}, "'test' (kind equivalence): 'welch' is not one of tost, noninferiority"),
        ({"baseline": "sb3"}, "'baseline': 'sb3' is not an arm of the plan"),
        ({"baseline": OURS}, "baseline and candidate are the same arm"),
        ({"metric": "iqm"}, "'metric': not a key of a 'equivalence' endpoint"),
    ],
)
def test_a_bad_equivalence_endpoint_is_one_line_naming_the_key(change, message):
    with pytest.raises(ConfigError, match="plan.toml \\[analysis\\] endpoint 1") as found:
        _parsed(_section(_endpoint(**change)))
    assert message in str(found.value) and "\n" not in str(found.value)


def test_the_shipped_atari_plan_names_its_peer_arm_in_its_frozen_section():
    plan = load_plan("atari_ppo")
    assert plan.peers == (PEER,) and PEER not in plan.arms
    section = plan_analysis(plan)
    kinds = {e.kind for e in section.endpoints}
    assert kinds == {"equivalence"} and any(e.baseline == PEER for e in section.endpoints)


def test_the_plan_record_names_the_peer_arms(tmp_path):
    """plan.json keeps the peers, so that a report can tell a peer's runs from this harness's."""
    plan = load_plan("atari_ppo")
    jobs = expand(plan, (0,), "smoke", tmp_path, envs=["pong"])
    [entry] = plan_record(plan, jobs, (0,))["plans"]
    assert entry["peers"] == [PEER] and PEER not in entry["arms"]


def test_a_peer_that_is_also_an_arm_is_refused(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(
        '[plan]\ntitle = "t"\narms = ["ppo_atari_zoo"]\npeers = ["ppo_atari_zoo"]\nenvs = ["pong"]\n'
        'envs_source = "x"\n'
    )
    with pytest.raises(ConfigError, match="'peers': 'ppo_atari_zoo' is also in 'arms'"):
        load_plan(str(path))
