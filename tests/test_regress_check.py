"""Learning-curve regression check: AUC, Holm, the verdicts, the CLI, and the false-alarm rate."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.regress import Suite, Task, compare, holm, load_suite, main, normalised_auc
from analysis.synthetic import SyntheticArm, write_experiment

SUITE_TOML = """
[suite]
alpha = 0.01
min_effect = 0.05

[[task]]
arm = "dqn_like"
env = "CartPole-v1"
plan = "unused.toml"

[[task]]
arm = "ppo_like"
env = "CartPole-v1"
plan = "unused.toml"
"""


def test_normalised_auc_hand_computed():
    # trapezoid: (0+100)/2*10 + (100+300)/2*10 = 500 + 2000 = 2500 over 20 steps = 125 -> 125/500
    assert normalised_auc(np.array([0, 10, 20]), np.array([0.0, 100.0, 300.0]), 0.0, 500.0) == pytest.approx(
        0.25
    )
    assert normalised_auc(np.array([5]), np.array([-600.0]), -1600.0, 0.0) == pytest.approx(1000 / 1600)
    with pytest.raises(ValueError, match="strictly increasing"):
        normalised_auc(np.array([0, 0]), np.array([1.0, 2.0]), 0.0, 1.0)


def test_holm_hand_computed():
    # sorted 0.01, 0.03, 0.04 -> 3*0.01, max(0.03, 2*0.03), max(0.06, 1*0.04)
    np.testing.assert_allclose(holm(np.array([0.01, 0.04, 0.03])), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(holm(np.array([0.5, 0.9])), [1.0, 1.0])


def _suite(n_tasks=2, alpha=0.01, min_effect=0.05):
    tasks = tuple(Task(f"t{i}", "CartPole-v1", "unused.toml", 0.0, 1.0, "test") for i in range(n_tasks))
    return Suite(tasks, alpha, min_effect)


def _aucs(suite, values):
    return pd.DataFrame(
        [
            {"arm": t.arm, "env": t.env, "seed": s, "auc": v}
            for t, vs in zip(suite.tasks, values)
            for s, v in enumerate(vs)
        ]
    )


def test_verdicts():
    suite = _suite(3)
    reference = _aucs(suite, [[0.80, 0.82, 0.78, 0.81, 0.79]] * 3)
    new = _aucs(suite, [[0.80, 0.79, 0.81], [0.20, 0.25, 0.22], [0.95, 0.97, 0.96]])
    table = compare(reference, new, suite)
    assert table.verdict.tolist() == ["ok", "REGRESSION", "better"]
    assert table.p_holm[1] < 0.01 and table.auc_drop[1] == pytest.approx(0.8 - 0.67 / 3, abs=1e-9)
    # a significant but tiny drop is not a regression: the effect floor
    tiny = compare(reference, _aucs(suite, [[0.77, 0.771, 0.772]] * 3), suite)
    assert set(tiny.verdict) == {"ok"}
    missing = compare(reference, new[new.arm != "t0"], suite)
    assert missing.verdict[0] == "no new runs"


def test_false_alarm_rate_of_unchanged_suites():
    """Simulated unchanged suites (new and reference runs from the same distribution): the share of
    suites that fail stays at or below alpha (binomial 3-sigma margin)."""
    suite = _suite(4, alpha=0.05, min_effect=0.0)
    rng = np.random.default_rng(0)
    trials = 400
    failures = 0
    for _ in range(trials):
        reference = _aucs(suite, rng.normal(0.6, 0.1, (4, 5)))
        new = _aucs(suite, rng.normal(0.6, 0.1, (4, 3)))
        failures += (compare(reference, new, suite).verdict == "REGRESSION").any()
    assert failures / trials <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / trials)


@pytest.mark.slow
def test_cli_catches_a_broken_algorithm_and_passes_an_unchanged_one(tmp_path, capsys):
    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(SUITE_TOML)
    reference_file = tmp_path / "reference.csv"
    kwargs = {"n_steps": 20_000, "n_logs": 8, "eval_episodes": 5, "frameskip": 1, "noise": 0.1}
    good = {"dqn_like": SyntheticArm(0.9, {"algo": "dqn"}), "ppo_like": SyntheticArm(0.7, {"algo": "ppo"})}
    ref_dir = write_experiment(tmp_path, "reference", good, ["CartPole-v1"], [0, 1, 2, 3, 4], **kwargs)
    assert (
        main(
            ["update", "--runs", str(ref_dir), "--reference", str(reference_file), "--suite", str(suite_file)]
        )
        == 0
    )
    reference = pd.read_csv(reference_file)
    assert len(reference) == 10 and reference.commit.notna().all()
    assert "wrote 10 reference runs" in capsys.readouterr().out

    # unchanged algorithm, new seeds: passes
    same_dir = write_experiment(tmp_path, "same", good, ["CartPole-v1"], [10, 11, 12], **kwargs)
    args = ["--reference", str(reference_file), "--suite", str(suite_file)]
    assert main(["check", "--runs", str(same_dir), *args]) == 0
    assert "no regression" in capsys.readouterr().out

    # a broken algorithm (e.g. a sign-flipped TD error) barely learns: the check fails and says where
    broken = {"dqn_like": SyntheticArm(0.1, {"algo": "dqn"}), "ppo_like": good["ppo_like"]}
    broken_dir = write_experiment(tmp_path, "broken", broken, ["CartPole-v1"], [10, 11, 12], **kwargs)
    assert main(["check", "--runs", str(broken_dir), *args]) == 1
    out = capsys.readouterr().out
    assert "FAILED: dqn_like / CartPole-v1 (REGRESSION)" in out
    assert "ppo_like / CartPole-v1" in out and "p Holm" in out


def test_update_of_some_plans_keeps_the_other_rows_byte_for_byte(tmp_path, capsys):
    """``update --plans`` replaces one task's rows where they were and leaves every other line as it
    was (how a new task's references are added without regenerating the others)."""
    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(
        SUITE_TOML.replace('plan = "unused.toml"', 'plan = "a.toml"', 1).replace('"unused.toml"', '"b.toml"')
    )
    reference_file = tmp_path / "reference.csv"
    kwargs = {"n_steps": 20_000, "n_logs": 8, "eval_episodes": 5, "frameskip": 1, "noise": 0.1}
    arms = {"dqn_like": SyntheticArm(0.9, {"algo": "dqn"}), "ppo_like": SyntheticArm(0.7, {"algo": "ppo"})}
    old_dir = write_experiment(tmp_path, "old", arms, ["CartPole-v1"], [0, 1, 2], **kwargs)
    args = ["--reference", str(reference_file), "--suite", str(suite_file)]
    assert main(["update", "--runs", str(old_dir), *args]) == 0
    before = reference_file.read_text().splitlines(keepends=True)
    # dqn_like (plan a.toml, the file's first rows) gets five new seeds; ppo_like's rows stay
    new_dir = write_experiment(tmp_path, "new", arms, ["CartPole-v1"], [10, 11, 12, 13, 14], **kwargs)
    capsys.readouterr()
    assert main(["update", "--runs", str(new_dir), "--plans", "a.toml", *args]) == 0
    assert "wrote 5 reference runs" in capsys.readouterr().out
    after = reference_file.read_text().splitlines(keepends=True)
    assert after[0] == before[0] and after[6:] == before[4:]
    assert [line.split(",")[0] for line in after[1:]] == ["dqn_like"] * 5 + ["ppo_like"] * 3
    assert [int(line.split(",")[2]) for line in after[1:6]] == [10, 11, 12, 13, 14]

    assert main(["update", "--runs", str(new_dir), "--plans", "c.toml", *args]) == 2
    assert "['c.toml'] run no task of the suite" in capsys.readouterr().err
    assert reference_file.read_text().splitlines(keepends=True) == after


def test_cli_errors(tmp_path, capsys):
    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(SUITE_TOML)
    assert main(["check", "--runs", str(tmp_path / "none"), "--suite", str(suite_file)]) == 2
    assert "does not exist" in capsys.readouterr().err
    suite_file.write_text(SUITE_TOML.replace("alpha = 0.01", "alpha = 2.0"))
    assert main(["check", "--runs", str(tmp_path), "--suite", str(suite_file)]) == 2
    assert "'alpha' must be in (0, 1)" in capsys.readouterr().err


def test_shipped_suite_loads():
    suite = load_suite()
    assert suite.tasks and 0 < suite.alpha < 1
    assert all(t.score_max > t.score_min for t in suite.tasks)


def test_shipped_references_cover_every_task():
    """Every task has committed references from at least ``make regress-update``'s 5 seeds (a task
    without them fails every `make regress` with "no reference"), and no rows of tasks that left."""
    from analysis.regress import REFERENCE_COLUMNS, REFERENCE_FILE

    reference = pd.read_csv(REFERENCE_FILE)
    assert list(reference.columns) == REFERENCE_COLUMNS
    counts = reference.groupby(["arm", "env"]).seed.nunique()
    assert set(counts.index) == {(t.arm, t.env) for t in load_suite().tasks}
    assert (counts >= 5).all()


def test_suite_plans_resolve_through_the_reproduction_layer(tmp_path, monkeypatch):
    """Every task's plan expands (settings loaded strictly, configs validated) into jobs whose run
    directories are the <arm>/<env> the check looks for."""
    from repro.plans import expand, load_plan

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    for task in load_suite().tasks:
        jobs = expand(
            load_plan(task.plan), 2, "analysis/regress/profile.toml", tmp_path, experiment="regress"
        )
        assert {(job.arm, job.env) for job in jobs} == {(task.arm, task.env)}
        assert sorted(job.seed for job in jobs) == [0, 1]
        assert jobs[0].run_dir == tmp_path / "regress" / task.arm / task.env / "seed0"
