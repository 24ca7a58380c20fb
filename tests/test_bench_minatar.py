"""The MinAtar benchmarks end to end at a tiny size: ``bench.bench_minatar_dqn`` (this code base's DQN,
and MinAtar's reference DQN where its scratch copy exists) and ``bench.bench_env``'s MinAtar section
(in-process envs against worker processes). Neither needs the network."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import torch
from torch import nn

from bench.bench_env import minatar_modes
from bench.bench_minatar_dqn import COLUMNS, DEFAULT_REFERENCE, PackedQNetwork


def run_bench(module: str, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]


def read_rows(path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path) as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def check_dqn_rows(rows: list[dict[str, str]], impls: set[str]) -> None:
    assert {r["impl"] for r in rows} == impls
    for r in rows:
        # The timed window trains on every step (the setting's one update per env step).
        assert int(r["env_steps"]) == int(r["updates"]) == 200
        rate = float(r["steps_per_second"])
        assert rate > 0 and abs(rate - int(r["env_steps"]) / float(r["seconds"])) < 1e-3 * rate
        assert float(r["steps_per_cpu_second"]) > 0


@pytest.mark.slow
def test_dqn_bench_without_the_reference_times_this_code_base_and_the_plain_floor(tmp_path):
    out = tmp_path / "minatar_dqn.csv"
    absent = str(tmp_path / "absent.py")
    run_bench(
        "bench.bench_minatar_dqn",
        "--out",
        str(out),
        "--quick",
        "--reference",
        absent,
        "--impls",
        "ours,reference,plain",
    )
    columns, rows = read_rows(out)
    assert columns == list(COLUMNS)
    check_dqn_rows(rows, {"ours", "plain"})
    summary = out.with_suffix(".md").read_text()
    assert "Reference not timed" in summary and "this code base (median)" in summary
    assert "ours / plain: median of the repeats' ratios" in summary and "ours / reference" not in summary


def test_packed_network_member_equals_young_and_tian_network_with_its_weights():
    torch.manual_seed(0)
    members, channels, actions = 3, 4, 6
    packed = PackedQNetwork(members, channels, actions)
    x = (torch.rand(members, 5, channels, 10, 10) < 0.2).float()
    out = packed(x)
    k = 1
    single = nn.Sequential(
        nn.Conv2d(channels, 16, 3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(1024, 128),
        nn.ReLU(),
        nn.Linear(128, actions),
    )
    with torch.no_grad():
        single[0].weight.copy_(packed.conv.weight[16 * k : 16 * (k + 1)])
        single[0].bias.copy_(packed.conv.bias[16 * k : 16 * (k + 1)])
        single[3].weight.copy_(packed.w_hidden[k].t())
        single[3].bias.copy_(packed.b_hidden[k, 0])
        single[5].weight.copy_(packed.w_out[k].t())
        single[5].bias.copy_(packed.b_out[k, 0])
        torch.testing.assert_close(out[k], single(x[k]), rtol=1e-5, atol=1e-5)
    # Member k's outputs do not depend on the other members' inputs.
    x2 = x.clone()
    x2[0] = 1.0
    torch.testing.assert_close(packed(x2)[k], out[k])


def test_dqn_bench_refuses_an_unknown_implementation(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_minatar_dqn",
            "--out",
            str(tmp_path / "x.csv"),
            "--impls",
            "ours,jax",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--impls: unknown ['jax']" in done.stderr
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.slow
@pytest.mark.skipif(
    not DEFAULT_REFERENCE.is_file(), reason=f"no scratch copy of MinAtar's dqn.py at {DEFAULT_REFERENCE}"
)
def test_dqn_bench_times_the_reference_beside_this_code_base(tmp_path):
    out = tmp_path / "minatar_dqn.csv"
    run_bench("bench.bench_minatar_dqn", "--out", str(out), "--quick", "--impls", "ours,reference")
    columns, rows = read_rows(out)
    assert columns == list(COLUMNS)
    check_dqn_rows(rows, {"ours", "reference"})
    assert "ours / reference: median of the repeats' ratios" in out.with_suffix(".md").read_text()


@pytest.mark.slow
def test_env_bench_minatar_section_times_in_process_and_worker_envs(tmp_path):
    out = tmp_path / "env.csv"
    sizes = ["--steps", "10", "--repeats", "1", "--minatar-envs", "4", "--minatar-batch-t", "5"]
    run_bench(
        "bench.bench_env",
        "--out",
        str(out),
        "--sections",
        "minatar",
        "--minatar-games",
        "minatar_breakout",
        *sizes,
    )
    columns, rows = read_rows(out)
    assert columns == [
        "backend",
        "game",
        "num_envs",
        "repeat",
        "env_steps",
        "frames",
        "seconds",
        "cpu_seconds",
        "env_steps_per_s",
        "env_steps_per_cpu_s",
    ]
    assert [r["backend"] for r in rows] == list(minatar_modes(2))
    for r in rows:
        assert r["game"] == "minatar_breakout" and int(r["env_steps"]) == int(r["frames"]) == 10 * 4
        assert float(r["env_steps_per_s"]) > 0 and float(r["env_steps_per_cpu_s"]) > 0
    assert "| minatar_breakout |" in out.with_suffix(".md").read_text()


@pytest.mark.slow
def test_r2d1_bench_times_the_job_loop_beside_the_plain_floor(tmp_path):
    from bench.bench_r2d1_minatar import COLUMNS as R2D1_COLUMNS
    from repro.inspect_settings import resolve_label

    out = tmp_path / "r2d1_minatar.csv"
    run_bench("bench.bench_r2d1_minatar", "--out", str(out), "--quick")
    columns, rows = read_rows(out)
    assert columns == list(R2D1_COLUMNS)
    assert {r["impl"] for r in rows} == {"ours", "plain"}
    algo = resolve_label("r2d1_minatar_corrected").entries
    owed = 800 * algo["algo.replay_ratio"].value
    per_update = algo["algo.batch_size_sequences"].value * algo["algo.sequence_length_steps"].value
    for r in rows:
        # 800 timed env steps at the setting's replay ratio (at 25.6 and 320 trained steps: 64 updates).
        assert int(r["env_steps"]) == 800 and abs(int(r["updates"]) - owed / per_update) <= 1
        for column in ("steps_per_second", "steps_per_cpu_second", "update_cpu_ms", "startup_cpu_seconds"):
            assert float(r[column]) > 0
    summary = out.with_suffix(".md").read_text()
    assert "Command: `python -m bench.bench_r2d1_minatar" in summary
    assert "| CPU ms per update |" in summary and "env steps per CPU second" in summary


@pytest.mark.slow
def test_update_ab_bench_times_two_trees_in_turn(tmp_path):
    """``bench.bench_update_ab`` on this tree against itself: both learners start, count the same calls
    per update, and each tree gets its timed segments; a path that is not a source tree is one line."""
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_update_ab", "--old", repo, "--new", repo,
         "--setting", "dqn_minatar", "--updates", "2", "--rounds", "2", "--calls"],
        capture_output=True, text=True, timeout=1200, cwd=repo,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    old, new = (json.loads(line.split(" ", 2)[2]) for line in lines[:2])
    assert old["parameters"] == new["parameters"] > 0 and old["calls_per_update"] > 0
    assert lines[2].startswith("old: median") and len(lines[2].split("segments ")[1].split()) == 2
    assert lines[-1].startswith("new / old: median")
    bad = subprocess.run(
        [sys.executable, "-m", "bench.bench_update_ab", "--old", str(tmp_path), "--new", repo],
        capture_output=True, text=True, timeout=1200, cwd=repo,
    )  # fmt: skip
    assert bad.returncode == 2 and "not a source tree of this project" in bad.stderr.splitlines()[-1]
