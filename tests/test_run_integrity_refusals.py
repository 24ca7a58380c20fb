"""Run integrity (docs/results/run_integrity.md): values that would fail inside a job refused before
anything runs, in one line: bad setting, profile and plan values, size-like options past their
bound, a replay smaller than its batch; ``repro`` alone prints its usage.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from analysis.__main__ import main as analysis_main
from analysis.random_scores import main as random_scores_main
from reports.__main__ import main as reports_main
from repro.cli import main

# --- values refused before anything runs ---------------------------------------------------------------
R2D1_BASE = '[setting]\ntitle = "t"\ncitation = "c"\nbase = "r2d2_paper"\n'
BAD_VALUES = {
    "replay_ratio_inf": (
        "setting", R2D1_BASE + '[algo]\nreplay_ratio = { value = inf, source = "x" }\n',
        "bad.toml [algo] 'replay_ratio': expected a finite number, got inf",
    ),
    "learning_rate_inf": (
        "setting", R2D1_BASE + '[algo]\nlearning_rate = { value = inf, source = "x" }\n',
        "bad.toml [algo] 'learning_rate': expected a finite number, got inf",
    ),
    "learning_rate_nan": (
        "setting", R2D1_BASE + '[algo]\nlearning_rate = { value = nan, source = "x" }\n',
        "'learning_rate': expected a finite number, got nan",
    ),
    "n_steps_huge": (
        "profile", '[r2d1.runner]\nn_steps = { value = 1000000000000000000000000000000, source = "x" }\n',
        "prof.toml 'runner.n_steps': 1000000000000000000000000000000 does not fit in 64 bits",
    ),
    "n_steps_absurd": (
        "profile", '[r2d1.runner]\nn_steps = { value = 1000000000000000, source = "x" }\n',
        "prof.toml 'runner.n_steps': RunnerConfig.n_steps must be <= 1e+11",
    ),
    "profile_value_blamed_on_profile": (
        "profile", '[r2d1.runner]\nlog_interval_steps = { value = 0, source = "x" }\n',
        "prof.toml 'runner.log_interval_steps': RunnerConfig.log_interval_steps must be >= 1, got 0",
    ),
    "replay_smaller_than_a_batch": (
        "profile", '[r2d1.algo]\nreplay_size_steps = { value = 100, source = "x" }\n',
        "prof.toml 'algo.replay_size_steps': r2d1.Config.replay_size_steps must be large enough for one "
        "batch (batch_size_sequences=64 sequences, one per 40 steps), got 100",
    ),
    "replay_smaller_than_the_learning_start": (
        "profile", '[r2d1.algo]\nreplay_size_steps = { value = 50_000, source = "x" }\n',
        "prof.toml 'algo.replay_size_steps': r2d1.Config.replay_size_steps must be >= "
        "learning_starts_steps=100,000, got 50000",
    ),
    "replay_too_small_for_the_envs": (
        "profile", '[r2d1.algo]\nreplay_size_steps = { value = 20_000, source = "x" }\n'
        'learning_starts_steps = { value = 20_000, source = "x" }\n',
        "prof.toml 'algo.replay_size_steps': the replay cannot hold one training item with "
        "sampler.batch_B=256 on env 'pong': SequenceStorage: capacity_steps=20000 gives 40 rows per env, too "
        "few for sequences of 125",
    ),
    "plan_arm_dotdot": ("plan", 'arms = ["...toml"]\nenvs = ["pong"]\n', "'...toml' gives the arm name '..'"),
    "plan_env_outside": ("plan", 'arms = ["ARM"]\nenvs = ["../x"]\n', "'../x' is not a valid name"),
    "seeds_huge": ("seeds", "", "--seeds '100000': 100000 seeds; at most 1000"),
    # Size-like options past their bound (issue 57, item 3): before, --jobs 1000000000 listed that many
    # slots until the kernel killed the process, with no word.
    "jobs_huge": ("option", "--jobs 1000000000", "JOBS 1,000,000,000 is over its limit of 4,096"),
    "cpus_per_job_huge": (
        "option", "--cpus-per-job 1000000", "CPUS_PER_JOB 1,000,000 is over its limit of 4,096",
    ),
    "retries_huge": (
        "option", "--retries 1000000000", "--retries 1,000,000,000 is over its limit of 100",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_values_are_refused_in_one_line_before_anything_runs(case, tmp_path, capsys):
    kind, text, expected = BAD_VALUES[case]
    root = tmp_path / "runs"
    (tmp_path / "bad.toml").write_text(R2D1_BASE)
    plan = tmp_path / "plan.toml"
    plan.write_text('[plan]\ntitle = "t"\narms = ["ARM"]\nenvs = ["pong"]\nenvs_source = "s"\n')
    profile = "smoke"
    if kind == "setting":
        (tmp_path / "bad.toml").write_text(text)
    elif kind == "profile":
        profile = str(tmp_path / "prof.toml")
        Path(profile).write_text('[profile]\ndescription = "d"\n' + text)
    elif kind == "plan":
        plan.write_text('[plan]\ntitle = "t"\nenvs_source = "s"\n' + text)
    plan.write_text(plan.read_text().replace("ARM", str(tmp_path / "bad.toml")))
    seeds = "100000" if kind == "seeds" else "1"
    option = text.split() if kind == "option" else []
    start = time.perf_counter()
    code = main(
        ["run", str(plan), "--seeds", seeds, "--profile", profile, "--root", str(root), "--no-estimate"]
        + option
    )
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err
    assert not root.exists()
    if kind == "seeds":
        assert elapsed < 1.0


# The size-like options of the other commands past their bound (issue 57, item 3): before, --reps
# 1000000000 took ~20 GB and was killed by the kernel with no message. Each refused in one line naming
# the bound, its source and what the value would take, before anything is read.
HUGE = "1000000000"
SIZES = {
    "study_reps": (
        analysis_main, ["study", "{dir}", "--reps", HUGE],
        "analysis: --reps 1,000,000,000 is over its limit of 50,000 (rliable's default number of bootstrap "
        "resamples): its resamples would take 14.9 GiB for each run of the experiment",
    ),
    "study_reps_few": (analysis_main, ["study", "{dir}", "--reps", "10"], "analysis: --reps must be at"),
    "ending_reps": (analysis_main, ["ending", "{dir}", "--reps", HUGE], "analysis: --reps 1,000,000,000 is"),
    "report_reps": (reports_main, ["build", "{dir}", "--reps", HUGE], "reports: --reps 1,000,000,000 is"),
    "evaluate_episodes": (
        main, ["evaluate", "{dir}", "--episodes", HUGE], "error: --episodes 1,000,000,000 is over its limit",
    ),
    "evaluate_max_frames": (
        main, ["evaluate", "{dir}", "--max-frames", "1000000"],
        "error: --max-frames 1,000,000 is over its limit of 27,000 (the longest Atari episode, 108,000 "
        "frames at frameskip 4): a video would hold 93.9 GiB of Atari screens per episode",
    ),
    "random_scores_episodes": (
        random_scores_main, ["--envs", "CartPole-v1", "--episodes", HUGE, "--out", "{dir}/s.csv"],
        "error: --episodes 1,000,000,000 is over its limit of 10,000",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SIZES))
def test_size_options_past_their_bound_are_refused_in_one_line(case, tmp_path, capsys):
    command, argv, expected = SIZES[case]
    code = command([a.replace("{dir}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(expected), err
    assert list(tmp_path.iterdir()) == []


def test_a_dqn_replay_smaller_than_its_batch_is_refused_at_loading(tmp_path, capsys):
    """Young & Tian's DQN (batch 32, replay start 5,000) with a replay of 16: before, ``repro show``
    printed it and a run started, each batch drawing the 16 stored transitions over and over."""
    profile = tmp_path / "prof.toml"
    profile.write_text(
        '[profile]\ndescription = "d"\n[dqn.algo]\nreplay_size_steps = { value = 16, source = "x" }\n'
    )
    root = tmp_path / "runs"
    show = ["show", "dqn_minatar", "--profile", str(profile)]
    run = [
        "run",
        "dqn_family_minatar",
        "--seeds",
        "1",
        "--profile",
        str(profile),
        "--root",
        str(root),
        "--no-estimate",
    ]
    for command in (show, [*run, "--no-estimate"]):
        code = main(command)
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert (
            "prof.toml 'algo.replay_size_steps': dqn.Config.replay_size_steps must be large enough for one "
            "batch (batch_size=32 transitions), got 16" in err
        )
        assert not root.exists()
    # A batch larger than the replay, set on the command line, names both.
    assert main(["show", "dqn_minatar", "--set", "algo.batch_size=200000"]) == 2
    err = capsys.readouterr().err
    assert "replay_size_steps must be large enough for one batch (batch_size=200,000 transitions)" in err


def test_repro_alone_prints_usage(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m repro") and "summary" in err and "repro repro" not in err
    assert "run-job" not in err  # internal commands stay out of the usage
