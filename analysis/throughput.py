"""Throughput and step accounting from the counters columns of ``progress.csv``.

The columns are ``algorithms.counters.Counters.snapshot()``'s: ``steps_per_second`` and
``updates_per_second`` count sampling + optimizing time only (evaluation and logging excluded);
both replay-ratio countings are kept (``replay_ratio_trained``: R2D2's, trained steps per env step;
``replay_ratio_with_burnin``: rlpyt's, burn-in included) for runs that train from a replay; an
algorithm without one (A2C, PPO) counts its epochs and minibatches there, a constant, left empty. A
run's figures are those of its last row.
"""

from __future__ import annotations

import pandas as pd

from analysis.runs import KEYS, Experiment

COLUMNS = (
    "env_steps",
    "frames",
    "updates",
    "steps_per_second",
    "frames_per_second",
    "updates_per_second",
    "replay_ratio_trained",
    "replay_ratio_with_burnin",
    "wall_time_s",
    "time_sampling_s",
    "time_optimizing_s",
    "time_evaluating_s",
    "time_logging_s",
)


REPLAY_RATIOS = ["replay_ratio_trained", "replay_ratio_with_burnin"]


def trains_from_replay(config: dict) -> bool:
    """Whether a run's ``config.json`` is that of an algorithm with a replay: its ``algo_config`` has a
    ``replay_size_steps`` (``algorithms.registry.replay_bytes``' rule)."""
    return "replay_size_steps" in config.get("algo_config", {})


def run_throughput(exp: Experiment) -> pd.DataFrame:
    """One row per run with progress rows (complete or not): the last row's counters columns, the
    replay ratios empty for a run without a replay (``trains_from_replay``). Columns absent from a
    run's table are left empty rather than failing the report."""
    if exp.progress.empty or "env_steps" not in exp.progress:
        return pd.DataFrame(columns=KEYS + list(COLUMNS))
    last = exp.progress.sort_values("env_steps").groupby(KEYS, as_index=False).tail(1)
    table = last.reindex(columns=KEYS + list(COLUMNS)).sort_values(KEYS).reset_index(drop=True)
    replays = [
        trains_from_replay(exp.configs.get(tuple(run), {})) for run in table[KEYS].itertuples(index=False)
    ]
    table.loc[~pd.Series(replays, dtype=bool), REPLAY_RATIOS] = float("nan")
    status = exp.runs[KEYS + ["status"]]
    return table.merge(status, on=KEYS, how="left")


def arm_throughput(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per arm: number of runs, mean of each counter over its runs, and the wall-time split as
    fractions of the summed time categories."""
    if per_run.empty:
        return pd.DataFrame(columns=["arm", "n_runs", *COLUMNS])
    numeric = per_run[["arm", *COLUMNS]].apply(
        lambda c: pd.to_numeric(c, errors="coerce") if c.name != "arm" else c
    )
    table = numeric.groupby("arm").mean()
    table.insert(0, "n_runs", per_run.groupby("arm").size())
    times = [c for c in COLUMNS if c.startswith("time_")]
    total = table[times].sum(axis=1).where(lambda t: t > 0)
    for c in times:
        table["share_" + c.removeprefix("time_").removesuffix("_s")] = table[c] / total
    return table.reset_index()
