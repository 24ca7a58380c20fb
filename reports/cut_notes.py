"""Notes the report's sections share: cut evaluations and their IQM intervals, runs left out, smoke
runs, the normalisation bounds (``analysis.learning``, ``analysis.scores``)."""

from __future__ import annotations

import pandas as pd

from analysis.learning import CUT_MARKS, SMOKE_COMPARISON, smoke_sentence
from analysis.markdown import fmt
from analysis.scores import Bounds
from protocol.files import repo_path
from reports.page import Section, Table


def bounds_table(bounds: Bounds, envs: list[str]) -> Table:
    rows = [
        [env, fmt(r.low), r.low_source, fmt(r.high), r.high_source]
        for env, r in bounds.scores.loc[[e for e in envs if e in bounds.scores.index]].iterrows()
    ]
    return Table(
        "bounds-table",
        ["env", "0 (random play)", "source", "1 (reference)", "source of the reference"],
        rows,
        f"the normalisation: (score - random) / (reference - random); {repo_path(bounds.path)}",
    )


# The two IQM intervals of one arm the report shows, named where either appears.
LEVEL_INTERVALS = (
    "The learning check's level is each env's mean over every complete run of the arm there (t interval); "
    "the aggregates' IQM uses the runs kept to balance the arms and envs (those left out are listed "
    "beside them), as the verdict does (the stratified bootstrap's standard error with a t quantile, "
    "analysis/intervals.py)."
)


def cut_caption(arm_bounds: dict[str, str]) -> str:
    """A figure's caption naming its arms whose figures come from cut evaluations, with their mark."""
    if not arm_bounds:
        return ""
    arms = ", ".join(f"{arm} ({CUT_MARKS[b]})" for arm, b in sorted(arm_bounds.items()))
    return f"From evaluations cut at the harness's cap: {arms}; the marks are explained below the table."


def left_out_notes(left_out: pd.DataFrame) -> list[str]:
    """The runs left out of the aggregates to balance the arms, named beside the figures they change."""
    if left_out.empty:
        return []
    runs = ", ".join(f"{r.arm}/{r.env}/seed{r.seed}" for r in left_out.itertuples())
    return [
        f"Left out of these aggregates to give every arm the same envs and runs per env: {runs}. The "
        "per-env final scores (learning curves) and the learning check use every complete run, so their "
        "means can differ from these."
    ]


def with_smoke(section: Section | None, plan: dict | None) -> Section | None:
    """The verdict section opened by ``analysis.learning.SMOKE_SENTENCE`` and
    ``analysis.learning.SMOKE_COMPARISON`` when a smoke profile ran (the caller computes no verdict)."""
    sentence = smoke_sentence(plan)
    if sentence is None:
        return section
    if section is None:
        return Section("verdict", "Verdict", statements=[sentence, SMOKE_COMPARISON])
    section.statements[:0] = [sentence, SMOKE_COMPARISON]
    return section
