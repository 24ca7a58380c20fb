"""Build one self-contained HTML page for an experiment directory.

The page holds everything inline (figures as base64 PNG, CSS in the page, no scripts, no network):
what ran, config differences between arms, per-game learning curves with 95% CI bands, aggregate
metrics with 95% stratified-bootstrap CIs, performance profiles, probability of improvement,
sample-efficiency curves, the per-game comparison with published scores (R2D2's for Atari games,
Young & Tian's DQN curves for MinAtar), the throughput table, and every run that was missing,
failed, damaged or left out, with the reason.

Results come first: a two-arm experiment opens with its verdict (``analysis.verdict``: which arm is
better, or that the data cannot tell, and the smallest difference the experiment could detect), then
the aggregates, then the per-game comparison with published results; what ran and how follow.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import pandas as pd

from algorithms.rundir import atomic_write_bytes
from analysis import aggregate, verdict
from analysis.ablation import PLANNED_DIFFERENCE, ablation_record, verdict_arms
from analysis.configdiff import InEffect, config_diff, effective_table, origins_table, run_effective_values
from analysis.confirmatory import Registration, endpoint_table, registration, run_label
from analysis.curves import Scores, resample_curves, score_tables
from analysis.learning import (
    CUT_MARKS,
    arm_caps,
    arm_cut_bounds,
    cut_bounds,
    cut_legend,
    marked,
    metric_bound,
    smoke_sentence,
)
from analysis.markdown import ci_text, fmt
from analysis.published import TRAINING_LAST, minatar_like_for_like
from analysis.robust import Robustness, balanced_runs, middle_sentence, robust_verdict
from analysis.runs import KEYS, Experiment, load_experiment
from analysis.scores import Bounds, is_minatar, minatar_published_curves, minatar_reference_table
from analysis.study import Checks, learning_checks
from analysis.study_markdown import effect_game_intro, effect_game_table
from analysis.throughput import arm_throughput, run_throughput
from protocol.files import profile_label, repo_path
from protocol.plan_args import seeds_label
from reports import figures
from reports.factorial import factorial_section
from reports.page import REPORT_FILE, Figure, Section, Table, frame_table, render, write_figures

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
THROUGHPUT_COLUMNS = (
    ("runs", "n_runs"),
    ("env steps", "env_steps"),
    ("frames", "frames"),
    ("updates", "updates"),
    ("steps/s", "steps_per_second"),
    ("frames/s", "frames_per_second"),
    ("updates/s", "updates_per_second"),
    ("replay ratio (trained)", "replay_ratio_trained"),
    ("replay ratio (with burn-in)", "replay_ratio_with_burnin"),
    ("wall time (s)", "wall_time_s"),
    ("sampling %", "share_sampling"),
    ("optimizing %", "share_optimizing"),
    ("evaluating %", "share_evaluating"),
    ("logging %", "share_logging"),
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
def _what_ran(exp: Experiment) -> Section:
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
    rows = []
    for label, column in METADATA_FIELDS:
        values = sorted({fmt(v) for v in meta[column]}) if column in meta else ["not recorded"]
        rows.append([label, ", ".join(values)])
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
    section.tables.append(Table("hardware", ["what", "value (all runs)"], rows, "code version and hardware"))
    return section


# (label, column) of the table of values in effect (``analysis.configdiff.effective_table``).
EFFECTIVE_COLUMNS = (
    ("arm", "arm"), ("key", "key"), ("stated", "stated"), ("in effect", "in_effect"), ("why", "reason"),
    ("runs", "runs"),
)  # fmt: skip


def _config_cell(value: Any) -> str:
    """A config-diff cell: a value a run used in place of the stated one shows both, marked."""
    if isinstance(value, InEffect):
        return f"{fmt(value.value)} in effect (stated {fmt(value.stated)})"
    return fmt(value)


def _config_section(exp: Experiment) -> Section:
    effective = run_effective_values(exp.metadata)
    diff = config_diff(exp.configs, effective)
    section = Section(
        "config-diff",
        "Config differences between arms",
        "Keys (flattened, from each run's config.json) on which the runs of every arm agree and the arms "
        "differ; keys that vary inside an arm (seed, env id) are omitted. A value another key overrides "
        "(recorded in metadata.json when the run started) is compared as it ran and shows as "
        "'X in effect (stated Y)'.",
    )
    origins = origins_table(exp.configs)
    from_command_line = {(r.arm, r.key) for r in origins.itertuples()}
    if len(exp.arms) < 2:
        section.notes.append("one arm only: nothing to compare")
    elif diff.empty:
        section.notes.append("the arms' configs are identical")
    else:
        cells = diff.assign(
            **{
                arm: [
                    _config_cell(v) + (" (command line)" if (arm, key) in from_command_line else "")
                    for key, v in zip(diff.key, diff[arm])
                ]
                for arm in diff.columns[1:]
            }
        )
        section.tables.append(frame_table("config-diff-table", cells, [(c, c) for c in diff.columns]))
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


def _curves_section(
    scores: Scores, colours: dict[str, str], reps: int, bounds: dict[tuple[str, str], str]
) -> Section:
    sources = ", ".join(sorted(scores.curves.source.unique())) if len(scores.curves) else "none"
    section = Section(
        "learning-curves",
        "Learning curves",
        f"Raw score per env, the quantity of the final score, mean over seeds with a 95% bootstrap CI band "
        f"(seeds resampled). Source: {sources}.",
    )
    bands = aggregate.curve_bands(resample_curves(scores.curves, "score"), reps=reps)
    if bands.empty:
        section.notes.append(
            "no run has a learning curve (no progress rows with return_mean and no evaluations)"
        )
        return section
    section.figures.append(
        Figure(
            "fig-learning-curves",
            figures.learning_curves(bands, colours, "return"),
            "learning curves per env",
        )
    )
    rows = []
    for (arm, env), g in scores.final.groupby(["arm", "env"]):
        lo, hi = aggregate.bootstrap_mean_ci(g.score.to_numpy(float), reps=reps)
        norm = g.normalised.to_numpy(float)
        rows.append(
            [
                arm,
                env,
                fmt(len(g)),
                fmt(int(g.env_steps.max())),
                marked(ci_text(g.score.mean(), lo, hi), bounds.get((arm, env))),
                marked(fmt(norm.mean() * scores.scale), bounds.get((arm, env))),
            ]
        )
    section.tables.append(
        Table(
            "final-table",
            [
                "arm",
                "env",
                "runs",
                "env steps",
                "final score [95% CI]",
                f"{scores.label}{scores.unit} (mean)",
            ],
            rows,
            "final score per arm and env, the last point of each curve above: "
            + ", ".join(sorted(scores.final.source.unique())),
        )
    )
    section.notes += cut_legend(bounds.values())
    if not scores.training_curves.empty:
        training = aggregate.curve_bands(resample_curves(scores.training_curves, "score"), reps=reps)
        if not training.empty:
            section.figures.append(
                Figure(
                    "fig-training-curves",
                    figures.learning_curves(training, colours, "training return"),
                    "training returns per env",
                    "The runs evaluated once, at the end, so the curves above are single points. These are "
                    "the returns of the training episodes (progress.csv, exploration included): another "
                    "quantity than the final score, shown for the shape of learning only.",
                )
            )
    return section


def _poi_pairs(exp: Experiment, arms: list[str]) -> list[tuple[str, str]]:
    """The (X, Y) of each P(X > Y) shown: in an ablation, every other arm against the base (each
    ordered pair of ten arms would be 90 rows); otherwise each ordered pair of arms."""
    record = ablation_record(exp.plan)
    if record is not None and record["base"] in arms:
        return [(arm, record["base"]) for arm in arms if arm != record["base"]]
    return list(itertools.permutations(arms, 2))


def _aggregate_sections(
    exp: Experiment, scores: Scores, colours: dict[str, str], reps: int, bounds: dict[tuple[str, str], str]
) -> tuple[list[Section], pd.DataFrame]:
    label = scores.label
    matrices, games, left_out = aggregate.score_matrices(scores.final)
    agg = Section(
        "aggregates",
        "Aggregate metrics",
        f"Final scores, {scores.normalisation}. IQM, median, mean and optimality gap over runs x envs "
        f"({len(games)} envs common to all arms, {next(iter(matrices.values())).shape[0] if matrices else 0} "
        f"runs per env and arm) with 95% stratified-bootstrap CIs (rliable, {reps} resamples).",
    )
    if not games:
        agg.notes.append("no env was run to completion by every arm: no aggregate")
        return [agg], left_out
    if next(iter(matrices.values())).shape[0] == 1:
        agg.notes.append(
            "one run per env and arm: the bootstrap has nothing to resample, intervals are points"
        )
    scale, unit = scores.scale, scores.unit
    metrics = aggregate.aggregate_metrics(matrices, reps=reps)
    shown = metrics.assign(
        value=metrics.value * scale, ci_low=metrics.ci_low * scale, ci_high=metrics.ci_high * scale
    )
    table = shown.pivot(index="arm", columns="metric").swaplevel(axis=1)
    by_arm = arm_cut_bounds(bounds)
    rows = [
        [arm]
        + [
            marked(
                ci_text(*(table.loc[arm, (m, k)] for k in ("value", "ci_low", "ci_high"))),
                metric_bound(m, by_arm.get(arm)),
            )
            for m in aggregate.METRICS
        ]
        for arm in table.index
    ]
    agg.tables.append(
        Table(
            "aggregate-table",
            ["arm"] + [m + unit for m in aggregate.METRICS],
            rows,
            "point estimate [95% CI]; optimality gap: lower is better",
        )
    )
    agg.figures.append(
        Figure(
            "fig-aggregates",
            figures.interval_estimates(shown, colours, label + unit),
            "aggregates",
            _cut_caption(by_arm),
        )
    )
    agg.notes += cut_legend(by_arm.values()) + _left_out_notes(left_out) + [IQM_INTERVALS]
    if scores.bounds is not None:
        agg.tables.append(_bounds_table(scores.bounds, games))
    if not scores.comparable:
        agg.notes.append(
            "These scores are normalised within this experiment (the fallback): a one-arm experiment "
            "scores 1 on every env by construction. Give per-env bounds (reports build --bounds FILE) "
            "for scores that mean something across experiments."
        )

    profile = Section(
        "performance-profiles",
        "Performance profiles",
        "Fraction of runs (all envs) whose final score exceeds tau, with 95% CIs (Agarwal et al. 2021).",
    )
    profiles = aggregate.performance_profiles(matrices, reps=max(200, reps // 4))
    profile.figures.append(
        Figure(
            "fig-profiles",
            figures.performance_profiles(profiles, colours, label + " tau"),
            "performance profiles",
            _cut_caption(by_arm),
        )
    )
    sections = [agg, profile]
    arms = sorted(matrices)
    if len(arms) >= 2:
        poi = Section(
            "probability-of-improvement",
            "Probability of improvement",
            "P(X > Y): chance that a run of X scores above a run of Y on an env drawn at random "
            "(Mann-Whitney per env, averaged), 95% CI from independent stratified bootstraps. "
            "0.5 = no difference.",
        )
        pois = pd.DataFrame(
            [
                aggregate.probability_of_improvement(matrices, x, y, reps=reps)
                for x, y in _poi_pairs(exp, arms)
            ]
        )
        poi.tables.append(
            Table(
                "poi-table",
                ["comparison", "P(X > Y) [95% CI]"],
                [[f"P({r.x} > {r.y})", ci_text(r.value, r.ci_low, r.ci_high)] for r in pois.itertuples()],
            )
        )
        poi.figures.append(
            Figure("fig-poi", figures.probability_of_improvement(pois), "probability of improvement")
        )
        sections.append(poi)
    efficiency = Section(
        "sample-efficiency",
        "Sample efficiency",
        f"IQM of the {label} over runs x envs along training, 95% stratified-bootstrap CIs, on a common "
        "env-step grid (each run's curve interpolated, never extrapolated). The same quantity as the "
        f"aggregates ({', '.join(sorted(scores.curves.source.unique()))}): where every run ends at the "
        "same env step, the curve's last point is the aggregates' IQM.",
    )
    resampled = resample_curves(scores.curves, "normalised", grid_per=())
    if resampled.point.nunique() >= 2:
        curves = aggregate.sample_efficiency(resampled, reps=max(200, reps // 4))
        curves = curves.assign(
            iqm=curves.iqm * scale, ci_low=curves.ci_low * scale, ci_high=curves.ci_high * scale
        )
        efficiency.figures.append(
            Figure(
                "fig-sample-efficiency",
                figures.sample_efficiency(curves, colours, "IQM " + label + unit),
                "sample efficiency",
            )
        )
    else:
        efficiency.notes.append(
            "the runs share fewer than two points of the final score's quantity (evaluations only at the "
            "end): no curve"
        )
    sections.append(efficiency)
    return sections, left_out


def _robustness_tables(r: Robustness, scale: float, in_units: str) -> list[Table]:
    """The verdict across games (``analysis.robust``): each game's effect and test, and the verdict
    with each game left out."""
    correction = r.games.correction.iloc[0] if len(r.games) else "holm"
    games = Table(
        "verdict-games",
        ["game", f"{r.baseline} mean", f"{r.candidate} mean", "difference", "p (Mann-Whitney)",
         f"adjusted p ({correction})"],
        [[row.env, fmt(row.baseline_mean), fmt(row.candidate_mean), f"{row.difference:+.3g}", fmt(row.p),
          fmt(row.p_adjusted)] for row in r.games.itertuples()],
        f"Each game's own effect ({r.candidate} - {r.baseline}, mean final return), two-sided, adjusted "
        "across the games.",
    )  # fmt: skip
    loo = Table(
        "verdict-leave-one-out",
        ["left out", f"IQM difference{in_units} [95% CI]", f"P({r.candidate} > {r.baseline})", "better arm"],
        [[row.left_out, ci_text(row.difference, row.ci_low, row.ci_high, scale),
          ci_text(row.poi, row.poi_low, row.poi_high), row.winner or "neither"]
         for row in r.leave_one_out.itertuples()],
        "The verdict recomputed with each game left out (same rule, same bootstrap).",
    )  # fmt: skip
    return [games] + ([loo] if len(r.leave_one_out) else [])


def _registration_section(exp: Experiment, scores: Scores, reg: Registration, reps: int) -> Section:
    """The page's first section: whether an analysis was frozen before the data, its changes, and its
    endpoints tested as frozen (``analysis.confirmatory``)."""
    if not reg.frozen:
        return Section(
            "analysis-plan",
            "Analysis plan: none frozen",
            statements=[
                "Exploratory: no [analysis] section was frozen in this experiment before its runs "
                "(repro/preregister.py), so every result on this page is exploratory."
            ],
        )
    section = Section(
        "analysis-plan",
        "Analysis fixed before the data",
        f"The plan's [analysis] section (correction {reg.section.correction}, alpha {reg.section.alpha:g}), "
        "frozen before the first job of each seed set; a result is pre-registered when every run it uses "
        "started after the freeze, from the frozen commit.",
        statements=[f"Changed after runs existed: {n}" for n in reg.notes if "changed" in n],
        notes=[n for n in reg.notes if "changed" not in n],
    )
    section.tables.append(
        Table(
            "analysis-freezes",
            ["seed set", "seeds", "section hash", "commit", "frozen at", "dirty tree"],
            [[name, e["seeds"], str(e["hash"])[:12], str(e["commit"])[:12], e["frozen_at"],
              "yes (--allow-dirty)" if e.get("dirty") else "no"] for name, e in reg.freezes.items()],
        )
    )  # fmt: skip
    endpoints = endpoint_table(reg, scores.final, exp.metadata, ablation_record(exp.plan), reps)
    section.tables.append(
        Table(
            "analysis-endpoints",
            ["endpoint", "seed set", "seeds", "runs", "estimate [95% CI]", "test", "p", "adjusted p",
             "result", "label", "why"],
            [[r.endpoint, r.seed_set, r.seeds, fmt(r.runs), ci_text(r.estimate, r.ci_low, r.ci_high),
              f"{r.test}, {r.sides}", fmt(r.p), fmt(r.p_adjusted), "holds" if r.holds else "not shown",
              r.label, r.why] for r in endpoints.itertuples()],
            "Each frozen endpoint on each seed set: candidate minus baseline (raw returns for a game, "
            "normalised points for an aggregate), p of the frozen test adjusted across the set's endpoints.",
        )
    )  # fmt: skip
    return section


def _verdict_section(
    exp: Experiment, scores: Scores, reps: int, baseline: str | None, reg: Registration
) -> Section | None:
    """The verdict and power statement of a two-arm experiment or of an ablation's endpoints
    (``analysis.ablation.verdict_arms``), labelled pre-registered or exploratory, with the verdict
    across games (``analysis.robust``); None for any other experiment."""
    pair = verdict_arms(scores.final, exp.plan, baseline)
    if pair is None:
        return None
    a, b, matrices, games = pair
    if not scores.comparable:
        return Section(
            "verdict",
            "Verdict",
            f"Arm A (baseline) {a}, arm B {b}.",
            statements=[
                "No verdict: the scores are normalised within this experiment (min-max fallback), so a "
                "difference between the arms has no fixed scale and no detectable difference is computed. "
                "Give per-env score bounds with reports build --bounds FILE."
            ],
            notes=[f"Normalisation: {scores.normalisation}."],
        )
    scale, diff_unit = scores.scale, scores.difference_unit
    in_units = f" ({diff_unit.strip()})" if diff_unit else ""
    correction = reg.section.correction if reg.frozen else "holm"
    found, power, checked = robust_verdict(
        scores.final, matrices, games, a, b, reps, 0, correction, scores.label, scale, diff_unit,
        arm_caps(exp, scores),
    )  # fmt: skip
    label, why = run_label(reg, balanced_runs(scores.final), exp.metadata)
    section = Section(
        "verdict",
        f"Verdict ({label})",
        f"Arm A (baseline) {a}, arm B {b}; final scores, {scores.normalisation}; {len(games)} envs common "
        f"to both arms, {found.n_runs} runs per env and arm; {label}: {why}.",
        statements=[found.sentence, power.sentence],
    )
    diff = found.iqm_difference
    section.tables.append(
        Table(
            "verdict-table",
            ["statistic", "estimate [95% CI]"],
            [
                [f"P({b} > {a})", ci_text(found.poi["value"], found.poi["ci_low"], found.poi["ci_high"])],
                [
                    f"IQM difference {b} - {a}{in_units}",
                    ci_text(diff["value"], diff["ci_low"], diff["ci_high"], scale),
                ],
                [f"standard error of the IQM difference{in_units}", fmt(diff["se"] * scale)],
                [
                    f"smallest IQM difference detected with {power.power:.0%} power, two-sided alpha "
                    f"{power.alpha:.2g}{in_units}",
                    fmt(power.detectable * scale),
                ],
            ],
        )
    )
    section.tables += _robustness_tables(checked, scale, in_units)
    section.notes.append(
        f"Leaving out {' or '.join(checked.carried_by)} (one at a time) removes the verdict's resolution."
        if checked.carried_by
        else "No single game's removal changes the verdict."
    )
    section.notes.append(middle_sentence(checked))
    section.notes.append(f"Rule: {verdict.RULE} (analysis/verdict.py).")
    section.notes.append(f"Power: {power.method}.")
    section.notes.append(
        "A is the --baseline arm when given, else the plan's first arm (an ablation's: the setting it "
        "ablates), else the arm named 'published'."
    )
    return section


def _learning_section(study: Checks, arm_bounds: dict[str, str]) -> Section | None:
    """Each arm's level against random play and the published reference (``analysis.learning``). Its
    sentence for arms not shown to learn is the verdict's first (``build_report``), not repeated here."""
    if study.learning.empty:
        return None
    scale, unit = study.scores.scale, study.scores.unit
    frame = study.learning.assign(
        iqm_ci=[
            marked(ci_text(r.iqm, r.ci_low, r.ci_high, scale), arm_bounds.get(r.arm))
            for r in study.learning.itertuples()
        ],
        reference=study.learning.reference_iqm * scale,
        training=study.learning.get("training_iqm", float("nan")) * scale,
    )
    columns = [("arm", "arm"), ("runs per game", "runs"), (f"IQM{unit} [95% CI]", "iqm_ci"),
               ("evaluations cut at (steps)", "eval_cap"),
               ("shown to learn (above random play, whole episodes)", "learned"),
               *([(f"training IQM{unit}", "training")] if "training_iqm" in frame else []),
               (f"reference IQM{unit}", "reference"),
               ("share of reference", "share_of_reference")]  # fmt: skip
    return Section(
        "learning",
        "Learning check",
        f"Each arm's IQM of final {study.scores.label} from all of its own runs (widened 95% "
        f"stratified-bootstrap CI); random play is 0; the reference is {study.learning_reference}, its "
        "IQM over the same games.",
        tables=[frame_table("learning-table", frame, columns)],
        notes=([study.cut_short] if study.cut_short else [])
        + ([study.share_note] if study.share_note else [])
        + cut_legend(arm_bounds.values())
        + [IQM_INTERVALS],
    )


def _effects_section(study: Checks) -> Section | None:
    """Each deviation's effect on the IQM of an ablation experiment (``analysis.ablation``)."""
    effects = study.effects
    if effects.empty:
        return None
    scores = study.scores
    scale, unit = scores.scale, scores.difference_unit
    in_units = f" ({unit.strip()})" if unit else ""
    frame = effects.assign(
        difference_ci=[ci_text(r.difference, r.ci_low, r.ci_high, scale) for r in effects.itertuples()],
        se_shown=effects.se * scale,
        detectable_shown=effects.detectable * scale,
    )
    columns = [("deviation", "deviation"), ("keys", "keys"),
               (f"IQM difference to the base{in_units} [95% CI]", "difference_ci"),
               (f"standard error{in_units}", "se_shown"),
               (f"detectable with 80% power{in_units}", "detectable_shown"),
               (f"power at {PLANNED_DIFFERENCE * scale:g}{unit}", "power_at_planned")]  # fmt: skip
    base = effects.base.iloc[0]
    label = f"IQM difference to {base}{in_units}"
    return Section(
        "deviations",
        "Each deviation's effect",
        f"The base arm {base} with one deviation switched on, minus the base: IQM difference of final "
        f"{scores.label}, widened 95% stratified-bootstrap CI, ordered by size; dotted lines: the smallest "
        "difference detected with 80% power (two-sided, alpha 0.05).",
        figures=[
            Figure("fig-deviations", figures.deviation_effects(effects, label, scale), "deviation effects")
        ],
        tables=[frame_table("deviations-table", frame, columns), *_effect_game_tables(study.effect_games)],
    )


def _effect_game_tables(games: pd.DataFrame) -> list[Table]:
    """Each deviation's effect per game in raw returns (``analysis.study.effect_game_table``)."""
    if games.empty:
        return []
    columns, rows = effect_game_table(games)
    return [Table("deviation-games-table", columns, rows, effect_game_intro(games))]


def _bounds_table(bounds: Bounds, envs: list[str]) -> Table:
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


def _minatar_published_section(
    exp: Experiment, scores: Scores, reps: int, bounds: dict[tuple[str, str], str]
) -> Section | None:
    """Per MinAtar env and arm: our training return next to Young & Tian's DQN curve (a training
    return) at our frame count, our greedy evaluation beside it (``analysis.published``); ``bounds``:
    the cut marks of the greedy evaluations (``analysis.learning.cut_bounds``)."""
    if not any(is_minatar(env) for env in scores.final.env.unique()):
        return None
    section = Section(
        "published-minatar",
        "Comparison with published MinAtar results (Young & Tian 2019, DQN)",
        "The published DQN learning curve (Young & Tian 2019, arXiv:1903.03176) is a training return, so "
        f"our side is too: {TRAINING_LAST} (mean over seeds, 95% bootstrap CI). The curve is read at the "
        "frame count our runs reached (a MinAtar frame is an env step), linearly interpolated between the "
        "points read off the paper's figure; the range in brackets is the figure-reading uncertainty. Not "
        "extrapolated: '–' where our frame count lies outside the read-off points. Our greedy evaluation "
        "is shown beside it and compared with nothing (no greedy figure was published); our runs train "
        "under their own exploration (R2D1: one epsilon per actor), DQN's under epsilon 0.1.",
    )
    try:
        curves = minatar_published_curves()
    except FileNotFoundError as e:
        section.notes.append(f"no published MinAtar curves: {e.filename} is absent")
        return section
    try:
        comparison = minatar_like_for_like(exp, scores, curves, reps)
    except ValueError as e:
        section.notes.append(str(e))
        return section
    scale, unit = scores.scale, scores.unit
    rows = [
        [r.arm, r.env, fmt(r.n_runs), fmt(r.frames),
         marked(ci_text(r.eval_score, r.eval_ci_low, r.eval_ci_high), bounds.get((r.arm, r.env))),
         ci_text(r.score, r.ci_low, r.ci_high),
         ci_text(r.normalised, r.normalised_ci_low, r.normalised_ci_high, scale),
         ci_text(r.published, r.published_low, r.published_high), fmt(r.published_in_ci), fmt(r.overlap),
         r.published_protocol, r.published_source]
        for r in comparison.itertuples()
    ]  # fmt: skip
    section.tables.append(
        Table(
            "minatar-published-table",
            [
                "arm",
                "env",
                "runs",
                "frames",
                "greedy evaluation [95% CI]",
                "training return [95% CI]",
                f"training return, {scores.label}{unit} [95% CI]",
                "published DQN at these frames [reading range]",
                "published inside our CI",
                "our CI overlaps the reading range",
                "published protocol",
                "source of the published value",
            ],
            rows,
        )  # fmt: skip
    )
    section.notes += cut_legend(bounds.values())
    if scores.reference == "dqn":
        reference = minatar_reference_table().scores
        section.tables.append(
            Table(
                "minatar-reference-table",
                [
                    "env",
                    "random",
                    "random source",
                    "DQN at 5M frames [reading range]",
                    "frames",
                    "DQN source",
                ],
                [
                    [
                        env,
                        fmt(r.random),
                        r.random_source,
                        ci_text(r.dqn_5m, r.dqn_5m_low, r.dqn_5m_high),
                        fmt(r.frames),
                        r.dqn_5m_source,
                    ]
                    for env, r in reference.loc[sorted(set(scores.final.env))].iterrows()
                ],  # fmt: skip
                "the normalisation: DQN-normalised score = (score - random) / (DQN at 5M - random)",
            )
        )
    return section


def _published_section(
    scores: Scores, colours: dict[str, str], reps: int, bounds: dict[tuple[str, str], str]
) -> Section | None:
    comparison = aggregate.compare_with_published(scores.final, reps=reps)
    if comparison.empty:  # no Atari-57 game among the envs
        return None
    comparison["score_shown"] = [
        marked(fmt(v), bounds.get((arm, env)))
        for arm, env, v in zip(comparison.arm, comparison.env, comparison.score)
    ]
    section = Section(
        "published",
        "Comparison with published scores (R2D2)",
        "Our final raw score (mean over seeds, 95% bootstrap CI) next to R2D2's Table 4 (Kapturowski et al. "
        "2019; mean of 3 seeds after about 10 billion frames). A ratio well below 1 at a much smaller "
        "frame budget says little about the algorithm.",
    )
    columns = [
        ("arm", "arm"),
        ("game", "game"),
        ("runs", "n_runs"),
        ("frames", "frames"),
        ("our score", "score_shown"),
        ("CI low", "ci_low"),
        ("CI high", "ci_high"),
        ("R2D2", "published"),
        ("ratio", "ratio"),
        ("R2D2 inside our CI", "published_in_ci"),
    ]
    section.tables.append(frame_table("published-table", comparison, columns))
    section.figures.append(
        Figure(
            "fig-published",
            figures.published_ratios(comparison, colours),
            "ratio to R2D2",
            _cut_caption(arm_cut_bounds(bounds)),
        )
    )
    section.notes += cut_legend(bounds.values())
    return section


def _throughput_section(exp: Experiment, colours: dict[str, str]) -> Section:
    section = Section(
        "throughput",
        "Throughput and step accounting",
        "From each run's last progress row (algorithms.counters). Steps/s and updates/s count sampling + "
        "optimizing time only. Replay ratio: samples per env step, trained steps only (R2D2's counting) and "
        "with burn-in (rlpyt's). Time columns: share of wall time. Means over the arm's runs.",
    )
    per_run = run_throughput(exp)
    if per_run.empty:
        section.notes.append("no progress rows with counters")
        return section
    per_arm = arm_throughput(per_run)
    shares = [c for c in per_arm if c.startswith("share_")]
    section.tables.append(
        frame_table(
            "throughput-table",
            per_arm.assign(**{c: 100 * per_arm[c] for c in shares}),
            [("arm", "arm"), *THROUGHPUT_COLUMNS],
        )
    )
    section.figures.append(
        Figure("fig-time-split", figures.to_data_uri(figures.time_split_figure(per_arm)), "wall-time split")
    )
    columns = [("arm", "arm"), ("env", "env"), ("seed", "seed"), ("status", "status")] + [
        (label, key) for label, key in THROUGHPUT_COLUMNS if key in per_run and not key.startswith("share_")
    ]
    section.tables.append(frame_table("throughput-runs-table", per_run, columns, "per run"))
    return section


def _problems_section(exp: Experiment, left_out: pd.DataFrame) -> Section:
    section = Section("problems", "Missing, failed and skipped runs")
    section.tables.append(
        frame_table(
            "skipped-table",
            exp.skipped,
            [
                ("arm", "arm"),
                ("env", "env"),
                ("seed", "seed"),
                ("status", "status"),
                ("reason", "reason"),
                ("path", "path"),
            ],
            "runs not used for results (incomplete, failed or corrupt)",
        )
    )
    section.tables.append(
        frame_table(
            "missing-table",
            exp.missing,
            [("arm", "arm"), ("env", "env"), ("seed", "seed")],
            "expected runs with no run directory",
        )
    )
    if len(left_out):
        section.tables.append(
            frame_table(
                "left-out-table",
                left_out,
                [("arm", "arm"), ("env", "env"), ("seed", "seed")],
                "complete runs left out of the aggregates to keep the same envs and seed count for every arm",
            )
        )
    notes = exp.runs[(exp.runs.status == "complete") & (exp.runs.problems != "")]
    for row in notes.itertuples():
        section.notes.append(f"{row.arm}/{row.env}/seed{row.seed}: {row.problems}")
    return section


# --- sweep arms labelled by what differs ---------------------------------------------------------
# The prefix of a --set value's source in config.json's origins (repro.settings.command_line_entries).
SET_SOURCE = "--set "


def sweep_labels(exp: Experiment) -> dict[str, str]:
    """Arm -> what tells it apart from the other arms (``learning_rate=1e-4``): its ``--set`` values
    (config.json's origins) that not every arm shares; an arm with none keeps its name. Empty (no
    relabelling) for fewer than two arms, an ablation (its record names arms), or labels that would
    not be unique."""
    if len(exp.arms) < 2 or ablation_record(exp.plan) is not None:
        return {}
    origins = origins_table(exp.configs)
    sets = {arm: set() for arm in exp.arms}
    for row in origins.itertuples():
        if row.source.startswith(SET_SOURCE) and row.arm in sets:
            key, _, text = row.source.removeprefix(SET_SOURCE).partition("=")
            sets[row.arm].add((key, text))
    if not any(sets.values()):
        return {}
    common = set.intersection(*sets.values())
    labels = {
        arm: ", ".join(f"{key.rpartition('.')[2]}={text}" for key, text in sorted(pairs - common)) or arm
        for arm, pairs in sets.items()
    }
    return labels if len(set(labels.values())) == len(labels) else {}


def relabelled(exp: Experiment, labels: dict[str, str]) -> Experiment:
    """``exp`` with its arms renamed by ``labels`` in every table, its configs and its plan record."""
    if not labels:
        return exp

    def frame(table: pd.DataFrame) -> pd.DataFrame:
        return table.assign(arm=table.arm.map(lambda a: labels.get(a, a))) if "arm" in table else table

    def names(value: Any) -> Any:
        return [labels.get(a, a) for a in value] if isinstance(value, list) else value

    plan = exp.plan
    if plan is not None and "error" not in plan:
        plan = {
            **plan,
            "arms": names(plan.get("arms")),
            "plans": [
                {**p, "arms": names(p.get("arms"))} for p in plan.get("plans", []) if isinstance(p, dict)
            ],
            "jobs": [{**j, "arm": labels.get(j.get("arm"), j.get("arm"))} for j in plan.get("jobs", [])],
        }
    return dataclasses.replace(
        exp,
        runs=frame(exp.runs), config=frame(exp.config), metadata=frame(exp.metadata),
        progress=frame(exp.progress), eval=frame(exp.eval), skipped=frame(exp.skipped),
        missing=frame(exp.missing),
        configs={(labels.get(a, a), e, s): c for (a, e, s), c in exp.configs.items()},
        plan=plan,
    )  # fmt: skip


def _labels_note(labels: dict[str, str]) -> list[str]:
    """What ran's note of the arms shown by their labels, with their run directories."""
    renamed = [
        f"{label}: {arm}/" for arm, label in sorted(labels.items(), key=lambda x: x[1]) if label != arm
    ]
    if not renamed:
        return []
    return [
        "Arms are labelled by the --set values that tell them apart; their run directories: "
        + "; ".join(renamed)
    ]


# --- cut evaluations, runs left out, smoke runs (analysis.learning) ------------------------------------
# The two IQM intervals of one arm the report shows, named where either appears.
IQM_INTERVALS = (
    "Two IQM intervals: the learning check's is widened by sqrt(n / (n - 1)) for n seeds (a bootstrap of "
    "few seeds is too narrow; analysis/verdict.py) and uses every complete run of the arm; the aggregates' "
    "is rliable's percentile interval over the runs kept to balance the arms. The verdict uses the widened "
    "one."
)


def _cut_caption(arm_bounds: dict[str, str]) -> str:
    """A figure's caption naming its arms whose figures come from cut evaluations, with their mark."""
    if not arm_bounds:
        return ""
    arms = ", ".join(f"{arm} ({CUT_MARKS[b]})" for arm, b in sorted(arm_bounds.items()))
    return f"From evaluations cut at the harness's cap: {arms}; the marks are explained below the table."


def _left_out_notes(left_out: pd.DataFrame) -> list[str]:
    """The runs left out of the aggregates to balance the arms, named beside the figures they change."""
    if left_out.empty:
        return []
    runs = ", ".join(f"{r.arm}/{r.env}/seed{r.seed}" for r in left_out.itertuples())
    return [
        f"Left out of these aggregates to give every arm the same envs and runs per env: {runs}. The "
        "per-env final scores (learning curves) and the learning check use every complete run, so their "
        "means can differ from these."
    ]


def _with_smoke(section: Section | None, plan: dict | None) -> Section | None:
    """The verdict section opened by ``analysis.learning.SMOKE_SENTENCE`` when a smoke profile ran."""
    sentence = smoke_sentence(plan)
    if sentence is None:
        return section
    if section is None:
        return Section("verdict", "Verdict", statements=[sentence])
    section.statements.insert(0, sentence)
    return section


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
    context = [_what_ran(exp), _config_section(exp)]
    context[0].notes += _labels_note(labels)
    left_out = pd.DataFrame(columns=KEYS)
    if scores.final.empty:
        sections = context + [
            Section("results", "Results", notes=["no complete run with a score: nothing to aggregate"])
        ]
    else:
        bounds = cut_bounds(exp, scores)
        verdict_section = _verdict_section(exp, scores, reps, baseline, reg)
        checks = learning_checks(exp, scores, reps, reg=reg)
        if verdict_section is None and checks.learning_lead:
            verdict_section = Section("verdict", "Verdict", statements=[checks.learning_lead])
        verdict_section = _with_smoke(verdict_section, exp.plan)
        aggregate_sections, left_out = _aggregate_sections(exp, scores, colours, reps, bounds)
        published = [
            _published_section(scores, colours, reps, bounds),
            _minatar_published_section(exp, scores, reps, bounds),
        ]
        sections = [
            section
            for section in (
                [
                    verdict_section,
                    _learning_section(checks, arm_cut_bounds(bounds)),
                    _effects_section(checks),
                    factorial_section(checks),
                ]
                + aggregate_sections
                + published
                + [_curves_section(scores, colours, reps, bounds)]
                + context
            )
            if section is not None
        ]
    # A frozen analysis is the page's headline; without one, the verdict stays first and the line that
    # labels it exploratory follows it.
    sections.insert(0 if reg.frozen else 1, _registration_section(exp, scores, reg, reps))
    sections.append(_throughput_section(exp, colours))
    sections.append(_problems_section(exp, left_out))
    html = render(
        title=f"Experiment {exp.name}",
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        normalisation=scores.normalisation,
        sections=sections,
    )
    path = Path(out) if out is not None else exp.path / REPORT_FILE
    atomic_write_bytes(path, html.encode("utf-8"))  # a full disk leaves the old report, never half of one
    if figures_dir is not None:
        write_figures(sections, Path(figures_dir))
    return path
