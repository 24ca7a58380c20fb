"""What ``python -m repro run`` says before it starts (the estimated duration, and a hint at smaller
runs when that is days), the plan record it leaves in the experiment directory, the report's plan and
profile read from that record, and the R2D1 arms' step budget.

The scheduler is replaced by a stand-in wherever no job needs to run, and probe results are put into
the cache (or the probe is replaced), so nothing here trains except the one end-to-end report test.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import pytest

from analysis.synthetic import SyntheticArm, write_experiment
from protocol.files import PROFILES_DIR
from repro import probe
from repro.cli import main
from repro.cli_shared import smaller_runs_hint
from repro.inspect_settings import resolve_label
from repro.plans import expand, load_plan
from repro.probe import ProbeCache, ProbeResult, estimate_range, steps_left
from repro.record import PLAN_FILE, write_plan_record
from repro.scheduler import detect_slots
from repro.tasks import Outcome

SETTING = """
[setting]
title = "A2C on CartPole (test)"
citation = "test"
base = "a2c_atari"

[algo]
anneal_env_steps = { value = 0, source = "test" }
[env]
id = { value = "CartPole-v1", source = "test" }
kind = { value = "gym", source = "test" }
fire_reset = { value = false, source = "test" }
clip_rewards = { value = false, source = "test" }
episodic_life = { value = false, source = "test" }
[sampler]
batch_B = { value = 4, source = "test" }
"""
# 1M steps per job: the two jobs' 2M env steps dwarf a probe's 4,000 (0.2%), so `run` may probe.
LONG_PROFILE = """
[profile]
description = "test: long jobs"
[a2c.runner]
n_steps = { value = 1_000_000, source = "test" }
"""
TITLE = "A2C on CartPole, estimate test"


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A one-arm CartPole plan, a long profile, and a probe cache of its own (XDG_CACHE_HOME)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    arm = tmp_path / "a2c_cartpole.toml"
    arm.write_text(textwrap.dedent(SETTING))
    (tmp_path / "long.toml").write_text(textwrap.dedent(LONG_PROFILE))
    plan = tmp_path / "cartpole.toml"
    plan.write_text(
        f'[plan]\ntitle = "{TITLE}"\narms = ["{arm}"]\nenvs = ["CartPole-v1", "Acrobot-v1"]\n'
        'envs_source = "test"\n'
    )
    return tmp_path


@pytest.fixture
def scheduler(monkeypatch, capsys):
    """Stands in for the local scheduler: records what was printed and on disk when the jobs would
    have started, and runs nothing."""
    seen = {}

    def run_local(tasks, slots, retries=2, progress=True):
        seen["printed"] = capsys.readouterr().out
        record = tasks[0].run_dir.parents[2] / PLAN_FILE
        seen["record"] = json.loads(record.read_text()) if record.exists() else None
        return [Outcome(t.key, "skipped", 0, 0.0) for t in tasks]

    monkeypatch.setattr("repro.scheduler.run_local", run_local)
    return seen


@pytest.fixture
def no_probe(monkeypatch):
    def refuse(job, device):
        raise AssertionError("the probe ran")

    monkeypatch.setattr(probe, "probe_job", refuse)


def _jobs(files, profile="smoke", games=("CartPole-v1",), seeds=2):
    return expand(load_plan(str(files / "cartpole.toml")), seeds, profile, files / "runs", envs=games)


def _device():
    return detect_slots(None, 1)[0].device


def _result(job, seconds_per_step):
    return ProbeResult(job.arm, job.env, 4_000, 10, seconds_per_step, 2.0, 3.0, "2026-11-30T08:00+00:00")


def _cache(jobs, seconds_per_step):
    ProbeCache().put(jobs[0], _device(), _result(jobs[0], seconds_per_step))


def _argv(files, seeds="2", profile="smoke"):
    """``rlrepro run`` of the CartPole plan with these seeds and profile."""
    return ["run", str(files / "cartpole.toml"), "--seeds", seeds, "--profile", profile]


def _run(files, *extra, profile="smoke"):
    argv = [*_argv(files, profile=profile), "--games", "CartPole-v1"]
    return main([*argv, "--root", str(files / "runs"), "--no-progress", *extra])


def test_run_prints_the_estimate_before_the_jobs_start(files, scheduler, no_probe, capsys):
    _cache(_jobs(files), seconds_per_step=1e-3)
    assert _run(files) == 0
    printed = scheduler["printed"]
    # smoke: 2,000 steps per job; 2 jobs x (2,000 x 1 ms + 2 s fixed + 3 s start-up) over the slots
    assert re.search(r"^estimated duration: .* for 2 job\(s\) left on \d+ \w+ slot\(s\)", printed, re.M)
    assert "from throughput measured 2026-11-30T08:00+00:00" in printed
    assert "hint:" not in printed + capsys.readouterr().out
    assert scheduler["record"]["plans"][0]["title"] == TITLE  # the plan record, also before the jobs


def test_a_run_of_days_prints_a_one_line_hint_at_smaller_runs(files, scheduler, no_probe):
    _cache(_jobs(files), seconds_per_step=100.0)  # 2 jobs x 2,000 steps x 100 s: days on any slot count
    assert _run(files) == 0
    lines = scheduler["printed"].splitlines()
    estimate = next(i for i, line in enumerate(lines) if line.startswith("estimated duration:"))
    assert "days" in lines[estimate]
    hint = lines[estimate + 1]
    assert hint.startswith("hint: ") and "days" in hint
    # A plan of the user's own: the CLI's options, not the Makefile's R2D1 suite.
    assert "fewer --env/--games or --seeds" in hint and "SUITE=" not in hint


def test_the_hint_names_only_smaller_runs():
    assert "PROFILE=mini" in smaller_runs_hint("r2d1", "paper")
    assert "PROFILE=mini" not in smaller_runs_hint("r2d1", "mini")
    minatar = smaller_runs_hint("r2d1_minatar_published_vs_corrected", "minatar_cpu")
    assert "SUITE=minatar" not in minatar and "PROFILE=mini" not in minatar and "GAMES or SEEDS" in minatar
    assert smaller_runs_hint("ppo_cartpole_zoo", "paper") == (
        "hint: that is days on this machine; smaller runs: --profile smoke (minutes, says nothing about "
        "learning), or fewer --env/--games or --seeds"
    )


def test_run_without_a_measurement_does_not_probe_a_short_plan(files, scheduler, no_probe):
    assert _run(files) == 0  # the probe's 2,000 steps would be half the plan's 4,000
    printed = scheduler["printed"]
    assert "estimated duration: not measured on this machine for a2c_cartpole" in printed
    assert "a probe would add 50.0% to the env steps left" in printed
    # The hint is the user's own command as a dry run (python -m repro here: the tests' argv[0]).
    cartpole = files / "cartpole.toml"
    assert (
        f"a dry run with the probe (python -m repro run {cartpole} --seeds 2 --profile smoke --games "
        f"CartPole-v1 --root {files / 'runs'} --no-progress --dry-run) measures it" in printed
    )


def test_run_probes_a_long_plan_and_keeps_the_measurement(files, scheduler, monkeypatch):
    calls = []

    def fake_probe(job, device):
        calls.append(job.key)
        return _result(job, 1e-4)

    monkeypatch.setattr(probe, "probe_job", fake_probe)
    assert _run(files, profile=str(files / "long.toml")) == 0
    assert calls == ["a2c_cartpole/CartPole-v1/seed0"]
    assert "probing throughput: a2c_cartpole on CartPole-v1" in scheduler["printed"]
    assert "estimated duration:" in scheduler["printed"]
    assert _run(files, profile=str(files / "long.toml")) == 0  # the second run reads the cache
    assert len(calls) == 1 and "from throughput measured" in scheduler["printed"]


def test_dry_runs_reuse_the_cached_probe_and_reprobe_measures_afresh(files, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(probe, "probe_job", lambda job, device: calls.append(1) or _result(job, 1e-3))
    argv = [*_argv(files, seeds="1"), "--root", str(files / "runs")]
    assert main([*argv, "--dry-run"]) == 0
    assert "probing throughput" in capsys.readouterr().out
    assert main([*argv, "--dry-run"]) == 0  # another command, the same arm: the cached probe
    assert main([*argv, "--seeds", "100-104", "--dry-run"]) == 0  # other seeds: the same probe
    assert len(calls) == 1 and "probing throughput" not in capsys.readouterr().out
    assert main([*argv, "--dry-run", "--reprobe"]) == 0
    assert len(calls) == 2 and "probing throughput" in capsys.readouterr().out
    assert main([*argv, "--dry-run", "--no-probe"]) == 0
    out = capsys.readouterr().out
    assert len(calls) == 2 and "from throughput measured 2026-11-30T08:00+00:00" in out
    assert (files / "cache" / "rlrepro" / "probe_cache.json").is_file()
    assert not (files / "runs").exists()  # a dry run writes nothing under the runs root


def test_no_estimate_skips_probe_and_cache(files, scheduler, no_probe):
    _cache(_jobs(files), seconds_per_step=100.0)
    assert _run(files, "--no-estimate") == 0
    assert "estimated duration" not in scheduler["printed"] and "hint:" not in scheduler["printed"]


def test_the_estimate_counts_only_what_is_left(files):
    jobs = _jobs(files)
    done, half = jobs
    done.run_dir.mkdir(parents=True)
    (done.run_dir / "status.json").write_text(json.dumps({"state": "complete"}))
    (done.run_dir / "progress.csv").write_text(f"env_steps,updates\n{done.n_steps},9\n")  # all of it
    half.run_dir.mkdir(parents=True)
    (half.run_dir / "progress.csv").write_text("env_steps,updates\n500,0\n1200,3\n")
    assert [steps_left(j) for j in jobs] == [0, 800]
    probes = {done.arm: _result(done, 0.01)}
    estimate = estimate_range(jobs, probes, n_slots=1)
    assert estimate.seconds == pytest.approx(800 * 0.01 + 2.0 + 3.0)  # no evaluation time measured
    assert estimate.low == estimate.seconds == estimate.high  # one slot, no segments: no spread


def test_plan_record_keeps_each_invocation_of_one_experiment(files):
    plan = load_plan(str(files / "cartpole.toml"))
    experiment = files / "runs" / "cartpole-smoke"
    write_plan_record(experiment, plan, _jobs(files, games=("CartPole-v1",), seeds=1), seeds=1)
    first = json.loads((experiment / PLAN_FILE).read_text())["plans"]
    write_plan_record(experiment, plan, _jobs(files, games=("Acrobot-v1",), seeds=2), seeds=2)
    record = json.loads((experiment / PLAN_FILE).read_text())
    assert record["plans"][:1] == first  # what ran before is never rewritten
    assert record["plans"][1] == {
        "plan": "cartpole",
        "title": TITLE,
        "profile": "smoke",  # a shipped profile by its name
        "arms": ["a2c_cartpole"],
        "envs": ["Acrobot-v1"],
        "seeds": "0,1",
    }
    assert record["arms"] == ["a2c_cartpole"]
    assert sorted((j["env"], j["seed"]) for j in record["jobs"]) == [
        ("Acrobot-v1", 0), ("Acrobot-v1", 1), ("CartPole-v1", 0),
    ]  # fmt: skip
    assert {j["n_steps"] for j in record["jobs"]} == {2_000}
    # Rerunning an invocation (to resume it) adds nothing to the history.
    write_plan_record(experiment, plan, _jobs(files, games=("Acrobot-v1",), seeds=2), seeds=2)
    assert len(json.loads((experiment / PLAN_FILE).read_text())["plans"]) == 2
    # Another profile, named by its path (outside the repository: absolute).
    write_plan_record(experiment, plan, _jobs(files, profile=str(files / "long.toml"), seeds=1), seeds=1)
    record = json.loads((experiment / PLAN_FILE).read_text())
    assert [p["profile"] for p in record["plans"]] == ["smoke", "smoke", str((files / "long.toml").resolve())]
    assert len(record["jobs"]) == 3  # the same (arm, env, seed) again


def test_report_without_a_plan_file_names_a_shipped_profile_from_the_command_line(tmp_path):
    from reports.build import build_report

    arms = {"a": SyntheticArm(1.0, {"algo": "a2c"}), "b": SyntheticArm(1.2, {"algo": "a2c"})}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0], n_logs=2, eval_episodes=1)
    for metadata in exp.glob("*/*/seed0/metadata.json"):
        data = json.loads(metadata.read_text())
        # a run of another checkout, from before job command lines named shipped profiles
        data["argv"] = ["repro", "run-job", "--profile", "/elsewhere/repro/configs/profiles/smoke.toml"]
        metadata.write_text(json.dumps(data))
    html = build_report(exp, reps=50).read_text()
    assert "<td>profile</td><td>smoke</td>" in html
    assert "no plan file (plan.json)" in html


@pytest.mark.slow
def test_report_of_a_tiny_plan_shows_its_plan_and_the_profile_by_name(files):
    from reports.build import build_report

    root = files / "runs"
    argv = [*_argv(files, seeds="1"), "--games", "CartPole-v1"]
    assert main([*argv, "--root", str(root), "--no-progress", "--no-estimate"]) == 0
    experiment = root / "cartpole-smoke"
    metadata = json.loads((experiment / "a2c_cartpole/CartPole-v1/seed0/metadata.json").read_text())
    argv = metadata["argv"]
    assert argv[argv.index("--profile") + 1] == "smoke"  # no path of this checkout
    html = build_report(experiment, reps=50).read_text()
    assert "no plan file" not in html
    plan_row = re.search(r'<table id="plan">.*?<tbody>\s*<tr>(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r"<td>(.*?)</td>", plan_row)
    assert cells == ["cartpole", TITLE, "smoke", "a2c_cartpole", "CartPole-v1", "0", "–"]  # no --set
    assert "<td>profile</td><td>smoke</td>" in html
    assert str(PROFILES_DIR) not in html


def test_both_r2d1_arms_run_r2d2s_budget():
    for arm in ("rlpyt_r2d1_published", "r2d1_corrected"):
        entries = resolve_label(arm).entries
        n_steps = entries["runner.n_steps"]
        assert n_steps.value == 2_500_000_000 and n_steps.origin == "derived"
        assert "10B environment frames" in n_steps.source and "Sec. 4.2" in n_steps.source
        assert n_steps.value * entries["env.frameskip"].value == 10_000_000_000


def test_the_estimate_range_covers_the_committed_r2d1_minatar_case(tmp_path):
    """docs/results/r2d1_minatar.md's 50 jobs took 5,452 s on 2 slots; the range estimated from the
    committed probes of its two arms (docs/results/estimate_r2d1_minatar.json) holds it, where the
    point estimate of the old model (the whole probe's cost per step, no evaluations, no range)
    came out well short."""
    case = json.loads((Path(__file__).parents[1] / "docs/results/estimate_r2d1_minatar.json").read_text())
    jobs = expand(load_plan("r2d1_minatar_published_vs_corrected"), 5, "minatar_cpu", tmp_path / "runs")
    assert len(jobs) == 50 and {j.n_steps for j in jobs} == {250_000}
    measured = case["measured_wall_s"]
    for name, rows in case["probes"].items():
        probes = {row["arm"]: ProbeResult(**row) for row in rows}
        estimate = estimate_range(jobs, probes, case["slots"])
        assert estimate.low <= estimate.seconds <= estimate.high
        assert estimate.low <= measured <= estimate.high, (name, estimate)
        old = (
            sum(
                j.n_steps * probes[j.arm].seconds_per_step + probes[j.arm].fixed_s + probes[j.arm].startup_s
                for j in jobs
            )
            / case["slots"]
        )
        assert old < estimate.seconds and old < 0.85 * measured, (name, old)


def test_segment_costs_and_the_job_evaluation_by_hand(tmp_path):
    from algorithms.run_config import SamplerConfig
    from repro.probe import job_evaluation_seconds, segment_costs

    progress = tmp_path / "progress.csv"
    # cumulative sampling + optimizing time 0.5, 1, 2, 4, 6, 7.5 s: from 1,000 steps on, segments of
    # 1,000 steps costing 1, 2, 2 and 1.5 s
    progress.write_text(
        "env_steps,time_sampling_s,time_optimizing_s\n"
        "500,0.5,0.0\n1000,1.0,0.0\n2000,1.5,0.5\n3000,2.5,1.5\n4000,3.5,2.5\n5000,4.5,3.0\n"
    )
    low, learning, high = segment_costs(progress, learning_start=1000)
    assert (low, learning, high) == pytest.approx((0.001, 6.5 / 4000, 0.002))
    low, learning, high = segment_costs(progress, learning_start=0)  # and 0.5 s over 500 steps before
    assert (low, learning, high) == pytest.approx((0.001, 7.0 / 4500, 0.002))
    assert all(map(math.isnan, segment_costs(progress, learning_start=4500)))  # one segment: no spread
    evals = tmp_path / "eval.csv"
    evals.write_text("env_steps,episode,return,length\n5000,0,1.0,100\n5000,1,2.0,300\n")
    probed = SamplerConfig(eval_episodes=2, eval_max_steps=4000)
    job = SamplerConfig(eval_episodes=10, eval_max_steps=27_000)
    # 2 s over 400 evaluation steps; the job plays 10 episodes of the probe's mean length, 200 steps
    assert job_evaluation_seconds(evals, 2.0, probed, job) == pytest.approx(2.0 / 400 * 10 * 200)
    evals.write_text("env_steps,episode,return,length\n5000,0,1.0,4000\n5000,1,2.0,4000\n")
    # every probe episode was cut at the probe's 4,000 steps: the job's run to its own cap
    assert job_evaluation_seconds(evals, 8.0, probed, job) == pytest.approx(8.0 / 8000 * 10 * 27_000)
    assert job_evaluation_seconds(evals, 8.0, probed, SamplerConfig(eval_episodes=0)) == 0.0
    # A torn last row (a probe killed while writing) is dropped; a damaged table gives no figure.
    progress.write_bytes(progress.read_bytes() + b"6000,5.0")
    assert segment_costs(progress, learning_start=1000) == pytest.approx((0.001, 6.5 / 4000, 0.002))
    progress.write_text(
        "env_steps,time_sampling_s,time_optimizing_s\n500,0.5\n1000,1.0,0.0,9\n2000,1.5,0.5\n"
    )
    assert all(map(math.isnan, segment_costs(progress, learning_start=0)))
    evals.write_text("env_steps,episode,return,length\n5000,0,1.0\n5000,1,2.0,300,7\n")
    assert job_evaluation_seconds(evals, 2.0, probed, job) == 0.0
