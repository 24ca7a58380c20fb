"""Each deviation's effect in an ablation experiment: IQM difference to the base arm with its CI,
power and smallest detectable difference, ordered by size, in the study's markdown and csv and in the
report (table and plot); the verdict of the ablation's endpoints; a study run in pieces; the verdict
replicated on fresh seeds beside the study's. On synthetic runs with known effects."""

from __future__ import annotations

import itertools
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from analysis.__main__ import main as analysis_main
from analysis.ablation import deviation_effects, deviation_games, false_discovery_q, rank_test
from analysis.replication import pooled_verdict
from analysis.study import run_study
from analysis.synthetic import SyntheticArm, write_experiment
from reports.build import build_report

BASE = "corrected"
GAMES = ["minatar_breakout", "minatar_space_invaders", "minatar_seaquest", "minatar_asterix"]
SKILLS = {
    "published": 0.3,
    BASE: 0.8,
    f"{BASE}_with_big": 0.4,
    f"{BASE}_with_none": 0.8,
    f"{BASE}_with_small": 0.7,
}
PLAN = {
    "plans": [
        {
            "plan": "abl", "title": "t", "profile": "mini", "arms": list(SKILLS), "envs": GAMES,
            "seeds": "0-4",
            "ablation": {
                "base": BASE, "ablate": "published",
                "deviations": {f"{BASE}_with_{d}": [f"algo.{d}"] for d in ("small", "none", "big")},
            },
        }
    ]
}  # fmt: skip
# The synthetic curve ends at 1 - exp(-1 / 0.3) of the skill (analysis/synthetic.py).
REACHED = 0.9643


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    arms = {arm: SyntheticArm(skill, {"algo": arm}) for arm, skill in SKILLS.items()}
    exp = write_experiment(
        tmp_path_factory.mktemp("abl"), "abl", arms, GAMES, list(range(5)), n_steps=250_000, frameskip=1
    )
    (exp / "plan.json").write_text(json.dumps(PLAN))
    return exp


def test_effects_are_ordered_by_size_with_intervals_that_find_the_known_differences(experiment):
    effects = run_study(experiment, reps=500).effects
    assert list(effects.deviation) == ["big", "small", "none"]
    big, small, none = (effects.iloc[i] for i in range(3))
    assert big.difference == pytest.approx(-0.4 * REACHED, abs=0.05)
    assert big.ci_high < 0 and big["keys"] == "algo.big"
    assert small.difference == pytest.approx(-0.1 * REACHED, abs=0.05)
    assert none.ci_low <= 0 <= none.ci_high
    assert (effects.detectable > 0).all() and (effects.detectable < 0.1).all()
    # Detectable with 80% power is where the power at that difference, on t with the interval's df
    # (Welch-Satterthwaite over 4 games x 4 df a side: at most 32), is 0.8; the normal distribution
    # would call a smaller difference detectable.
    from protocol.stats import power_at

    rows = list(effects.itertuples())
    assert (effects.df > 1).all() and (effects.df <= 32).all()
    assert all(power_at(r.detectable, r.se, df=r.df) == pytest.approx(0.8, abs=1e-6) for r in rows)
    assert all(power_at(r.detectable, r.se) > 0.8 for r in rows)


def test_no_ablation_record_no_effects_and_a_missing_base_gives_none():
    final = pd.DataFrame({"arm": ["x"], "env": ["g"], "seed": [0], "normalised": [0.5]})
    assert deviation_effects(final, {"base": "b", "deviations": {"x": []}}).empty


def test_each_deviation_per_game_compares_the_seeds_it_shares_with_the_base():
    """Hand-computed: the arm's mean on its seeds, the base's mean on the same seeds, the base's
    range over all of its seeds; a game the base lacks and an arm outside the record are left out;
    ``order`` puts the arms first in its order."""
    rows = [
        ("b", "g1", 0, 1.0), ("b", "g1", 1, 3.0), ("b", "g1", 2, 8.0), ("b", "g2", 0, 5.0),
        ("b_with_x", "g1", 1, 4.0), ("b_with_x", "g1", 2, 6.0), ("b_with_x", "g1", 9, 100.0),
        ("b_with_x", "g3", 0, 1.0), ("b_with_y", "g2", 0, 2.0), ("other", "g1", 0, 0.0),
    ]  # fmt: skip
    final = pd.DataFrame(rows, columns=["arm", "env", "seed", "score"])
    record = {"base": "b", "deviations": {"b_with_x": ["algo.x"], "b_with_y": ["algo.y"]}}
    games = deviation_games(final, record, order=["b_with_y"])
    assert list(zip(games.deviation, games.env)) == [("y", "g2"), ("x", "g1")]
    x = games.iloc[1]
    assert (x.runs, x.score, x.base_score, x.difference) == (2, 5.0, 5.5, -0.5)  # seeds 1, 2 only
    assert (x.base_runs, x.base_low, x.base_high) == (3, 1.0, 8.0)
    y = games.iloc[0]
    assert (y.runs, y.score, y.base_score, y.base_runs, y.base_low, y.base_high) == (1, 2.0, 5.0, 1, 5.0, 5.0)
    # x's runs 4, 6 against the base's 1, 3, 8: ranks 3 and 4 of the pooled five, U = 4; 4 of the 10
    # ways to pick 2 of 5 have U >= 4, 8 have U <= 4: p = 2 * 4/10. y has one run: no test.
    assert x.p_rank == pytest.approx(0.8) and np.isnan(y.p_rank)
    assert x.q_rank == pytest.approx(0.8) and np.isnan(y.q_rank)  # the table's only test


def test_the_false_discovery_q_is_benjamini_hochberg_over_the_finite_tests():
    """Hand-computed, m = 4 finite tests ranked 0.01, 0.03, 0.04, 0.5: p * m / rank = 0.04, 0.0533,
    0.0533, 0.5 once each is lowered to the smallest at or above its rank (0.03's 0.06 to 0.04's
    0.0533); NaN stays NaN and does not count as a test."""
    q = false_discovery_q(pd.Series([0.04, np.nan, 0.01, 0.5, 0.03], index=list("abcde")))
    assert list(q.index) == list("abcde") and np.isnan(q["b"])
    assert q.drop("b").tolist() == pytest.approx([4 * 0.04 / 3, 0.04, 0.5, 4 * 0.04 / 3])
    assert false_discovery_q(pd.Series([np.nan, np.nan])).isna().all()


def test_a_replication_s_base_runs_join_the_range_and_the_test_not_the_means():
    """Hand-computed: the base's runs on seeds 10 and 11 (2 and 9, and another arm's run, ignored)
    widen the base's range on g1 to [1, 9] over 5 runs; x's means stay those of the shared seeds.
    x's 4, 6 against 1, 2, 3, 8, 9: ranks 4 and 5 of 7, U = 6; of the 21 ways to pick 2 of 7, 9 have
    U >= 6 and 15 have U <= 6: p = 2 * 9/21."""
    rows = [
        ("b", "g1", 0, 1.0), ("b", "g1", 1, 3.0), ("b", "g1", 2, 8.0),
        ("b_with_x", "g1", 1, 4.0), ("b_with_x", "g1", 2, 6.0),
    ]  # fmt: skip
    final = pd.DataFrame(rows, columns=["arm", "env", "seed", "score"])
    more = pd.DataFrame(
        [("b", "g1", 10, 2.0), ("b", "g1", 11, 9.0), ("other", "g1", 10, 100.0)],
        columns=["arm", "env", "seed", "score"],
    )
    record = {"base": "b", "deviations": {"b_with_x": ["algo.x"]}}
    x = deviation_games(final, record, more_base=more).iloc[0]
    assert (x.runs, x.score, x.base_score, x.difference) == (2, 5.0, 5.5, -0.5)
    assert (x.base_runs, x.base_low, x.base_high) == (5, 1.0, 9.0)
    assert x.p_rank == pytest.approx(18 / 21)


def test_the_rank_test_is_exact_and_two_sided_with_ties():
    """Hand-computed: 4 runs all below 5 others is the most extreme of C(9, 4) = 126 splits, on
    either side: p = 2/126. Tied values are ranked exactly: the p of a slow enumeration of the splits
    with midranks (with the base's ties, U cannot reach 0, so the doubled tail is what makes it 2/126
    there too)."""
    assert rank_test(pd.Series([2.2, 3.9, 3.9, 4.2]), pd.Series([6.0, 6.1, 6.4, 6.4, 6.5])) == pytest.approx(
        2 / 126
    )
    assert rank_test(pd.Series([6.5, 7.0, 7.2, 7.8]), pd.Series([5.0, 5.5, 6.0, 6.0, 6.0])) == pytest.approx(
        _enumerated_p([6.5, 7.0, 7.2, 7.8], [5.0, 5.5, 6.0, 6.0, 6.0])
    )
    assert np.isnan(rank_test(pd.Series([1.0]), pd.Series([2.0, 3.0])))


def _enumerated_p(runs, base_runs):
    """The slow reference: U of every split of the pooled runs from midranks; two-sided as twice the
    smaller one-sided share, at most 1."""
    pooled = np.array(runs + base_runs)
    ranks = pd.Series(pooled).rank().to_numpy()
    n = len(runs)

    def u(indices):
        return ranks[list(indices)].sum() - n * (n + 1) / 2

    observed = u(range(n))
    us = np.array([u(s) for s in itertools.combinations(range(len(pooled)), n)])
    return min(1.0, 2 * min(np.mean(us >= observed - 1e-9), np.mean(us <= observed + 1e-9)))


def test_the_verdict_of_an_ablation_compares_its_endpoints(experiment, tmp_path):
    """Five arms, no two-arm experiment: the verdict is the ablate setting's arm (A) against the base
    (B), as the two-arm plan of those settings would give it, in the summary and in the report."""
    study = run_study(experiment, reps=300)
    found = study.verdict
    assert (found.baseline, found.candidate, found.winner) == ("published", BASE, BASE)
    assert found.iqm_difference["value"] == pytest.approx(0.5 * REACHED, abs=0.05)
    assert (found.n_games, found.n_runs) == (len(GAMES), 5) and study.power is not None
    md = tmp_path / "abl.md"
    assert analysis_main(["study", str(experiment), "--markdown", str(md), "--reps", "200"]) == 0
    assert f"**Verdict (exploratory).** {BASE} is better than published" in md.read_text()
    html = build_report(experiment, out=tmp_path / "r.html", reps=200).read_text()
    assert 'id="verdict-table"' in html and f"P({BASE} &gt; published)" in html


def test_a_study_run_in_pieces_reports_every_complete_pair(tmp_path):
    """One deviation arm has run one game of four: the other arms' effects and the endpoint verdict
    are those of the complete study, its own effect uses the one game it shares with the base."""
    whole = tmp_path / "whole"
    arms = {arm: SyntheticArm(skill, {"algo": arm}) for arm, skill in SKILLS.items()}
    exp = write_experiment(whole, "abl", arms, GAMES, list(range(5)), n_steps=250_000, frameskip=1)
    (exp / "plan.json").write_text(json.dumps(PLAN))
    complete = run_study(exp, reps=300)
    for game in GAMES[1:]:
        shutil.rmtree(exp / f"{BASE}_with_small" / game)
    part = run_study(exp, reps=300)
    assert part.verdict.iqm_difference == complete.verdict.iqm_difference
    keep = ["big", "none"]
    pd.testing.assert_frame_equal(
        part.effects.set_index("deviation").loc[keep], complete.effects.set_index("deviation").loc[keep]
    )
    small = part.effects.set_index("deviation").loc["small"]
    assert small.difference != complete.effects.set_index("deviation").loc["small"].difference


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The endpoints again on seeds 100-104, and an experiment of other arms."""
    root = tmp_path_factory.mktemp("fresh")
    endpoints = {arm: SyntheticArm(SKILLS[arm], {"algo": arm}) for arm in ("published", BASE)}
    exp = write_experiment(
        root, "fresh", endpoints, GAMES, list(range(100, 105)), n_steps=250_000, frameskip=1
    )
    others = {arm: SyntheticArm(0.5, {"algo": arm}) for arm in ("published", "other")}
    other = write_experiment(root, "other", others, GAMES, list(range(3)), n_steps=250_000, frameskip=1)
    return exp, other


def test_the_replication_on_fresh_seeds_is_shown_beside_the_study(experiment, fresh, tmp_path):
    md = tmp_path / "abl.md"
    argv = ["study", str(experiment), "--replication", str(fresh[0]), "--markdown", str(md), "--reps", "200"]
    assert analysis_main(argv) == 0
    text = md.read_text()
    section = text[text.index("## Replication on fresh seeds") :]
    assert f"The replication agrees with the study: both find {BASE} better." in section
    assert (
        "| seeds | 0-4 | 100-104 |" in section
        and "| games x runs per game and arm | 4 x 5 | 4 x 5 |" in section
    )
    assert f"| better arm (verdict rule) | {BASE} | {BASE} |" in section
    # No frozen [analysis] section allows pooling: the two seed sets are not pooled unless asked.
    assert "The two seed sets are not pooled" in section and "| pooled |" not in section
    games = text[text.index("## Each deviation's effect per game") :]
    assert games.count("(10 runs)") == len(GAMES)  # the base's runs on both seed sets, per game


def test_pooling_asked_for_after_the_data_is_labelled_exploratory(experiment, fresh, tmp_path):
    md = tmp_path / "abl.md"
    argv = ["study", str(experiment), "--replication", str(fresh[0]), "--pool", "--markdown", str(md),
            "--reps", "200"]  # fmt: skip
    assert analysis_main(argv) == 0
    section = md.read_text()[md.read_text().index("## Replication on fresh seeds") :]
    assert f"| better arm (verdict rule) | {BASE} | {BASE} | {BASE} |" in section
    assert "Pooled (**exploratory**: no frozen [analysis] section allows pooling" in section
    assert f"the two seed sets (4 games x 10 runs per game and arm) find {BASE} better" in section
    assert "| seeds | 0-4 | 100-104 | 0-4,100-104 |" in section


def test_the_pooled_verdict_is_the_verdict_of_one_experiment_of_both_seed_sets(experiment, fresh, tmp_path):
    study = run_study(experiment, reps=200)
    pooled, seeds, _ = pooled_verdict(study, run_study(fresh[0], baseline="published", reps=200))
    both = tmp_path / "both"  # one experiment holding the run directories of the two
    for arm in ("published", BASE):
        for exp in (experiment, fresh[0]):
            shutil.copytree(exp / arm, both / arm, dirs_exist_ok=True)
    alone = run_study(both, baseline="published", reps=200).verdict
    assert seeds == [*range(5), *range(100, 105)] and (pooled.n_games, pooled.n_runs) == (4, 10)
    assert pooled.iqm_difference == alone.iqm_difference and pooled.poi == alone.poi
    assert pooled.winner == alone.winner == BASE


def test_a_replication_on_the_study_s_own_seeds_is_one_line_and_exit_2(experiment, tmp_path, capsys):
    md = tmp_path / "abl.md"
    argv = [
        "study",
        str(experiment),
        "--replication",
        str(experiment),
        "--markdown",
        str(md),
        "--reps",
        "200",
    ]
    assert analysis_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"analysis: {experiment}: seeds 0-4 are also the study's: a replication runs other seeds"
    assert not md.exists()


def test_the_replication_lists_only_the_seeds_its_verdict_compares(experiment, tmp_path):
    """A seed one arm ran and the other did not is left out of the balanced verdict, and out of the
    seeds the replication's row names."""
    endpoints = {arm: SyntheticArm(SKILLS[arm], {"algo": arm}) for arm in ("published", BASE)}
    exp = write_experiment(
        tmp_path, "more", endpoints, GAMES, list(range(100, 106)), n_steps=250_000, frameskip=1
    )
    for game in GAMES:
        shutil.rmtree(exp / BASE / game / "seed105")
    md = tmp_path / "abl.md"
    argv = ["study", str(experiment), "--replication", str(exp), "--markdown", str(md), "--reps", "200"]
    assert analysis_main(argv) == 0
    section = md.read_text().split("## Replication on fresh seeds")[1]
    assert (
        "| seeds | 0-4 | 100-104 |" in section
        and "| games x runs per game and arm | 4 x 5 | 4 x 5 |" in section
    )


def test_a_replication_of_one_seed_on_fewer_games_says_it_cannot_test_the_verdict_yet(experiment, tmp_path):
    """A piece of a replication (one seed, three of the four games): no interval, so no claim that it
    agrees or not, and the games it covers named."""
    endpoints = {arm: SyntheticArm(SKILLS[arm], {"algo": arm}) for arm in ("published", BASE)}
    exp = write_experiment(tmp_path, "piece", endpoints, GAMES[:3], [100], n_steps=250_000, frameskip=1)
    md = tmp_path / "abl.md"
    argv = ["study", str(experiment), "--replication", str(exp), "--markdown", str(md), "--reps", "200"]
    assert analysis_main(argv) == 0
    section = md.read_text().split("## Replication on fresh seeds")[1].split("\n## ")[0]
    assert "The replication cannot test the study's verdict yet: with 1 run per game and arm" in section
    assert "agrees" not in section and "outside" not in section
    assert "complete on 3 of the study's 4 games so far" in section
    assert "| games x runs per game and arm | 4 x 5 | 3 x 1 |" in section


def test_a_replication_of_other_arms_is_one_line_and_exit_2(experiment, fresh, tmp_path, capsys):
    md = tmp_path / "abl.md"
    argv = ["study", str(experiment), "--replication", str(fresh[1]), "--markdown", str(md), "--reps", "200"]
    assert analysis_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("analysis: ") and str(fresh[1]) in err and len(err.splitlines()) == 1, err
    assert not md.exists()


def test_the_study_writes_the_table_to_markdown_and_csv_and_the_report_shows_it(experiment, tmp_path):
    csv, md = tmp_path / "abl.csv", tmp_path / "abl.md"
    assert (
        analysis_main(["study", str(experiment), "--csv", str(csv), "--markdown", str(md), "--reps", "200"])
        == 0
    )
    table = pd.read_csv(tmp_path / "abl_deviations.csv")
    assert list(table.deviation) == ["big", "small", "none"]
    text = md.read_text()
    assert "## Each deviation's effect" in text and "| big | algo.big |" in text
    per_game = text.split("## Each deviation's effect per game")[1].split("\n## ")[0]
    assert f"| {BASE}: range over its runs | – |" in per_game and "(5 runs)" in per_game
    assert re.search(r"; p [0-9.e-]+, q [0-9.e-]+\)", per_game)
    assert [line.split(" | ")[0] for line in per_game.splitlines() if line.startswith("| ")][2:] == [
        "| big", "| small", "| none",
    ]  # fmt: skip
    assert "## Learning check" in text
    html = build_report(experiment, out=tmp_path / "r.html", reps=200).read_text()
    assert 'id="deviations-table"' in html and "fig-deviations" in html and 'id="learning-table"' in html
    assert 'id="deviation-games-table"' in html
    # The probabilities of improvement: each other arm against the base, not every ordered pair.
    poi = re.search(r'<table id="poi-table">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    assert re.findall(r"P\((\w+) &gt; (\w+)\)", poi) == [(arm, BASE) for arm in sorted(SKILLS) if arm != BASE]
