"""Equivalence and non-inferiority of two means: the ``equivalence`` endpoint of a plan's
``[analysis]`` section (``protocol.registration``).

A reproduction claims that an implementation scores what a reference scores, within a margin stated
before the data: an equivalence claim, which a difference test cannot make (a large p says nothing
about sameness). The test is Schuirmann's (1987) two one-sided tests (TOST) on Welch's t: with ``d``
the candidate's mean minus the reference's, ``se`` and ``df`` Welch's,

    H0-: d <= -margin   rejected when (d + margin) / se > t(1 - alpha, df)
    H0+: d >= +margin   rejected when (d - margin) / se < -t(1 - alpha, df)

and p = max of the two one-sided p's; equivalence at ``alpha`` is exactly the (1 - 2 alpha) t
interval lying inside (-margin, +margin) (Schuirmann 1987; Lakens 2017, "Equivalence tests",
Social Psychological and Personality Science 8(4)). A non-inferiority claim ("at least as good,
within the margin") is one of the two: ``sides = "greater"`` tests H0-, ``"less"`` H0+.

The reference is either a second arm's runs (Welch) or a published value: with its spread (a
standard deviation over ``n`` runs, Welch from the summary statistics) or without one (a fixed
value, the one-sample t test, which Welch's formulas give with the reference's variance 0).

Every verdict is one of ``VERDICTS``, decided on the test's (adjusted) p and, for "different", on
the two-sided (1 - alpha) interval of the difference excluding 0 (the combined reading of Lakens
2017, Fig. 1): a difference can be detected inside the margin (equivalent and different), and a
failure to show equivalence is never read as a difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from analysis.intervals import t_p

EQUIVALENT = "equivalent"
NOT_SHOWN = "not shown equivalent"
DIFFERENT = "different"
NON_INFERIOR = "non-inferior"
NOT_SHOWN_NON_INFERIOR = "not shown non-inferior"
INFERIOR = "inferior"
VERDICTS = (EQUIVALENT, NOT_SHOWN, DIFFERENT, NON_INFERIOR, NOT_SHOWN_NON_INFERIOR, INFERIOR)


@dataclass(frozen=True)
class Reference:
    """A published value: ``value`` with its standard deviation ``sd`` over ``n`` runs, or a fixed
    value (``sd`` and ``n`` None)."""

    value: float
    sd: float | None = None
    n: int | None = None
    source: str = ""


@dataclass(frozen=True)
class Welch:
    """The difference of two means with Welch's standard error and degrees of freedom."""

    estimate: float
    se: float
    df: float

    def interval(self, level: float) -> tuple[float, float]:
        """The two-sided t interval at ``level`` (0.90 for a TOST at alpha 0.05)."""
        half = stats.t.ppf(0.5 + level / 2, self.df) * self.se
        return self.estimate - half, self.estimate + half

    def p_greater(self, shift: float) -> float:
        """One-sided p of H0: difference <= ``shift``."""
        return t_p(self.estimate - shift, self.se, self.df, "greater")

    def p_less(self, shift: float) -> float:
        """One-sided p of H0: difference >= ``shift``."""
        return t_p(self.estimate - shift, self.se, self.df, "less")


def welch(candidate: np.ndarray, baseline: np.ndarray | Reference) -> Welch | None:
    """``Welch`` of mean(candidate) minus the baseline's mean (runs or a ``Reference``); None when it
    cannot be computed: fewer than 2 candidate runs (or baseline runs), or no spread at all."""
    candidate = np.asarray(candidate, dtype=float)
    if len(candidate) < 2:
        return None
    if isinstance(baseline, Reference):
        mean_b = baseline.value
        var_b, n_b = (baseline.sd**2, baseline.n) if baseline.sd is not None else (0.0, None)
    else:
        baseline = np.asarray(baseline, dtype=float)
        if len(baseline) < 2:
            return None
        mean_b, var_b, n_b = baseline.mean(), baseline.var(ddof=1), len(baseline)
    a = candidate.var(ddof=1) / len(candidate)
    b = var_b / n_b if n_b else 0.0
    se = math.sqrt(a + b)
    if not se > 0:
        return None
    df = (a + b) ** 2 / (a**2 / (len(candidate) - 1) + (b**2 / (n_b - 1) if n_b else 0.0))
    return Welch(float(candidate.mean() - mean_b), se, float(df))


def test_p(w: Welch, test: str, sides: str, margin: float) -> float:
    """The p of ``test`` (``"tost"``: the larger one-sided p; ``"noninferiority"``: the one the sides
    name) at ``margin``."""
    if test == "tost":
        return max(w.p_greater(-margin), w.p_less(margin))
    return w.p_greater(-margin) if sides == "greater" else w.p_less(margin)


def interval_level(alpha: float) -> float:
    """The level of the two-sided interval that agrees with both tests at ``alpha``: 1 - 2 alpha. TOST
    holds exactly when that interval lies inside the margins; non-inferiority (one-sided at alpha)
    exactly when its bound on the named side clears the margin."""
    return 1 - 2 * alpha


def verdict(w: Welch, test: str, sides: str, alpha: float, holds: bool) -> str:
    """One of ``VERDICTS``: ``holds`` is the frozen test's (adjusted) p at most ``alpha``; otherwise
    "different" / "inferior" when the difference is shown on the wrong side of 0 at ``alpha``."""
    if test == "tost":
        if holds:
            return EQUIVALENT
        lo, hi = w.interval(1 - alpha)
        return DIFFERENT if lo > 0 or hi < 0 else NOT_SHOWN
    if holds:
        return NON_INFERIOR
    worse = w.p_less(0.0) if sides == "greater" else w.p_greater(0.0)
    return INFERIOR if worse <= alpha else NOT_SHOWN_NON_INFERIOR


def verdict_text(name: str, margin: float) -> str:
    """The verdict with its margin, as the study and the report print it: "equivalent within ±5"."""
    if name == EQUIVALENT:
        return f"equivalent within ±{margin:g}"
    if name == NON_INFERIOR:
        return f"non-inferior within {margin:g}"
    return name
