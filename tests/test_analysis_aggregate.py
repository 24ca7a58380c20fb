"""Aggregates with CIs, comparisons, throughput and config diffs: hand-computed values."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.__main__ import main as analysis_main
from analysis.aggregate import (
    aggregate_metrics,
    compare_with_published,
    curve_bands,
    performance_profiles,
    probability_of_improvement,
    sample_efficiency,
    score_matrices,
)
from analysis.configdiff import config_diff, mixed_config_lines, mixed_configs
from analysis.curves import resample_curves, score_tables
from analysis.intervals import mean_interval
from analysis.runs import load_experiment
from analysis.study import run_study
from analysis.study_markdown import study_markdown
from analysis.synthetic import SyntheticArm, write_experiment
from analysis.throughput import arm_throughput, run_throughput
from reports.__main__ import main as reports_main
from reports.build import build_report


def _final(rows):
    return pd.DataFrame(rows, columns=["arm", "env", "seed", "normalised"])


def test_score_matrices_balance_seeds_and_games():
    final = _final(
        [
            ("a", "g1", 0, 1.0),
            ("a", "g1", 1, 2.0),
            ("a", "g2", 0, 3.0),
            ("a", "g2", 1, 4.0),
            ("a", "g3", 0, 9.0),
            ("b", "g1", 0, 5.0),
            ("b", "g2", 0, 6.0),
            ("b", "g2", 1, 7.0),
        ]
    )
    matrices, games, left_out = score_matrices(final)
    assert games == ["g1", "g2"]  # g3: only arm a ran it
    np.testing.assert_array_equal(matrices["a"], [[1.0, 3.0]])  # b has 1 seed on g1 -> 1 seed everywhere
    np.testing.assert_array_equal(matrices["b"], [[5.0, 6.0]])
    assert sorted(map(tuple, left_out[["arm", "env", "seed"]].values.tolist())) == [
        ("a", "g1", 1), ("a", "g2", 1), ("a", "g3", 0), ("b", "g2", 1)
    ]  # fmt: skip


def test_aggregate_point_estimates_hand_computed():
    # 4 runs x 2 games; IQM trims the lowest and highest quarter of all 8 scores.
    m = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 100.0]])
    table = aggregate_metrics({"x": m}, reps=200).set_index("metric")
    assert table.loc["IQM", "value"] == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))
    assert table.loc["Median", "value"] == pytest.approx(np.median([3.0, 27.25]))
    assert table.loc["Mean", "value"] == pytest.approx(np.mean([3.0, 27.25]))
    assert table.loc["Optimality gap", "value"] == pytest.approx(1 - np.mean([0, 1, 1, 1, 1, 1, 1, 1]))
    shown = table.drop(index="Median")  # an estimate without an interval (aggregate.NO_INTERVAL)
    assert (shown.ci_low <= shown.value).all() and (shown.value <= shown.ci_high).all()
    assert np.isnan(table.loc["Median", ["ci_low", "ci_high"]].astype(float)).all()
    # reproducible: the bootstrap is seeded
    pd.testing.assert_frame_equal(
        aggregate_metrics({"x": m}, reps=200), aggregate_metrics({"x": m}, reps=200)
    )


def test_probability_of_improvement():
    rng = np.random.default_rng(0)
    better, worse = rng.normal(1.0, 0.1, (5, 3)), rng.normal(0.0, 0.1, (5, 3))
    assert probability_of_improvement({"b": better, "w": worse}, "b", "w") == 1.0
    assert probability_of_improvement({"b": better, "c": better.copy()}, "b", "c") == pytest.approx(0.5)


def test_performance_profile_fractions():
    m = np.array([[0.0, 0.5], [1.0, 2.0]])
    table = performance_profiles({"x": m}, taus=np.array([-1.0, 0.25, 0.75, 1.5, 3.0]), reps=100)
    np.testing.assert_allclose(table.fraction, [1.0, 0.75, 0.5, 0.25, 0.0])


def test_mean_interval_is_student_s_t():
    lo, hi = mean_interval(np.array([[1.0, 5.0], [1.0, 7.0], [1.0, 9.0]]))
    assert lo[0] == hi[0] == 1.0  # no spread
    t = stats.ttest_1samp([5.0, 7.0, 9.0], 0.0).confidence_interval(0.95)
    np.testing.assert_allclose([lo[1], hi[1]], [t.low, t.high])  # 7 -+ 4.303 * 2 / sqrt(3)
    assert np.isnan(mean_interval(np.array([3.0]))).all()  # one run: no spread, no interval
    with pytest.raises(ValueError, match="at least one run"):
        mean_interval(np.zeros((0, 2)))


def test_compare_with_published():
    final = pd.DataFrame(
        {
            "arm": "a",
            "env": ["pong", "pong", "pong", "CartPole-v1"],
            "seed": [0, 1, 2, 0],
            "score": [20.0, 21.0, 21.0, 500.0],
            "frames": 4000,
        }
    )
    table = compare_with_published(final)
    assert len(table) == 1  # CartPole has no published R2D2 score
    row = table.iloc[0]
    assert row.published == 21.0 and row.score == pytest.approx(62 / 3)
    # the t interval of three runs: 62 / 3 -+ t(0.975, 2) * sd / sqrt(3), sd = sqrt(1 / 3)
    half = stats.t.ppf(0.975, 2) * np.sqrt(1 / 3) / np.sqrt(3)
    assert row.ratio == pytest.approx(62 / 63) and row.published_in_ci
    assert row.ci_high == pytest.approx(62 / 3 + half)


def test_throughput_and_curves_from_synthetic_experiment(tmp_path):
    replay, no_replay = {"replay_size_steps": 10_000}, {"epochs": 4}
    arms = {
        "a": SyntheticArm(1.0, {"lr": 1, "algo_config": replay}),
        "b": SyntheticArm(0.2, {"lr": 2, "algo_config": no_replay}),
    }
    exp = load_experiment(write_experiment(tmp_path, "e", arms, ["pong", "breakout"], [0, 1, 2], n_logs=5))
    per_run = run_throughput(exp)
    assert len(per_run) == 12 and (per_run.env_steps == 10_000).all() and (per_run.frames == 40_000).all()
    per_arm = arm_throughput(per_run).set_index("arm")
    assert per_arm.n_runs.tolist() == [6, 6]
    shares = per_arm[["share_sampling", "share_optimizing", "share_evaluating", "share_logging"]].sum(axis=1)
    np.testing.assert_allclose(shares, 1.0)
    assert per_arm.loc["a", "replay_ratio_trained"] == pytest.approx(0.8)
    assert per_arm.loc["a", "replay_ratio_with_burnin"] == pytest.approx(1.2)
    # b's algorithm has no replay: what it logs there is its batch reuse, a constant, left out
    assert per_arm.loc["b", ["replay_ratio_trained", "replay_ratio_with_burnin"]].isna().all()

    scores = score_tables(exp)
    bands = curve_bands(resample_curves(scores.curves, "score", n_points=5))
    assert len(bands) == 2 * 2 * 5 and (bands.ci_low <= bands["mean"] + 1e-9).all()
    efficiency = sample_efficiency(
        resample_curves(scores.curves, "normalised", n_points=5, grid_per=()), reps=100
    )
    a, b = (efficiency[efficiency.arm == arm].iqm.to_numpy() for arm in ("a", "b"))
    assert len(a) == 5 and a[-1] > a[0] and a[-1] > b[-1]
    assert efficiency.frames.iloc[-1] == 4 * efficiency.env_steps.iloc[-1]


def test_resample_does_not_extrapolate():
    curves = pd.DataFrame(
        {
            "arm": "a",
            "env": "e",
            "seed": [0, 0, 0, 1, 1],
            "env_steps": [0, 10, 20, 5, 15],
            "frames": [0, 10, 20, 5, 15],
            "value": [0.0, 1.0, 2.0, 0.0, 1.0],
        }
    )
    table = resample_curves(curves, "value", n_points=3)
    assert table.env_steps.min() == 5 and table.env_steps.max() == 15
    np.testing.assert_allclose(table[table.seed == 0].value, [0.5, 1.0, 1.5])


def test_config_diff_ignores_run_level_keys():
    configs = {
        ("a", "pong", 0): {
            "algo": "r2d1",
            "opt": {"lr": 1, "eps": 1e-3},
            "runner": {"seed": 0},
            "env": {"id": "pong"},
        },
        ("a", "qbert", 1): {
            "algo": "r2d1",
            "opt": {"lr": 1, "eps": 1e-3},
            "runner": {"seed": 1},
            "env": {"id": "qbert"},
        },
        ("b", "pong", 0): {
            "algo": "r2d1",
            "opt": {"lr": 2, "eps": 1e-3, "clip": 80},
            "runner": {"seed": 0},
            "env": {"id": "pong"},
        },
    }
    diff = config_diff(configs)
    assert diff.to_dict("records") == [
        {"key": "opt.clip", "a": "(absent)", "b": 80},
        {"key": "opt.lr", "a": 1, "b": 2},
    ]


def test_mixed_configs_name_the_keys_the_runs_of_one_arm_differ_in():
    """Keys that describe a run (its seed, TensorBoard on or off) and keys that differ between envs
    are no mixture; a key on which the seeds of one arm and env disagree is."""

    def config(seed, env, lr, tensorboard=False):
        return {"opt": {"lr": lr}, "runner": {"seed": seed, "tensorboard": tensorboard}, "env": {"id": env}}

    configs = {
        ("a", "pong", 0): config(0, "pong", 1e-3),
        ("a", "pong", 1): config(1, "pong", 1e-4, tensorboard=True),
        ("a", "pong", 2): config(2, "pong", 1e-3),
        ("a", "qbert", 0): config(0, "qbert", 2e-3),
        ("b", "pong", 0): config(0, "pong", 1e-3),
        ("b", "pong", 1): config(1, "pong", 1e-3, tensorboard=True),
    }
    mixed = mixed_configs(configs)
    assert mixed.to_dict("records") == [
        {"arm": "a", "env": "pong", "key": "opt.lr", "values": "0.001 (seeds 0,2); 0.0001 (seed 1)"}
    ]
    assert mixed_config_lines(mixed) == [
        "Arm a: its runs differ in config, so its results mix configurations: opt.lr on pong: 0.001 "
        "(seeds 0,2); 0.0001 (seed 1)."
    ]


def test_the_seed_recorded_in_other_keys_is_no_mixture():
    """The SB3 record names the run's seed in the library's arguments (``sb3.ppo_kwargs.seed``) and in
    the recorded env call (``sb3.env``); before, main's study flagged the two SB3 Pong seeds of the Atari
    experiment as runs of two configurations. A seed there other than the run's own still is one."""

    def config(seed, recorded_seed=None, lr=1e-3):
        recorded = seed if recorded_seed is None else recorded_seed
        call = f"VecFrameStack(make_atari_env('PongNoFrameskip-v4', n_envs=8, seed={recorded}), n_stack=4)"
        return {"runner": {"seed": seed}, "sb3": {"env": call, "ppo_kwargs": {"seed": recorded, "lr": lr}}}

    same = {("sb3", "pong", s): config(s) for s in (0, 1, 10)}
    assert mixed_configs(same).empty
    wrong = {**same, ("sb3", "pong", 2): config(2, recorded_seed=12, lr=1e-4)}
    rows = mixed_configs(wrong).set_index("key")["values"].to_dict()
    assert set(rows) == {"sb3.env", "sb3.ppo_kwargs.seed", "sb3.ppo_kwargs.lr"}
    assert rows["sb3.ppo_kwargs.seed"] == "<seed> (seeds 0,1,10); 12 (seed 2)"
    assert "seed=12" in rows["sb3.env"] and "seed=<seed>" in rows["sb3.env"]


def test_an_arm_whose_runs_differ_in_config_is_flagged_in_the_study_and_the_report(tmp_path, capsys):
    """One seed of arm a rerun with another learning rate (``--rerun-changed`` on that seed): before,
    the study and the report said nothing, and the config diff left the key out as varying inside an arm."""
    arms = {
        a: SyntheticArm(s, {"algo": "dqn", "algo_config": {"learning_rate": 1e-3}})
        for a, s in (("a", 1.0), ("b", 1.2))
    }
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1, 2], n_logs=3, eval_episodes=2)
    path = exp / "a" / "CartPole-v1" / "seed1" / "config.json"
    config = json.loads(path.read_text())
    config["algo_config"]["learning_rate"] = 1e-4
    path.write_text(json.dumps(config))
    said = (
        "Arm a: its runs differ in config, so its results mix configurations: algo_config.learning_rate on "
        "CartPole-v1: 0.001 (seeds 0,2); 0.0001 (seed 1)."
    )
    assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
    out = capsys.readouterr().out
    assert f"**Runs differ in config.** {said}" in out.split("**Verdict")[0], out
    assert "arm b" not in out.lower().split("**verdict")[0]
    report = tmp_path / "r.html"
    assert reports_main(["build", str(exp), "--reps", "100", "--out", str(report)]) == 0
    page = report.read_text()
    assert said in page and page.index(said) < page.index('<section id="verdict"')


@pytest.mark.parametrize("eval_episodes", [2, 0])
def test_the_r2d2_comparison_names_which_of_our_scores_it_shows(tmp_path, eval_episodes):
    """R2D2's Table 4 is a final evaluation; runs without one are scored by their training return, and
    the study and the report say so beside the table (before, both said 'our final evaluation')."""
    arms = {a: SyntheticArm(1.0, {"algo": a}) for a in ("a", "b")}
    exp = write_experiment(
        tmp_path, "exp", arms, ["pong", "breakout"], [0, 1], n_logs=3, eval_episodes=eval_episodes
    )
    ours = "our final evaluation" if eval_episodes else "our last training return, standing in"
    text = study_markdown(run_study(exp, reps=100), "cmd", "today")
    assert f"Final raw score per arm and game ({ours}" in text.split("## Per game")[1]
    assert f"Our final raw score ({ours}" in build_report(exp, reps=100).read_text()
