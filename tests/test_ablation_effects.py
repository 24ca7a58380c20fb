"""Each deviation's effect in an ablation experiment: IQM difference to the base arm with its CI,
power and smallest detectable difference, ordered by size, in the study's markdown and csv and in the
report (table and plot); on synthetic runs with known effects."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.__main__ import main as analysis_main
from analysis.ablation import deviation_effects
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
            "plan": "abl", "title": "t", "profile": "smoke", "arms": list(SKILLS), "envs": GAMES,
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
    # Detectable with 80% power is where the power at that difference is 0.8.
    from analysis.verdict import power_at

    assert all(power_at(r.detectable, r.se) == pytest.approx(0.8, abs=1e-6) for r in effects.itertuples())


def test_no_ablation_record_no_effects_and_a_missing_base_gives_none():
    assert deviation_effects({"x": None}, {"base": "b", "deviations": {"x": []}}).empty


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
    assert "## Learning check" in text
    html = build_report(experiment, out=tmp_path / "r.html", reps=200).read_text()
    assert 'id="deviations-table"' in html and "fig-deviations" in html and 'id="learning-table"' in html
