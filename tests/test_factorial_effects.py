"""Effects of a designed ablation (analysis/factorial.py) on synthetic runs of known effects, the
multiplicity corrections, and the design's power plan (repro/power.py) against simulated designs."""

from __future__ import annotations

import base64
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis.__main__ import main as analysis_main
from analysis.factorial import AGGREGATE, factorial_effects, factorial_lines
from analysis.multiple import adjust
from analysis.study import run_study
from analysis.synthetic import SyntheticArm, write_experiment
from protocol.design import Design
from reports.__main__ import main as reports_main
from reports.factorial import factorial_section
from repro.power import Family, design_power, design_seeds_needed, effect_se, plan_design_seeds

SWITCHES = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta")
GENERATORS = ("E=BCD", "F=ACD", "G=ABC", "H=ABD")
# Known main effects (on minus off) per letter, and one interaction: A x B, whose column is shared
# with C x G, D x H and E x F in the 2^(8-4) IV design.
EFFECTS = dict(zip("ABCDEFGH", (3.0, 0.0, -2.0, 0.0, 1.0, -4.0, 0.0, 0.5)))
INTERACTION = 4.0  # the A x B effect: y gains INTERACTION / 2 * x_A * x_B
SIGMA = 1.0


def _record(design: Design) -> dict:
    names = [f"arm{i}" for i in range(len(design.matrix))]
    return {
        "base": names[0],
        "ablate": names[-1],
        "design": {
            "kind": design.kind,
            "generators": list(design.generators),
            "switches": [
                {"letter": c, "name": n, "keys": []} for c, n in zip(design.letters, design.switches)
            ],
            "arms": {n: [int(x) for x in row] for n, row in zip(names, design.matrix)},
        },
    }


def _runs(
    design: Design, seeds: int, rng: np.random.Generator, games=("g1", "g2"), centred: bool = False
) -> pd.DataFrame:
    """Normal runs about the known effects; ``centred``: each arm's noise has mean 0 on each game, so
    every arm mean is its true mean and every contrast its true value, while the spread within arms
    (and so every SE and CI) stays that of the noise."""
    rows = []
    for i, row in enumerate(design.matrix):
        mean = 10 + sum(EFFECTS[c] / 2 * x for c, x in zip("ABCDEFGH", row))
        mean += INTERACTION / 2 * row[0] * row[1]
        for g, game in enumerate(games):
            noise = rng.normal(0, SIGMA, seeds)
            noise -= noise.mean() if centred else 0.0
            for seed in range(seeds):
                score = mean + g + noise[seed]
                rows.append([f"arm{i}", game, seed, score, score / 20])
    return pd.DataFrame(rows, columns=["arm", "env", "seed", "score", "normalised"])


def _mains(effects: pd.DataFrame, response: str) -> pd.DataFrame:
    return effects[(effects.response == response) & (effects.kind == "main")].set_index("effect")


@pytest.fixture(scope="module")
def found():
    design = Design("fractional", SWITCHES, GENERATORS)
    final = _runs(design, 4, np.random.default_rng(7))
    return design, final, factorial_effects(final, _record(design))


@pytest.fixture(scope="module")
def centred():
    design = Design("fractional", SWITCHES, GENERATORS)
    final = _runs(design, 4, np.random.default_rng(7), centred=True)
    return design, final, factorial_effects(final, _record(design))


def test_main_effects_and_the_interaction_are_recovered_within_their_cis(centred):
    # Noise centred within each arm: the estimates must be the true effects (the aliasing of A x B
    # with C x G, D x H and E x F puts it in one group, nothing in the others), inside CIs as wide as
    # the noise makes them.
    design, final, result = centred
    effects = result.effects
    effects = result.effects
    for game in ("g1", "g2"):
        mains = _mains(effects, game)
        assert list(mains.index) == list("ABCDEFGH")
        np.testing.assert_allclose(mains.estimate, list(EFFECTS.values()), atol=1e-9)
        for c, true in EFFECTS.items():
            assert mains.ci_low[c] < true < mains.ci_high[c] and mains.ci_high[c] - mains.ci_low[c] > 0.5
        inter = effects[(effects.response == game) & (effects.kind == "interaction")].set_index("effect")
        assert inter.ci_low["AB = CG = DH = EF"] < INTERACTION < inter.ci_high["AB = CG = DH = EF"]
        np.testing.assert_allclose(inter.estimate.drop("AB = CG = DH = EF"), 0, atol=1e-9)
    # The aggregate is the mean of the games' normalised scores (score / 20 here): effects / 20.
    agg, one, two = (_mains(effects, r) for r in (AGGREGATE, "g1", "g2"))
    np.testing.assert_allclose(agg.estimate, (one.estimate + two.estimate) / 40, atol=1e-12)


def test_estimates_and_standard_errors_are_the_regression_of_the_replicated_design(found):
    # The main effects are twice the least-squares coefficients of y on the +/-1 columns, and the
    # SE is 2 s / sqrt(N) with s^2 the variance pooled within arms (df = runs - arms).
    design, final, result = found
    game = final[final.env == "g1"]
    arm_index = game.arm.str.removeprefix("arm").astype(int).to_numpy()
    x = design.matrix[arm_index]
    columns = [x[:, i] for i in range(8)] + [x[:, 0] * x[:, 1]]
    coef, *_ = np.linalg.lstsq(
        np.column_stack([np.ones(len(x))] + columns), game.score.to_numpy(), rcond=None
    )
    effects = result.effects[result.effects.response == "g1"].set_index("effect")
    np.testing.assert_allclose(effects.estimate[list("ABCDEFGH")], 2 * coef[1:9])
    np.testing.assert_allclose(effects.estimate["AB = CG = DH = EF"], 2 * coef[9])
    pooled = game.groupby("arm").score.var(ddof=1).mean()  # equal seeds per arm
    assert effects.df.iloc[0] == 64 - 16
    np.testing.assert_allclose(effects.se["A"], effect_se(math.sqrt(pooled), 16, 4))


def test_the_additivity_check_finds_the_interaction_at_the_all_on_corner(centred):
    _, _, result = centred
    row = result.additivity.set_index("response").loc["g1"]
    # At the all-on corner x_A x_B = +1: the observed mean exceeds the main effects' prediction by
    # the interaction's half-effect.
    assert math.isclose(row.difference, INTERACTION / 2)
    assert 0 < row.ci_low < INTERACTION / 2 < row.ci_high and row.p < 0.05
    assert math.isclose(row.observed - row.predicted, row.difference)


def test_one_sided_tests_and_the_correction_are_the_plans(centred):
    design, final, _ = centred
    result = factorial_effects(
        final,
        _record(design),
        alpha=0.01,
        correction="bonferroni",
        alternatives={"alpha": "greater", "F": "less"},
    )
    mains = result.effects[(result.effects.response == "g1") & (result.effects.kind == "main")].set_index(
        "effect"
    )
    assert mains.alternative["A"] == "greater" and mains.alternative["F"] == "less"
    assert mains.alternative["B"] == "two-sided"
    np.testing.assert_allclose(mains.p_adjusted, np.minimum(1, mains.p * 8))
    assert mains.reject[list("ACF")].all() and not mains.reject[list("BDG")].any()
    lines = "\n".join(factorial_lines(result, scale=100, unit="%"))
    assert "## Designed ablation: main effects" in lines and "bonferroni" in lines and "additivity" in lines


def test_corrections_match_their_definitions():
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.005])
    np.testing.assert_allclose(adjust(p, "holm").to_numpy(), [0.03, 0.06, 0.06, np.nan, 0.02])
    np.testing.assert_allclose(adjust(p, "bonferroni").to_numpy(), [0.04, 0.16, 0.12, np.nan, 0.02])
    np.testing.assert_allclose(adjust(p, "bh").to_numpy(), [0.02, 0.04, 0.04, np.nan, 0.02])
    np.testing.assert_allclose(adjust(p, "none").to_numpy(), p)
    with pytest.raises(ValueError, match="correction 'sidak'"):
        adjust(p, "sidak")


def test_a_response_missing_an_arm_is_left_out():
    design = Design("factorial", ("a", "b", "c"))
    final = _runs(design, 3, np.random.default_rng(1), games=("g1",))
    final = final[~((final.arm == "arm3") & (final.env == "g1"))]
    result = factorial_effects(final, _record(design))
    assert result.skipped == ("g1", AGGREGATE) and result.effects.empty


def test_the_main_effect_se_and_the_power_plan_match_simulated_designs():
    # 16 arms x 3 seeds of normal scores: the SD of simulated main-effect estimates is 2 sigma /
    # sqrt(N), and the share of t tests rejecting a true effect delta is design_power's.
    design = Design("fractional", SWITCHES, GENERATORS)
    arms, seeds, sigma, delta = 16, 3, 0.7, 0.6
    x = design.matrix[:, 0]
    rng = np.random.default_rng(11)
    sims = 20000
    y = rng.normal(0, sigma, size=(sims, arms, seeds)) + (delta / 2 * x)[None, :, None]
    means = y.mean(axis=2)
    estimate = means @ (2 * x / arms)
    pooled = ((y - means[..., None]) ** 2).sum(axis=(1, 2)) / (arms * (seeds - 1))
    t = estimate / (2 * np.sqrt(pooled) / math.sqrt(arms * seeds))
    from scipy import stats

    rejected = np.mean(np.abs(t) > stats.t.ppf(0.975, arms * (seeds - 1)))
    assert abs(np.std(estimate) / effect_se(sigma, arms, seeds) - 1) < 0.02
    predicted = design_power(delta, sigma, arms, seeds)
    assert abs(rejected - predicted) < 0.015  # 4 binomial SEs at 20,000 draws
    n = design_seeds_needed(delta, sigma, arms)
    assert design_power(delta, sigma, arms, n) >= 0.8 > design_power(delta, sigma, arms, n - 1)


@pytest.mark.parametrize("sides", ["two", "one"])
def test_the_family_s_power_is_holm_s_over_k_endpoints_in_simulated_designs(sides):
    # The 2^(8-4) design's eight main effects tested together, Holm at 0.05 over k = 9 endpoints (the
    # eighth effect's slot stands in for the ninth): one true effect delta, the others 0. The share of
    # designs where Holm rejects the true effect is design_power's at the family's first step, alpha / k
    # (Holm's later steps add only when a null is rejected first: at most 0.05 of the draws).
    design = Design("fractional", SWITCHES, GENERATORS)
    arms, seeds, sigma, k = 16, 3, 0.7, 9
    family = Family(0.05, "holm", k, sides)
    delta = 0.7  # 3.5 standard errors: power about 0.65 at alpha / 9
    x = design.matrix  # [arms, switches]
    rng = np.random.default_rng(12)
    sims = 4000
    y = rng.normal(0, sigma, size=(sims, arms, seeds)) + (delta / 2 * x[:, 0])[None, :, None]
    means = y.mean(axis=2)
    estimates = means @ (2 * x / arms)  # [sims, switches]
    df = arms * (seeds - 1)
    pooled = ((y - means[..., None]) ** 2).sum(axis=(1, 2)) / df
    t = estimates / (2 * np.sqrt(pooled) / math.sqrt(arms * seeds))[:, None]
    p = 2 * stats.t.sf(np.abs(t), df) if sides == "two" else stats.t.sf(t, df)
    p = np.column_stack([p, np.ones(sims)])  # the ninth endpoint, never significant here
    # Holm, vectorised over the draws: the i-th smallest p (from 0) is rejected while every p up to it
    # is at most alpha / (k - i); statsmodels' Holm agrees on the first draws.
    ordered = np.sort(p, axis=1)
    steps = np.logical_and.accumulate(ordered <= 0.05 / (k - np.arange(k)), axis=1).sum(axis=1)
    holm = (p < p[:, :1]).sum(axis=1) < steps  # the true effect's rank lies among the rejected
    assert [multipletests(row, 0.05, "holm")[0][0] for row in p[:20]] == holm[:20].tolist()
    rejected = holm.mean()
    predicted = design_power(delta, sigma, arms, seeds, family)
    assert predicted < design_power(delta, sigma, arms, seeds, Family(0.05, sides=sides))  # the family costs
    assert abs(rejected - predicted) < 0.03  # under 4 binomial SEs at 4,000 draws


def test_the_design_power_plan_reads_the_pilots_pooled_spread(tmp_path):
    rows = [
        (arm, "g1", seed, v)
        for arm, values in (("a", [0.1, 0.3, 0.2]), ("b", [0.5, 0.9]))
        for seed, v in enumerate(values)
    ]
    path = tmp_path / "pilot.csv"
    pd.DataFrame(rows, columns=["arm", "env", "seed", "normalised"]).to_csv(path, index=False)
    plan = plan_design_seeds(path, ["g1"], 16, 0.1)
    # within-arm squares: 0.02 (a) + 0.08 (b) over 3 df
    assert plan.pilot_df == 3 and math.isclose(plan.pilot_sd, math.sqrt(0.1 / 3))
    assert plan.seeds == design_seeds_needed(0.1, plan.sigma, 16) and plan.power_with(plan.seeds) >= 0.8
    assert math.isclose(plan.detectable_with(plan.seeds), 0.1, rel_tol=0.3)


def test_the_study_and_the_report_show_a_designed_ablation(tmp_path):
    # A 2^2 factorial on one MinAtar game: switch a raises the final score by 0.2 of the game's scale.
    design = Design("factorial", ("a", "b"))
    record = _record(design)
    rows = record["design"]["arms"]
    arms = {arm: SyntheticArm(0.5 + 0.1 * row[0], {"algo": arm}) for arm, row in rows.items()}
    exp = write_experiment(tmp_path, "fx", arms, ["minatar_breakout"], [0, 1, 2], n_steps=10_000, frameskip=1)
    record["deviations"] = {arm: [] for arm in list(rows)[1:-1]}
    plan = {"plans": [{"plan": "fx", "title": "t", "profile": "smoke", "arms": list(rows),
                       "envs": ["minatar_breakout"], "seeds": "0-2", "ablation": record}]}  # fmt: skip
    (exp / "plan.json").write_text(json.dumps(plan))
    csv, md = tmp_path / "fx.csv", tmp_path / "fx.md"
    assert analysis_main(["study", str(exp), "--csv", str(csv), "--markdown", str(md), "--reps", "200"]) == 0
    table = pd.read_csv(tmp_path / "fx_factorial.csv")
    mains = _mains(table, "minatar_breakout")
    assert list(mains.switch) == ["a", "b"] and mains.reject["A"] and mains.estimate["A"] > 0
    text = md.read_text()
    assert "## Designed ablation: main effects" in text and "## Each deviation's effect" not in text
    # The report's section (reports/factorial.py; build_report adds it beside the deviation section).
    section = factorial_section(run_study(exp, reps=200).checks)
    assert [t.id for t in section.tables] == [
        "factorial-minatar_breakout",
        "factorial-aggregate",
        "factorial-additivity",
    ]
    assert section.figures[0].uri.startswith("data:image/png;base64,")
    # The report's figures as files, for the results page in docs/ (python -m reports build --figures).
    out, figures = tmp_path / "fx.html", tmp_path / "figures"
    assert (
        reports_main(["build", str(exp), "--out", str(out), "--reps", "200", "--figures", str(figures)]) == 0
    )
    png = (figures / "fig-half-normal.png").read_bytes()
    assert png.startswith(b"\x89PNG") and base64.b64encode(png).decode() in out.read_text()
    ids = set(re.findall(r'<img id="([^"]+)"', out.read_text()))
    assert {p.stem for p in figures.glob("*.png")} == ids
