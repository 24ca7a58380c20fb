"""Loading run directories into tidy tables; damaged runs are listed, not fatal."""

import json

import pytest

from analysis.curves import EVAL_SOURCE, TRAIN_SOURCE, raw_scores, score_tables
from analysis.runs import flatten, load_experiment, load_run
from analysis.scores import gym_reference_bounds, read_bounds
from analysis.synthetic import SyntheticArm, write_experiment

ARMS = {
    "fast": SyntheticArm(1.5, {"algo": "r2d1", "lr": 1e-4}),
    "slow": SyntheticArm(0.5, {"algo": "r2d1", "lr": 1e-3}),
}


@pytest.fixture
def experiment(tmp_path):
    return write_experiment(tmp_path, "exp", ARMS, ["pong", "qbert"], [0, 1], n_logs=4, eval_episodes=3)


def test_tidy_tables(experiment):
    exp = load_experiment(experiment)
    assert exp.name == "exp" and exp.arms == ["fast", "slow"] and exp.envs == ["pong", "qbert"]
    assert len(exp.runs) == 8 and set(exp.runs.status) == {"complete"}
    assert len(exp.progress) == 8 * 4 and len(exp.eval) == 8 * 4 * 3
    assert list(exp.progress.columns[:3]) == ["arm", "env", "seed"]
    lr = exp.config[exp.config.key == "lr"].set_index(["arm", "env", "seed"]).value
    assert lr.loc[("slow", "qbert", 1)] == 1e-3
    assert set(exp.metadata.columns) >= {"arm", "git_commit", "packages.numpy", "seeds.seed"}
    assert exp.skipped.empty and exp.missing.empty


def test_damaged_runs_are_listed(experiment):
    # torn last line: read around, noted, and not complete (the scheduler's rule: a rerun repairs it)
    torn = experiment / "fast/pong/seed0/progress.csv"
    torn.write_bytes(torn.read_bytes() + b"1,2,3")
    (experiment / "fast/pong/seed1/config.json").unlink()  # corrupt
    (experiment / "slow/qbert/seed0/status.json").write_text(json.dumps({"state": "running"}))  # incomplete
    (experiment / "slow/pong/seed1/eval.csv").write_bytes(b'env_steps,frames\n1,2,3,4\n"unterminated\n')
    exp = load_experiment(experiment)
    status = exp.runs.set_index(["arm", "env", "seed"]).status
    assert status[("fast", "pong", 0)] == "incomplete"
    assert "torn last line" in exp.runs.set_index(["arm", "env", "seed"]).problems[("fast", "pong", 0)]
    assert status[("fast", "pong", 1)] == "corrupt"
    assert status[("slow", "qbert", 0)] == "incomplete"
    assert status[("slow", "pong", 1)] == "corrupt"
    skipped = exp.skipped.set_index(["arm", "env", "seed"]).reason
    assert "config.json missing" in skipped[("fast", "pong", 1)]
    assert "eval.csv does not parse" in skipped[("slow", "pong", 1)]
    assert "the last row of progress.csv is torn" in skipped[("fast", "pong", 0)]
    assert len(skipped) == 4
    final, _ = raw_scores(exp)
    assert len(final) == 4  # only complete runs give scores


def test_missing_grid_cells(experiment):
    import shutil

    shutil.rmtree(experiment / "slow/qbert/seed1")
    exp = load_experiment(experiment)
    assert exp.missing.to_dict("records") == [{"arm": "slow", "env": "qbert", "seed": 1}]


def test_empty_or_absent_experiment_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run directories"):
        load_experiment(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_experiment(tmp_path / "nope")


def test_load_one_run(experiment):
    exp = load_run(experiment / "slow/qbert/seed1")
    assert exp.runs[["arm", "env", "seed"]].values.tolist() == [["slow", "qbert", 1]]


def test_one_score_source_for_every_run_and_human_normalisation(tmp_path):
    exp_dir = write_experiment(tmp_path, "e", ARMS, ["pong"], [0], n_logs=3, eval_episodes=2)
    scores = score_tables(load_experiment(exp_dir))
    assert scores.human_normalised and "Video Pinball random 0.0" in scores.normalisation
    assert set(scores.final.source) == set(scores.curves.source) == {EVAL_SOURCE}
    row = scores.final.iloc[0]
    assert row.normalised == pytest.approx((row.score + 20.7) / 35.3)
    assert set(scores.curves.groupby("arm").size()) == {3}
    # the final score is the last point of its run's curve
    last = scores.curves.sort_values("env_steps").groupby(["arm", "env", "seed"]).tail(1)
    merged = scores.final.merge(last, on=["arm", "env", "seed"], suffixes=("", "_curve"))
    assert (merged.score == merged.score_curve).all() and (merged.env_steps == merged.env_steps_curve).all()
    # one run without evaluations: every run's score is the training return then, and says so
    (exp_dir / "slow/pong/seed0/eval.csv").unlink()
    scores = score_tables(load_experiment(exp_dir))
    assert set(scores.final.source) == set(scores.curves.source) == {TRAIN_SOURCE}


def test_gym_envs_use_random_and_reference_bounds(tmp_path):
    table = gym_reference_bounds().scores
    for env in ("CartPole-v1", "Acrobot-v1"):
        exp_dir = write_experiment(tmp_path, env, ARMS, [env], [0, 1], n_logs=3, eval_episodes=2)
        scores = score_tables(load_experiment(exp_dir))
        assert scores.reference == "reference" and scores.comparable and scores.percent
        low, high = table.loc[env, ["low", "high"]]
        row = scores.final.iloc[0]
        assert row.normalised == pytest.approx((row.score - low) / (high - low))
    assert table.loc["CartPole-v1", "high"] == 500.0 and table.loc["Acrobot-v1", "high"] == -73.506
    assert table.loc["Acrobot-v1", "low"] == -500.0  # random play never swings up in 500 steps


def test_envs_without_bounds_fall_back_to_min_max_within_experiment(tmp_path):
    exp_dir = write_experiment(tmp_path, "e", ARMS, ["MyEnv-v0"], [0, 1], n_logs=3)
    scores = score_tables(load_experiment(exp_dir))
    assert not scores.comparable and "FALLBACK: min-max" in scores.normalisation
    assert "--bounds FILE" in scores.normalisation and not scores.percent
    both = list(scores.final.normalised) + list(scores.curves.normalised)
    assert min(both) == pytest.approx(0.0) and max(both) == pytest.approx(1.0)
    bounds = tmp_path / "bounds.csv"
    bounds.write_text("env,score_min,score_max,source\nMyEnv-v0,0,10,a test\n")
    scores = score_tables(load_experiment(exp_dir), bounds=read_bounds(bounds))
    assert scores.reference == "reference" and scores.bounds.scores.loc["MyEnv-v0", "low_source"] == "a test"
    row = scores.final.iloc[0]
    assert row.normalised == pytest.approx(row.score / 10)


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {"d": None}}, "e": [1, 2]}) == {"a.b": 1, "a.c.d": None, "e": "[1, 2]"}


def test_plan_jobs_define_missing_runs(experiment):
    jobs = [
        {"arm": arm, "env": env, "seed": seed}
        for arm in ARMS
        for env in ("pong", "qbert")
        for seed in (0, 1, 2)
    ]
    (experiment / "plan.json").write_text(json.dumps({"plan": "demo", "profile": "smoke", "jobs": jobs}))
    exp = load_experiment(experiment)
    assert exp.plan["profile"] == "smoke"
    assert sorted(exp.missing.itertuples(index=False, name=None)) == [
        ("fast", "pong", 2), ("fast", "qbert", 2), ("slow", "pong", 2), ("slow", "qbert", 2)
    ]  # fmt: skip
