"""Runs that were interrupted and resumed from a checkpoint.

Each later start of a run is an entry of its metadata.json's ``resumes`` (``RunDir.note_resume``:
its time, the env steps it continued from, its code and host), read with ``analysis.runs.run_starts``.
Runs written before that record existed are read from their ``log.txt``: every attempt appends a
header there (``repro/tasks.py``: "=== attempt N on SLOT at TIME: ..."), so a run with more than one
header was started again (the scheduler reruns only runs not complete, and a rerun resumes from the
run's latest checkpoint), and where it resumed is the line ``algorithms.train.open_run`` writes on
resuming ("resumed from its checkpoint at 125,040 env steps"; a repaired run says "resuming from
previous.pt at ...", one whose checkpoint lacked some state "resuming at ... without ..."); logs
written before that line existed say only that it resumed. Whether a resumed run continues exactly as
the uninterrupted one depends on what its checkpoint held (docs/results/resume_exact.md), and a run
resumed on another host computes on another CPU's floating point, so the study lists them for the
reader to weigh.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from algorithms.rundir.layout import LOG_FILE
from analysis.runs import KEYS, Experiment, run_starts

RESUMED_COLUMNS = [*KEYS, "attempts", "started", "resumed_at", "hosts"]
ATTEMPT = re.compile(r"^=== attempt \d+ on \S+ at (\S+):", re.MULTILINE)
RESUMING = re.compile(r"resum(?:ed|ing) (?:from [^\n]*? )?at ([\d,]+) env steps")


def resumed_runs(exp: Experiment) -> pd.DataFrame:
    """``RESUMED_COLUMNS``, one row per complete run of ``exp`` started more than once: its starts,
    their times (comma-separated), the env steps it resumed at (comma-separated; "not recorded" in
    logs from before the line existed) and, when its starts ran on more than one CPU model, those
    models in the order of the starts (else empty)."""
    metadata = exp.metadata.set_index(KEYS) if not exp.metadata.empty else exp.metadata
    rows = []
    for run in exp.complete.itertuples():
        key = (run.arm, run.env, run.seed)
        starts = run_starts(metadata.loc[key].to_dict()) if key in metadata.index else []
        if len(starts) > 1:
            times = [str(s.get("time")) for s in starts]
            steps = [s.get("env_steps") for s in starts[1:]]
            resumed_at = ", ".join("?" if n is None else f"{int(n):,}" for n in steps)
            models = list(dict.fromkeys(str(s.get("cpu_model")) for s in starts if s.get("cpu_model")))
            hosts = ", ".join(str(s.get("cpu_model", "?")) for s in starts) if len(models) > 1 else ""
        else:
            log = Path(run.path) / LOG_FILE
            text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
            times = ATTEMPT.findall(text)
            if len(times) < 2:
                continue
            found = list(dict.fromkeys(RESUMING.findall(text)))  # one resume may say so twice
            resumed_at, hosts = ", ".join(found) or "not recorded", ""
        rows.append([run.arm, run.env, run.seed, len(times), ", ".join(times), resumed_at, hosts])
    return pd.DataFrame(rows, columns=RESUMED_COLUMNS)


def resumed_lines(resumed: pd.DataFrame) -> list[str]:
    """The study page's section on resumed runs (nothing when none was)."""
    if resumed.empty:
        return []
    items = [
        (f"- {r.arm}/{r.env}/seed{r.seed}: {r.attempts} attempts (started {r.started}), resumed at "
         f"{r.resumed_at} env steps" if r.resumed_at != "not recorded" else
         f"- {r.arm}/{r.env}/seed{r.seed}: {r.attempts} attempts (started {r.started}), resumed from its "
         "latest checkpoint (where: not recorded in its log.txt)")
        + (f"; on more than one CPU, start by start: {r.hosts}" if r.hosts else "")
        for r in resumed.itertuples()
    ]  # fmt: skip
    return [
        "## Runs resumed from a checkpoint",
        "",
        f"{len(resumed)} complete run(s) were interrupted and resumed from a checkpoint (their "
        "metadata.json's resumes, or their log.txt; "
        "analysis/interruptions.py):",
        "",
        *items,
        "",
    ]
