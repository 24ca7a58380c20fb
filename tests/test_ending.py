"""The CPU main job (plan r2d1_breakout_cpu, the Makefile's default suite) and what a run ends with
(analysis/ending.py): the plan's fresh seeds, the hint on a machine too small for the paper replay,
the confirmed figure as data with its source, and the score, verdict and replication lines on
synthetic runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from analysis.ending import confirmed_differences, ending_lines, replication_lines
from analysis.study import run_study
from analysis.synthetic import SyntheticArm, write_experiment
from protocol.plan_args import parse_seeds

REPO = Path(__file__).resolve().parents[1]
PUBLISHED, CORRECTED = "rlpyt_r2d1_minatar_published", "r2d1_minatar_corrected"
BREAKOUT = "minatar_breakout"
# Seed sets other studies used or keep (docs/results; 200-299 held out): the CPU job stays off them.
USED_SEEDS = set(range(0, 10)) | set(range(100, 105)) | set(range(200, 300)) | set(range(300, 303))


def test_the_cpu_plan_runs_both_arms_on_fresh_seeds(tmp_path):
    from repro.plans import expand, load_plan

    plan = load_plan("r2d1_breakout_cpu")
    jobs = expand(plan, parse_seeds(plan.seeds, first_seed=plan.first_seed), "minatar_cpu", tmp_path)
    assert {(j.arm, j.env) for j in jobs} == {(PUBLISHED, BREAKOUT), (CORRECTED, BREAKOUT)}
    seeds = {j.seed for j in jobs}
    assert len(seeds) == 3 and not seeds & USED_SEEDS
    assert {j.n_steps for j in jobs} == {250_000}  # the confirmed scale
    assert jobs[0].run_dir.parents[2].name == "r2d1_breakout_cpu-minatar_cpu"


def test_the_makefiles_default_is_the_cpu_answer_and_atari_profiles_still_ask_for_atari():
    def command(*variables: str) -> str:
        out = subprocess.run(
            ["make", "-n", "reproduce-r2d1", *variables], cwd=REPO, capture_output=True, text=True, check=True
        )
        return [line for line in out.stdout.splitlines() if "-m repro run" in line][0]

    default = command("SEEDS=3")
    assert "run r2d1_breakout_cpu " in default and '--profile "minatar_cpu"' in default
    assert default.endswith("--report")
    assert "run r2d1 " in command("SEEDS=3", "PROFILE=smoke")
    assert "run r2d1 " in command("SUITE=atari") and '--profile "paper"' in command("SUITE=atari")
    assert "run r2d1_minatar_published_vs_corrected " in command("SUITE=minatar")


def test_the_paper_plan_on_a_small_machine_names_what_it_can_run(tmp_path, capsys, monkeypatch):
    from repro import memory
    from repro.cli import main

    monkeypatch.setattr(memory, "physical_memory", lambda: 24 * 2**30)
    root = tmp_path / "runs"
    argv = ["run", "r2d1", "--seeds", "3", "--games", "pong", "--dry-run", "--no-estimate"]
    assert main([*argv, "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "of memory; this machine has 24.0 GiB" in err
    assert "this machine can run: make reproduce-r2d1 SEEDS=3" in err
    assert not root.exists()


def test_the_confirmed_figure_is_the_confirmatory_pages_own_difference():
    """The stored figure is recomputed from the tidy table its source page publishes."""
    row = (
        confirmed_differences()
        .set_index(["env", "candidate", "baseline"])
        .loc[(BREAKOUT, PUBLISHED, CORRECTED)]
    )
    assert row.source.startswith("docs/results/r2d1_minatar_factorial.md")
    tidy = pd.read_csv(REPO / "docs/results/r2d1_minatar_factorial.csv")
    means = tidy[tidy.env == BREAKOUT].groupby("arm").final_return.mean()
    assert round(means[PUBLISHED] - means[CORRECTED], 2) == row.difference
    runs = tidy[tidy.env == BREAKOUT].groupby("arm").final_return
    welch = stats.ttest_ind(runs.get_group(PUBLISHED), runs.get_group(CORRECTED), equal_var=False)
    assert (row.ci_low, row.ci_high) == tuple(round(x, 2) for x in welch.confidence_interval(0.95))


def _experiment(tmp_path, published: float, corrected: float, seeds=(400, 401, 402), profile="minatar_cpu"):
    arms = {PUBLISHED: SyntheticArm(published, {"arm": PUBLISHED}), CORRECTED: SyntheticArm(corrected, {})}
    path = write_experiment(tmp_path, "exp", arms, [BREAKOUT], list(seeds), frameskip=1, eval_episodes=16)
    from repro.plans import load_plan

    arms_in_order = list(load_plan("r2d1_breakout_cpu").arms)  # the shipped plan's: its first is the baseline
    entry = {"plan": "r2d1_breakout_cpu", "profile": profile, "arms": arms_in_order}
    plan = {"arms": arms_in_order, "plans": [entry]}  # as repro/record.py writes it
    (path / "plan.json").write_text(json.dumps(plan))
    return path


def test_the_run_ends_with_each_arms_score_the_verdict_and_the_replication(tmp_path):
    study = run_study(_experiment(tmp_path, 0.19, 0.58), reps=200)
    lines = ending_lines(study)
    assert lines[0].startswith(f"{CORRECTED} on {BREAKOUT}: final evaluation ")
    assert lines[1].startswith(f"{PUBLISHED} on {BREAKOUT}: final evaluation ")
    score = r"-?\d+\.\d\d \[-?\d+\.\d\d, -?\d+\.\d\d\]"
    assert all(re.search(f"final evaluation {score}, training {score} \\(3 seeds, 10k frames\\)$", line)
               for line in lines[:2])  # fmt: skip
    assert lines[2] == study.verdict.sentence
    assert f"{PUBLISHED} - {CORRECTED} = " in lines[2]  # the direction of the confirmed difference
    assert lines[3].startswith("a replication on a CPU (seeds 400-402, 3 vs 3 runs): ")
    assert "returns (Welch t 95% interval)" in lines[3]
    assert lines[4].startswith("  the confirmatory run: -3.71 [-4.92, -2.49]")
    assert lines[4].endswith("same direction, inside its interval")


def _confirmed(difference: float, low: float, high: float) -> pd.DataFrame:
    table = confirmed_differences()
    return table.assign(difference=difference, ci_low=low, ci_high=high)


def test_the_replication_line_says_when_it_disagrees(tmp_path):
    study = run_study(_experiment(tmp_path, 0.19, 0.58), reps=200)
    here = study.scores.final.groupby("arm").score.mean()
    own = here[PUBLISHED] - here[CORRECTED]
    assert own < 0
    same_outside = replication_lines(study, _confirmed(own - 5, own - 6, own - 4))
    assert same_outside[1].endswith("same direction, outside its interval")
    opposite = replication_lines(study, _confirmed(-own, -own - 1, -own + 1))
    assert opposite[1].endswith("the opposite direction, outside its interval")


@pytest.mark.parametrize(
    "seeds, profile, expected",
    [
        ((300, 301, 302), "minatar_cpu", "a rerun on seeds of the confirmatory run"),
        ((400, 401), "smoke", None),
    ],
)
def test_a_rerun_is_no_replication_and_another_scale_is_not_compared(tmp_path, seeds, profile, expected):
    study = run_study(_experiment(tmp_path, 0.19, 0.58, seeds, profile), reps=200)
    lines = replication_lines(study, confirmed_differences())
    assert (lines[0].split(" (")[0] if lines else None) == expected


def test_analysis_ending_on_a_missing_experiment_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "analysis", "ending", str(tmp_path / "nothing")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and not out.stdout
