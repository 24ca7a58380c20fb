"""Shipped settings and profiles load strictly; the CLI's bad-input contract; dry runs of plans.

Bad input (unknown setting, game, profile or plan, SEEDS < 1, JOBS < 1, a malformed file) must give
one line on stderr starting ``error:``, exit code 2, and no run directory.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest

from algorithms import registry
from algorithms.configs import ConfigError
from algorithms.run_config import RunnerConfig, SamplerConfig, env_config_class
from protocol.plan_args import format_seeds, parse_seeds, seeds_from
from repro.cli import main
from repro.inspect_settings import diff_rows, resolve_label
from repro.plans import available_plans, expand, load_plan
from repro.profiles import (
    EXECUTION_KEYS,
    apply_profile,
    available_profiles,
    is_allowed_key,
    is_budget_key,
    load_profile,
)
from repro.settings import available_settings, default_schema, load_setting, train_config

SETTINGS = available_settings()
PROFILES = available_profiles()


def test_shipped_files_exist():
    assert {"paper", "mini", "smoke"} <= set(PROFILES)
    assert not any(is_budget_key(key) for key in EXECUTION_KEYS)


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
    refused = sorted(key for key in changed if not is_allowed_key(key))
    assert not refused, f"{profile} changes {refused} of {name}"
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
    with pytest.raises(ConfigError, match="no \\[a2c.\\*\\] tables and no \\[default.\\*\\] tables"):
        profile.changes_for(load_setting("a2c_atari"), default_schema("a2c"))


# Every budget-type field as repro/profiles.py listed them by hand before the naming rule replaced
# the list of algorithm fields: the rule must classify every field of every Config the same way.
BUDGET_FIELDS = {
    "runner.n_steps",
    "runner.eval_interval_steps",
    "sampler.batch_T",
    "sampler.batch_B",
    "sampler.eval_n_envs",
    "sampler.eval_episodes",
    "sampler.eval_max_steps",
    "algo.replay_size_steps",
    "algo.learning_starts_steps",
    "algo.random_steps",
    "algo.anneal_env_steps",
    "algo.priority_beta_anneal_updates",
}


def test_budget_rule_classifies_every_config_field_as_the_hand_list_did():
    classes = [("algo", registry.config_class(algo)) for algo in registry.ALGORITHMS]
    classes += [("runner", RunnerConfig), ("sampler", SamplerConfig), ("env", env_config_class())]
    fields = {f"{section}.{f.name}" for section, cls in classes for f in dataclasses.fields(cls)}
    assert BUDGET_FIELDS <= fields
    assert {name for name in fields if is_budget_key(name)} == BUDGET_FIELDS
    # A new algorithm's fields follow the rule with no edit in repro/profiles.py.
    assert is_budget_key("algo.learning_starts_updates") and is_budget_key("algo.epsilon_anneal_steps")
    assert not is_budget_key("algo.anneal_clip") and not is_budget_key("algo.target_update_period_steps")


def test_default_tables_apply_to_every_algorithm_key_by_key(tmp_path):
    path = tmp_path / "defaults.toml"
    path.write_text(
        textwrap.dedent(
            """
            [profile]
            description = "a default for every algorithm, ppo's n_steps its own"
            [default.runner]
            n_steps = { value = 4_000, source = "default" }
            log_interval_steps = { value = 1_000, source = "default" }
            [default.algo]
            replay_size_steps = { value = 500, source = "default: A2C and PPO have no replay" }
            learning_starts_steps = { value = 500, source = "default: within the replay" }
            [ppo.runner]
            n_steps = { value = 8_000, source = "ppo" }
            """
        )
    )
    profile = load_profile(str(path))

    def scaled(name):
        setting = load_setting(name)
        return apply_profile(setting, profile, default_schema(setting.algo)).entries

    a2c = scaled("a2c_atari")  # not named: the default, less the key A2C's Config lacks
    assert (a2c["runner.n_steps"].value, a2c["runner.log_interval_steps"].value) == (4_000, 1_000)
    assert a2c["runner.n_steps"].source == "profile defaults: default" and "algo.replay_size_steps" not in a2c
    ppo = scaled("ppo_atari")  # named: its own key replaces the default's, the others still apply
    assert (ppo["runner.n_steps"].value, ppo["runner.log_interval_steps"].value) == (8_000, 1_000)
    assert scaled("dqn_nature")["algo.replay_size_steps"].value == 500


def test_named_tables_stay_strict_and_default_tables_take_only_budget_or_execution_keys(tmp_path):
    path = tmp_path / "strict.toml"
    path.write_text(
        '[profile]\ndescription = "x"\n[default.runner]\nn_steps = { value = 10, source = "x" }\n'
        '[ppo.algo]\nreplay_size_steps = { value = 10, source = "x" }\n'
    )
    setting = load_setting("ppo_atari")
    with pytest.raises(ConfigError, match="unknown key 'replay_size_steps'"):
        apply_profile(setting, load_profile(str(path)), default_schema("ppo"))
    path.write_text(
        '[profile]\ndescription = "x"\n[default.algo]\nlearning_rate = { value = 1.0, source = "x" }\n'
    )
    with pytest.raises(
        ConfigError, match=r"\[default.algo\] 'learning_rate': a profile may change only budget"
    ):
        load_profile(str(path))


def test_seed_specs_count_range_and_list():
    assert parse_seeds("3") == parse_seeds(3) == (0, 1, 2)
    assert parse_seeds("100-104") == (100, 101, 102, 103, 104)
    assert parse_seeds("1,5,9") == (1, 5, 9)
    assert parse_seeds("0-2,7") == (0, 1, 2, 7) and parse_seeds((4, 2)) == (4, 2)
    assert parse_seeds("0-999") == tuple(range(1000))
    for seeds in [(0, 1, 2), (100, 101, 102, 103, 104), (1, 5, 9), (7,), (1, 2), (0, 1, 2, 7)]:
        assert parse_seeds(format_seeds(seeds)) == seeds
    for bad, why in [
        ("5-1", "goes down"), ("1-", "is not a seed"), ("a,b", "is not a seed"), ("1001", "at most 1000"),
        ("0-1000", "more than 1000"), ("0", "at least 1"), ("-2", "is not a seed"), ("", "is not a seed"),
        ("1,1", "listed twice"), (True, "is not a seed"), ("2.5", "is not a seed"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError, match=f"^--seeds '{bad}': .*{why}"):
            parse_seeds(bad)


def test_a_count_of_seeds_counts_from_the_plans_first_seed():
    assert parse_seeds("3", first_seed=400) == parse_seeds(3, first_seed=400) == (400, 401, 402)
    assert parse_seeds("7-8", first_seed=400) == (7, 8)  # a range is read as written
    assert parse_seeds("3", first_seed=0) == (0, 1, 2)


def test_a_count_never_reaches_the_seeds_kept_for_outside_checks():
    assert parse_seeds("200") == tuple(range(200))
    assert parse_seeds("5", first_seed=300) == tuple(range(300, 305))
    for count, first_seed in [("201", 0), ("300", 0), ("3", 198), ("3", 250), ("1", 299)]:
        reaches = f"^--seeds '{count}': .* from seed {first_seed} reaches seeds 200-299"
        with pytest.raises(ConfigError, match=reaches):
            parse_seeds(count, first_seed=first_seed)
    assert parse_seeds("200-202") == (200, 201, 202)  # named, as an outside check names them
    with pytest.raises(ConfigError, match="past the largest seed"):
        parse_seeds("3", first_seed=2**32 - 2)
    assert seeds_from(198, 4) == (198, 199, 300, 301)  # a planner steps over the kept seeds
    assert seeds_from(0, 3) == (0, 1, 2)
    assert seeds_from(250, 2) == (300, 301) and len(seeds_from(0, 1000)) == 1000


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


def test_jobs_run_seed_by_seed_so_a_stopped_study_leaves_whole_blocks(plan_file, tmp_path):
    jobs = expand(load_plan(str(plan_file)), "7,3", "smoke", tmp_path / "runs")
    assert [(job.seed, job.env, job.arm) for job in jobs] == [
        (7, "pong", "ppo_atari"), (7, "pong", "a2c_atari"), (7, "breakout", "ppo_atari"),
        (7, "breakout", "a2c_atari"), (3, "pong", "ppo_atari"), (3, "pong", "a2c_atari"),
        (3, "breakout", "ppo_atari"), (3, "breakout", "a2c_atari"),
    ]  # fmt: skip


def test_dry_run_prints_totals(plan_file, tmp_path, capsys):
    root = tmp_path / "runs"
    argv = ["run", str(plan_file), "--seeds", "3", "--profile", "smoke", "--root", str(root)]
    code = main([*argv, "--dry-run", "--no-probe", "--jobs", "2"])
    out = capsys.readouterr().out
    assert code == 0
    # 2 arms x 2 games x 3 seeds; ppo 4,096 and a2c 2,000 steps per job at frameskip 4
    assert "12 jobs, 36,576 env steps, 146,304 frames in total; 2 cpu slot(s)" in out
    assert not root.exists()


def test_dry_run_says_which_jobs_are_complete_part_way_or_not_started(plan_file, tmp_path, capsys):
    """Run directories as a stopped study leaves them: the first job complete at its 4,096 env steps, the
    second stopped after a row at 1,024; the dry run's "done" column and totals say so."""
    root = tmp_path / "runs"
    jobs = expand(load_plan(str(plan_file)), 2, "smoke", root)
    for job, steps, state in ((jobs[0], (2048, 4096), "complete"), (jobs[1], (1024,), "interrupted")):
        job.run_dir.mkdir(parents=True)
        (job.run_dir / "progress.csv").write_text("env_steps\n" + "".join(f"{n}\n" for n in steps))
        (job.run_dir / "status.json").write_text(json.dumps({"state": state}))
    assert jobs[0].n_steps == 4096
    argv = ["run", str(plan_file), "--seeds", "2", "--profile", "smoke", "--root", str(root)]
    assert main([*argv, "--dry-run", "--no-probe", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if "/seed" in line}
    assert lines[jobs[0].key].rstrip().endswith("complete")
    assert lines[jobs[1].key].rstrip().endswith("resumes at 1.02k")
    assert lines[jobs[2].key].rstrip().endswith("cpu")
    left = 4 * 4_096 + 4 * 2_000 - 4_096 - 1_024  # 4 ppo jobs of 4,096 env steps, 4 a2c of 2,000
    assert f"done: 1 complete, 1 part-way, 6 not started; {left:,} of" in out


def test_show_and_diff_exit_zero(capsys):
    assert main(["show", "ppo_atari", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "runner.n_steps" in out and "profile smoke" in out
    assert main(["diff", "ppo_mujoco", "ppo_atari"]) == 0
    assert "algo.epochs" in capsys.readouterr().out


def test_no_plan_shares_a_settings_name():
    """``show`` and ``run`` take a plan or a setting by name: one name must not mean both."""
    assert set(available_plans()) & set(available_settings()) == set()


def test_show_of_a_plan_lists_its_arms(capsys):
    assert main(["show", "r2d1_minatar_published_vs_corrected"]) == 0
    assert "arm" in capsys.readouterr().out


BAD_INPUT = {
    "unknown_setting": (["show", "r2d3_paper"], "unknown setting 'r2d3_paper'"),
    "unknown_setting_in_diff": (["diff", "ppo_atari", "ppo_atary"], "unknown setting 'ppo_atary'"),
    "unknown_profile": (["show", "ppo_atari", "--profile", "huge"], "unknown profile 'huge'"),
    "missing_setting_file": (["show", "nowhere/x.toml"], "does not exist"),
    "unknown_plan": (["run", "r2d9", "--seeds", "1", "--dry-run"], "'r2d9' is neither a plan nor a setting"),
    "seeds_zero": (["run", "PLAN", "--seeds", "0", "--dry-run"], "--seeds '0': a count of seeds must be"),
    "seeds_negative": (["run", "PLAN", "--seeds", "-3", "--dry-run"], "--seeds '-3': '-3' is not a seed"),
    "seeds_text": (["run", "PLAN", "--seeds", "three", "--dry-run"], "--seeds 'three': 'three' is not a"),
    "seeds_down": (["run", "PLAN", "--seeds", "5-1", "--dry-run"], "--seeds '5-1': the range 5-1 goes down"),
    "seeds_open": (["run", "PLAN", "--seeds", "1-", "--dry-run"], "--seeds '1-': '1-' is not a seed"),
    "seeds_letters": (["run", "PLAN", "--seeds", "a,b", "--dry-run"], "--seeds 'a,b': 'a' is not a seed"),
    "seeds_too_many": (["run", "PLAN", "--seeds", "0-1000"], "--seeds '0-1000': more than 1000 seeds"),
    "seeds_missing": (["run", "PLAN", "--dry-run"], "--seeds is required"),
    "env_with_plan": (
        ["run", "PLAN", "--seeds", "1", "--env", "pong"],
        "--env pong: --env names the envs of a",
    ),
    "set_unknown_key": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "algo.learning_rat=1e-3"],
        "--set 'algo.learning_rat': unknown key 'learning_rat'",
    ),
    "set_wrong_type": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "runner.n_steps=1e4"],
        "--set 'runner.n_steps': expected an integer, got float 10000.0",
    ),
    "set_not_a_number": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "algo.learning_rate=fast"],
        "--set 'algo.learning_rate': expected a number, got str 'fast'",
    ),
    "set_budget_sweep": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "runner.n_steps=1000,2000"],
        "--set runner.n_steps=1000,2000: a sweep over a budget key is refused",
    ),
    "set_malformed": (["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "lr"], "--set 'lr': expected"),
    "set_per_job_key": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "runner.seed=3"],
        "'runner.seed' is set per job; give it with --seeds",
    ),
    "set_in_show": (["show", "ppo_cartpole_zoo", "--set", "algo.nope=1"], "--set 'algo.nope': unknown key"),
    "arms_with_setting": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--arms", "a2c_cartpole"],
        "--arms a2c_cartpole: --arms replaces a plan's arms",
    ),
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
    # Issue 47: what a job would fail on (or run wrongly) is refused at --dry-run, before any job.
    "seeds_past_2_32": (
        ["run", "PLAN", "--seeds", "4294967296-4294967296", "--dry-run"],
        "seed 4294967296 is past the largest seed, 4294967295",
    ),
    "seeds_20_digits": (
        ["run", "PLAN", "--seeds", "1,12345678901234567890", "--dry-run"],
        "seed 12345678901234567890 is past the largest seed",
    ),
    "discrete_algo_on_box_actions": (
        ["run", "dqn_cartpole", "--env", "Pendulum-v1", "--seeds", "1", "--profile", "smoke", "--dry-run"],
        "setting 'dqn_cartpole' cannot run on env 'Pendulum-v1' (observations (3,)): DQN, C51 and "
        "Rainbow each takes Discrete actions; this env's are Box(",
    ),
    "box_algo_on_discrete_actions": (
        ["run", "ddpg_pendulum", "--env", "CartPole-v1", "--seeds", "1", "--profile", "smoke", "--dry-run"],
        "DDPG and TD3 each takes 1-D Box actions; this env's are Discrete(2)",
    ),
    "replay_past_memory": (
        ["run", "dqn_cartpole", "--seeds", "1", "--set", "algo.replay_size_steps=1000000000000", "--dry-run"],
        "algo.replay_size_steps=1,000,000,000,000 on env 'CartPole-v1' needs at least 54,948.0 GiB of memory",
    ),
    "sweep_same_float": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "algo.learning_rate=1e-3,0.001", "--dry-run"],
        "--set 'algo.learning_rate=1e-3,0.001': 1e-3 and 0.001 are the same value",
    ),
    "sweep_same_exponent": (
        ["run", "ppo_cartpole_zoo", "--seeds", "1", "--set", "algo.learning_rate=1e-3,1E-3", "--dry-run"],
        "1e-3 and 1E-3 are the same value",
    ),
    "sweep_same_int": (
        ["run", "dqn_cartpole", "--seeds", "1", "--set", "algo.replay_size_steps=1000,1_000", "--dry-run"],
        "1000 and 1_000 are the same value",
    ),
    "plan_arm_twice": (
        ["run", "PLAN_ARM_TWICE", "--seeds", "1", "--dry-run"],
        "arm 'a2c_atari' ('a2c_atari') on env 'pong' is planned twice",
    ),
    "plan_env_twice": (
        ["run", "PLAN_ENV_TWICE", "--seeds", "1", "--dry-run"],
        "arm 'a2c_atari' ('a2c_atari') on env 'pong' is planned twice",
    ),
    "toml_nested_5000_deep": (["show", "TOML_DEEP"], "arrays or tables nested too deeply to read"),
    "pilot_random_bytes": (["run", "PLAN", "--pilot", "PILOT_random_bytes", "--dry-run"], "not a CSV table"),
    "pilot_nan": (
        ["run", "PLAN", "--pilot", "PILOT_nan", "--dry-run"],
        "line 3: normalised score 'nan' is not a",
    ),
    "pilot_inf": (
        ["run", "PLAN", "--pilot", "PILOT_inf", "--dry-run"],
        "line 2: normalised score '-inf' is not a",
    ),
    "pilot_all_equal": (
        ["run", "PLAN", "--pilot", "PILOT_all_equal", "--dry-run"],
        "every arm scores the same on every seed",
    ),
    "pilot_repeated_seed": (
        ["run", "PLAN", "--pilot", "PILOT_repeated_seed", "--dry-run"],
        "line 4: arm a on pong seed 0 repeats line 2",
    ),
}

# The files the cases above name: pilot tables (``repro.power.read_pilot``) and plans.
PILOT_HEADER = "arm,env,seed,normalised\n"
BAD_FILES = {
    "PILOT_random_bytes": bytes(range(128, 256)) * 4,
    "PILOT_nan": (PILOT_HEADER + "a,pong,0,0.1\na,pong,1,nan\n").encode(),
    "PILOT_inf": (PILOT_HEADER + "a,pong,0,-inf\na,pong,1,0.2\n").encode(),
    "PILOT_all_equal": (
        PILOT_HEADER + "".join(f"{a},pong,{s},0.5\n" for a in "ab" for s in range(4))
    ).encode(),
    "PILOT_repeated_seed": (PILOT_HEADER + "a,pong,0,0.1\na,pong,1,0.3\na,pong,0,0.1\n").encode(),
    "TOML_DEEP": b'[setting]\ntitle = "t"\nx = ' + b"[" * 5000 + b"]" * 5000 + b"\n",
    "PLAN_ARM_TWICE": PLAN.replace('["ppo_atari", "a2c_atari"]', '["a2c_atari", "a2c_atari"]').encode(),
    "PLAN_ENV_TWICE": PLAN.replace('["ppo_atari", "a2c_atari"]', '["a2c_atari"]')
    .replace('["pong", "breakout"]', '["pong", "pong"]')
    .encode(),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_no_run_dir(case, plan_file, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[setting]\ntitle = "t"\ncitation = "c"\nbase = "ppo_mujoco"\n'
        '[algo]\nlearning_rat = { value = 1e-3, source = "typo" }\n'
    )
    argv, expected = BAD_INPUT[case]
    for name in set(argv) & set(BAD_FILES):
        (tmp_path / f"{name}.toml").write_bytes(BAD_FILES[name])
    argv = [str(plan_file) if a == "PLAN" else str(bad) if a == "BAD" else a for a in argv]
    argv = [str(tmp_path / f"{a}.toml") if a in BAD_FILES else a for a in argv]
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


def test_show_prints_values_in_effect_next_to_the_stated_ones(capsys):
    assert main(["show", "rlpyt_r2d1_published"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("algo.")}
    # The published arm states R2D2's exponents, and its swap switch runs them the other way round.
    assert rows["algo.priority_alpha"].split()[1:6] == ["0.9", "->", "0.6", "in", "effect"]
    assert rows["algo.priority_beta"].split()[1:6] == ["0.6", "->", "0.9", "in", "effect"]
    assert rows["algo.swap_priority_exponents"].split()[1] == "true"
    assert "  algo.priority_alpha = 0.6: swap_priority_exponents = true" in out
    assert "  algo.priority_beta = 0.9: swap_priority_exponents = true" in out
    assert main(["show", "r2d1_corrected"]) == 0
    out = capsys.readouterr().out
    assert "in effect" not in out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("algo.priority_")] == [
        "0.9",
        "0.6",
        "0.9",
    ]  # alpha, beta, eta as stated


def test_profile_with_a_renamed_key_names_the_new_one(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text(
        '[profile]\ndescription = "x"\n[dqn.algo]\nmin_steps_learn = { value = 10, source = "x" }\n'
    )
    with pytest.raises(
        ConfigError,
        match=r"\[dqn.algo\] 'min_steps_learn': key '\w+' was renamed to 'learning_starts_steps'$",
    ):
        load_profile(str(path))
