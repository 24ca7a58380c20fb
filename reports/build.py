"""Build one self-contained HTML page for an experiment directory.

The page holds everything inline (figures as base64 PNG, CSS in the page, no scripts, no network):
what ran, config differences between arms, per-game learning curves with 95% CI bands, aggregate
metrics with 95% intervals that hold at a few seeds (analysis/intervals.py), performance profiles,
probability of improvement,
sample-efficiency curves, the per-game comparison with published scores (R2D2's for Atari games,
Young & Tian's DQN curves for MinAtar), the throughput table, and every run that was missing,
failed, damaged or left out, with the reason.

Results come first: a two-arm experiment opens with its verdict (``analysis.verdict``: which arm is
better, or that no difference was detected, with its interval, and the smallest difference the
experiment could detect; a smoke run: no comparison), then
the aggregates, then the per-game comparison with published results; what ran and how follow.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from algorithms.rundir import atomic_write_bytes, check_output
from analysis.curves import score_tables, source_switch_sentence
from analysis.learning import cut_bounds, smoke_sentence
from analysis.preregistered import registration
from analysis.runs import KEYS, load_experiment
from analysis.scores import Bounds
from analysis.study import learning_checks
from reports import figures
from reports.clips import clips_section
from reports.confirmatory_sections import (
    effects_section,
    learning_section,
    registration_section,
    verdict_section,
)
from reports.cut_notes import with_smoke
from reports.factorial import factorial_section
from reports.labels import labels_note, relabelled, sweep_labels
from reports.page import REPORT_FILE, Section, render, write_figures
from reports.published_sections import minatar_published_section, published_section
from reports.run_sections import problems_section, throughput_section
from reports.score_sections import aggregate_sections, curves_section
from reports.setup_sections import config_section, mixed_config_section, what_ran


# --- page ---------------------------------------------------------------------------------------
def build_report(
    experiment_dir: Path | str,
    out: Path | str | None = None,
    reps: int = 2000,
    table: str = "r2d2",
    baseline: str | None = None,
    bounds: Bounds | None = None,
    figures_dir: Path | str | None = None,
) -> Path:
    """Write the experiment's report (default ``<experiment_dir>/report.html``) and return its path.
    ``baseline``: arm A of a two-arm verdict (default: ``analysis.verdict.order_arms``); ``bounds``:
    per-env score bounds (``analysis.scores.read_bounds``) for envs without a shipped reference;
    ``figures_dir``: also write each figure there as ``<figure id>.png`` (``write_figures``).

    Raises ``FileNotFoundError`` when the directory holds no run at all; anything less (damaged runs,
    no complete run) still gives a page that says what it skipped."""
    labels = sweep_labels(exp := load_experiment(experiment_dir))
    exp = relabelled(exp, labels)
    colours = figures.arm_colours(exp.arms)
    scores = score_tables(exp, table, bounds)
    reg = registration(exp.path, exp.metadata, exp.plan)
    context = [what_ran(exp), config_section(exp)]
    context[0].notes += labels_note(labels)
    if switched := source_switch_sentence(exp):
        context[0].statements.append(switched)
    left_out = pd.DataFrame(columns=KEYS)
    if scores.final.empty:
        sections = context + [
            Section("results", "Results", notes=["no complete run with a score: nothing to aggregate"])
        ]
    else:
        bounds = cut_bounds(exp, scores)
        checks = learning_checks(exp, scores, reps, reg=reg)
        smoke = smoke_sentence(exp.plan) is not None  # a smoke run gets no comparison (with_smoke)
        verdict_part = None if smoke else verdict_section(exp, scores, reps, baseline, reg, checks.levels)
        if verdict_part is None and checks.learning_lead:
            verdict_part = Section("verdict", "Verdict", statements=[checks.learning_lead])
        verdict_part = with_smoke(verdict_part, exp.plan)
        aggregates, left_out = aggregate_sections(exp, scores, colours, reps, bounds)
        published = [
            published_section(scores, colours, bounds),
            minatar_published_section(exp, scores, bounds),
        ]
        sections = [
            section
            for section in (
                [
                    verdict_part,
                    learning_section(checks, bounds),
                    effects_section(checks),
                    factorial_section(checks),
                ]
                + aggregates
                + published
                + [curves_section(scores, colours, bounds), clips_section(exp)]
                + context
            )
            if section is not None
        ]
    # A frozen analysis is the page's headline; without one, the verdict stays first and the line that
    # labels it exploratory follows it.
    sections.insert(0 if reg.frozen else 1, registration_section(exp, scores, reg, reps))
    if (mixed := mixed_config_section(exp)) is not None:  # above every result it qualifies
        sections.insert(0, mixed)
    sections.append(throughput_section(exp, colours))
    sections.append(problems_section(exp, left_out))
    html = render(
        title=f"Experiment {exp.name}",
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        normalisation=scores.normalisation,
        sections=sections,
    )
    path = Path(out) if out is not None else exp.path / REPORT_FILE
    check_output(path)  # before the figures: a refused report writes nothing
    if figures_dir is not None:
        write_figures(sections, Path(figures_dir))
    atomic_write_bytes(path, html.encode("utf-8"))  # a full disk leaves the old report, never half of one
    return path
