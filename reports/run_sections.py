"""The report's account of the runs themselves: throughput per arm and run, and every run that was
missing, failed, damaged or left out."""

from __future__ import annotations

import pandas as pd

from analysis.runs import Experiment
from analysis.throughput import arm_throughput, run_throughput
from reports import figures
from reports.page import Figure, Section, frame_table

# Frames per second is steps per second times the frameskip (the frames column says which); the
# time split is a table of its own, and the per-run table keeps the columns that differ between runs
# (replay ratios per run are folded away), so that no table is wider than a 1280 px page.
REPLAY_COLUMNS = (
    ("replay ratio (trained)", "replay_ratio_trained"),
    ("replay ratio (with burn-in)", "replay_ratio_with_burnin"),
)
THROUGHPUT_COLUMNS = (
    ("runs", "n_runs"),
    ("env steps", "env_steps"),
    ("frames", "frames"),
    ("updates", "updates"),
    ("steps/s", "steps_per_second"),
    ("updates/s", "updates_per_second"),
    *REPLAY_COLUMNS,
    ("wall time (s)", "wall_time_s"),
)
RUN_COLUMNS = (
    ("arm", "arm"),
    ("env", "env"),
    ("seed", "seed"),
    ("status", "status"),
    ("env steps", "env_steps"),
    ("updates", "updates"),
    ("steps/s", "steps_per_second"),
    ("wall time (s)", "wall_time_s"),
)
TIME_SPLIT_COLUMNS = (
    ("sampling %", "share_sampling"),
    ("optimizing %", "share_optimizing"),
    ("evaluating %", "share_evaluating"),
    ("logging %", "share_logging"),
)


def throughput_section(exp: Experiment, colours: dict[str, str]) -> Section:
    section = Section(
        "throughput",
        "Throughput and step accounting",
        "From each run's last progress row (algorithms.counters). Steps/s and updates/s count sampling + "
        "optimizing time only. Time columns: share of wall time. Means over the arm's runs.",
    )
    per_run = run_throughput(exp)
    if per_run.empty:
        section.notes.append("no progress rows with counters")
        return section
    per_arm = arm_throughput(per_run)
    replays = per_run[[key for _, key in REPLAY_COLUMNS]].notna().any(axis=None)
    shown = [c for c in THROUGHPUT_COLUMNS if replays or c not in REPLAY_COLUMNS]
    if replays:
        section.intro += (
            " Replay ratio (algorithms with a replay): samples per env step, trained steps only (R2D2's "
            "counting) and with burn-in (rlpyt's)."
        )
    shares = [c for c in per_arm if c.startswith("share_")]
    section.tables.append(frame_table("throughput-table", per_arm, [("arm", "arm"), *shown]))
    section.tables.append(
        frame_table(
            "time-split-table",
            per_arm.assign(**{c: 100 * per_arm[c] for c in shares}),
            [("arm", "arm"), *TIME_SPLIT_COLUMNS],
            "share of wall time",
        )
    )
    section.figures.append(
        Figure("fig-time-split", figures.to_data_uri(figures.time_split_figure(per_arm)), "wall-time split")
    )
    section.tables.append(frame_table("throughput-runs-table", per_run, list(RUN_COLUMNS), "per run"))
    if replays:
        section.tables.append(
            frame_table(
                "replay-runs-table",
                per_run,
                [("arm", "arm"), ("env", "env"), ("seed", "seed"), *REPLAY_COLUMNS],
                "replay ratio per run",
                folded=True,
            )
        )
    return section


def problems_section(exp: Experiment, left_out: pd.DataFrame) -> Section:
    section = Section("problems", "Missing, failed and skipped runs")
    section.tables.append(
        frame_table(
            "skipped-table",
            exp.skipped,
            [
                ("arm", "arm"),
                ("env", "env"),
                ("seed", "seed"),
                ("status", "status"),
                ("reason", "reason"),
                ("path", "path"),
            ],
            "runs not used for results (incomplete, failed or corrupt)",
        )
    )
    section.tables.append(
        frame_table(
            "missing-table",
            exp.missing,
            [("arm", "arm"), ("env", "env"), ("seed", "seed")],
            "expected runs with no run directory",
        )
    )
    if len(left_out):
        section.tables.append(
            frame_table(
                "left-out-table",
                left_out,
                [("arm", "arm"), ("env", "env"), ("seed", "seed")],
                "complete runs left out of the aggregates to keep the same envs and seed count for every arm",
            )
        )
    notes = exp.runs[(exp.runs.status == "complete") & (exp.runs.problems != "")]
    for row in notes.itertuples():
        section.notes.append(f"{row.arm}/{row.env}/seed{row.seed}: {row.problems}")
    return section
