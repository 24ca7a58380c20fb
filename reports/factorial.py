"""The report's section of a designed ablation (``analysis.factorial``): main effects per response
with their tests, the interaction alias groups, the additivity check, and a half-normal plot of the
aggregate's effects."""

from __future__ import annotations

from analysis.factorial import AGGREGATE
from analysis.markdown import ci_text, fmt
from analysis.study import Checks
from reports import figures
from reports.page import Figure, Section, Table


def factorial_section(checks: Checks) -> Section | None:
    """None unless the experiment is a designed ablation with a response every design arm ran."""
    found = checks.factorial
    if found is None or found.effects.empty:
        return None
    scores = checks.scores
    effects, tables, shown = found.effects, [], []
    for response, table in effects.groupby("response", sort=False):
        k = scores.scale if response == AGGREGATE else 1.0
        rows = [
            [r.effect, r.switch, r.kind, ci_text(r.estimate, r.ci_low, r.ci_high, k), fmt(r.se * k),
             f"{fmt(r.t)} ({r.df})", r.alternative, fmt(r.p), fmt(r.p_adjusted), fmt(r.reject)]
            for r in table.itertuples()
        ]  # fmt: skip
        columns = [
            "effect",
            "switch",
            "kind",
            "estimate [CI]",
            "SE",
            "t (df)",
            "alternative",
            "p",
            "p adjusted",
        ]
        unit = f"{scores.label}{scores.unit}" if response == AGGREGATE else "raw return"
        tables.append(Table(f"factorial-{response}", columns + ["rejected"], rows, f"{response} ({unit})"))
        shown.append(response)
    rows = []
    for r in found.additivity.itertuples():
        k = scores.scale if r.response == AGGREGATE else 1.0
        difference = ci_text(r.difference, r.ci_low, r.ci_high, k)
        rows.append([r.response, fmt(r.observed * k), fmt(r.predicted * k), difference, fmt(r.p)])
    tables.append(
        Table(
            "factorial-additivity",
            ["response", "observed all-on", "predicted from main effects", "difference [CI]", "p"],
            rows,
            "Additivity: the all-on arm against grand mean + half the sum of the main effects",
        )
    )
    aggregate = effects[effects.response == AGGREGATE]
    plot = figures.half_normal_effects(aggregate, f"effect on {scores.label}{scores.unit}", scores.scale)
    return Section(
        "factorial",
        "Designed ablation: effects of each switch",
        f"Main effects (mean of the arms with the switch on minus off), t tests on the variance pooled "
        f"within arms, p adjusted over the main effects of each response ({found.correction}), rejected at "
        f"{found.alpha:g}; {1 - found.alpha:.0%} bootstrap CIs over seeds, not adjusted; interaction alias "
        f"groups exploratory (two-sided, unadjusted). Responses: {', '.join(shown)} (analysis/factorial.py).",
        figures=[Figure("fig-half-normal", plot, "half-normal plot of the aggregate's effects")],
        tables=tables,
        notes=[f"left out (a design arm has no run): {', '.join(found.skipped)}"] if found.skipped else [],
    )
