"""Runs that were interrupted and resumed from a checkpoint, read from each run's ``log.txt``.

Every attempt at a run appends a header to its ``log.txt`` (``repro/tasks.py``: "=== attempt N on
SLOT at TIME: ..."), so a run with more than one header was started again: the scheduler reruns only
runs not complete, and a rerun resumes from the run's latest checkpoint. Where it resumed is the line
``algorithms.train.open_run`` writes on resuming ("resumed from its checkpoint at 125,040 env steps";
a repaired run says "resuming from previous.pt at ...", one whose checkpoint lacked some state
"resuming at ... without ..."); logs written before that line existed say only that it resumed.
Whether a resumed run continues exactly as the uninterrupted one depends on what its checkpoint held
(docs/results/resume_exact.md), so the study lists them for the reader to weigh.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from algorithms.rundir.layout import LOG_FILE
from analysis.runs import KEYS, Experiment

RESUMED_COLUMNS = [*KEYS, "attempts", "started", "resumed_at"]
ATTEMPT = re.compile(r"^=== attempt \d+ on \S+ at (\S+):", re.MULTILINE)
RESUMING = re.compile(r"resum(?:ed|ing) (?:from [^\n]*? )?at ([\d,]+) env steps")


def resumed_runs(exp: Experiment) -> pd.DataFrame:
    """``RESUMED_COLUMNS``, one row per complete run of ``exp`` started more than once: its attempts,
    their start times (comma-separated) and the env steps it resumed at (comma-separated; "not
    recorded" in logs from before the line existed)."""
    rows = []
    for run in exp.complete.itertuples():
        log = Path(run.path) / LOG_FILE
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        starts = ATTEMPT.findall(text)
        if len(starts) < 2:
            continue
        steps = list(dict.fromkeys(RESUMING.findall(text)))  # one resume may say so twice
        resumed_at = ", ".join(steps) or "not recorded"
        rows.append([run.arm, run.env, run.seed, len(starts), ", ".join(starts), resumed_at])
    return pd.DataFrame(rows, columns=RESUMED_COLUMNS)


def resumed_lines(resumed: pd.DataFrame) -> list[str]:
    """The study page's section on resumed runs (nothing when none was)."""
    if resumed.empty:
        return []
    items = [
        f"- {r.arm}/{r.env}/seed{r.seed}: {r.attempts} attempts (started {r.started}), resumed at "
        f"{r.resumed_at} env steps" if r.resumed_at != "not recorded" else
        f"- {r.arm}/{r.env}/seed{r.seed}: {r.attempts} attempts (started {r.started}), resumed from its "
        "latest checkpoint (where: not recorded in its log.txt)"
        for r in resumed.itertuples()
    ]  # fmt: skip
    return [
        "## Runs resumed from a checkpoint",
        "",
        f"{len(resumed)} complete run(s) were interrupted and resumed from a checkpoint (their log.txt; "
        "analysis/interruptions.py):",
        "",
        *items,
        "",
    ]
