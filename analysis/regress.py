"""Learning-curve regression checks: new runs of a fixed suite against committed references.

The suite (``analysis/regress/suite.toml``) is a list of short CPU-sized tasks, each an arm of the
reproduction layer run on one env (``make regress`` runs them through ``python -m repro run``). Each
run is summarised by its **normalised area under the learning curve**: the mean evaluation return,
integrated over env steps by the trapezoid rule, divided by the steps covered, and mapped by the
env's score bounds: random play to 0 and the published reference to 1, from the one table of them,
``analysis/data/gym_reference_scores.csv`` (``analysis.scores.gym_reference_bounds``, which reports
use too). A task states ``score_min``/``score_max`` itself only for an env that table lacks. AUC
rewards learning early as well as ending high, and is far less noisy than the final score alone.
Normalisation is linear, so references computed under other bounds convert exactly
(``rescale_auc``: the committed references were converted from the bounds [0, 500] for CartPole-v1
and [-1600, 0] for Pendulum-v1 this way, not rerun).

The test, per task: one-sided Welch t-test of H0 "the new runs' mean AUC is at least the
reference's" against H1 "it is lower", and Holm's step-down correction over the tasks. A task
regresses when its Holm-adjusted p-value is below ``alpha`` **and** its mean AUC dropped by more
than ``min_effect``. False-alarm rate: when no task changed, the suite fails with probability at
most ``alpha`` (Holm controls the family-wise error; the effect floor only lowers it), under the
t-test's approximation (AUCs of independent seeds roughly normal; averaging over the curve helps).
``tests/test_regress_check.py`` measures the rate on simulated unchanged suites.

``python -m analysis.regress check`` prints the table and exits 1 on a regression (or a task with
no runs); ``update`` rewrites the reference CSV from a run directory, recording each run's commit;
``update --plans P [P ...]`` replaces only those plans' tasks and keeps every other line as it was.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import sys
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis.curves import raw_scores
from analysis.runs import KEYS, load_experiment
from analysis.scores import Bounds, gym_reference_bounds

SUITE_FILE = Path(str(resources.files("analysis").joinpath("regress", "suite.toml")))
REFERENCE_FILE = Path(str(resources.files("analysis").joinpath("data", "regress_reference.csv")))
REFERENCE_COLUMNS = ["arm", "env", "seed", "auc", "final", "env_steps", "commit", "dirty", "created"]


@dataclass(frozen=True)
class Task:
    """One suite entry: ``arm`` on ``env`` (run by ``plan``), scores mapped to [0, 1] by the bounds."""

    arm: str
    env: str
    plan: str
    score_min: float
    score_max: float
    score_source: str


@dataclass(frozen=True)
class Suite:
    tasks: tuple[Task, ...]
    alpha: float
    min_effect: float


BOUND_KEYS = ("score_min", "score_max", "score_source")


def load_suite(path: Path = SUITE_FILE, bounds: Bounds | None = None) -> Suite:
    """Read the suite TOML, each task's bounds from ``bounds`` (default the gymnasium reference
    table); a missing or mistyped key, bounds stated for an env the table has (two homes) or missing
    for one it lacks are a ``ValueError`` naming file and key."""
    bounds = gym_reference_bounds() if bounds is None else bounds
    with open(path, "rb") as f:
        data = tomllib.load(f)
    head = data.get("suite", {})
    for key in ("alpha", "min_effect"):
        if not isinstance(head.get(key), float | int):
            raise ValueError(f"{path} [suite]: '{key}' must be a number, got {head.get(key)!r}")
    if not 0 < head["alpha"] < 1:
        raise ValueError(f"{path} [suite]: 'alpha' must be in (0, 1), got {head['alpha']}")
    tasks = []
    for i, entry in enumerate(data.get("task", [])):
        fields = {
            "arm": str,
            "env": str,
            "plan": str,
            "score_min": float,
            "score_max": float,
            "score_source": str,
        }
        env = entry.get("env")
        stated = [key for key in BOUND_KEYS if key in entry]
        if isinstance(env, str) and env in bounds.scores.index:
            if stated:
                raise ValueError(
                    f"{path} [[task]] #{i}: {stated} for {env}, whose bounds are in {bounds.path.name}: "
                    "remove them (one home for score bounds)"
                )
            row = bounds.scores.loc[env]
            entry = {
                **entry,
                "score_min": float(row.low),
                "score_max": float(row.high),
                "score_source": f"{bounds.path.name}: random play ({row.low_source}) to the reference "
                f"({row.high_source})",
            }
        for key, kind in fields.items():
            value = entry.get(key)
            if not (isinstance(value, kind) or (kind is float and isinstance(value, int))):
                absent = f" ({env!r} is not in {bounds.path.name})" if key in BOUND_KEYS else ""
                raise ValueError(
                    f"{path} [[task]] #{i}: '{key}' must be {kind.__name__}, got {value!r}{absent}"
                )
        unknown = set(entry) - set(fields)
        if unknown:
            raise ValueError(f"{path} [[task]] #{i}: unknown keys {sorted(unknown)}")
        if entry["score_max"] <= entry["score_min"]:
            raise ValueError(f"{path} [[task]] #{i}: score_max must exceed score_min")
        tasks.append(Task(**{k: kind(entry[k]) for k, kind in fields.items()}))
    if not tasks:
        raise ValueError(f"{path}: no [[task]] entries")
    return Suite(tuple(tasks), float(head["alpha"]), float(head["min_effect"]))


def normalised_auc(env_steps: np.ndarray, score: np.ndarray, score_min: float, score_max: float) -> float:
    """Mean of the curve over the steps it covers (trapezoid rule), mapped to [0, 1] by the bounds.

    ``env_steps`` [T] increasing, ``score`` [T]; a single point gives that point's normalised score."""
    env_steps, score = np.asarray(env_steps, dtype=float), np.asarray(score, dtype=float)
    if env_steps.ndim != 1 or env_steps.shape != score.shape or len(env_steps) == 0:
        raise ValueError(f"normalised_auc: need matching 1-D arrays, got {env_steps.shape} and {score.shape}")
    if np.any(np.diff(env_steps) <= 0):
        raise ValueError("normalised_auc: env_steps must be strictly increasing")
    span = env_steps[-1] - env_steps[0]
    mean = float(score[0]) if span == 0 else float(np.trapezoid(score, env_steps) / span)
    return (mean - score_min) / (score_max - score_min)


def rescale_auc(auc: np.ndarray | float, old: tuple[float, float], new: tuple[float, float]) -> np.ndarray:
    """The AUC under bounds ``new`` (min, max) of a curve whose AUC under ``old`` is ``auc``: exact,
    since the AUC is the curve's mean mapped linearly (``normalised_auc``)."""
    mean = old[0] + np.asarray(auc, dtype=float) * (old[1] - old[0])
    return (mean - new[0]) / (new[1] - new[0])


def run_summaries(experiment_dir: Path, suite: Suite) -> pd.DataFrame:
    """Per complete run of a suite task: ``arm, env, seed, auc, final, env_steps, commit, dirty``."""
    exp = load_experiment(experiment_dir)
    _, curves = raw_scores(exp)
    meta = exp.metadata.reindex(columns=KEYS + ["git_commit", "git_dirty"])
    rows = []
    for task in suite.tasks:
        for seed, curve in curves[(curves.arm == task.arm) & (curves.env == task.env)].groupby("seed"):
            curve = curve.sort_values("env_steps")
            info = meta[(meta.arm == task.arm) & (meta.env == task.env) & (meta.seed == seed)]
            rows.append(
                {"arm": task.arm, "env": task.env, "seed": int(seed),
                 "auc": normalised_auc(curve.env_steps, curve.score, task.score_min, task.score_max),
                 "final": float(curve.score.iloc[-1]), "env_steps": int(curve.env_steps.iloc[-1]),
                 "commit": info.git_commit.iloc[0] if len(info) else None,
                 "dirty": info.git_dirty.iloc[0] if len(info) else None}
            )  # fmt: skip
    return pd.DataFrame(rows, columns=REFERENCE_COLUMNS[:-1])


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): family-wise error <= alpha for any dependence."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    m = len(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def compare(reference: pd.DataFrame, new: pd.DataFrame, suite: Suite) -> pd.DataFrame:
    """One row per task: reference and new AUC (mean, sd, n), the drop, p (one-sided Welch), Holm's
    adjusted p and the verdict: ``ok``, ``better``, ``REGRESSION``, ``no new runs`` or ``no reference``."""
    rows = []
    for task in suite.tasks:
        ref = reference[(reference.arm == task.arm) & (reference.env == task.env)].auc.to_numpy(float)
        cur = new[(new.arm == task.arm) & (new.env == task.env)].auc.to_numpy(float)
        row = {
            "task": f"{task.arm} / {task.env}",
            **_describe("ref", ref),
            **_describe("new", cur),
            "p": np.nan,
        }
        row["auc_drop"] = row["ref_auc"] - row["new_auc"]
        if len(ref) >= 2 and len(cur) >= 2:
            if row["ref_sd"] == 0 and row["new_sd"] == 0:
                # No spread at all (e.g. every seed at the score ceiling): any drop is certain.
                row["p"] = 0.0 if row["auc_drop"] > 0 else 1.0
            else:
                row["p"] = stats.ttest_ind(cur, ref, equal_var=False, alternative="less").pvalue
        rows.append(row)
    table = pd.DataFrame(rows)
    tested = table.p.notna()
    table["p_holm"] = np.nan
    if tested.any():
        table.loc[tested, "p_holm"] = holm(table.loc[tested, "p"].to_numpy())
    table["verdict"] = [_verdict(r, suite) for r in table.itertuples()]
    return table


def _describe(prefix: str, aucs: np.ndarray) -> dict[str, float]:
    return {
        f"{prefix}_n": len(aucs),
        f"{prefix}_auc": aucs.mean() if len(aucs) else np.nan,
        f"{prefix}_sd": aucs.std(ddof=1) if len(aucs) > 1 else np.nan,
    }


def _verdict(row: object, suite: Suite) -> str:
    if row.ref_n == 0:
        return "no reference"
    if row.new_n == 0:
        return "no new runs"
    if row.ref_n < 2 or row.new_n < 2:
        return "too few seeds"
    if row.p_holm < suite.alpha and row.auc_drop > suite.min_effect:
        return "REGRESSION"
    if row.auc_drop < -suite.min_effect:
        return "better"
    return "ok"


FAILING = ("REGRESSION", "no new runs", "no reference", "too few seeds")


def format_table(table: pd.DataFrame, suite: Suite) -> str:
    """Plain-text table for the console."""

    def num(x: float, digits: int = 3) -> str:
        return "-" if pd.isna(x) else f"{x:.{digits}f}"

    header = ["task", "ref AUC (sd, n)", "new AUC (sd, n)", "drop", "p", "p Holm", "verdict"]
    lines = []
    for r in table.itertuples():
        ref = f"{num(r.ref_auc)} ({num(r.ref_sd)}, {r.ref_n})"
        new = f"{num(r.new_auc)} ({num(r.new_sd)}, {r.new_n})"
        lines.append([r.task, ref, new, num(r.auc_drop), num(r.p, 4), num(r.p_holm, 4), r.verdict])
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines)]
    out = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [header, *lines]]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append(
        f"\nAUC: mean evaluation return over the run, normalised by the task's score bounds. Regression: "
        f"one-sided Welch t-test, Holm-adjusted p < {suite.alpha} and drop > {suite.min_effect}; "
        f"false-alarm rate <= {suite.alpha} for the whole suite."
    )
    return "\n".join(out)


def write_reference(
    summaries: pd.DataFrame, path: Path, suite: Suite, plans: list[str] | None = None
) -> pd.DataFrame:
    """Write the reference rows of ``summaries``; returns the rows written.

    ``plans`` None rewrites the file. Otherwise only the tasks run by those plans get new rows: they
    replace the task's old rows where those were (else they are appended), and every other line of
    the file is kept byte for byte, so a new task's references leave the others' untouched."""
    if plans is not None:
        unknown = sorted(set(plans) - {task.plan for task in suite.tasks})
        if unknown:
            raise ValueError(f"--plans: {unknown} run no task of the suite")
        keys = {(task.arm, task.env) for task in suite.tasks if task.plan in plans}
        summaries = summaries[[key in keys for key in zip(summaries.arm, summaries.env)]]
        missing = sorted(keys - set(zip(summaries.arm, summaries.env)))
        if missing:
            raise ValueError(f"no complete runs of {missing} to make references from")
    if summaries.empty:
        raise ValueError("no complete suite runs to make references from")
    table = summaries.assign(created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))[REFERENCE_COLUMNS]
    path.parent.mkdir(parents=True, exist_ok=True)
    if plans is None or not path.exists():
        table.to_csv(path, index=False, float_format="%.6g")
        return table
    new_lines = table.to_csv(index=False, header=False, float_format="%.6g").splitlines(keepends=True)
    by_task = {key: [] for key in keys}
    for key, line in zip(zip(table.arm, table.env), new_lines):
        by_task[key].append(line)
    with open(path, newline="") as f:
        header, *old_lines = f.readlines()
    if next(csv.reader([header])) != REFERENCE_COLUMNS:
        raise ValueError(f"{path}: header is not {','.join(REFERENCE_COLUMNS)}; rewrite it without --plans")
    out = [header]
    for line in old_lines:
        row = dict(zip(REFERENCE_COLUMNS, next(csv.reader([line]))))
        key = (row["arm"], row["env"])
        if key in keys:
            out += by_task.pop(key, [])  # the task's new rows, once, where its old rows began
        else:
            out.append(line)
    for lines in by_task.values():
        out += lines
    path.write_text("".join(out), newline="")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.regress", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("check", "compare runs with the references"), ("update", "rewrite the references")):
        p = commands.add_parser(name, help=text)
        p.add_argument("--runs", type=Path, required=True, help="experiment directory of the suite's runs")
        p.add_argument("--reference", type=Path, default=REFERENCE_FILE)
        p.add_argument("--suite", type=Path, default=SUITE_FILE)
        if name == "update":
            p.add_argument(
                "--plans", nargs="+", metavar="PLAN", help="only these plans' tasks (paths as `plans` prints)"
            )
    commands.add_parser("plans", help="print the suite's plan files, one a line (for the Makefile)")
    args = parser.parse_args(argv)
    try:
        suite = load_suite(getattr(args, "suite", SUITE_FILE))
        if args.command == "plans":
            print("\n".join(dict.fromkeys(task.plan for task in suite.tasks)))
            return 0
        summaries = run_summaries(args.runs, suite)
        if args.command == "update":
            table = write_reference(summaries, args.reference, suite, args.plans)
            commits = ", ".join(
                sorted({f"{c}{' (dirty)' if d else ''}" for c, d in zip(table.commit, table.dirty)})
            )
            print(f"wrote {len(table)} reference runs to {args.reference} from commit {commits}")
            return 0
        if not args.reference.exists():
            raise FileNotFoundError(f"no reference file {args.reference}: run `make regress-update` first")
        reference = pd.read_csv(args.reference)
    except (FileNotFoundError, ValueError) as e:
        print(f"analysis.regress: {e}", file=sys.stderr)
        return 2
    table = compare(reference, summaries, suite)
    commits = ", ".join(sorted(set(map(str, reference.commit))))
    print(f"references: {args.reference} (commit {commits})\n")
    print(format_table(table, suite))
    failed = table[table.verdict.isin(FAILING)]
    if len(failed):
        print(f"\nFAILED: {', '.join(f'{t} ({v})' for t, v in zip(failed.task, failed.verdict))}")
        return 1
    print("\nno regression")
    return 0


if __name__ == "__main__":
    sys.exit(main())
