"""The machinery shared by the learning-check benchmarks (``bench_learn_dqn``, ``bench_learn_pg``).

A benchmark module defines ``ARMS`` (name -> ``Arm``) and calls ``main(module_name, title, doc)``.
An arm names a shipped setting (``repro/configs/settings/<name>.toml``): its algorithm, algorithm
config, env and sampler shape come from there (``repro.settings.setting_configs``), and the bench
adds only its budget, the values it scales with that budget and, where it runs the setting on
another task, the env (as a plan sets a job's env id).

Every (arm, seed) trains through ``algorithms.train.train`` into ``<out stem>_runs/<arm>/seed<k>``,
one row per run goes to the CSV, and a Markdown summary (median final return, mean with a 95%
percentile-bootstrap CI over seeds, pass or fail against the arm's mark) goes next to it.

Sweeps run through the same command: ``--set NAME=VALUE`` (repeatable) replaces fields of every
chosen arm's algorithm config and ``--batch TxB`` its sampler shape; both are recorded in the CSV
and the summary, e.g. ``--arms a2c_cartpole --seeds 10 --set learning_rate=7e-4 --batch 5x8``.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import read_run
from algorithms.train import train
from bench.outputs import check_outputs, write_rows, write_summary
from repro.settings import load_setting, setting_configs


@dataclass(frozen=True)
class Arm:
    setting: str  # a shipped setting's name
    budget_steps: int
    # What the median seed's final return must satisfy: ">= x", "> x", "reported", or
    # "above <arm>": above the upper end of that arm's 95% CI.
    pass_mark: str
    # (the setting's own configs, budget) -> {"section.key": value}: the budget-type values the bench
    # scales to its budget (learning start, exploration and annealing lengths), as a profile would.
    budget_values: Callable[[dict[str, Any], int], dict[str, Any]]
    # {"env.key": value} where the bench runs the setting on another task than the setting's own.
    task: Mapping[str, Any] = field(default_factory=dict)
    eval_episodes: int = 10


@cache
def setting_algo(name: str) -> str:
    return load_setting(name).algo


def arm_configs(arm: Arm, budget: int) -> dict[str, Any]:
    """The setting's configs (``algo``, ``env``, ``sampler``, ``runner``) on the arm's task with the
    arm's budget values for ``budget`` env steps."""
    own = setting_configs(arm.setting, arm.task)
    return setting_configs(arm.setting, {**arm.task, **arm.budget_values(own, budget)})


def batch_shape(arm: Arm, overrides: Overrides) -> tuple[int, int]:
    """(T, B): the sweep's ``--batch``, else the setting's sampler shape."""
    if overrides.batch is not None:
        return overrides.batch
    sampler = setting_configs(arm.setting)["sampler"]
    return sampler.batch_T, sampler.batch_B


def _arms(module_name: str) -> dict[str, Arm]:
    # Worker processes look the arms up by module name rather than receive them pickled.
    return importlib.import_module(module_name).ARMS


@dataclass(frozen=True)
class Overrides:
    """What a sweep changes in every chosen arm: algorithm config fields and the sampler shape."""

    fields: tuple[tuple[str, Any], ...] = ()
    batch: tuple[int, int] | None = None  # (T, B)

    def label(self) -> str:
        parts = [f"{name}={value!r}" for name, value in self.fields]
        if self.batch is not None:
            parts.append(f"batch={self.batch[0]}x{self.batch[1]}")
        return " ".join(parts)


def train_config(arm: Arm, budget: int, seed: int, overrides: Overrides = Overrides()) -> TrainConfig:
    """The arm's run at ``budget`` env steps with ``overrides`` applied (raises on a bad override)."""
    configs = arm_configs(arm, budget)
    batch_T, batch_B = batch_shape(arm, overrides)
    return TrainConfig(
        algo=setting_algo(arm.setting),
        algo_config=replace(configs["algo"], **dict(overrides.fields)),
        env=configs["env"],
        sampler=SamplerConfig(batch_T=batch_T, batch_B=batch_B, eval_episodes=arm.eval_episodes),
        runner=RunnerConfig(
            n_steps=budget, log_interval_steps=max(budget // 10, 1), seed=seed, torch_threads=1
        ),
    )


def arm_budget(arm: Arm, budget_scale: float, overrides: Overrides = Overrides()) -> int:
    """The arm's env-step budget at ``budget_scale``, at least one sampler batch."""
    batch_T, batch_B = batch_shape(arm, overrides)
    return max(int(arm.budget_steps * budget_scale), batch_T * batch_B)


def run_one(
    module_name: str,
    arm_name: str,
    seed: int,
    budget_scale: float,
    root: Path,
    overrides: Overrides = Overrides(),
) -> dict[str, Any]:
    arm = _arms(module_name)[arm_name]
    budget = arm_budget(arm, budget_scale, overrides)
    config = train_config(arm, budget, seed, overrides)
    run_dir = root / arm_name / f"seed{seed}"
    start = time.perf_counter()
    counters = train(config, run_dir, resume=False)
    wall = time.perf_counter() - start
    data = read_run(run_dir)
    final = data.eval[data.eval.env_steps == data.eval.env_steps.max()]
    returns = data.progress.return_mean.dropna() if "return_mean" in data.progress else []
    return {
        "arm": arm_name,
        "algo": config.algo,
        "env": config.env.id + ("-masked" if config.env.mask_velocity else ""),
        "seed": seed,
        "overrides": overrides.label(),
        "budget_steps": budget,
        "final_eval_return": float(final["return"].mean()),
        "eval_episodes": len(final),
        "last_train_return_mean": float(returns.iloc[-1]) if len(returns) else np.nan,
        "updates": counters.updates,
        "replay_ratio_trained": counters.replay_ratio_trained,
        "replay_ratio_with_burnin": counters.replay_ratio_with_burnin,
        "steps_per_second": counters.steps_per_second,
        "wall_s": wall,
        "run_dir": str(run_dir),
    }


def bootstrap_ci(values: list[float], statistic: Any = np.mean) -> tuple[float, float]:
    """95% percentile-bootstrap CI of ``statistic`` (the mean by default) over seeds or repeats
    (scipy); NaN with fewer than 2 values, the value itself when all are equal."""
    if len(values) < 2:
        return np.nan, np.nan
    if len(set(values)) == 1:
        return values[0], values[0]
    from scipy.stats import bootstrap

    res = bootstrap(
        (np.asarray(values),), statistic, confidence_level=0.95, method="percentile", random_state=0
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_ratio(mine: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """(median, 95% bootstrap CI low, high) of the per-repeat ratios ``mine[i] / theirs[i]``, for
    two implementations timed back to back in each repeat (so a load drift hits both alike)."""
    ratios = [a / b for a, b in zip(mine, theirs, strict=True)]
    return (statistics.median(ratios), *bootstrap_ci(ratios, np.median))


def verdict(mark: str, median: float, cis: dict[str, tuple[float, float]]) -> str:
    if mark == "reported":
        return "-"
    op, reference = mark.split()
    if op == "above":
        if reference not in cis:
            return f"({reference} not run)"
        return "yes" if median > cis[reference][1] else "no"
    ok = median >= float(reference) if op == ">=" else median > float(reference)
    return "yes" if ok else "no"


def summarize(
    title: str,
    arms: dict[str, Arm],
    rows: list[dict[str, Any]],
    budget_scale: float,
    overrides: Overrides = Overrides(),
) -> str:
    label = overrides.label()
    lines = [
        f"# {title} (budget scale {budget_scale:g}{', overrides: ' + label if label else ''})",
        "",
        "| arm | env | budget (steps) | seeds | median final return | mean [95% bootstrap CI] | pass mark "
        "| pass | mean wall (s) | finals by seed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    stats = {}
    for arm_name in arms:
        finals = [r["final_eval_return"] for r in rows if r["arm"] == arm_name]
        if finals:
            stats[arm_name] = (statistics.median(finals), bootstrap_ci(finals), finals)
    cis = {name: s[1] for name, s in stats.items()}
    for arm_name, (median, (low, high), finals) in stats.items():
        mine = [r for r in rows if r["arm"] == arm_name]
        mark = arms[arm_name].pass_mark
        by_seed = ", ".join(f"{r['seed']}: {r['final_eval_return']:.1f}" for r in mine)
        lines.append(
            f"| {arm_name} | {mine[0]['env']} | {mine[0]['budget_steps']} | {len(mine)} | {median:.1f} | "
            f"{np.mean(finals):.1f} [{low:.1f}, {high:.1f}] | {mark} | {verdict(mark, median, cis)} | "
            f"{np.mean([r['wall_s'] for r in mine]):.0f} | {by_seed} |"
        )
    return "\n".join(lines) + "\n"


def _overrides(parser: argparse.ArgumentParser, assignments: list[str], batch: str | None) -> Overrides:
    assigned = []
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        if not sep or not name.strip():
            parser.error(f"--set {assignment!r}: expected NAME=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text  # a bare word such as adam is a string
        assigned.append((name.strip(), value))
    shape = None
    if batch is not None:
        t, sep, b = batch.partition("x")
        if not (sep and t.isdigit() and b.isdigit() and int(t) > 0 and int(b) > 0):
            parser.error(f"--batch {batch!r}: expected TxB with positive integers, e.g. 5x16")
        shape = (int(t), int(b))
    return Overrides(tuple(assigned), shape)


def main(module_name: str, title: str, description: str) -> None:
    arms = _arms(module_name)
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True, help="CSV, one row per (arm, seed)")
    parser.add_argument("--arms", default=",".join(arms), help=f"comma-separated subset of {list(arms)}")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds run: first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument(
        "--budget-scale", type=float, default=1.0, help="fraction of each arm's env-step budget"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one torch thread each)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replace an algorithm config field of every chosen arm (VALUE as a Python literal)",
    )
    parser.add_argument("--batch", metavar="TxB", help="sampler shape of every chosen arm, e.g. 5x16")
    args = parser.parse_args()
    check_outputs(args.out)
    chosen = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in chosen if a not in arms]
    if unknown:
        parser.error(f"unknown arm {unknown[0]!r}; known: {', '.join(arms)}")
    if not 0 < args.budget_scale <= 1.0 or args.seeds < 1 or args.jobs < 1 or args.first_seed < 0:
        parser.error("--budget-scale must be in (0, 1], --seeds and --jobs >= 1, --first-seed >= 0")
    overrides = _overrides(parser, args.set, args.batch)
    for arm in chosen:
        budget = arm_budget(arms[arm], args.budget_scale, overrides)
        known = {f.name for f in fields(arm_configs(arms[arm], budget)["algo"])}
        for name, _ in overrides.fields:
            if name not in known:
                parser.error(
                    f"--set {name}: arm {arm}'s {setting_algo(arms[arm].setting)} config has no such field"
                )
        try:
            train_config(arms[arm], budget, 0, overrides)
        except (TypeError, ValueError) as error:
            parser.error(f"arm {arm}: {error}")
    root = args.out.parent / (args.out.stem + "_runs")
    jobs = [(arm, seed) for arm in chosen for seed in range(args.first_seed, args.first_seed + args.seeds)]
    for arm, seed in jobs:
        path = root / arm / f"seed{seed}"
        if path.exists():
            parser.error(f"{path} exists; remove it or choose another --out")
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(run_one, module_name, arm, seed, args.budget_scale, root, overrides)
            for arm, seed in jobs
        ]
        for (arm, seed), future in zip(jobs, futures):
            row = future.result()
            rows.append(row)
            print(
                f"{arm} seed {seed}: final return {row['final_eval_return']:.1f} ({row['wall_s']:.0f} s)",
                flush=True,
            )
    write_rows(args.out, rows, list(rows[0]))
    write_summary(args.out, summarize(title, arms, rows, args.budget_scale, overrides))
