"""The seed planner (repro/power.py): hand-computed seed counts, a pilot of synthetic runs with known
variance read through the tidy result table, the planned count checked by simulating the verdict's
rule at that count, and the dry run's report."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from algorithms.configs import ConfigError
from analysis.multiple import adjust
from analysis.study import result_table, run_study
from analysis.synthetic import SyntheticArm, write_experiment
from analysis.verdict import iqm_difference
from protocol.plan_args import format_seeds, seeds_from
from protocol.stats import detectable_difference, power_at
from repro.plans import load_plan
from repro.power import (
    Family,
    arm_iqm_se,
    difference_power,
    pilot_inflation,
    plan_seeds,
    read_pilot,
    seeds_needed,
)

REPO = Path(__file__).resolve().parents[1]
GAMES = ["minatar_breakout", "minatar_space_invaders", "minatar_seaquest", "minatar_asterix"]
# analysis/synthetic.py: each evaluation episode is level + noise * N(0, 1) in normalised units, and
# a run's final score is the mean of 5 episodes, so its seed-to-seed SD is noise / sqrt(5).
NOISE = 1.0
SIGMA = NOISE / math.sqrt(5)


def test_seeds_needed_by_hand():
    ratio = detectable_difference(1.0)  # (z_0.975 + z_0.8) = 2.8016 standard errors
    assert ratio == pytest.approx(1.959964 + 0.841621, abs=2e-3)
    # se at one seed 0.5, delta 0.1: the normal approximation needs n >= (2.80 * 0.5 / 0.1)^2 = 196.2
    # -> 197; the t on 2 (n - 1) df needs a little more at so many df: 198
    n = seeds_needed(0.5, 0.1, games=1)
    assert n == 198 and math.ceil((ratio * 5) ** 2) == 197
    assert difference_power(0.1, 0.5, 1, n) >= 0.8 > difference_power(0.1, 0.5, 1, n - 1)
    assert power_at(0.1, 0.5 / math.sqrt(197)) >= 0.8 > power_at(0.1, 0.5 / math.sqrt(190))
    assert seeds_needed(0.01, 0.1, games=1) == 5  # never fewer than 5
    # 3 seeds a side on one game: t on 4 df, critical 2.776 at 0.05 two-sided
    shift = 1.0 / (0.5 / math.sqrt(3))
    expected = stats.nct.sf(2.7764451, 4, shift) + stats.nct.sf(2.7764451, 4, -shift)
    assert difference_power(1.0, 0.5, 1, 3) == pytest.approx(expected, abs=1e-6)


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p of each row of ``p`` at once (analysis.multiple.adjust, one row at a time, is
    checked against it below): sorted p times k, k - 1, ..., made monotone, capped at 1, put back."""
    k = p.shape[1]
    order = np.argsort(p, axis=1)
    ranked = np.minimum(
        1, np.maximum.accumulate(np.take_along_axis(p, order, 1) * (k - np.arange(k)), axis=1)
    )
    out = np.empty_like(p)
    np.put_along_axis(out, order, ranked, 1)
    return out


def test_power_for_the_frozen_family_matches_simulated_holm_families():
    """k endpoints tested together, one with a true shift and k - 1 null, Holm-adjusted: the planned
    power (the first step's level, alpha / k, on t with 2 (n - 1) df) is what the true endpoint's
    rejections come to in simulation, never above (Holm's later steps only add)."""
    rng = np.random.default_rng(3)
    n, sigma, delta, draws = 4, 1.0, 2.2, 4000
    for k, sides in ((1, "two"), (3, "two"), (9, "one")):
        family = Family(0.05, "holm" if k > 1 else "none", k, sides)
        planned = difference_power(delta, math.sqrt(2) * sigma, 1, n, family)
        a = rng.normal(0, sigma, size=(draws, k, n))
        b = rng.normal(0, sigma, size=(draws, k, n))
        b[:, 0] += delta
        p = stats.ttest_ind(b, a, axis=2, alternative="two-sided" if sides == "two" else "greater").pvalue
        hits = np.mean(_holm(p)[:, 0] <= 0.05)
        assert planned - 0.03 <= hits <= planned + 0.05, (k, sides, planned, hits)
    row = np.array([[0.04, 0.001, 0.03, 0.5]])
    assert _holm(row)[0] == pytest.approx(adjust(pd.Series(row[0]), "holm").to_numpy())
    assert difference_power(delta, math.sqrt(2), 1, n, Family(0.05, "holm", 9)) < difference_power(
        delta, math.sqrt(2), 1, n
    )


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    root = tmp_path_factory.mktemp("pilot")
    arms = {"a": SyntheticArm(0.5, {"algo": "a"}), "b": SyntheticArm(0.5, {"algo": "b"})}
    exp = write_experiment(
        root, "pilot", arms, GAMES, list(range(8)), n_steps=250_000, frameskip=1, noise=NOISE
    )
    csv = exp / "results.csv"
    result_table(run_study(exp, reps=200).scores).to_csv(csv, index=False)
    return exp


def _detected(rng, seeds: int, delta: float, sims: int) -> float:
    """Share of simulated experiments (known spread, true shift ``delta``) whose verdict interval of the
    IQM difference lies above 0."""
    hits = 0
    for _ in range(sims):
        a = rng.normal(0.5, SIGMA, size=(seeds, 4))
        b = rng.normal(0.5 + delta, SIGMA, size=(seeds, 4))
        hits += iqm_difference(b, a, reps=300, seed=int(rng.integers(1 << 30)))["ci_low"] > 0
    return hits / sims


def test_a_pilot_of_synthetic_runs_is_read_with_its_known_spread(pilot):
    found = plan_seeds(pilot, GAMES, delta=0.3)
    matrices, games = read_pilot(pilot, GAMES)
    assert games == sorted(GAMES) and matrices["a"].shape == (8, 4)
    assert all(np.std(m, ddof=1, axis=0).mean() == pytest.approx(SIGMA, rel=0.35) for m in matrices.values())
    assert found.pilot_seeds == 8 and found.upper == pytest.approx(pilot_inflation(4, 8))
    assert 6 <= found.seeds <= 60
    # Fewer seeds than planned detect the shift less often than more.
    rng = np.random.default_rng(0)
    assert _detected(rng, max(2, found.seeds // 3), 0.3, 100) < _detected(rng, found.seeds, 0.3, 100)


def test_the_planned_seeds_reach_80_percent_power_over_pilot_draws():
    """Pilots of 8 seeds x 4 games drawn with the known spread: the seeds each plans detect the shift
    in about 80% or more of simulated verdicts, on average over the pilots (Browne 1995's upper limit;
    the pilot's own SD falls short for about half of the draws)."""
    rng = np.random.default_rng(1)
    rates = []
    for _ in range(8):
        pilot = {arm: rng.normal(0.5, SIGMA, size=(8, 4)) for arm in "ab"}
        se = max(arm_iqm_se(m, reps=300) for m in pilot.values())
        n = seeds_needed(math.sqrt(2) * se * math.sqrt(8) * pilot_inflation(4, 8), 0.3, games=4)
        rates.append(_detected(rng, n, 0.3, 60))
    assert np.mean(rates) >= 0.75


def test_bad_pilots_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="no tidy result table"):
        read_pilot(tmp_path)
    (tmp_path / "x.csv").write_text("arm,env\na,b\n")
    with pytest.raises(ConfigError, match="expected a tidy result table"):
        read_pilot(tmp_path / "x.csv")


def test_the_dry_run_plans_seeds_from_the_committed_results_and_says_the_power_of_given_seeds():
    def dry(*extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "repro", "run", "r2d1_minatar_ablation", "--profile", "smoke", "--dry-run",
             "--no-estimate", *extra],
            cwd=REPO, capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    planned = dry("--detect", "2")
    found = plan_seeds(load_plan("r2d1_minatar_ablation").pilot, delta=0.02)
    assert f"each arm needs {found.seeds} seeds per game" in planned
    assert f"seeds: {format_seeds(seeds_from(0, found.seeds))} " in planned
    assert planned.count("/minatar_breakout/seed0 ") == 10
    given = dry("--seeds", "100-102")
    assert "--seeds 100-102: 3 seeds per game have" in given and "/seed100" in given


def test_planned_seeds_count_from_the_plans_first_seed_and_never_reach_the_kept_seeds():
    from repro.cli_estimate import _chosen_seeds

    assert _chosen_seeds("3", 4, first_seed=500) == "500-503"  # a count in the plan: its first_seed
    assert _chosen_seeds(None, 4, first_seed=0) == "0-3"
    assert _chosen_seeds("100-104", 7, first_seed=500) == "100-106"  # a range: its first seed
    assert _chosen_seeds(None, 250, first_seed=0) == "0-199,300-349"  # the kept seeds stepped over
    assert _chosen_seeds(None, 3, first_seed=250) == "300-302"
