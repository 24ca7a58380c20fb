"""The learning-check benchmarks (``make bench-learn-dqn``, ``make bench-learn-pg``) end to end at a
tiny budget: every chosen (arm, seed) trains, the CSV has one row each and the summary names the
scale; bad arguments exit 2 with one line and write nothing."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest


def _bench(module: str, *args: str) -> subprocess.CompletedProcess:
    # The timeout guards against a hang; it is not a speed check (a loaded machine is slow).
    return subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args], capture_output=True, text=True, timeout=1200
    )


@pytest.mark.parametrize(
    ("module", "arms"),
    [("bench_learn_pg", "a2c_cartpole,sac_pendulum"), ("bench_learn_dqn", "dqn,r2d1_masked")],
)
def test_learning_benchmark_runs_every_arm_and_seed_at_a_tiny_scale(tmp_path, module, arms):
    out = tmp_path / "learn.csv"
    done = _bench(module, "--out", str(out), "--arms", arms, "--seeds", "2", "--budget-scale", "0.004")
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [(r["arm"], r["seed"]) for r in rows] == [(a, s) for a in arms.split(",") for s in ("0", "1")]
    assert all(float(r["budget_steps"]) > 0 and r["final_eval_return"] != "nan" for r in rows)
    summary = out.with_suffix(".md").read_text()
    assert "budget scale 0.004" in summary and all(a in summary for a in arms.split(","))


def test_a_sweep_overrides_config_fields_and_batch_shape_and_records_them(tmp_path):
    out = tmp_path / "sweep.csv"
    args = ("--arms", "a2c_cartpole", "--seeds", "1", "--budget-scale", "0.004")
    done = _bench("bench_learn_pg", "--out", str(out), *args, "--set", "learning_rate=7e-4", "--batch", "5x4")
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out) as f:
        (row,) = list(csv.DictReader(f))
    assert row["overrides"] == "learning_rate=0.0007 batch=5x4"
    config = json.loads((tmp_path / "sweep_runs" / "a2c_cartpole" / "seed0" / "config.json").read_text())
    assert config["algo_config"]["learning_rate"] == 7e-4
    assert (config["sampler"]["batch_T"], config["sampler"]["batch_B"]) == (5, 4)
    assert "overrides: learning_rate=0.0007 batch=5x4" in out.with_suffix(".md").read_text()


def test_bad_arguments_exit_2_with_one_line_and_write_nothing(tmp_path):
    out = tmp_path / "learn.csv"
    done = _bench("bench_learn_pg", "--out", str(out), "--arms", "ppo_pong")
    assert done.returncode == 2 and "unknown arm 'ppo_pong'" in done.stderr.strip().splitlines()[-1]
    done = _bench("bench_learn_dqn", "--out", str(out), "--budget-scale", "2")
    assert done.returncode == 2 and "--budget-scale must be in (0, 1]" in done.stderr
    for bad, message in (
        (("--set", "lr=1e-3"), "--set lr: arm a2c_cartpole's a2c config has no such field"),
        (("--set", "learning_rate=-1"), "a2c.Config.learning_rate"),
        (("--set", "learning_rate"), "expected NAME=VALUE"),
        (("--batch", "5by16"), "expected TxB"),
    ):
        done = _bench("bench_learn_pg", "--out", str(out), "--arms", "a2c_cartpole", *bad)
        assert done.returncode == 2, bad
        assert message in done.stderr.strip().splitlines()[-1], (bad, done.stderr)
    assert not any(tmp_path.iterdir())
