"""bench/cpu_watch.py: a running job's CPU time from /proc, found through its run's lock, and each
process instance's env steps per CPU second between its first and last progress rows."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from bench import cpu_watch


def test_a_running_process_is_sampled_through_its_run_lock(tmp_path):
    run = tmp_path / "arm" / "pong" / "seed0"
    run.mkdir(parents=True)
    (run / ".lock").write_text(str(os.getpid()))
    (run / "progress.csv").write_text("env_steps,return_mean\n1024,-20\n2048,-19\n")
    stale = tmp_path / "arm" / "pong" / "seed1"
    stale.mkdir(parents=True)
    (stale / ".lock").write_text("999999999")  # no such process: not sampled
    before = cpu_watch.sample(tmp_path)
    sum(i * i for i in range(2_000_000))  # burn some CPU
    after = cpu_watch.sample(tmp_path)
    assert [r["run"] for r in after] == ["arm/pong/seed0"] and after[0]["env_steps"] == 2048
    assert after[0]["started"] == before[0]["started"] and after[0]["cpu_s"] > before[0]["cpu_s"]


def test_rates_use_the_cpu_between_the_first_and_last_new_progress_rows():
    samples = pd.DataFrame(
        [
            # instance 1: 10 s of start-up before its first row, then 2 rows 100 CPU s apart
            [0, "a", 1, 5, 10.0, None],
            [1, "a", 1, 5, 20.0, 1000],
            [2, "a", 1, 5, 25.0, 1000],
            [3, "a", 1, 5, 120.0, 3000],
            [4, "a", 1, 5, 130.0, 3000],
            # a resume: another pid and start time, one row only: no rate
            [5, "a", 2, 9, 1.0, 4000],
        ],
        columns=cpu_watch.COLUMNS,
    )
    found = cpu_watch.rates(samples)
    assert len(found) == 1
    assert found.iloc[0].env_steps == 2000 and found.iloc[0].cpu_s == pytest.approx(100.0)
    assert found.iloc[0].steps_per_cpu_s == pytest.approx(20.0)


def test_a_missing_experiment_is_one_line_and_exit_2(tmp_path, capsys):
    assert cpu_watch.main([str(tmp_path / "none"), "--out", str(tmp_path / "x.csv")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
