"""``repro.summary``: replay ratios only for runs whose algorithm replays."""

from __future__ import annotations

from pathlib import Path

from algorithms.rundir import RunDir, run_path
from repro.summary import summary_text

PROGRESS = (
    "env_steps,frames,updates,samples_trained,samples_replayed,time_sampling_s,time_optimizing_s,wall_time_s\n"
    "1000,4000,10,4000,6000,1.0,1.0,3\n"
)
REPLAY = {"algo": "r2d1", "algo_config": {"replay_size_steps": 1000}}
ON_POLICY = {"algo": "ppo", "algo_config": {"epochs": 4}}


def write(root: Path, arm: str, config: dict) -> None:
    run = RunDir.open(run_path(root, "exp", arm, "env", 0), config, {"seed": 0})
    (run.path / "progress.csv").write_text(PROGRESS)
    run.set_status("complete")
    run.close()


def table_row(summary: str, first: str, table: int = 0) -> list[str]:
    """The row starting with ``first`` in the runs table (0) or the totals table (1)."""
    return [line.split() for line in summary.splitlines() if line.startswith(first)][table]


def test_on_policy_runs_alone_have_no_replay_ratio_columns(tmp_path: Path) -> None:
    write(tmp_path, "ppo", ON_POLICY)
    summary = summary_text(tmp_path / "exp")
    assert "RR" not in summary and "4.000" not in summary  # PPO's 4 epochs are not a replay ratio
    assert table_row(summary, "ppo ") == [
        "ppo",
        "env",
        "seed0",
        "complete",
        "1k",
        "4k",
        "10",
        "500",
        "5.00",
        "3",
    ]


def test_mixed_runs_show_ratios_for_replay_runs_and_a_dash_for_the_others(tmp_path: Path) -> None:
    write(tmp_path, "ppo", ON_POLICY)
    write(tmp_path, "r2d1", REPLAY)
    summary = summary_text(tmp_path / "exp")
    assert "RR trained" in summary
    assert table_row(summary, "r2d1 ")[-3:] == ["4.000", "6.000", "3"]
    assert table_row(summary, "ppo ")[-3:] == ["-", "-", "3"]
    assert table_row(summary, "r2d1 ", table=1)[-3:] == ["4.000", "6.000", "3"]
    assert table_row(summary, "ALL ")[-3:] == ["-", "-", "6"]  # a ratio over both kinds means nothing
