"""MinAtar in analysis and reports: DQN normalisation, the comparison with published curves, the
two-arm verdict and its power, the report and the study summary. The reference tables here are small
fixtures (tmp files), not the published values."""

import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis import scores as score_module
from analysis.__main__ import main as analysis_main
from analysis.aggregate import compare_with_minatar_published
from analysis.curves import score_tables
from analysis.runs import load_experiment
from analysis.scores import minatar_published_curves, minatar_reference_table, published_at
from analysis.study import RESULT_COLUMNS
from analysis.synthetic import SyntheticArm, write_experiment
from analysis.verdict import iqm_difference, order_arms, power_statement, two_arm_verdict
from protocol.stats import ALPHA, detectable_difference, power_at
from reports.__main__ import main as reports_main

ENVS = [
    "minatar_asterix",
    "minatar_breakout",
    "minatar_freeway",
    "minatar_seaquest",
    "minatar_space_invaders",
]
# env: (random, dqn_5m, dqn_5m_low, dqn_5m_high): fixture values, not Young & Tian's.
REFERENCE = {
    "minatar_asterix": (0.5, 20.5, 18.0, 23.0),
    "minatar_breakout": (0.5, 10.5, 9.0, 12.0),
    "minatar_freeway": (0.0, 50.0, 45.0, 55.0),
    "minatar_seaquest": (0.0, 20.0, 15.0, 25.0),
    "minatar_space_invaders": (2.0, 62.0, 55.0, 70.0),
}
PUBLISHED = "rlpyt_r2d1_minatar_published"
CORRECTED = "r2d1_minatar_corrected"


def _write_reference(directory):
    reference = pd.DataFrame(
        [
            {"env": env, "random": r, "random_source": f"fixture random {env}", "dqn_5m": d,
             "dqn_5m_low": lo, "dqn_5m_high": hi, "dqn_5m_source": f"fixture figure {env}",
             "frames": 5_000_000}
            for env, (r, d, lo, hi) in REFERENCE.items()
        ]
    )  # fmt: skip
    # Each curve: random at 0 frames, 60% of DQN's 5M score at 1M (band +-10%), DQN's score at 5M;
    # algo spelt "DQN" to check the case-insensitive match. An "AC" curve must be ignored.
    curves = pd.DataFrame(
        [
            {"env": env, "algo": algo, "frames": f, "return": v, "return_low": v - band,
             "return_high": v + band, "source": f"fixture Fig. 2 {env} {f}", "protocol": "training return"}
            for env, (r, d, lo, hi) in REFERENCE.items()
            for algo, k in (("DQN", 1.0), ("AC", 3.0))
            for f, v, band in ((0, r, 0.0), (1_000_000, k * 0.6 * d, 0.1 * d),
                               (5_000_000, k * d, (hi - lo) / 2))
        ]
    )  # fmt: skip
    reference.to_csv(directory / "minatar_reference_scores.csv", index=False)
    curves.to_csv(directory / "minatar_published_curves.csv", index=False)


@pytest.fixture(scope="module")
def minatar_data(tmp_path_factory):
    """Fixture reference tables in place of analysis/data's, for every test of this module."""
    directory = tmp_path_factory.mktemp("minatar_data")
    _write_reference(directory)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(score_module, "MINATAR_REFERENCE_PATH", directory / "minatar_reference_scores.csv")
        patch.setattr(score_module, "MINATAR_CURVES_PATH", directory / "minatar_published_curves.csv")
        yield directory


@pytest.fixture(scope="module")
def experiment(minatar_data, tmp_path_factory):
    """Two R2D1 arms on the five MinAtar games, 3 seeds; the corrected arm ends at DQN's level, the
    published arm at 40% of it. MinAtar has no frame skip: frames = env steps."""
    arms = {PUBLISHED: SyntheticArm(0.4, {"algo": "r2d1", "swap": True}),
            CORRECTED: SyntheticArm(1.0, {"algo": "r2d1", "swap": False})}  # fmt: skip
    root = tmp_path_factory.mktemp("runs")
    return write_experiment(
        root, "r2d1_minatar", arms, ENVS, [0, 1, 2], n_logs=3, eval_episodes=4, frameskip=1
    )


# --- normalisation and published values ----------------------------------------------------------
def test_dqn_normalisation_hand_computed(minatar_data, tmp_path):
    table = minatar_reference_table()
    # asterix: random 0.5, DQN 20.5 -> (10.5 - 0.5) / 20 = 0.5
    assert table.normalise("minatar_asterix", 10.5).item() == pytest.approx(0.5)
    np.testing.assert_allclose(
        table.normalise("minatar_freeway", np.array([0.0, 50.0, 75.0])), [0.0, 1.0, 1.5]
    )
    with pytest.raises(KeyError, match="minatar_pong"):
        table.normalise("minatar_pong", 1.0)
    broken = pd.read_csv(minatar_data / "minatar_reference_scores.csv")
    broken.drop(columns="dqn_5m_low").to_csv(tmp_path / "a.csv", index=False)
    with pytest.raises(ValueError, match="missing columns \\['dqn_5m_low'\\]"):
        minatar_reference_table(tmp_path / "a.csv")
    broken.assign(dqn_5m=broken.random).to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(ValueError, match="dqn_5m equals random"):
        minatar_reference_table(tmp_path / "b.csv")
    with pytest.raises(FileNotFoundError):
        minatar_reference_table(tmp_path / "absent.csv")


def test_published_curve_is_interpolated_and_never_extrapolated(tmp_path):
    curve = pd.DataFrame(
        {"env": "e", "algo": "dqn", "frames": [200, 0, 100], "return": [30.0, 0.0, 10.0],
         "return_low": [20.0, 0.0, 8.0], "return_high": [40.0, 0.0, 12.0], "source": ["c", "a", "b"],
         "protocol": "training return"}
    )  # fmt: skip
    # halfway between (100, 10 [8, 12]) and (200, 30 [20, 40])
    assert published_at(curve, 150) == {
        "return": 20.0,
        "return_low": 14.0,
        "return_high": 26.0,
        "source": "b; c",
    }
    assert published_at(curve, 100) == {"return": 10.0, "return_low": 8.0, "return_high": 12.0, "source": "b"}
    beyond = published_at(curve, 250)
    assert np.isnan(beyond["return"]) and "read-off range: 0 to 200" in beyond["source"]
    pd.concat([curve, curve.iloc[:1]]).to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(ValueError, match="repeated"):
        minatar_published_curves(tmp_path / "dup.csv")


def test_compare_with_minatar_published_hand_computed(minatar_data):
    final = pd.DataFrame(
        {"arm": "a", "env": ["minatar_breakout"] * 3 + ["minatar_freeway", "CartPole-v1"],
         "seed": [0, 1, 2, 0, 0], "score": [4.0, 5.0, 6.0, 1.0, 500.0], "normalised": 0.0,
         "frames": [500_000] * 3 + [6_000_000, 500_000]}
    )  # fmt: skip
    table = compare_with_minatar_published(final).set_index("env")
    assert list(table.index) == ["minatar_breakout", "minatar_freeway"]  # CartPole is not MinAtar
    row = table.loc["minatar_breakout"]
    # breakout's DQN curve: (0, 0.5), (1M, 6.3 [5.25, 7.35]); halfway: 3.4 [2.875, 3.925]
    assert row.published == pytest.approx(3.4) and row.published_low == pytest.approx(2.875)
    assert row.published_high == pytest.approx(3.925) and row.algo == "dqn"
    assert (
        row.published_source == "fixture Fig. 2 minatar_breakout 0; fixture Fig. 2 minatar_breakout 1000000"
    )
    assert row.score == pytest.approx(5.0) and row.n_runs == 3 and row.frames == 500_000
    # Three runs 4, 5, 6: the t interval 5 -+ t(0.975, 2) / sqrt(3) = [2.52, 7.48] holds the published 3.4
    # (the runs' own range, the percentile bootstrap's interval, would not).
    assert row.ci_low == pytest.approx(5 - stats.t.ppf(0.975, 2) / np.sqrt(3))
    assert row.published_in_ci and row.overlap
    freeway = table.loc["minatar_freeway"]  # 6M frames: past the last read-off point
    assert np.isnan(freeway.published) and freeway.published_in_ci is None and freeway.overlap is None


def test_minatar_experiments_are_dqn_normalised(experiment, minatar_data, tmp_path, monkeypatch):
    scores = score_tables(load_experiment(experiment))
    assert scores.reference == "dqn" and scores.label == "DQN-normalised score" and scores.percent
    assert not scores.human_normalised and "no human scores" in scores.normalisation
    row = scores.final.iloc[0]
    random, dqn = REFERENCE[row.env][:2]
    assert row.normalised == pytest.approx((row.score - random) / (dqn - random))
    assert (scores.final.frames == scores.final.env_steps).all()
    means = scores.final.groupby("arm").normalised.mean()  # synthetic skills 1.0 and 0.4
    assert means[CORRECTED] == pytest.approx(1.0, abs=0.1) and means[PUBLISHED] == pytest.approx(0.4, abs=0.1)
    # without the reference table the experiment falls back to min-max, and says why
    monkeypatch.setattr(score_module, "MINATAR_REFERENCE_PATH", tmp_path / "absent.csv")
    fallback = score_tables(load_experiment(experiment))
    assert fallback.reference == "min-max" and "MinAtar reference table is absent" in fallback.normalisation


# --- verdict and power: hand-computed ------------------------------------------------------------
def test_iqm_difference_hand_computed():
    # No spread within a game: every resample is the data, the interval is the point.
    a, b = np.array([[1.0, 2.0], [1.0, 2.0]]), np.array([[3.0, 4.0], [3.0, 4.0]])
    # IQM of {1, 1, 2, 2} trims one value at each end: mean(1, 2) = 1.5; of b: 3.5
    assert iqm_difference(b, a) == {"value": 2.0, "ci_low": 2.0, "ci_high": 2.0, "se": 0.0, "df": 4.0}
    # One game, two runs: IQM of two values is their mean (no value trimmed). Resampling b = [0, 2]
    # gives means 0, 1, 2 with probability 1/4, 1/2, 1/4: SD sqrt(1/2). Widened by sqrt(2 / 1): se = 1
    # (= the unbiased standard error of the mean, sqrt(2 / 2)); the baseline has no spread, so Welch's
    # df is b's, 1, and the interval is Welch's, 1 -+ t(0.975, 1) = 12.71.
    out = iqm_difference(np.array([[0.0], [2.0]]), np.zeros((2, 1)), reps=20_000)
    assert out["value"] == 1.0 and out["se"] == pytest.approx(1.0, rel=0.02) and out["df"] == 1.0
    half = stats.t.ppf(0.975, 1) * out["se"]
    assert out["ci_low"] == pytest.approx(1 - half) and out["ci_high"] == pytest.approx(1 + half)
    one_run = iqm_difference(np.ones((1, 3)), np.zeros((1, 3)))
    assert one_run["value"] == 1.0 and np.isnan(one_run["ci_low"]) and np.isnan(one_run["se"])
    with pytest.raises(ValueError, match="one shape"):
        iqm_difference(np.ones((2, 3)), np.ones((3, 3)))


def test_power_function_hand_computed():
    assert power_at(0.0, se=0.1) == pytest.approx(ALPHA)  # a zero shift is "detected" at alpha
    # z_0.975 + z_0.8 = 1.959964 + 0.841621 = 2.801585 standard errors; the far tail adds ~1e-6
    assert power_at(2.801585 * 0.1, se=0.1) == pytest.approx(0.8, abs=1e-5)
    assert detectable_difference(0.1) == pytest.approx(0.2801585, rel=1e-5)
    assert detectable_difference(0.1, power=0.9) == pytest.approx(0.1 * (1.959964 + 1.281552), rel=1e-5)
    assert detectable_difference(0.0) == 0.0
    # on t: 8 df, two-sided 0.05 (critical 2.306); the noncentral t with shift 3.2009 passes it with
    # probability 0.8 (scipy.stats.nct.sf(2.306004, 8, 3.2009) = 0.80000)
    assert power_at(3.2009196 * 0.1, se=0.1, df=8) == pytest.approx(0.8, abs=1e-6)
    assert detectable_difference(0.1, df=8) == pytest.approx(0.32009196, rel=1e-6)
    assert power_at(0.0, se=0.1, df=8) == pytest.approx(ALPHA)
    with pytest.raises(ValueError, match="must exceed alpha"):
        detectable_difference(0.1, power=0.05)


def test_order_arms():
    arms = [CORRECTED, PUBLISHED]
    assert order_arms(arms) == (PUBLISHED, CORRECTED)  # the arm named "published" is the baseline
    assert order_arms(arms, baseline=CORRECTED) == (CORRECTED, PUBLISHED)
    assert order_arms(["x", "y"], {"plan": {"arms": ["y", "x", "z"]}}) == ("y", "x")
    assert order_arms(["x", "y"], {"arms": ["y", "x"]}) == ("y", "x")
    assert order_arms(["y", "x"]) == ("x", "y")
    with pytest.raises(ValueError, match="not one of"):
        order_arms(arms, baseline="other")
    with pytest.raises(ValueError, match="two arms"):
        order_arms(["x"])


def test_verdict_sentences():
    rng = np.random.default_rng(0)
    base = rng.normal(0.5, 0.05, (5, 3))
    better = {"A": base, "B": rng.normal(1.0, 0.05, (5, 3))}
    found = two_arm_verdict(better, "A", "B", reps=100, label="DQN-normalised score", scale=100,
                            unit=" percentage points")  # fmt: skip
    assert found.winner == "B" and found.poi["value"] == 1.0 and found.iqm_difference["ci_low"] > 0
    assert found.sentence.startswith("B is better than A over 3 games x 5 seeds per arm: the IQM")
    assert "percentage points (95% CI above 0); P(B > A) = 1 (an estimate, no interval)." in found.sentence
    worse = two_arm_verdict({"A": better["B"], "B": base}, "A", "B", reps=100)
    assert worse.winner == "A" and worse.sentence.startswith("A is better than B")
    same = two_arm_verdict({"A": base, "B": base + 0.001}, "A", "B", reps=100)
    assert same.winner is None and same.sentence.startswith("No difference between B and A was detected")
    assert "(95% CI including 0)" in same.sentence
    single = two_arm_verdict({"A": base[:1], "B": better["B"][:1]}, "A", "B", reps=100)
    assert (
        single.winner is None
        and "one seed per game" in single.sentence
        and "1 seed per arm" in single.sentence
    )

    power = power_statement(found, label="DQN-normalised score", scale=100, unit=" percentage points")
    df = found.iqm_difference["df"]
    assert power.detectable == pytest.approx(detectable_difference(found.iqm_difference["se"], df=df))
    assert power.detectable > 2.80 * power.se  # t on the interval's few df asks more than the normal
    assert (
        f"80% power (two-sided t on {df:.0f} df, alpha 0.05)" in power.sentence
        and "is at least that in size" in power.sentence
    )
    assert "no seed-to-seed spread" in power_statement(single).sentence


# --- power: simulation -----------------------------------------------------------------------------
def test_power_function_matches_simulated_experiments():
    """Simulated 5-game x 5-seed experiments from a known population (per-game means and spreads of
    different sizes, one skewed game): the verdict's rule (the IQM-difference interval excludes 0)
    detects a zero shift at about alpha, a shift of ``detectable_difference`` about 80% of the time,
    and a large shift always; the bootstrap standard error matches the true spread of the estimate."""
    rng = np.random.default_rng(7)
    mean, spread = np.array([0.2, 0.5, 1.0, 0.8, 0.3]), np.array([0.1, 0.2, 0.15, 0.3, 0.05])

    def draw():
        runs = rng.normal(mean, spread, (5, 5))
        runs[:, 4] = 0.3 * rng.lognormal(0.0, 0.5, 5)  # a skewed game
        return runs

    def detected(shift, sims=300):
        hits, estimates, ses, dfs = 0, [], [], []
        for k in range(sims):
            out = iqm_difference(draw() + shift, draw(), reps=250, seed=k)
            hits += out["ci_low"] > 0 or out["ci_high"] < 0
            estimates.append(out["value"])
            ses.append(out["se"])
            dfs.append(out["df"])
        return hits / sims, np.std(estimates), np.mean(ses), np.median(dfs)

    null_rate, true_se, mean_se, df = detected(0.0)
    assert 0.01 <= null_rate <= 0.10  # alpha = 0.05, 300 simulations: SE of the rate about 0.013
    assert mean_se == pytest.approx(true_se, rel=0.15)
    mdd = detectable_difference(true_se, df=df)
    assert power_at(mdd, true_se, df=df) == pytest.approx(0.8)
    assert 0.68 <= detected(mdd)[0] <= 0.92
    assert detected(3 * mdd, sims=100)[0] == 1.0


# --- report and study ----------------------------------------------------------------------------
def _section_order(html):
    return re.findall(r'<section id="([^"]+)">', html)


def _rows(html, table_id):
    body = re.search(rf'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return re.findall(r"<tr>(.*?)</tr>", body, re.S)


@pytest.mark.slow
def test_report_of_a_minatar_experiment_opens_with_the_verdict(experiment, minatar_data, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert reports_main(["build", str(experiment), "--reps", "100", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    html = out.read_text()
    order = _section_order(html)
    # No [analysis] was frozen: the verdict stays first and the line labelling it exploratory follows.
    assert order[:5] == ["verdict", "analysis-plan", "learning", "aggregates", "performance-profiles"]
    assert order.index("published-minatar") < order.index("learning-curves") < order.index("what-ran")
    assert '<section id="published">' not in html  # no Atari game
    statements = re.findall(r'<p class="statement">(.*?)</p>', html, re.S)
    assert len(statements) == 3 and statements[2].startswith("Exploratory: no [analysis] section was frozen")
    assert statements[0].startswith(f"{CORRECTED} is better than {PUBLISHED} over 5 games x 3 seeds per arm")
    assert "the smallest IQM DQN-normalised score difference detected with 80% power" in statements[1]
    assert len(_rows(html, "verdict-table")) == 4
    assert "DQN-normalised" in html and "no human scores" in html
    assert "DQN-normalised score (%)" in html  # the aggregate table's unit
    rows = _rows(html, "minatar-published-table")
    assert len(rows) == 10  # 2 arms x 5 games
    # The published protocol and source, once per game beside the table (as columns they widened it
    # past a 1280 px page).
    notes = re.findall(r'<p class="note">(minatar_asterix: .*?)</p>', html)
    assert (
        len(notes) == 1
        and "fixture Fig. 2 minatar_asterix 0; fixture Fig. 2 minatar_asterix 1000000" in notes[0]
    )
    assert "fixture Fig. 2" not in rows[0]
    assert len(_rows(html, "minatar-reference-table")) == 5
    # a baseline that is not an arm is a clear error, before any bootstrap
    assert reports_main(["build", str(experiment), "--out", str(out), "--baseline", "nope"]) == 2
    assert "not one of" in capsys.readouterr().err


def test_study_writes_result_table_and_markdown(experiment, minatar_data, tmp_path, capsys):
    csv, md = tmp_path / "docs/r2d1_minatar.csv", tmp_path / "docs/r2d1_minatar.md"
    argv = ["study", str(experiment), "--csv", str(csv), "--markdown", str(md), "--reps", "100"]
    assert analysis_main(argv) == 0
    assert capsys.readouterr().out.split() == [str(csv), str(md)]
    table = pd.read_csv(csv)
    assert list(table.columns) == RESULT_COLUMNS and len(table) == 2 * 5 * 3
    assert (table.frames == table.env_steps).all() and (table.env_steps == 10_000).all()
    row = table.iloc[0]
    random, dqn = REFERENCE[row.env][:2]
    assert row.normalised == pytest.approx((row.final_return - random) / (dqn - random))

    text = md.read_text()
    assert (
        f"Produced by `python -m analysis study {experiment} --csv {csv} --markdown {md} --reps 100` on "
        in text
    )
    assert re.search(r"on \d{4}-\d{2}-\d{2} \(UTC\)", text)
    verdict_line = next(line for line in text.splitlines() if line.startswith("**Verdict (exploratory).**"))
    assert f"{CORRECTED} is better than {PUBLISHED}" in verdict_line
    assert "**Power.** With 5 games x 3 seeds per arm" in text
    assert "Method: t with the interval's degrees of freedom" in text
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == [
        "## The verdict across games", "## Learning check", "## Aggregates", "## Per game",
        "## Runs not used",
    ]  # fmt: skip
    assert text.index("**Verdict (exploratory).**") < text.index("## Aggregates")
    assert "| arm | IQM (%) | Median (%) | Mean (%) | Optimality gap (%) |" in text
    per_game = text[text.index("## Per game") : text.index("## Runs not used")]
    assert len([line for line in per_game.splitlines() if line.startswith(f"| {CORRECTED} | minatar_")]) == 5
    assert "published DQN training return at these frames [reading range]" in per_game
    assert "fixture Fig. 2 minatar_freeway 0; fixture Fig. 2 minatar_freeway 1000000" in per_game

    # without output paths the summary is printed; --baseline swaps A and B; an empty directory is a
    # clear error
    assert analysis_main(["study", str(experiment), "--reps", "100", "--baseline", CORRECTED]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith("# Study r2d1_minatar")
        and f"P({PUBLISHED} > {CORRECTED}) = 0 (an estimate, no interval)" in printed
    )
    (tmp_path / "empty").mkdir()
    assert analysis_main(["study", str(tmp_path / "empty")]) == 2
    assert "no run directories" in capsys.readouterr().err
