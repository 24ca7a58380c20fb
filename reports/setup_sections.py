"""The report's account of what ran (plan, profile, metadata of the runs) and how the arms' configs
differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.configdiff import (
    ABSENT,
    config_diff,
    effective_table,
    mixed_config_lines,
    mixed_configs,
    origins_table,
    run_effective_values,
    shown,
)
from analysis.markdown import fmt
from analysis.runs import Experiment, run_starts
from protocol.files import profile_label
from protocol.plan_args import seeds_label
from reports.page import Section, Table, frame_table

# Metadata shown under "what ran": (label, flattened metadata column).
METADATA_FIELDS = (
    ("git commit", "git_commit"),
    ("git dirty", "git_dirty"),
    ("host", "hostname"),
    ("CPU", "cpu_model"),
    ("CPU count", "cpu_count"),
    ("GPU", "gpu_model"),
    ("GPU count", "gpu_count"),
    ("Python", "python"),
    ("torch", "packages.torch"),
    ("numpy", "packages.numpy"),
    ("gymnasium", "packages.gymnasium"),
    ("ale-py", "packages.ale-py"),
    ("platform", "platform"),
)


# --- plan and profile -----------------------------------------------------------------------------
# "set": the command line's --set values (repro/record.py), a sweep's as key=a,b,c
PLAN_FIELDS = ("plan", "title", "profile", "arms", "envs", "seeds", "set")


def _plan_entries(plan: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The plans of the experiment's plan file: its ``plans`` as ``repro/record.py`` writes them, or
    the file itself as one plan when it holds one plan's fields at the top level (another tool's)."""
    if not plan or "error" in plan:
        return []
    entries = plan["plans"] if isinstance(plan.get("plans"), list) else [plan]
    return [e for e in entries if isinstance(e, dict) and any(k in e for k in ("plan", "title", "arms"))]


def _plan_field(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if key == "seeds" and value is not None:
        label = seeds_label(value)
        return fmt(value) if label is None else label
    return ", ".join(map(str, value)) if isinstance(value, list) else fmt(value)


def _profile_name(arg: str) -> str:
    """A job command line's ``--profile`` (runs without a plan file) as a name: a shipped profile,
    also one given by its path in whichever checkout ran it, by its name; another file as
    ``protocol.files.profile_label`` names it (relative to the repository)."""
    path = Path(arg)
    if path.suffix != ".toml":
        return arg
    if path.parent.parts[-3:] == ("repro", "configs", "profiles"):
        return path.stem
    return profile_label(path)


# --- sections -----------------------------------------------------------------------------------
def what_ran(exp: Experiment) -> Section:
    section = Section("what-ran", "What ran")
    counts = exp.runs.groupby("status").size().to_dict()
    section.intro = (
        f"Experiment {exp.name} at {exp.path}: {len(exp.runs)} run directories "
        f"({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}), "
        f"{len(exp.arms)} arms x {len(exp.envs)} envs."
    )
    plans = _plan_entries(exp.plan)
    if plans:
        section.tables.append(
            Table(
                "plan",
                list(PLAN_FIELDS),
                [[_plan_field(p, k) for k in PLAN_FIELDS] for p in plans],
                "from plan.json, written by python -m repro run; its jobs are the expected runs",
            )
        )
    elif exp.plan is not None:
        section.notes.append(f"plan file unusable: {exp.plan.get('error', 'no plan in it')}")
    else:
        section.notes.append(
            "no plan file (plan.json) at the experiment root: expected runs are taken to be, for each arm, "
            "the envs it ran x every seed seen in the experiment"
        )
    algos = (
        exp.config[exp.config.key == "algo"]
        .groupby("arm")
        .value.agg(lambda v: ", ".join(sorted(set(map(str, v)))))
    )
    by_arm = exp.runs.groupby("arm").agg(
        envs=("env", lambda v: ", ".join(sorted(set(v)))),
        seeds=("seed", lambda v: ", ".join(map(str, sorted(set(v))))),
        runs=("seed", "size"),
    )
    by_arm["algo"] = algos.reindex(by_arm.index)
    section.tables.append(
        frame_table(
            "arms",
            by_arm.reset_index(),
            [("arm", "arm"), ("algorithm", "algo"), ("envs", "envs"), ("seeds", "seeds"), ("runs", "runs")],
        )
    )
    meta = exp.metadata
    starts = [run_starts(row) for row in meta.to_dict("records")]
    later = [start for run in starts for start in run[1:]]
    rows = []
    for label, column in METADATA_FIELDS:
        # A run resumed on another host, or from other code, shows that host's values here too.
        found = {fmt(v) for v in meta[column]} if column in meta else set()
        found |= {fmt(start[column]) for start in later if column in start}
        rows.append([label, ", ".join(sorted(found)) if found else "not recorded"])
    commands = [json.loads(a) for a in meta["argv"].dropna()] if "argv" in meta else []
    profiles = sorted({str(p["profile"]) for p in plans if p.get("profile")}) or sorted(
        {_profile_name(c[c.index("--profile") + 1]) for c in commands if "--profile" in c[:-1]}
    )
    rows.append(
        [
            "profile",
            ", ".join(profiles) if profiles else "not recorded (no --profile on the job command line)",
        ]
    )
    if commands:
        rows.append(["command (first run)", " ".join(commands[0])])
    if "start_time" in meta and meta.start_time.notna().any():
        rows.append(["started", f"{meta.start_time.min()} to {meta.start_time.max()}"])
    if later:
        resumed = sum(len(run) > 1 for run in starts)
        rows.append(["resumed", f"{len(later)} later start(s) of {resumed} run(s) (metadata.json)"])
    caption = "code version and hardware of every start of every run"
    section.tables.append(Table("hardware", ["what", "value (all runs)"], rows, caption))
    return section


# (label, column) of the table of values in effect (``analysis.configdiff.effective_table``).
EFFECTIVE_COLUMNS = (
    ("arm", "arm"), ("key", "key"), ("stated", "stated"), ("in effect", "in_effect"), ("why", "reason"),
    ("runs", "runs"),
)  # fmt: skip


def config_section(exp: Experiment) -> Section:
    effective = run_effective_values(exp.metadata)
    diff = config_diff(exp.configs, effective)
    section = Section(
        "config-diff",
        "Config differences between arms",
        "Keys (flattened, from each run's config.json) on which the runs of every arm agree and the arms "
        "differ; keys that vary inside an arm (seed, env id) are omitted, and keys only some arms record "
        "are listed apart. A value another key overrides (recorded in metadata.json when the run "
        "started) is compared as it ran and shows as 'X in effect (stated Y)'.",
    )
    origins = origins_table(exp.configs)
    from_command_line = {(r.arm, r.key) for r in origins.itertuples()}
    cells = diff.assign(
        **{
            arm: [
                shown(v) + (" (command line)" if (arm, key) in from_command_line else "")
                for key, v in zip(diff.key, diff[arm])
            ]
            for arm in diff.columns[1:]
        }
    )
    # An arm of another algorithm or implementation (SB3's PPO beside ours) names its settings
    # otherwise: its keys, absent from the other arms, would bury the keys both record and differ in.
    one_sided = diff.iloc[:, 1:].map(lambda v: isinstance(v, str) and v == ABSENT).any(axis=1)
    columns = [(c, c) for c in diff.columns]
    if len(exp.arms) < 2:
        section.notes.append("one arm only: nothing to compare")
    elif diff.empty:
        section.notes.append("the arms' configs are identical")
    elif one_sided.all():
        section.notes.append("no key that every arm records differs between the arms")
    else:
        section.tables.append(frame_table("config-diff-table", cells[~one_sided], columns))
    if len(exp.arms) >= 2 and one_sided.any():
        caption = (
            f"{int(one_sided.sum())} keys some arms do not record: an arm of another algorithm or another "
            "implementation names its settings otherwise, so these are not compared value to value"
        )
        section.tables.append(frame_table("config-one-side-table", cells[one_sided], columns, caption, True))
    if not origins.empty:
        section.tables.append(
            frame_table(
                "command-line-table",
                origins,
                [
                    ("arm", "arm"),
                    ("key", "key"),
                    ("value", "value"),
                    ("origin", "origin"),
                    ("source", "source"),
                    ("runs", "runs"),
                ],
                "values no settings file gave, as each run's config.json records them (origins)",
            )  # fmt: skip
        )
    overridden = effective_table(exp.configs, effective)
    if not overridden.empty:
        section.tables.append(
            frame_table(
                "effective-values-table",
                overridden,
                list(EFFECTIVE_COLUMNS),
                "values the runs used in place of the stated ones, and the key that made it so",
            )
        )
    return section


def mixed_config_section(exp: Experiment) -> Section | None:
    """The page's warning, on top, when the runs of an arm differ in config (``mixed_configs``): one
    line per arm naming the keys, and the values with the seeds that ran each; ``None`` when every
    arm ran one configuration."""
    mixed = mixed_configs(exp.configs, run_effective_values(exp.metadata))
    if mixed.empty:
        return None
    columns = [("arm", "arm"), ("env", "env"), ("key", "key"), ("values (seeds)", "values")]
    return Section(
        "mixed-configs",
        "Arms whose runs differ in config",
        statements=mixed_config_lines(mixed),
        tables=[frame_table("mixed-config-table", mixed, columns)],
    )
