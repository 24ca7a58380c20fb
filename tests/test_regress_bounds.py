"""One home for score bounds: the regression suite takes each env's bounds from the gymnasium
reference table, and the committed reference AUCs were converted exactly from the suite's former
bounds ([0, 500] for CartPole-v1, [-1600, 0] for Pendulum-v1), not rerun."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.regress import REFERENCE_FILE, compare, load_suite, normalised_auc, rescale_auc
from analysis.scores import gym_reference_bounds

OLD_BOUNDS = {"CartPole-v1": (0.0, 500.0), "Pendulum-v1": (-1600.0, 0.0)}
# The committed reference AUCs under the former bounds (analysis/data/regress_reference.csv at
# commit 6b16941), in file order.
OLD_AUCS = [
    0.319911, 0.275156, 0.327289, 0.322333, 0.334911,  # dqn_cartpole
    0.472133, 0.767756, 0.8184, 0.678956, 0.616311,  # ppo_cartpole
    0.61191, 0.647652, 0.623156, 0.646587, 0.647305,  # sac_pendulum
    0.403308, 0.29617, 0.415868, 0.254437, 0.446461,  # r2d1_masked_cartpole
]  # fmt: skip


def test_rescaling_is_exact_for_any_curve():
    rng = np.random.default_rng(0)
    for _ in range(20):
        steps = np.cumsum(rng.integers(1, 100, size=12)).astype(float)
        curve = rng.uniform(-1500, 500, size=12)
        old, new = (-1600.0, 0.0), (-1197.184, -172.225)
        rescaled = rescale_auc(normalised_auc(steps, curve, *old), old, new)
        assert rescaled == pytest.approx(normalised_auc(steps, curve, *new), abs=1e-12)
    # By hand: a mean return of 250 is 0.5 of [0, 500] and (250 - 24.96) / 475.04 of [24.96, 500].
    assert rescale_auc(0.5, (0.0, 500.0), (24.96, 500.0)) == pytest.approx(225.04 / 475.04, abs=1e-15)


def test_the_suite_takes_its_bounds_from_the_reference_table():
    table = gym_reference_bounds().scores
    for task in load_suite().tasks:
        assert (task.score_min, task.score_max) == (table.loc[task.env, "low"], table.loc[task.env, "high"])
        assert "gym_reference_scores.csv" in task.score_source


def test_the_committed_references_are_the_former_ones_converted():
    reference = pd.read_csv(REFERENCE_FILE)
    table = gym_reference_bounds().scores
    assert len(reference) == len(OLD_AUCS)
    for row, old_auc in zip(reference.itertuples(), OLD_AUCS):
        low, high = table.loc[row.env, ["low", "high"]]
        mean_now = low + row.auc * (high - low)  # the mean return the reference AUC stands for
        old_low, old_high = OLD_BOUNDS[row.env]
        assert mean_now == pytest.approx(old_low + old_auc * (old_high - old_low), abs=1e-9)
    # The check passes on the committed references (make regress compares new runs to them).
    table = compare(reference, reference, load_suite())
    assert (table.verdict == "ok").all()


def test_bounds_in_two_homes_or_none_are_refused(tmp_path):
    task = '[[task]]\narm = "a"\nenv = "{env}"\nplan = "p.toml"\n'
    head = "[suite]\nalpha = 0.01\nmin_effect = 0.05\n"
    both = tmp_path / "both.toml"
    both.write_text(head + task.format(env="CartPole-v1") + "score_min = 0.0\nscore_max = 500.0\n")
    with pytest.raises(
        ValueError, match=r"\['score_min', 'score_max'\] for CartPole-v1, whose bounds are in"
    ):
        load_suite(both)
    none = tmp_path / "none.toml"
    none.write_text(head + task.format(env="MyEnv-v0"))
    with pytest.raises(ValueError, match="'score_min' must be float, got None \\('MyEnv-v0' is not in"):
        load_suite(none)
    own = tmp_path / "own.toml"
    own.write_text(
        head + task.format(env="MyEnv-v0") + 'score_min = 0.0\nscore_max = 1.0\nscore_source = "t"\n'
    )
    assert load_suite(own).tasks[0].score_max == 1.0
