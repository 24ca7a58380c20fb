"""Matplotlib figures for the experiment report, returned as embeddable ``data:image/png`` URIs.

Everything renders with the Agg backend (no display, no network); one colour per arm, fixed across
every figure of a page, so an arm is recognised at a glance.
"""

from __future__ import annotations

import base64
import io
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

DPI = 110
STEP_UNITS = ((1e9, "B"), (1e6, "M"), (1e3, "k"))


def arm_colours(arms: list[str]) -> dict[str, str]:
    cycle = plt.get_cmap("tab10").colors
    return {arm: matplotlib.colors.to_hex(cycle[i % len(cycle)]) for i, arm in enumerate(sorted(arms))}


def to_data_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _steps_label(value: float, _pos: object = None) -> str:
    for scale, suffix in STEP_UNITS:
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def learning_curves(bands: pd.DataFrame, colours: dict[str, str], ylabel: str) -> str:
    """One panel per env: mean over seeds per arm with its 95% t interval band."""
    envs = sorted(bands.env.unique())
    cols = min(3, len(envs))
    rows = math.ceil(len(envs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, env in zip(axes.flat, envs):
        for arm, g in bands[bands.env == env].groupby("arm"):
            n = int(g.n_runs.iloc[0])
            # A curve of one point (runs evaluated once) is a line of zero length: a marker shows it.
            marker = "o" if len(g) == 1 else None
            ax.plot(g.env_steps, g["mean"], color=colours[arm], marker=marker, label=f"{arm} (n={n})")
            if len(g) == 1:
                mean, lo, hi = (g[c].to_numpy(float) for c in ("mean", "ci_low", "ci_high"))
                ax.errorbar(g.env_steps.to_numpy(), mean, yerr=[mean - lo, hi - mean], color=colours[arm],
                            capsize=4, linewidth=1)  # fmt: skip
            ax.fill_between(g.env_steps, g.ci_low, g.ci_high, color=colours[arm], alpha=0.2, linewidth=0)
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_formatter(_steps_label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(envs) :]:
        ax.axis("off")
    fig.tight_layout()
    return to_data_uri(fig)


def _unstick(ax: plt.Axes) -> None:
    """Margins beyond the outermost interval: bars' sticky edges would put an extreme point estimate
    (a one-run interval is a point) on the axes' frame, where it cannot be seen. An interval of
    identical scores (every smoke run cut at the same cap) that rounding left 1e-12 wide would zoom
    the axis to that width, its ticks offset labels of nothing: it is widened as a zero-width one is."""
    ax.use_sticky_edges = False
    ax.margins(x=0.05)
    ax.autoscale_view()
    low, high = ax.get_xlim()
    size = max(1.0, abs(low), abs(high))
    if high - low < 1e-9 * size:
        ax.set_xlim(low - 0.05 * size, high + 0.05 * size)


def interval_estimates(metrics: pd.DataFrame, colours: dict[str, str], xlabel: str) -> str:
    """rliable-style panel per metric: point estimate and 95% CI per arm."""
    names = list(dict.fromkeys(metrics.metric))
    arms = sorted(metrics.arm.unique())
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 0.5 * len(arms) + 1.2), squeeze=False)
    for ax, name in zip(axes.flat, names):
        table = metrics[metrics.metric == name].set_index("arm")
        for i, arm in enumerate(arms):
            row = table.loc[arm]
            ax.barh(i, row.ci_high - row.ci_low, left=row.ci_low, height=0.6, color=colours[arm], alpha=0.6)
            ax.plot([row.value, row.value], [i - 0.3, i + 0.3], color="black", linewidth=1.5)
        ax.set_yticks(range(len(arms)), arms if ax is axes.flat[0] else [""] * len(arms))
        _unstick(ax)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return to_data_uri(fig)


def _arm_bands(table: pd.DataFrame, x: str, y: str, colours: dict[str, str], xlabel: str, ylabel: str):
    """One panel with a line of ``y`` over ``x`` per arm and its ``ci_low``..``ci_high`` band; the
    figure and axes are returned for the caller's own axis settings."""
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for arm, g in table.groupby("arm"):
        ax.plot(g[x], g[y], color=colours[arm], label=arm)
        ax.fill_between(g[x], g.ci_low, g.ci_high, color=colours[arm], alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig, ax


def performance_profiles(profiles: pd.DataFrame, colours: dict[str, str], xlabel: str) -> str:
    fig, ax = _arm_bands(
        profiles, "tau", "fraction", colours, xlabel, r"fraction of runs with score $> \tau$"
    )
    ax.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    return to_data_uri(fig)


def probability_of_improvement(pois: pd.DataFrame) -> str:
    labels = [f"P({r.x} > {r.y})" for r in pois.itertuples()]
    # Room for the labels (about 0.07 inch a character at the default size) beside a 3.5-inch plot.
    width = 3.5 + 0.07 * max(len(label) for label in labels)
    fig, ax = plt.subplots(figsize=(width, 0.55 * len(pois) + 1.2))
    for i, row in enumerate(pois.itertuples()):  # estimates only: analysis.aggregate says why
        ax.plot([row.value, row.value], [i - 0.3, i + 0.3], color="black", linewidth=1.5)
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(pois)), labels)
    ax.set_xlim(-0.03, 1.03)  # a probability of 0 or 1 stays off the frame
    ax.set_xlabel("probability of improvement")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return to_data_uri(fig)


def deviation_effects(effects: pd.DataFrame, xlabel: str, scale: float = 1.0) -> str:
    """Each deviation's IQM difference to the base arm with its 95% CI, largest on top; the dotted
    lines mark the smallest difference detected with 80% power either way."""
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * len(effects) + 1.3))
    rows = list(effects.itertuples())[::-1]  # largest effect at the top
    for i, row in enumerate(rows):
        lo, hi, value = row.ci_low * scale, row.ci_high * scale, row.difference * scale
        colour = "tab:red" if hi < 0 else "tab:green" if lo > 0 else "tab:grey"
        ax.barh(i, hi - lo, left=lo, height=0.6, color=colour, alpha=0.5)
        ax.plot([value, value], [i - 0.3, i + 0.3], color="black", linewidth=1.5)
    detectable = effects.detectable.max() * scale
    if np.isfinite(detectable):
        for x in (-detectable, detectable):
            ax.axvline(x, color="grey", linestyle=":", linewidth=1)
    ax.axvline(0, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(rows)), [r.deviation for r in rows])
    _unstick(ax)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return to_data_uri(fig)


def half_normal_effects(effects: pd.DataFrame, xlabel: str, scale: float = 1.0) -> str:
    """Daniel's half-normal plot of a designed ablation's contrasts (``analysis.factorial``: main
    effects and interaction alias groups of one response): each |estimate| against the half-normal
    quantile of its rank, Phi^-1(0.5 + 0.5 (i - 0.5) / m) (Montgomery 2013, section 6.5). Effects that
    are noise fall on a line through the origin; the dashed line is the one the pooled standard error
    predicts (slope: the contrasts' SE), so a real effect stands off to its right."""
    from scipy import stats

    ordered = effects.assign(size=effects.estimate.abs() * scale).sort_values("size", kind="stable")
    m = len(ordered)
    quantiles = stats.norm.ppf(0.5 + 0.5 * (np.arange(1, m + 1) - 0.5) / m)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    main = (ordered.kind == "main").to_numpy()
    ax.scatter(ordered["size"][main], quantiles[main], color="tab:blue", label="main effect", zorder=3)
    ax.scatter(
        ordered["size"][~main], quantiles[~main], color="tab:grey", label="interaction group", zorder=3
    )
    se = float(np.nanmedian(ordered.se)) * scale
    if np.isfinite(se) and se > 0:
        ax.plot(
            se * quantiles, quantiles, color="grey", linestyle="--", linewidth=1, label="noise (pooled SE)"
        )
    for (_, row), q in zip(ordered.iterrows(), quantiles):
        if row.kind == "main":
            ax.annotate(row.switch, (row["size"], q), xytext=(4, -3), textcoords="offset points", fontsize=8)
    ax.set_xlabel(f"|{xlabel}|")
    ax.set_ylabel("half-normal quantile")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return to_data_uri(fig)


def sample_efficiency(curves: pd.DataFrame, colours: dict[str, str], ylabel: str) -> str:
    fig, ax = _arm_bands(curves, "env_steps", "iqm", colours, "env steps", ylabel)
    ax.xaxis.set_major_formatter(_steps_label)
    fig.tight_layout()
    return to_data_uri(fig)


def published_ratios(comparison: pd.DataFrame, colours: dict[str, str]) -> str:
    """Our final score / R2D2's per game and arm, with the CI of our score as an error bar."""
    games = sorted(comparison.game.unique())
    arms = sorted(comparison.arm.unique())
    width = 0.8 / len(arms)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.8 * len(games) * len(arms) + 1.5), 3.5))
    for j, arm in enumerate(arms):
        table = comparison[comparison.arm == arm].set_index("game").reindex(games)
        x = np.arange(len(games)) + (j - (len(arms) - 1) / 2) * width
        err = np.abs(
            np.vstack([table.score - table.ci_low, table.ci_high - table.score]) / table.published.to_numpy()
        )
        ax.bar(x, table.ratio, width=width, color=colours[arm], label=arm, yerr=err, capsize=2)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(games)), games, rotation=30, ha="right")
    ax.set_ylabel("our score / R2D2 Table 4")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return to_data_uri(fig)


def time_split_figure(per_arm: pd.DataFrame) -> Figure:
    """Wall-time split per arm (sampling, optimizing, evaluating, logging) as stacked percentages;
    the legend sits above the bars, clear of the axis labels."""
    parts = ["sampling", "optimizing", "evaluating", "logging"]
    fig, ax = plt.subplots(figsize=(5.5, 0.5 * len(per_arm) + 1.6))
    left = np.zeros(len(per_arm))
    shades = plt.get_cmap("Set2").colors
    for k, part in enumerate(parts):
        share = 100 * per_arm[f"share_{part}"].fillna(0.0).to_numpy()
        ax.barh(range(len(per_arm)), share, left=left, color=shades[k], label=part)
        left += share
    ax.set_yticks(range(len(per_arm)), per_arm.arm)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of wall time (%)")
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.02), frameon=False)
    fig.tight_layout()
    return fig
