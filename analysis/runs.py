"""Run directories -> tidy pandas tables.

An experiment is ``runs/<experiment>/<arm>/<env>/seed<k>/`` (docs/ARCHITECTURE.md, Contract 5).
Reading never fails on a damaged run: every run is read with ``algorithms.rundir.read_run`` and
anything not usable ends up in ``Experiment.skipped`` with the reason, so a report can list it.

Tidy tables (one observation per row, identified by ``arm, env, seed``):

* ``runs``: one row per run directory found (``status`` complete / incomplete / corrupt; corrupt
  includes a run whose rows repeat or go backwards in env steps, whatever its ``status.json`` says,
  so an old damaged run cannot pass as complete);
* ``config``: ``arm, env, seed, key, value`` with nested config keys flattened to dotted names;
* ``metadata``: one row per run, nested keys flattened (``packages.torch``);
* ``progress`` / ``eval``: the run's tables with ``arm, env, seed`` prepended.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from algorithms.rundir import (
    RESUMES_KEY,
    START_KEYS,
    RunData,
    RunFileNotRegular,
    find_runs,
    read_regular,
    read_run,
)

KEYS = ["arm", "env", "seed"]
# A plan file the reproduction layer may leave at the experiment root: shown in reports, and its
# ``jobs`` list (``[{"arm", "env", "seed"}, ...]``), when present, says which runs are expected.
PLAN_FILES = ("plan.json", "experiment.json")


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` -> ``{"a.b": 1, "c": "[1, 2]"}`` (lists kept as JSON text)."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(obj, list | tuple):
        return {prefix: json.dumps(obj)}
    return {prefix: obj}


def run_starts(meta: Any) -> list[dict[str, Any]]:
    """Every start of a run, from its row of ``Experiment.metadata`` (a mapping or a named tuple):
    the first (its ``START_KEYS`` and ``time``, the run's ``start_time``), then each later one its
    metadata.json's ``resumes`` list holds (``RunDir.note_resume``), in order. Runs written before
    that list existed give their first start only."""
    get = meta.get if isinstance(meta, dict) else lambda key, default=None: getattr(meta, key, default)
    first = {key: get(key) for key in START_KEYS}
    starts = [{"time": get("start_time"), **{k: v for k, v in first.items() if not pd.isna(v)}}]
    text = get(RESUMES_KEY)
    if isinstance(text, str):
        try:
            later = json.loads(text)
        except json.JSONDecodeError:
            later = []
        starts += [entry for entry in later if isinstance(entry, dict)] if isinstance(later, list) else []
    return starts


def run_identity(path: Path, experiment_dir: Path) -> tuple[str, str, int] | None:
    """``(arm, env, seed)`` from ``<experiment>/<arm>/<env>/seed<k>``, or None for any other layout."""
    parts = path.relative_to(experiment_dir).parts
    if len(parts) != 3 or not parts[2].startswith("seed") or not parts[2][4:].isdigit():
        return None
    return parts[0], parts[1], int(parts[2][4:])


@dataclass
class Experiment:
    """Every run of one experiment as tidy tables, plus what could not be used and why."""

    path: Path
    runs: pd.DataFrame
    config: pd.DataFrame
    metadata: pd.DataFrame
    progress: pd.DataFrame
    eval: pd.DataFrame
    configs: dict[tuple[str, str, int], dict[str, Any]]
    plan: dict[str, Any] | None
    skipped: pd.DataFrame  # arm, env, seed, path, status, reason
    missing: pd.DataFrame  # arm, env, seed: grid cells (arms x envs x seeds) with no run directory

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def complete(self) -> pd.DataFrame:
        """Runs usable for results: ``status == "complete"``."""
        return self.runs[self.runs.status == "complete"]

    @property
    def arms(self) -> list[str]:
        return sorted(self.runs.arm.unique())

    @property
    def envs(self) -> list[str]:
        return sorted(self.runs.env.unique())


@dataclass
class _Tables:
    runs: list[dict[str, Any]] = field(default_factory=list)
    config: list[dict[str, Any]] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    progress: list[pd.DataFrame] = field(default_factory=list)
    eval: list[pd.DataFrame] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    configs: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)

    def add(self, run: RunData, arm: str, env: str, seed: int) -> None:
        ident = {"arm": arm, "env": env, "seed": seed}
        self.runs.append(
            {
                **ident,
                "path": str(run.path),
                "status": run.status,
                "state": run.state,
                "problems": "; ".join(run.problems),
            }
        )
        if run.status != "complete":
            reason = "; ".join(run.problems) or f"status.json state {run.state!r}"
            self.skipped.append({**ident, "path": str(run.path), "status": run.status, "reason": reason})
        if run.config is not None:
            self.configs[(arm, env, seed)] = run.config
            self.config.extend({**ident, "key": k, "value": v} for k, v in flatten(run.config).items())
        if run.metadata is not None:
            self.metadata.append({**ident, **flatten(run.metadata)})
        for table, rows in ((run.progress, self.progress), (run.eval, self.eval)):
            if not table.empty:
                rows.append(table.assign(**ident)[KEYS + list(table.columns)])


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns) if not rows else pd.DataFrame(rows)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=KEYS)


def _missing(runs: pd.DataFrame, plan: dict[str, Any] | None) -> pd.DataFrame:
    """Expected runs with no run directory. Expected: the plan's ``jobs`` (``[{"arm", "env", "seed"}]``)
    when the experiment has a plan file listing them; else, for each arm, the envs it ran x every seed
    seen in the experiment (without a plan an env an arm never ran cannot be told from one it was
    never meant to run)."""
    jobs = plan.get("jobs") if plan else None
    if isinstance(jobs, list) and jobs and all(isinstance(j, dict) and set(KEYS) <= set(j) for j in jobs):
        expected = pd.DataFrame(jobs)[KEYS].astype({"seed": int})
    elif runs.empty:
        return pd.DataFrame(columns=KEYS)
    else:
        seeds = sorted(runs.seed.unique())
        expected = pd.DataFrame(
            [(arm, env, seed) for arm, env in runs[["arm", "env"]].drop_duplicates().itertuples(index=False)
             for seed in seeds],
            columns=KEYS,
        )  # fmt: skip
    found = runs[KEYS] if len(runs) else pd.DataFrame(columns=KEYS)
    merged = expected.merge(found, on=KEYS, how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"][KEYS].sort_values(KEYS).reset_index(drop=True)


def _read_plan(experiment_dir: Path) -> dict[str, Any] | None:
    """The experiment's plan file as an object; ``{"error": why}`` (naming the file) when it is there
    but unusable: not UTF-8, not JSON, not a JSON object, not readable. ``RunFileNotRegular`` when
    it is a FIFO, device or directory."""
    for name in PLAN_FILES:
        path = experiment_dir / name
        try:
            plan = json.loads(read_regular(path))
        except FileNotFoundError:
            continue
        except RunFileNotRegular:  # refused like a run file that is none, never read as a damaged plan
            raise
        except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return {"error": f"{path} unreadable: {type(e).__name__}: {e}"}
        if not isinstance(plan, dict):
            return {"error": f"{path}: expected a JSON object, got {type(plan).__name__}"}
        return plan
    return None


def load_experiment(experiment_dir: Path | str) -> Experiment:
    """Read every run under ``experiment_dir``; raises ``FileNotFoundError`` only when there are none."""
    experiment_dir = Path(experiment_dir)
    if not experiment_dir.is_dir():
        raise FileNotFoundError(f"experiment directory {experiment_dir} does not exist")
    paths = find_runs(experiment_dir)  # RunUnreadable (a ValueError) names a directory it may not read
    if not paths:
        raise FileNotFoundError(
            f"no run directories under {experiment_dir} (expected <arm>/<env>/seed<k>/ with config.json)"
        )
    return _build(experiment_dir, paths, plan=_read_plan(experiment_dir))


def load_run(run_dir: Path | str) -> Experiment:
    """One run as a one-run experiment (its arm/env/seed taken from the path's last three parts)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    return _build(run_dir.parents[2], [run_dir], plan=None)


def _build(experiment_dir: Path, paths: list[Path], plan: dict[str, Any] | None) -> Experiment:
    tables = _Tables()
    for path in paths:
        ident = run_identity(path, experiment_dir)
        if ident is None:
            tables.skipped.append(
                {
                    "arm": None,
                    "env": None,
                    "seed": None,
                    "path": str(path),
                    "status": "corrupt",
                    "reason": "not at <arm>/<env>/seed<k> below the experiment directory",
                }
            )
            continue
        tables.add(read_run(path), *ident)
    runs = _frame(tables.runs, KEYS + ["path", "status", "state", "problems"])
    return Experiment(
        path=experiment_dir,
        runs=runs,
        config=_frame(tables.config, KEYS + ["key", "value"]),
        metadata=_frame(tables.metadata, KEYS),
        progress=_concat(tables.progress),
        eval=_concat(tables.eval),
        configs=tables.configs,
        plan=plan,
        skipped=_frame(tables.skipped, KEYS + ["path", "status", "reason"]),
        missing=_missing(runs, plan),
    )
