"""Shipped settings and profiles load strictly; the CLI's bad-input contract; dry runs of plans.

Bad input (unknown setting, game, profile or plan, SEEDS < 1, JOBS < 1, a malformed file) must give
one line on stderr starting ``error:``, exit code 2, and no run directory.
"""

from __future__ import annotations

import textwrap

import pytest

from algorithms.configs import ConfigError
from repro.cli import main
from repro.inspect_settings import diff_rows, resolve_label
from repro.plans import check_seeds, expand, load_plan
from repro.profiles import ALLOWED_KEYS, BUDGET_KEYS, EXECUTION_KEYS, available_profiles, load_profile
from repro.settings import available_settings, default_schema, load_setting, train_config

SETTINGS = available_settings()
PROFILES = available_profiles()


def test_shipped_files_exist():
    assert {"paper", "mini", "smoke"} <= set(PROFILES)
    assert not BUDGET_KEYS & EXECUTION_KEYS


@pytest.mark.parametrize("name", SETTINGS)
def test_every_shipped_setting_loads_and_builds(name):
    setting = load_setting(name)
    config = train_config(setting, default_schema(setting.algo))
    assert config.algo == setting.algo
    for key, entry in setting.entries.items():
        assert entry.source.strip(), f"{name}: {key} has no source"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", SETTINGS)
def test_profiles_change_only_budget_and_execution_keys(name, profile):
    base = resolve_label(name)
    scaled = resolve_label(f"{name}@{profile}")
    changed = {key for key, _, _ in diff_rows(base, scaled)}
    assert changed <= ALLOWED_KEYS, f"{profile} changes {sorted(changed - ALLOWED_KEYS)} of {name}"
    if profile == "paper":
        assert not changed
    if profile == "smoke":
        assert scaled.entries["runner.n_steps"].value < base.entries["runner.n_steps"].value
    for key in changed:
        assert scaled.entries[key].origin == "profile"


def test_profile_refuses_an_algorithm_hyperparameter(tmp_path):
    path = tmp_path / "greedy.toml"
    path.write_text(
        textwrap.dedent(
            """
            [profile]
            description = "tries to change the learning rate"
            [ppo.algo]
            learning_rate = { value = 1.0, source = "faster" }
            """
        )
    )
    with pytest.raises(
        ConfigError, match="may change only budget or execution keys, not 'algo.learning_rate'"
    ):
        load_profile(str(path))


def test_profile_must_cover_the_algorithm(tmp_path):
    path = tmp_path / "ppo_only.toml"
    path.write_text('[profile]\ndescription = "x"\n[ppo.runner]\nn_steps = { value = 10, source = "x" }\n')
    profile = load_profile(str(path))
    with pytest.raises(ConfigError, match="no \\[a2c.\\*\\] tables"):
        profile.changes_for(load_setting("a2c_atari"))


def test_seed_count_validation():
    assert check_seeds("3") == 3
    for bad in (0, -1, "0", "-2", "abc", "", True):
        with pytest.raises(ConfigError, match="SEEDS must be a positive integer"):
            check_seeds(bad)


PLAN = """
[plan]
title = "tiny"
arms = ["ppo_atari", "a2c_atari"]
envs = ["pong", "breakout"]
envs_source = "test"
"""


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(PLAN)
    return path


def test_expand_jobs_and_run_dirs(plan_file, tmp_path):
    jobs = expand(load_plan(str(plan_file)), 2, "smoke", tmp_path / "runs")
    assert len(jobs) == 2 * 2 * 2
    job = jobs[-1]
    assert (job.arm, job.env, job.seed) == ("a2c_atari", "breakout", 1)
    assert job.run_dir == tmp_path / "runs" / "tiny-smoke" / "a2c_atari" / "breakout" / "seed1"
    assert job.config.env.id == "breakout" and job.config.runner.seed == 1
    assert job.config.runner.n_steps == 2_000 and job.frames == 8_000
    assert not (tmp_path / "runs").exists()


def test_dry_run_prints_totals(plan_file, tmp_path, capsys):
    root = tmp_path / "runs"
    argv = ["run", str(plan_file), "--seeds", "3", "--profile", "smoke", "--root", str(root)]
    code = main([*argv, "--dry-run", "--no-probe", "--jobs", "2"])
    out = capsys.readouterr().out
    assert code == 0
    # 2 arms x 2 games x 3 seeds; ppo 4,096 and a2c 2,000 steps per job at frameskip 4
    assert "12 jobs, 36,576 env steps, 146,304 frames in total; 2 cpu slot(s)" in out
    assert not root.exists()


def test_show_and_diff_exit_zero(capsys):
    assert main(["show", "ppo_atari", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "runner.n_steps" in out and "profile smoke" in out
    assert main(["diff", "ppo_mujoco", "ppo_atari"]) == 0
    assert "algo.epochs" in capsys.readouterr().out


BAD_INPUT = {
    "unknown_setting": (["show", "r2d3_paper"], "unknown setting 'r2d3_paper'"),
    "unknown_setting_in_diff": (["diff", "ppo_atari", "ppo_atary"], "unknown setting 'ppo_atary'"),
    "unknown_profile": (["show", "ppo_atari", "--profile", "huge"], "unknown profile 'huge'"),
    "missing_setting_file": (["show", "nowhere/x.toml"], "does not exist"),
    "unknown_plan": (["run", "r2d9", "--seeds", "1", "--dry-run"], "unknown plan 'r2d9'"),
    "seeds_zero": (["run", "PLAN", "--seeds", "0", "--dry-run"], "SEEDS must be a positive integer, got 0"),
    "seeds_negative": (
        ["run", "PLAN", "--seeds", "-3", "--dry-run"],
        "SEEDS must be a positive integer, got -3",
    ),
    "seeds_text": (["run", "PLAN", "--seeds", "three", "--dry-run"], "SEEDS must be a positive integer"),
    "seeds_missing": (["run", "PLAN", "--dry-run"], "the following arguments are required: --seeds"),
    "unknown_game": (
        ["run", "PLAN", "--seeds", "1", "--games", "pongg", "--dry-run"],
        "unknown game or env 'pongg'",
    ),
    "bad_game_name": (
        ["run", "PLAN", "--seeds", "1", "--games", "po ng", "--dry-run"],
        "'po ng' is not a valid",
    ),
    "unknown_arm": (["run", "PLAN", "--seeds", "1", "--arms", "nope", "--dry-run"], "unknown setting 'nope'"),
    "jobs_zero": (["run", "PLAN", "--seeds", "1", "--jobs", "0"], "JOBS must be a positive integer"),
    "bad_backend": (
        ["run", "PLAN", "--seeds", "1", "--backend", "slurm"],
        "BACKEND must be 'local' or 'ray'",
    ),
    "malformed_setting": (["show", "BAD"], "unknown key 'learning_rat'"),
    "unknown_command": (["launch"], "invalid choice: 'launch'"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_no_run_dir(case, plan_file, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[setting]\ntitle = "t"\ncitation = "c"\nbase = "ppo_mujoco"\n'
        '[algo]\nlearning_rat = { value = 1e-3, source = "typo" }\n'
    )
    argv, expected = BAD_INPUT[case]
    argv = [str(plan_file) if a == "PLAN" else str(bad) if a == "BAD" else a for a in argv]
    root = tmp_path / "runs"
    if argv[0] == "run":
        argv += ["--root", str(root)]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err
    assert not root.exists()
