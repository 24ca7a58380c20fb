"""The reader side: a run directory read without raising on damage (``read_run``: complete,
incomplete or corrupt, with the problems found), the runs of an experiment (``find_runs``), and the
cheap finished-or-not check a scheduler makes before starting a run (``completion``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from algorithms.rundir.layout import (
    CONFIG_FILE,
    EVAL_COLUMNS,
    EVAL_FILE,
    METADATA_FILE,
    PROGRESS_FILE,
    STATUS_FILE,
    RunStatus,
    RunUnreadable,
    read_regular,
)
from algorithms.rundir.tables import read_table, schedule_gap, sound_length


@dataclass
class RunData:
    """One run as read from disk. ``status`` is complete / incomplete / corrupt; ``problems`` says why."""

    path: Path
    config: dict[str, Any] | None
    metadata: dict[str, Any] | None
    progress: pd.DataFrame
    eval: pd.DataFrame
    state: str | None
    status: RunStatus
    problems: list[str] = field(default_factory=list)


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` with the reason in ``problems`` when it is missing or
    damaged (not UTF-8, not JSON, not an object, not a file). ``RunUnreadable`` when not permitted."""
    try:
        text = read_regular(path).decode()
    except FileNotFoundError:
        problems.append(f"{path.name} missing")
        return None
    except PermissionError as e:
        raise RunUnreadable.from_error(e, path) from None
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"{path.name} unreadable: {type(e).__name__}: {e}")
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        problems.append(f"{path.name} unreadable: {e}")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{path.name}: expected a JSON object, got {type(obj).__name__}")
        return None
    return obj


def read_status(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``status.json`` of the run at ``path`` as ``(object, None)``; ``(None, None)`` when there is none
    yet; ``(None, why)`` when it is damaged (the run counts as not finished: its next start rewrites it)."""
    problems: list[str] = []
    obj = _read_json(Path(path) / STATUS_FILE, problems)
    if obj is not None and not isinstance(obj.get("state"), str | None):
        return None, f"{STATUS_FILE}: 'state' is {obj['state']!r}, not a state"
    damaged = [p for p in problems if not p.endswith("missing")]
    return obj, damaged[0] if damaged else None


def read_run(path: Path) -> RunData:
    """Read a run directory without raising on damage (``RunUnreadable`` when it may not be read).

    * corrupt: config.json / metadata.json unreadable, or missing beside progress rows, or a table
      that does not parse, whose rows are not numbers, whose env steps repeat or go backwards, or
      that holds a return that is not a finite number (``_non_finite_return``);
    * complete: finished as the scheduler judges it (``completion``: status.json says complete and
      the progress rows, none torn and none of the schedule missing, reach the run's budget) and
      everything parses;
    * incomplete: readable, but still running, failed or killed, its status.json damaged, or said
      complete with rows torn or missing (listed in ``problems``; rerunning the plan repairs it).
    """
    path = Path(path)
    try:
        return _read_run(path)
    except PermissionError as error:
        raise RunUnreadable.from_error(error, path) from None


def _read_run(path: Path) -> RunData:
    problems: list[str] = []
    config = _read_json(path / CONFIG_FILE, problems)
    metadata = _read_json(path / METADATA_FILE, problems)
    status_obj, status_problem = read_status(path)
    if status_problem is not None or status_obj is None:
        problems.append(status_problem or f"{STATUS_FILE} missing")
    tables = {}
    corrupt = False
    for name in (PROGRESS_FILE, EVAL_FILE):
        try:
            table, table_problems = read_table(path / name)
        except (PermissionError, RunUnreadable):
            raise
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as e:
            detail = (str(e).splitlines() or [type(e).__name__])[0]
            table, table_problems = pd.DataFrame(), [f"{name} does not parse: {detail}"]
            corrupt = True
        tables[name] = table
        problems.extend(p for p in table_problems if not p.endswith("missing") or name == PROGRESS_FILE)
    for name, order in ((PROGRESS_FILE, _progress_order), (EVAL_FILE, _eval_order)):
        if (problem := order(tables[name]) or _non_finite_return(tables[name], name)) is not None:
            problems.append(problem)
            corrupt = True
    if config is None or metadata is None:
        damaged = any(p.startswith(f"{name} unreadable") or p.startswith(f"{name}:") for p in problems
                      for name in (CONFIG_FILE, METADATA_FILE))  # fmt: skip
        # A run stopped at its start (the scheduler's status.json beside its log, no config.json or
        # metadata.json yet) has nothing to distrust: not started, not corrupt.
        corrupt = corrupt or damaged or not tables[PROGRESS_FILE].empty
    state = status_obj.get("state") if status_obj else None
    finished, why_not = completion(path, budget(config))
    if corrupt:
        status: RunStatus = "corrupt"
    elif finished:
        status = "complete"
    else:
        status = "incomplete"
        if why_not is not None and state == "complete":
            problems.append(why_not.rsplit(":", 1)[0])
        if state == "failed" and status_obj and status_obj.get("error"):
            problems.append(f"failed: {status_obj['error']}")
    return RunData(path, config, metadata, tables[PROGRESS_FILE], tables[EVAL_FILE], state, status, problems)


def _env_steps(table: pd.DataFrame, name: str) -> tuple[pd.Series | None, str | None]:
    """``(env_steps, None)`` of a table whose cells are all numbers (or empty); ``(None, why)`` when
    one is not (``_not_numbers``); ``(None, None)`` when there are no rows or no env_steps column."""
    if table.empty or "env_steps" not in table:
        return None, None
    steps = pd.to_numeric(table["env_steps"], errors="coerce")
    if steps.isna().any():
        row = int(steps.isna().to_numpy().argmax()) + 2  # line in the file: header is line 1
        return None, f"{name} damaged: line {row} is not a row of numbers (a second header?)"
    if (problem := _not_numbers(table, name)) is not None:
        return None, problem
    return steps, None


def _not_numbers(table: pd.DataFrame, name: str) -> str | None:
    """Why ``table`` is damaged when a cell is neither a number nor empty (every column of both tables
    holds numbers: counters, returns, diagnostics), or ``None``."""
    for column in table.columns:
        if table[column].dtype != object:
            continue
        values = table[column]
        bad = values.notna() & pd.to_numeric(values, errors="coerce").isna()
        if bad.any():
            i = int(bad.to_numpy().argmax())
            return f"{name} damaged: {column} {values.iloc[i]!r} at line {i + 2} is not a number"
    return None


def _progress_order(table: pd.DataFrame) -> str | None:
    """Why ``progress.csv`` is damaged (cells that are not numbers, env steps that repeat or go
    backwards), or ``None``."""
    if not table.empty and "env_steps" not in table:
        return f"{PROGRESS_FILE} damaged: no env_steps column"
    steps, problem = _env_steps(table, PROGRESS_FILE)
    if steps is None:
        return problem
    back = steps.diff().to_numpy()[1:] <= 0
    if back.any():
        i = int(back.argmax()) + 1
        return (
            f"{PROGRESS_FILE} damaged: env_steps {steps.iloc[i]:g} at line {i + 2} after "
            f"{steps.iloc[i - 1]:g} (rows repeat or go backwards: two writers, or a restart that did "
            "not cut the table)"
        )
    return None


def _eval_order(table: pd.DataFrame) -> str | None:
    """Why ``eval.csv`` is damaged (columns missing, cells that are not numbers, env steps going
    backwards, an evaluation's episode twice), or ``None``."""
    if lacking := [c for c in EVAL_COLUMNS if not table.empty and c not in table]:
        return f"{EVAL_FILE} damaged: no {', '.join(lacking)} column"
    steps, problem = _env_steps(table, EVAL_FILE)
    if steps is None:
        return problem
    back = steps.diff().to_numpy()[1:] < 0
    if back.any():
        i = int(back.argmax()) + 1
        return f"{EVAL_FILE} damaged: env_steps {steps.iloc[i]:g} at line {i + 2} after {steps.iloc[i - 1]:g}"
    if "episode" not in table:
        return None
    repeated = table.assign(env_steps=steps).duplicated(["env_steps", "episode"]).to_numpy()
    if repeated.any():
        i = int(repeated.argmax())
        episode = table["episode"].iloc[i]
        return (
            f"{EVAL_FILE} damaged: the evaluation at env_steps {steps.iloc[i]:g} has episode {episode} twice"
        )
    return None


def _non_finite_return(table: pd.DataFrame, name: str) -> str | None:
    """Why a table whose rows are in order is damaged by a return that is not a finite number: any
    infinity; a NaN in ``eval.csv`` (each row is one episode played) or in a row of ``progress.csv``
    that logged episodes (with none, or no ``episodes_logged`` to say, its return columns are NaN by
    design: ``algorithms.logger``). Such a return would make every mean, IQM and interval it enters
    NaN or infinite."""
    columns = [c for c in table.columns if c == "return" or c.startswith("return_")]
    if name == EVAL_FILE:
        played = np.ones(len(table), bool)
    else:
        logged = table["episodes_logged"] if "episodes_logged" in table else pd.Series(0, index=table.index)
        played = pd.to_numeric(logged, errors="coerce").to_numpy(float) > 0
    for column in columns:
        values = pd.to_numeric(table[column], errors="coerce").to_numpy(float)
        bad = np.isinf(values) | (np.isnan(values) & played)
        if bad.any():
            i = int(bad.argmax())
            return f"{name} damaged: {column} {values[i]} at line {i + 2} is not a finite number"
    return None


def find_runs(experiment_dir: Path) -> list[Path]:
    """Every run directory under ``experiment_dir`` (a directory named seed<k> with any run file).
    ``RunUnreadable`` names the first directory on the way that may not be read: an experiment that
    cannot be listed is not one without runs."""
    experiment_dir = Path(experiment_dir)

    def refuse(error: OSError) -> None:
        raise RunUnreadable.from_error(error, experiment_dir)

    found = []
    for top, dirs, _ in os.walk(experiment_dir, onerror=refuse):
        for name in dirs:
            p = Path(top, name)
            if not (name.startswith("seed") and name[4:].isdigit()):
                continue
            try:
                if any((p / f).exists() for f in (CONFIG_FILE, STATUS_FILE)):
                    found.append(p)
            except PermissionError as error:
                raise RunUnreadable.from_error(error, p) from None
    return sorted(found)


def budget(config: dict[str, Any] | None) -> int | None:
    """The env-step budget (``runner.n_steps``) of a run's stored config; ``None`` when it has none."""
    return _runner_int(config, "n_steps")


def log_interval(config: dict[str, Any] | None) -> int | None:
    """The env steps between progress rows (``runner.log_interval_steps``) of a run's stored config;
    ``None`` when it has none (or not a positive one: no schedule to check rows against)."""
    interval = _runner_int(config, "log_interval_steps")
    return interval if interval is not None and interval > 0 else None


def _runner_int(config: dict[str, Any] | None, key: str) -> int | None:
    runner = config.get("runner") if isinstance(config, dict) else None
    value = runner.get(key) if isinstance(runner, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def completion(path: Path, steps: int | None = None) -> tuple[bool, str | None]:
    """Whether the run at ``path`` is finished and, when it looks finished or damaged but is not, why
    (one phrase): a damaged ``status.json``; complete, but the last progress row torn or missing, the
    rows ending short of ``steps`` (the run's env-step budget, by default its config.json's), or a
    row of the runner's schedule missing between them (``schedule_gap``, every
    ``runner.log_interval_steps``). The one rule of "complete" for the scheduler, the dry run,
    ``read_run`` (summary, study, report) and the job. ``RunUnreadable`` when not permitted
    (``RunFileNotRegular``: a file of the run is a FIFO, device or directory)."""
    path = Path(path)
    config = _read_json(path / CONFIG_FILE, [])
    if steps is None:
        steps = budget(config)
    status, damaged = read_status(path)
    if damaged is not None:
        return False, f"{damaged}: running it again"
    if status is None:
        return False, None
    complete = status.get("state") == "complete"
    said = f"{STATUS_FILE} says complete but " if complete else ""
    progress = path / PROGRESS_FILE
    try:
        data = read_regular(progress)
    except FileNotFoundError:
        return False, f"{said}{PROGRESS_FILE} is missing: running it again" if complete else None
    except PermissionError as error:
        raise RunUnreadable.from_error(error, progress) from None
    whole = data[: sound_length(data)]
    if len(whole) < len(data):
        return False, f"{said}the last row of {PROGRESS_FILE} is torn: repairing it"
    if not complete:
        return False, None
    rows = list(csv.DictReader(io.StringIO(whole.decode(errors="replace"))))
    if not rows:
        return False, f"{said}{PROGRESS_FILE} has no rows: running it again"
    env_steps = _numbers(rows, "env_steps")
    last = int(env_steps[-1]) if math.isfinite(env_steps[-1]) else 0
    if steps is not None and last < steps:
        return False, f"{said}{PROGRESS_FILE} ends at {last:,} of {steps:,} env steps: repairing it"
    interval = log_interval(config)
    gap = schedule_gap(env_steps, _numbers(rows, "sampler_itrs"), interval) if interval else None
    if gap is not None:
        return False, f"{said}{PROGRESS_FILE} {gap}: repairing it"
    return True, None


def _numbers(rows: list[dict[str, str]], column: str) -> list[float]:
    """``column`` of CSV ``rows`` as numbers, NaN where a cell is absent or not a number."""
    out = []
    for row in rows:
        try:
            out.append(float(row.get(column) or "nan"))
        except ValueError:
            out.append(math.nan)
    return out


def is_complete(path: Path, steps: int | None = None) -> bool:
    """``completion``'s verdict: used to skip finished runs."""
    return completion(path, steps)[0]
