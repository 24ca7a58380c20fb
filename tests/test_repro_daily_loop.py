"""A researcher's daily loop through ``python -m repro``: a setting run without a plan on any env with
any seeds, ``--set`` overrides recorded with their origin, sweeps as arms of one report, optional
dependencies refused before any job, TensorBoard per run, and what the report makes of it.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tiny_setting import a2c_cartpole_setting

from algorithms.configs import ConfigError
from algorithms.run_config import config_from_dict
from analysis.synthetic import SyntheticArm, write_experiment
from protocol.plan_args import parse_seeds
from repro import extras
from repro.cli import main
from repro.plans import expand, load_plan, setting_plan
from repro.settings import load_setting, parse_overrides

REPO = Path(__file__).resolve().parents[1]
# A profile that keeps the tiny setting's own budget (400 env steps, a row every 100).
AS_SET = '[profile]\ndescription = "test: the setting\'s own budget"\n'


@pytest.fixture
def files(tmp_path):
    (tmp_path / "tiny.toml").write_text(textwrap.dedent(a2c_cartpole_setting()))
    (tmp_path / "as_set.toml").write_text(AS_SET)
    return tmp_path


def repro(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "repro", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)


def _cells(html: str, table: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table}">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return [re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


@pytest.mark.slow
def test_a_setting_runs_without_a_plan_with_a_sweep_seeds_and_tensorboard(files):
    """``run SETTING --env ID --seeds A-B --set key=a,b --tensorboard``: one arm per value, named by it,
    each value recorded in config.json with origin 'command line', event files per run, and a report
    that compares the arms and says what ran."""
    root = files / "runs"
    done = repro(
        "run", str(files / "tiny.toml"), "--env", "CartPole-v1", "--seeds", "100-101",
        "--profile", str(files / "as_set.toml"), "--root", str(root), "--no-progress", "--no-estimate",
        "--set", "algo.learning_rate=1e-3,3e-3", "--set", "algo.value_coef=0.25", "--tensorboard",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    experiment = root / "tiny-as_set"
    arms = sorted(p.name for p in experiment.iterdir() if p.is_dir())
    assert arms == ["tiny_learning_rate-1e-3_value_coef-0.25", "tiny_learning_rate-3e-3_value_coef-0.25"]
    for arm, rate, text in zip(arms, (1e-3, 3e-3), ("1e-3", "3e-3")):
        for seed in (100, 101):
            run = experiment / arm / "CartPole-v1" / f"seed{seed}"
            config = json.loads((run / "config.json").read_text())
            assert config["algo_config"]["learning_rate"] == rate and config["runner"]["seed"] == seed
            assert config["origins"] == {
                "algo_config.learning_rate": {
                    "origin": "command line", "source": f"--set algo.learning_rate={text}",
                },
                "algo_config.value_coef": {"origin": "command line", "source": "--set algo.value_coef=0.25"},
            }  # fmt: skip
            assert config_from_dict(config).origins  # config.json reads back, origins included
            assert config["runner"]["tensorboard"] is True
            assert list((run / "tb").glob("events.out.tfevents.*")), "no TensorBoard event file"
    record = json.loads((experiment / "plan.json").read_text())
    (entry,) = record["plans"]
    assert entry["plan"] == "tiny" and entry["title"] == "setting tiny: A2C on CartPole (test)"
    assert entry["setting"] == str(files / "tiny.toml") and entry["seeds"] == "100,101"
    assert entry["set"] == ["algo.learning_rate=1e-3,3e-3", "algo.value_coef=0.25"]
    assert len(record["jobs"]) == 4

    built = subprocess.run(
        [sys.executable, "-m", "reports", "build", str(experiment), "--reps", "100"],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    html = (experiment / "report.html").read_text()
    (plan_row,) = _cells(html, "plan")
    assert plan_row[:2] == ["tiny", "setting tiny: A2C on CartPole (test)"] and plan_row[5] == "100,101"
    assert plan_row[6] == "algo.learning_rate=1e-3,3e-3, algo.value_coef=0.25"
    (diff_row,) = _cells(html, "config-diff-table")
    assert diff_row == ["algo_config.learning_rate", "0.001 (command line)", "0.003 (command line)"]
    assert len(_cells(html, "command-line-table")) == 4  # 2 arms x 2 keys
    # Arms labelled by what differs (value_coef, shared, does not), their directories named.
    assert [row[0] for row in _cells(html, "arms")] == ["learning_rate=1e-3", "learning_rate=3e-3"]
    assert "learning_rate=1e-3: tiny_learning_rate-1e-3_value_coef-0.25/" in html
    assert '<section id="verdict">' in html and "reference-normalised" in html  # CartPole's bounds


def test_sweep_expansion_one_arm_per_combination(files):
    """One arm per combination of values, named by them, less the values the setting has already
    (the tiny setting runs serially with discount 0.99): such a value is the setting's arm, not a
    second arm of the same config under another name."""
    plan = setting_plan(str(files / "tiny.toml"), ["CartPole-v1", "Acrobot-v1"])
    overrides = parse_overrides(
        ["algo.learning_rate=1e-3,3e-3", "sampler.mode=serial", "algo.discount=0.9,0.99"]
    )
    jobs = expand(plan, "5,7", str(files / "as_set.toml"), files / "runs", overrides=overrides)
    assert len(jobs) == 4 * 2 * 2  # 2 x 1 x 2 combinations, 2 envs, 2 seeds
    names = sorted({j.arm for j in jobs})
    assert names == [
        "tiny_learning_rate-1e-3", "tiny_learning_rate-1e-3_discount-0.9",
        "tiny_learning_rate-3e-3", "tiny_learning_rate-3e-3_discount-0.9",
    ]  # fmt: skip
    assert {(j.config.algo_config.learning_rate, j.config.algo_config.discount) for j in jobs} == {
        (1e-3, 0.9), (1e-3, 0.99), (3e-3, 0.9), (3e-3, 0.99),
    }  # fmt: skip
    assert {j.seed for j in jobs} == {5, 7} and {j.env for j in jobs} == {"CartPole-v1", "Acrobot-v1"}
    job = next(j for j in jobs if j.arm == names[1])
    assert job.overrides == (("algo.learning_rate", "1e-3"), ("algo.discount", "0.9"))
    assert job.run_dir.parent.parent.name == names[1]
    assert not (files / "runs").exists()


def test_a_sweep_value_equal_to_the_base_value_is_the_base_arm(files):
    """``--set algo.learning_rate=1e-4,7e-4`` on a setting whose rate is 7e-4: two arms, the setting's
    own (named as it, no override) and lr 1e-4; a single ``--set`` of the base value renames nothing."""
    plan = setting_plan(str(files / "tiny.toml"), ["CartPole-v1"])
    sweep = parse_overrides(["algo.learning_rate=1e-4,7e-4"])
    jobs = expand(plan, "1", str(files / "as_set.toml"), files / "runs", overrides=sweep)
    assert [(j.arm, j.overrides) for j in jobs] == [
        ("tiny_learning_rate-1e-4", (("algo.learning_rate", "1e-4"),)), ("tiny", ()),
    ]  # fmt: skip
    same = parse_overrides(["algo.learning_rate=0.0007"])
    (job,) = expand(plan, "1", str(files / "as_set.toml"), files / "runs", overrides=same)
    assert job.arm == "tiny" and job.config.algo_config.learning_rate == 7e-4


def test_set_values_are_read_as_toml_with_strings_lists_and_quoted_commas():
    overrides = parse_overrides(["algo.hidden_sizes=[64, 64],[32]", 'env.id_note="a,b"', "runner.device=cpu"])
    assert overrides["algo.hidden_sizes"] == (("[64, 64]", [64, 64]), ("[32]", [32]))
    assert overrides["env.id_note"] == (('"a,b"', "a,b"),)
    assert overrides["runner.device"] == (("cpu", "cpu"),)
    for bad, why in [
        ("algo.learning_rate", "expected section.key=value"),
        ("opt.lr=1", "unknown section 'opt'"),
        ("algo.learning_rate=1,,2", "an empty value"),
        ("algo.learning_rate=1,1", "listed twice"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(why)):
            parse_overrides([bad])
    with pytest.raises(ConfigError, match="given twice"):
        parse_overrides(["algo.discount=0.9", "algo.discount=0.99"])


def test_show_and_diff_take_set_and_name_its_origin(capsys):
    assert main(["show", "ppo_cartpole_zoo", "--set", "algo.learning_rate=5e-4"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("algo.learning_rate"))
    assert "0.0005" in row and "command line" in row and "--set algo.learning_rate=5e-4" in row
    assert main(["diff", "ppo_cartpole_zoo", "ppo_cartpole_zoo", "--set", "algo.learning_rate=5e-4"]) == 0
    out = capsys.readouterr().out
    assert "1 differing keys" in out and "[command line] --set algo.learning_rate=5e-4" in out


def test_a_missing_extra_is_one_line_naming_it_before_any_job(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(extras, "is_installed", lambda extra: extra.name != "box2d")
    root = tmp_path / "runs"
    code = main(["run", "ppo_lunarlander", "--seeds", "2", "--profile", "smoke", "--root", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "env 'LunarLander-v3' (setting 'ppo_lunarlander') needs Box2D" in err
    assert "pip install -c constraints.txt -e '.[box2d]'" in err
    assert not root.exists()
    monkeypatch.setattr(extras, "is_installed", lambda extra: extra.name != "mujoco")
    assert main(["run", "ppo_halfcheetah", "--seeds", "1", "--root", str(root), "--dry-run"]) == 2
    assert "'.[mujoco]'" in capsys.readouterr().err


def test_extras_know_which_envs_need_them():
    from algorithms.envs.config import EnvConfig

    needed = {
        env_id: getattr(extras.needed_extra(EnvConfig(id=env_id, kind="gym")), "name", None)
        for env_id in ("LunarLander-v3", "BipedalWalker-v3", "HalfCheetah-v5", "CartPole-v1")
    }
    assert needed == {"LunarLander-v3": "box2d", "BipedalWalker-v3": "box2d", "HalfCheetah-v5": "mujoco",
                      "CartPole-v1": None}  # fmt: skip
    assert extras.needed_extra(EnvConfig(id="pong")).name == "atari"


@pytest.mark.slow
def test_the_box2d_settings_run_after_the_documented_install(tmp_path):
    """CI installs the box2d extra (make test); a machine without it skips, saying so."""
    if not extras.is_installed(extras.EXTRAS["box2d"]):
        pytest.skip("Box2D not installed here: pip install -c constraints.txt -e '.[box2d]'")
    root = tmp_path / "runs"
    for setting in ("ppo_lunarlander", "dqn_lunarlander"):
        done = repro(
            "run", setting, "--seeds", "1", "--profile", "smoke", "--root", str(root), "--no-progress",
            "--no-estimate", "--set", "runner.n_steps=1024",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert "1 complete" in done.stdout


def test_plans_give_seed_specs_and_arms_take_paths(files, capsys):
    plan = files / "plan.toml"
    plan.write_text(
        '[plan]\ntitle = "t"\narms = ["a2c_cartpole"]\nenvs = ["CartPole-v1"]\nenvs_source = "s"\n'
        'seeds = "100-102"\n'
    )
    assert load_plan(str(plan)).seeds == "100-102"
    root = files / "runs"
    argv = ["run", str(plan), "--profile", "smoke", "--root", str(root), "--dry-run", "--no-estimate"]
    assert main([*argv, "--arms", str(files / "tiny.toml")]) == 0
    out = capsys.readouterr().out
    assert "tiny/CartPole-v1/seed100" in out and "tiny/CartPole-v1/seed102" in out and "3 jobs" in out
    assert main([*argv, "--seeds", "1,5,9"]) == 0
    assert "a2c_cartpole/CartPole-v1/seed9" in capsys.readouterr().out
    plan.write_text(plan.read_text().replace('"100-102"', '"102-100"'))
    with pytest.raises(
        ConfigError, match=r"plan.toml \[plan\] 'seeds' '102-100': the range 102-100 goes down"
    ):
        load_plan(str(plan))
    assert not root.exists()


def test_a_setting_runs_on_its_own_env_or_on_envs_given(files, capsys):
    argv = ["run", "ppo_cartpole_zoo", "--seeds", "3", "--profile", "smoke", "--dry-run", "--no-estimate"]
    assert main([*argv, "--root", str(files / "runs")]) == 0
    out = capsys.readouterr().out
    assert "plan ppo_cartpole_zoo: setting ppo_cartpole_zoo" in out and "ppo_cartpole_zoo-smoke" in out
    assert "ppo_cartpole_zoo/CartPole-v1/seed2" in out
    assert main([*argv, "--root", str(files / "runs"), "--env", "Acrobot-v1", "--env", "MountainCar-v0"]) == 0
    out = capsys.readouterr().out
    assert "ppo_cartpole_zoo/Acrobot-v1/seed0" in out and "ppo_cartpole_zoo/MountainCar-v0/seed2" in out


def test_make_passes_seed_specs_through():
    done = subprocess.run(
        ["make", "-n", "reproduce-r2d1", "SEEDS=100-104", "PROFILE=smoke", "-o", ".venv/.installed"],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '--seeds "100-104"' in done.stdout
    assert parse_seeds("100-104") == (100, 101, 102, 103, 104)


def test_a_base_file_resolves_against_the_referring_settings_folder(tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    parent = textwrap.dedent(a2c_cartpole_setting()).replace('base = "a2c_atari"', 'algo = "a2c"')
    (folder / "parent.toml").write_text(parent)
    (folder / "child.toml").write_text(
        '[setting]\ntitle = "c"\ncitation = "c"\nbase = "parent.toml"\n'
        '[algo]\nlearning_rate = { value = 1e-2, source = "test" }\n'
    )
    monkeypatch.chdir(tmp_path)  # not the settings' folder
    child = load_setting(str(folder / "child.toml"))
    assert (
        child.entries["algo.learning_rate"].value == 1e-2 and child.entries["env.id"].value == "CartPole-v1"
    )
    (folder / "orphan.toml").write_text('[setting]\ntitle = "o"\ncitation = "c"\nbase = "nowhere.toml"\n')
    with pytest.raises(
        ConfigError, match=r"orphan.toml \[setting\] 'base': setting file .*nowhere.toml does not"
    ):
        load_setting(str(folder / "orphan.toml"))
    (folder / "orphan.toml").write_text('[setting]\ntitle = "o"\ncitation = "c"\nbase = "nosuchsetting"\n')
    with pytest.raises(ConfigError, match=r"orphan.toml \[setting\] 'base': unknown setting 'nosuchsetting'"):
        load_setting(str(folder / "orphan.toml"))


class _WandbStandIn:
    """Records what ``algorithms.logger.WandbTracker`` hands to ``wandb``: the interface the tracker
    relies on (``login(prompt=False)``, ``init`` with mode, config and ids, ``Run.log`` per row,
    ``Run.finish``); the real package, where installed, runs in
    ``test_the_tracker_writes_an_offline_wandb_run``. ``logged_in``: what ``login`` finds."""

    def __init__(self, logged_in: bool = False):
        self.inits, self.rows, self.finished, self.logged_in = [], [], 0, logged_in
        self.__spec__ = importlib.machinery.ModuleSpec("wandb", None)

    def login(self, prompt: bool = True, verify: bool = True) -> bool:
        assert prompt is False  # never asks for a key inside a job
        return self.logged_in

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return self

    def log(self, row, step):
        self.rows.append((step, row))

    def finish(self):
        self.finished += 1


@pytest.mark.parametrize("logged_in", [False, True])
def test_the_tracker_gets_the_runs_config_and_grouped_rows(files, monkeypatch, logged_in):
    """Online when logged in, else offline; every progress row and every evaluation as grouped tags
    (train/, time/, eval/) at its env step, without the axis and the constant counters."""
    from algorithms.logger import TRACKER_ENV
    from algorithms.train import train
    from repro.settings import default_schema, train_config

    stand_in = _WandbStandIn(logged_in)
    monkeypatch.setitem(sys.modules, "wandb", stand_in)
    monkeypatch.setenv(TRACKER_ENV, "wandb")
    setting = load_setting(str(files / "tiny.toml"))
    run_dir = files / "exp" / "tiny" / "CartPole-v1" / "seed0"
    train(train_config(setting, default_schema(setting.algo)), run_dir)
    (init,) = stand_in.inits
    assert init["mode"] == ("online" if logged_in else "offline")
    assert init["dir"] == str(run_dir.resolve())
    assert init["config"] == json.loads((run_dir / "config.json").read_text())
    assert (init["project"], init["group"], init["name"]) == ("exp", "tiny", "tiny/CartPole-v1/seed0")
    progress = [step for step, row in stand_in.rows if "train/return_mean" in row]
    evaluations = [(step, row) for step, row in stand_in.rows if "eval/return_mean" in row]
    assert progress == [100, 200, 300, 400] and stand_in.finished == 1
    eval_csv = (run_dir / "eval.csv").read_text().splitlines()
    assert [step for step, _ in evaluations] == sorted({int(line.split(",")[0]) for line in eval_csv[1:]})
    assert {"eval/length_mean", "eval/episodes"} <= set(evaluations[-1][1])
    last_row = [row for _, row in stand_in.rows if "train/return_mean" in row][-1]
    assert "time/steps_per_second" in last_row and "train/updates" in last_row
    keys = {key for _, row in stand_in.rows for key in row}
    assert all(key.split("/")[0] in ("train", "time", "eval") for key in keys)
    assert not keys & {"train/frameskip", "train/env_steps", "train/frames"}
    assert all(isinstance(v, int | float) for _, row in stand_in.rows for v in row.values())


def test_tensorboard_gets_grouped_tags_and_evaluation_returns(files):
    import dataclasses

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from algorithms.train import train
    from repro.settings import default_schema, train_config

    setting = load_setting(str(files / "tiny.toml"))
    config = train_config(setting, default_schema(setting.algo))
    config = dataclasses.replace(config, runner=dataclasses.replace(config.runner, tensorboard=True))
    run_dir = files / "exp" / "tiny" / "CartPole-v1" / "seed0"
    train(config, run_dir)
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/return_mean", "eval/return_mean", "time/steps_per_second"} <= tags
    assert all(tag.split("/")[0] in ("train", "time", "eval") for tag in tags)
    assert "train/frameskip" not in tags and "frameskip" not in tags
    assert [e.step for e in events.Scalars("train/return_mean")] == [100, 200, 300, 400]
    # Nothing constant or restated: A2C has no replay (its replay ratio is its batch reuse, constant),
    # and frames per second is steps per second times the frameskip.
    assert (
        not {"train/replay_ratio_trained", "train/replay_ratio_with_burnin", "time/frames_per_second"} & tags
    )
    # Evaluating time at the steps the evaluations ran, with each one counted (the row at that step
    # was written before it).
    evaluated = events.Scalars("time/time_evaluating_s")
    assert [e.step for e in evaluated] == [e.step for e in events.Scalars("eval/return_mean")]
    assert all(e.value > 0 for e in evaluated)


def test_the_tracker_writes_an_offline_wandb_run(files, monkeypatch):
    """With the real package (not a dependency: skipped where it is not installed)."""
    pytest.importorskip(
        "wandb",
        reason="wandb is the track extra (pip install -e '.[track]'); the stand-in test covers the rest",
    )
    from algorithms.logger import TRACKER_ENV
    from algorithms.train import train
    from repro.settings import default_schema, train_config

    monkeypatch.setenv(TRACKER_ENV, "wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    setting = load_setting(str(files / "tiny.toml"))
    run_dir = files / "exp" / "tiny" / "CartPole-v1" / "seed0"
    train(train_config(setting, default_schema(setting.algo)), run_dir)
    assert list((run_dir / "wandb").glob("offline-run-*/*.wandb"))


@pytest.mark.slow
def test_adding_seeds_keeps_the_history_says_so_and_ends_at_the_report(files):
    """A second invocation with held-out seeds adds to the experiment: plan.json keeps the first
    invocation as written and adds the second, the run says so in one line, and each run ends at the
    report (the command printed, or built with --report)."""
    root = files / "runs"
    argv = ["run", str(files / "tiny.toml"), "--profile", str(files / "as_set.toml"), "--root", str(root),
            "--no-progress", "--no-estimate"]  # fmt: skip
    experiment = root / "tiny-as_set"
    first = repro(*argv, "--seeds", "3,4")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "note: adding" not in first.stdout
    assert f"report: python -m reports build {experiment}" in first.stdout
    written = json.loads((experiment / "plan.json").read_text())["plans"]
    again = repro(*argv, "--seeds", "5-5", "--report")
    assert again.returncode == 0, again.stderr[-3000:]
    (note,) = [line for line in again.stdout.splitlines() if line.startswith("note: adding")]
    assert note.startswith("note: adding seed 5 to experiment tiny-as_set, which 1 earlier invocation")
    assert "--exp NAME" in note
    plans = json.loads((experiment / "plan.json").read_text())["plans"]
    assert plans[:1] == written and [p["seeds"] for p in plans] == ["3,4", "5-5"]
    assert str(experiment / "report.html") in again.stdout and (experiment / "report.html").is_file()
    rerun = repro(*argv, "--seeds", "5-5")  # the same invocation again: nothing new to say or record
    assert rerun.returncode == 0 and "note: adding" not in rerun.stdout
    assert len(json.loads((experiment / "plan.json").read_text())["plans"]) == 2


def test_the_console_command_is_the_cli_with_a_report_command(tmp_path):
    """pyproject's ``[project.scripts]`` names ``rlrepro``; its target, called as the installed script
    calls it (``sys.exit(main())`` with ``sys.argv[0]`` the script), lists the settings, names itself
    in its usage, and ``rlrepro report`` takes an experiment's name under runs/ (the Makefile's venv
    installs the script: ``pip install -e``)."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["rlrepro"].partition(":")
    call = f"import sys; sys.argv[0] = 'rlrepro'; from {module} import {function}; sys.exit({function}())"

    def rlrepro(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        return subprocess.run([sys.executable, "-c", call, *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip

    listed = rlrepro("list")
    assert listed.returncode == 0 and "ppo_cartpole_zoo" in listed.stdout.splitlines()[0]
    usage = rlrepro("--help")
    assert usage.stdout.startswith("usage: rlrepro") and "report" in usage.stdout
    arms = {"a": SyntheticArm(1.0, {"algo": "a2c"})}
    write_experiment(tmp_path / "runs", "exp", arms, ["CartPole-v1"], [0, 1], n_logs=2, eval_episodes=1)
    built = rlrepro("report", "exp", "--reps", "100", cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout.strip() == str(Path("runs") / "exp" / "report.html")
    missing = rlrepro("report", "nope", cwd=tmp_path)
    assert (
        missing.returncode == 2
        and "experiment directory nope does not exist, nor runs/nope" in missing.stderr
    )


def test_the_installed_console_command_lists_the_settings():
    """The script the Makefile's venv installs (``pip install -e``, run again whenever pyproject.toml
    changes) is on the interpreter's bin path and runs the CLI."""
    script = Path(sys.executable).with_name("rlrepro")
    assert script.exists(), f"{script} is absent: make venv (pip install -e .) installs it"
    listed = subprocess.run([str(script), "list"], capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0 and "r2d1_minatar_factorial" in listed.stdout, listed.stderr[-2000:]


def test_the_progress_line_shows_each_running_jobs_latest_returns(tmp_path):
    """Each running task by what tells it apart, with the mean training return of its last progress
    row and the mean of its last evaluation (a torn last line is not read)."""
    from repro.loop import returns_text, short_labels
    from repro.tasks import Task

    keys = ["ppo/CartPole-v1/seed0", "ppo/CartPole-v1/seed1", "ppo_lr-1e-4/CartPole-v1/seed0"]
    assert short_labels(keys) == dict(zip(keys, ["ppo/seed0", "ppo/seed1", "ppo_lr-1e-4/seed0"]))
    assert short_labels(keys[:1]) == {keys[0]: "seed0"}
    run = tmp_path / "seed0"
    run.mkdir()
    task = Task(keys[0], run, ("true",), 1000)
    assert returns_text(task) == "train -"
    (run / "progress.csv").write_text("env_steps,return_mean\n100,\n200,21.5\n300,4")
    assert returns_text(task) == "train 21.5"
    (run / "eval.csv").write_text("env_steps,episode,return\n200,0,30\n200,1,50\n300,0,100\n300,1,140\n")
    assert returns_text(task) == "train 21.5 eval 120"


def test_classic_control_evaluations_are_not_cut_below_the_envs_time_limit(files):
    """The smoke profile caps evaluation at 200 steps; on a classic-control env the job evaluates up
    to the env's own time limit (cheap, and a cut CartPole episode reads a good agent as a bad one).
    Other envs keep the profile's cap, a setting's own cap stands, and config.json records only the
    env fields the env's kind uses (no Atari frameskip for CartPole)."""
    from algorithms.run_config import config_to_dict

    def eval_cap(setting: str, env: str | None, profile: str = "smoke") -> int:
        (job,) = expand(setting_plan(setting, [env] if env else None), "1", profile, files / "runs")
        return job.config.sampler.eval_max_steps

    assert eval_cap("ppo_cartpole_zoo", "CartPole-v1") == 500
    assert eval_cap("ppo_cartpole_zoo", "Acrobot-v1") == 500
    assert eval_cap("ppo_cartpole_zoo", "MountainCar-v0") == 200  # its own limit
    assert eval_cap("dqn_minatar", None) == 200
    assert eval_cap(str(files / "tiny.toml"), None, str(files / "as_set.toml")) == 50  # the setting's own
    (job,) = expand(setting_plan("ppo_cartpole_zoo", None), "1", "smoke", files / "runs")
    stored = config_to_dict(job.config)
    assert not {"frameskip", "frame_stack", "frame_size"} & set(stored["env"])
    assert config_from_dict(json.loads(json.dumps(stored))) == job.config
