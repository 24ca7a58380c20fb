"""Throughput summary of an experiment, read from its run directories' ``progress.csv``.

Per job and in total (per arm and overall): env steps, frames, updates, env steps/s and updates/s
(sampling + optimizing time only, as ``algorithms.counters`` defines throughput: evaluation and
logging excluded), and the achieved replay ratio under both countings, ``trained`` (samples in
the loss per env step, R2D2's) and ``with_burnin`` (burn-in steps included, rlpyt's). Totals are
ratios of sums (steps over summed train time), not means of ratios. A run whose files are damaged
(``algorithms.rundir.read_run``: rows that repeat or go backwards, a table that does not parse)
shows state ``corrupt`` and is listed under the tables with what is wrong; a complete run read
around damage (``read_run``'s notes) is listed too, and one whose ``status.json`` says complete
that is not (``algorithms.rundir.completion``, the scheduler's rule: rows torn, missing or short of
its budget) shows ``unfinished`` and is listed with why. A directory that may not be read raises
``RunUnreadable`` (one line at the command line), never "no run directories".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from algorithms.rundir import find_runs, read_run
from repro.tables import human_count, render

COLUMNS = (
    "env_steps",
    "frames",
    "updates",
    "samples_trained",
    "samples_replayed",
    "time_sampling_s",
    "time_optimizing_s",
    "wall_time_s",
)


@dataclass
class RunThroughput:
    arm: str
    env: str
    seed: str
    state: str  # status.json's state, or "corrupt" when the run's files are damaged (``problems``)
    values: dict[str, float]
    problems: list[str]
    replays: bool  # its algorithm keeps a replay (unknown: True, and its ratios are shown)


def collect(experiment_dir: Path) -> list[RunThroughput]:
    out = []
    for path in find_runs(experiment_dir):
        run = read_run(path)
        values = {c: 0.0 for c in COLUMNS}
        if not run.progress.empty:
            last = pd.to_numeric(run.progress.iloc[-1], errors="coerce")  # damaged rows may hold text
            values = {c: float(last[c]) if c in last and pd.notna(last[c]) else 0.0 for c in COLUMNS}
        rel = path.relative_to(experiment_dir).parts
        arm, env, seed = (rel + ("?", "?", "?"))[:3] if len(rel) < 3 else rel[-3:]
        state = run.state or run.status
        if run.status == "corrupt":
            state = run.status
        elif run.status != "complete" and state == "complete":  # said complete, short of it (``completion``)
            state = "unfinished"
        # ``replay_size_steps`` marks a replay learner's config (algorithms.registry.replay_bytes' rule).
        replays = run.config is None or "replay_size_steps" in run.config.get("algo_config", {})
        out.append(RunThroughput(arm, env, seed, state, values, run.problems, replays))
    return out


def _derived(v: dict[str, float], replays: bool, ratio_columns: bool) -> tuple[str, ...]:
    train_s = v["time_sampling_s"] + v["time_optimizing_s"]
    steps = v["env_steps"]
    ratios = (
        (
            f"{v['samples_trained'] / steps:.3f}" if steps and replays else "-",
            f"{v['samples_replayed'] / steps:.3f}" if steps and replays else "-",
        )
        if ratio_columns
        else ()
    )
    return (
        human_count(steps),
        human_count(v["frames"]),
        human_count(v["updates"]),
        f"{steps / train_s:,.0f}" if train_s else "-",
        f"{v['updates'] / train_s:.2f}" if train_s else "-",
        *ratios,
        f"{v['wall_time_s']:.0f}",
    )


RATIO_HEADER = ["RR trained", "RR w/ burn-in"]


def _header(ratio_columns: bool) -> list[str]:
    ratios = RATIO_HEADER if ratio_columns else []
    return ["env steps", "frames", "updates", "steps/s", "updates/s", *ratios, "wall s"]


def summary_text(experiment_dir: Path) -> str:
    runs = collect(experiment_dir)
    if not runs:
        return f"{experiment_dir}: no run directories"
    ratio_columns = any(r.replays for r in runs)
    header = _header(ratio_columns)
    rows = [(r.arm, r.env, r.seed, r.state, *_derived(r.values, r.replays, ratio_columns)) for r in runs]
    totals = []
    for arm in sorted({r.arm for r in runs}) + ["ALL"]:
        chosen = [r for r in runs if arm in ("ALL", r.arm)]
        summed = {c: sum(r.values[c] for r in chosen) for c in COLUMNS}
        complete = sum(r.state == "complete" for r in chosen)
        replays = all(r.replays for r in chosen)  # a ratio over runs with and without replay means nothing
        totals.append(
            (
                arm,
                f"{len(chosen)} runs",
                f"{complete} complete",
                "",
                *_derived(summed, replays, ratio_columns),
            )
        )
    right = tuple(range(4, 4 + len(header)))
    damaged = ""
    for title, chosen in (
        ("corrupt runs (their numbers above cannot be trusted; not used for results)", ("corrupt",)),
        ("complete runs read around damage (rerun the plan to repair them)", ("complete",)),
        ("runs status.json calls complete that are not (rerun the plan to repair them)", ("unfinished",)),
    ):
        listed = [f"  {r.arm}/{r.env}/{r.seed}: {'; '.join(r.problems)}" for r in runs
                  if r.state in chosen and r.problems]  # fmt: skip
        damaged += f"\n\n{title}:\n" + "\n".join(listed) if listed else ""
    ratio_note = (
        "; RR = replay ratio: trained steps per env step, and with burn-in steps included, - without a replay"
        if ratio_columns
        else ""
    )
    return (
        f"throughput of {experiment_dir} "
        f"(steps/s and updates/s over sampling + optimizing time{ratio_note})\n\n"
        + render(["arm", "env", "seed", "state", *header], rows, right)
        + "\n\ntotals (sums; wall s is summed over runs)\n\n"
        + render(["arm", "runs", "complete", "", *header], totals, right)
        + damaged
    )
