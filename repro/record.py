"""The plan record ``runs/<experiment>/plan.json``: what ``python -m repro run`` was asked to run.

Written before the first job starts, so a report knows the plan even of an experiment that was
interrupted or that failed: ``analysis.runs`` reads its ``jobs`` as the expected runs (a run that never
started is then reported missing, not silently absent), ``analysis.verdict`` orders two arms by its
``arms``, and ``reports.build`` shows each plan's title, arms, envs, seeds and profile::

    {"plans": [{"plan": "r2d1", "title": "...", "profile": "smoke",
                "arms": ["rlpyt_r2d1_published", "r2d1_corrected"], "envs": ["pong"], "seeds": "0-2"}],
     "arms": ["rlpyt_r2d1_published", "r2d1_corrected"],
     "jobs": [{"arm": "rlpyt_r2d1_published", "env": "pong", "seed": 0, "n_steps": 9600, "frames": 38400}]}

Arms are the run-directory names (the setting's name, followed by its ``--set`` values when it has
any). ``seeds`` is the seed spec of the seeds run (``repro.plans.format_seeds``: ``0-2``,
``100-104``, ``1,5,9``). A setting run without a plan file is recorded as a plan of its name whose
``setting`` says so; ``set`` lists the command line's ``--set`` values, a sweep's as ``key=a,b,c``;
``peers`` names the plan's peer arms (``repro.plan_file.Plan.peers``: run by another program);
``ablation`` of an ablation plan names its base arm, the ablate setting and each deviation arm's keys,
and of a designed ablation the design (``repro.ablation.design_record``: switches and each arm's row).
The profile is named as
``protocol.files.profile_label`` names it: a shipped profile by its name, another file by its path
relative to the repository. ``plans`` is the experiment's history: one entry per invocation that asked
for something new, in the order they ran, never rewritten; rerunning an invocation (to resume it) adds
nothing. ``arms`` and ``jobs`` are the union over the history (the jobs are the expected runs).
``invocation_note`` is the one line ``run`` prints when an invocation adds arms, envs or seeds to an
experiment that earlier invocations wrote (held-out seeds, another env, a sweep): they share one
report, which may not be what the user meant (``--exp NAME`` starts a separate experiment).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError
from algorithms.rundir import atomic_write_json, read_regular
from protocol.files import profile_label
from protocol.plan_args import format_seeds, parse_seeds
from repro.ablation import design_record
from repro.plan_file import Plan
from repro.plans import Job

# The name analysis.runs.PLAN_FILES looks for first.
PLAN_FILE = "plan.json"


def _union(first: list[Any], second: list[Any]) -> list[Any]:
    """Every item of ``first``, then of ``second``, once each, in first-seen order."""
    return list(dict.fromkeys(first + second))


def plan_record(plan: Plan, jobs: list[Job], seeds: tuple[int, ...]) -> dict[str, Any]:
    """The record of one invocation: ``plan`` expanded into ``jobs`` with ``seeds``."""
    arms = _union([], [j.arm for j in jobs])
    entry = {
        "plan": plan.name,
        "title": plan.title,
        "profile": profile_label(jobs[0].profile_path),
        "arms": arms,
        "envs": _union([], [j.env for j in jobs]),
        "seeds": format_seeds(parse_seeds(seeds)),
    }
    if plan.setting is not None:
        entry["setting"] = plan.setting
    if plan.peers:  # arms another program writes into the experiment: a report plays no checkpoint of theirs
        entry["peers"] = list(plan.peers)
    deviations = {j.arm: list(j.deviation[2]) for j in jobs if j.deviation is not None}
    if plan.ablate is not None:
        # Which arm is the base each deviation arm is compared with (analysis.ablation).
        base, ablate = (Path(a).stem for a in (plan.arms[0], plan.ablate))
        entry["ablation"] = {"base": base, "ablate": ablate, "deviations": deviations}
        if plan.design is not None:  # each arm's switches, for analysis.factorial
            entry["ablation"]["design"] = design_record(plan)
    sets: dict[str, list[str]] = {}
    for job in jobs:
        for key, text in job.overrides:
            sets.setdefault(key, [])
            if text not in sets[key]:
                sets[key].append(text)
    if sets:
        entry["set"] = [f"{key}={','.join(texts)}" for key, texts in sets.items()]
    rows = [
        {"arm": j.arm, "env": j.env, "seed": j.seed, "n_steps": j.n_steps, "frames": j.frames} for j in jobs
    ]
    return {"plans": [entry], "arms": arms, "jobs": rows}


def _same_invocation(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two plan entries ask for the same runs (a rerun that resumes), whatever their titles."""
    return {k: v for k, v in a.items() if k != "title"} == {k: v for k, v in b.items() if k != "title"}


def merge_records(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` (the experiment's record) with ``new``'s invocation added to its history (see the
    module docstring): earlier entries are kept as written."""
    plans = [dict(p) for p in old.get("plans", [])]
    plans += [e for e in new["plans"] if not any(_same_invocation(e, p) for p in plans)]
    jobs = {(j["arm"], j["env"], j["seed"]): j for j in old.get("jobs", []) + new["jobs"]}
    return {"plans": plans, "arms": _union(old.get("arms", []), new["arms"]), "jobs": list(jobs.values())}


def _read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; None when absent or not this module's format."""
    try:
        old = json.loads(read_regular(path))
    except (OSError, json.JSONDecodeError):
        return None
    return old if isinstance(old, dict) and isinstance(old.get("plans"), list) else None


def invocation_note(experiment_dir: Path, plan: Plan, jobs: list[Job], seeds: Any) -> str | None:
    """One line when this invocation adds runs (arms, envs or seeds) to an experiment that another
    invocation wrote: what it adds, that the report covers both, and how to keep them apart; None for
    a new experiment or a rerun of one of its invocations."""
    old = _read_record(Path(experiment_dir) / PLAN_FILE)
    if old is None:
        return None
    (entry,) = plan_record(plan, jobs, seeds)["plans"]
    if any(_same_invocation(entry, p) for p in old["plans"]):
        return None
    known = {(j["arm"], j["env"], j["seed"]) for j in old.get("jobs", [])}
    added = [j for j in jobs if (j.arm, j.env, j.seed) not in known]
    if not added:
        return None
    parts = []
    for what, values, before in (
        ("arms", [j.arm for j in added], {k[0] for k in known}),
        ("envs", [j.env for j in added], {k[1] for k in known}),
    ):
        new_values = [v for v in dict.fromkeys(values) if v not in before]
        if new_values:
            parts.append(f"{what} {', '.join(new_values)}")
    new_seeds = sorted({j.seed for j in added} - {k[2] for k in known})
    if new_seeds:
        parts.append(f"seed {new_seeds[0]}" if len(new_seeds) == 1 else f"seeds {format_seeds(new_seeds)}")
    what = "; ".join(parts) or f"{len(added)} runs"
    n = len(old["plans"])
    return (
        f"note: adding {what} to experiment {Path(experiment_dir).name}, which {n} earlier "
        f"invocation{'s' if n > 1 else ''} wrote (its report covers all of them; plan.json keeps each "
        "invocation); --exp NAME runs a separate experiment"
    )


def write_plan_record(experiment_dir: Path, plan: Plan, jobs: list[Job], seeds: int) -> Path:
    """Write (or add to) ``experiment_dir/plan.json``; returns its path. A record that cannot be read
    (not this module's format) is replaced."""
    path = Path(experiment_dir) / PLAN_FILE
    record = plan_record(plan, jobs, seeds)
    old = _read_record(path)
    if old is not None:
        record = merge_records(old, record)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)
    return path


def check_storage(run_dirs: Sequence[Path]) -> None:
    """``ConfigError`` unless every job's run directory can be created: a directory made and removed
    at once in the nearest existing folder above each experiment directory, the only test that holds
    for root too (``os.access`` grants root a write that /proc, a read-only mount or a file refuses).
    Run before anything else by ``run`` and by its dry run alike; nothing stays."""
    for root in {Path(r).absolute().parents[2] for r in run_dirs}:
        probe = root
        while not probe.exists() and not probe.is_symlink():
            probe = probe.parent
        try:
            os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".repro-probe-"))
        except OSError as e:
            raise ConfigError(f"cannot write run directories under {root}: {probe}: {e.strerror}") from None
