"""The MinAtar benchmarks end to end at a tiny size: ``bench.bench_minatar_dqn`` (this code base's DQN,
and MinAtar's reference DQN where its scratch copy exists) and ``bench.bench_env``'s MinAtar section
(in-process envs against worker processes). Neither needs the network."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from bench.bench_env import minatar_modes
from bench.bench_minatar_dqn import COLUMNS, DEFAULT_REFERENCE


def run_bench(module: str, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=600)
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
def test_dqn_bench_without_the_reference_times_this_code_base_only(tmp_path):
    out = tmp_path / "minatar_dqn.csv"
    run_bench(
        "bench.bench_minatar_dqn", "--out", str(out), "--quick", "--reference", str(tmp_path / "absent.py")
    )
    columns, rows = read_rows(out)
    assert columns == list(COLUMNS)
    check_dqn_rows(rows, {"ours"})
    summary = out.with_suffix(".md").read_text()
    assert "Reference not timed" in summary and "this code base (median)" in summary


@pytest.mark.slow
@pytest.mark.skipif(
    not DEFAULT_REFERENCE.is_file(), reason=f"no scratch copy of MinAtar's dqn.py at {DEFAULT_REFERENCE}"
)
def test_dqn_bench_times_the_reference_beside_this_code_base(tmp_path):
    out = tmp_path / "minatar_dqn.csv"
    run_bench("bench.bench_minatar_dqn", "--out", str(out), "--quick")
    columns, rows = read_rows(out)
    assert columns == list(COLUMNS)
    check_dqn_rows(rows, {"ours", "reference"})
    assert "ours / reference (median of the repeats' ratios)" in out.with_suffix(".md").read_text()


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
