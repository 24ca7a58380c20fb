"""``make bench-sampler`` end to end at a tiny size (trivial and Nature CNN sections): every mode is
measured against its reference, the trivial rows with the raw env timed interleaved, and the CSV
and Markdown summary are written."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from test_sampler_parallel_shutdown import assert_all_gone

from bench.bench_sampler import CNN_MODES, MODES
from bench.sampler_floors import FLOORS, MODE_FLOORS, HandoffFloor
from bench.sampler_parts import RawAleEnv, process_cpu_s


def test_sampler_benchmark_measures_every_mode_against_its_reference(tmp_path):
    out = tmp_path / "sampler.csv"
    sizes = ["--envs", "2", "--workers", "1", "--env-threads", "1", "--batch-t", "4", "--batches", "2"]
    args = [*sizes, "--repeats", "1", "--sections", "trivial,nature_cnn"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_sampler", "--out", str(out), *args],
        capture_output=True,
        text=True,
        # A guard against a hang, not a speed check: on a fresh clone under two busy loops beside a
        # full make test this run passed 300 s.
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out) as f:
        rows = {(r["section"], r["what"]): r for r in csv.DictReader(f)}
    assert set(rows) == {
        ("trivial", "raw_env"),
        ("trivial", "vec_env"),
        *(("trivial", floor) for floor in FLOORS),
        *(("trivial", mode) for mode in MODES),
        ("nature_cnn", "inference_B2"),
        ("nature_cnn", "inference_B1"),
        *(("nature_cnn", mode) for mode in CNN_MODES),
    }
    for mode in ("vec_env", *FLOORS, *MODES):
        row = rows["trivial", mode]
        # The ratio is the sampler's rate over the raw rate timed beside it, not a constant.
        assert float(row["ratio"]) > 0 and float(row["reference"]) > 0
        assert abs(float(row["ratio"]) - float(row["steps_per_s"]) / float(row["reference"])) < 0.01
        # CPU per env step of the mode (its workers' too) and of the raw env beside it.
        cpu, raw_cpu = float(row["cpu_us_per_step"]), float(row["reference_cpu_us_per_step"])
        assert cpu > 0 and raw_cpu > 0
        assert abs(float(row["cpu_parity"]) - raw_cpu / cpu) < 0.01
        busy = float(row["steps_per_s"]) * cpu * 1e-6
        assert abs(float(row["cpus_busy"]) - busy) < 0.01 + 0.01 * busy
    for mode, floor in MODE_FLOORS.items():  # each process-worker mode over its floor's ratio
        row = rows["trivial", mode]
        assert row["floor"] == rows["trivial", floor]["ratio"]
        # All three are rounded to 3 decimals, and a small floor magnifies its rounding in the
        # quotient (under load a floor of 0.278 put 3.692 / 0.278 at 13.281, the row's 13.298).
        ratio, of_floor, floor_ratio = float(row["ratio"]), float(row["of_floor"]), float(row["floor"])
        slack = 0.0005 + (ratio / floor_ratio) * (0.0005 / ratio + 0.0005 / floor_ratio) * 1.01
        assert abs(of_floor - ratio / floor_ratio) <= slack
    assert float(rows["nature_cnn", "alternating"]["ideal"]) > 0
    # The CPU ceiling comes from the raw env's measured CPU time per step and the inference rate.
    assert float(rows["trivial", "raw_env"]["cpu_us_per_step"]) > 0
    cnn = rows["nature_cnn", "alternating_threads"]
    reference = min(float(cnn["ideal"]), float(cnn["cpu_ceiling"]))
    assert abs(float(cnn["ratio_to_cpu_ceiling"]) - float(cnn["steps_per_s"]) / reference) < 0.01
    assert "| trivial | serial |" in out.with_suffix(".md").read_text()


def test_process_cpu_time_of_a_pid_matches_the_process_clock():
    """``process_cpu_s`` (from /proc, in clock ticks) agrees with ``time.process_time`` on this process
    to a few ticks while it burns CPU, and a vanished pid gives NaN, not a wrong figure."""
    pid = os.getpid()
    start, clock = process_cpu_s([pid]), time.process_time()
    while time.process_time() - clock < 0.3:
        pass
    used, clock_used = process_cpu_s([pid]) - start, time.process_time() - clock
    assert abs(used - clock_used) < 0.05, (used, clock_used)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert math.isnan(process_cpu_s([gone.pid]))


@pytest.mark.parametrize("groups", [[2], [1, 1]])
def test_handoff_floor_steps_the_raw_envs(groups):
    """The floor's workers step their slices of the envs as one raw env with the same seed does: its
    shared observations after a batch are the raw env's, frame for frame."""
    n_envs, seed = 4, 3
    actions = np.random.default_rng(0).integers(0, 6, size=(5, n_envs))
    raw = RawAleEnv("pong", n_envs, 1, seed)
    floor = HandoffFloor("pong", n_envs, 2, groups, seed)
    try:
        assert len(floor.pids) == sum(groups)
        for a in actions:
            raw.env.send(a)
            expected = raw.env.recv()[0]
        floor.batch(actions)
        assert float(expected.std()) > 0
        np.testing.assert_array_equal(floor.observation.numpy(), expected)
    finally:
        floor.close()
        raw.close()
    assert_all_gone(floor.pids)
