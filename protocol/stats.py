"""The study's statistics that both planning (``repro.power``: how many seeds) and the verdict
(``analysis.verdict``, ``analysis.aggregate``, ``analysis.confirmatory``) use: the interval size, the
test's alpha and power, the stratified bootstrap of rliable, the family of tests and the power of a
difference on t (the noncentral t; the normal distribution without degrees of freedom). One copy, so
that the seeds planned are the seeds the verdict needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

CI_SIZE = 0.95
ALPHA = 1 - CI_SIZE
POWER = 0.8


def iqm_rows(samples: np.ndarray) -> np.ndarray:
    """IQM of each resample ``[reps, runs, games]``: rliable's ``aggregate_iqm`` (25% trimmed mean of
    all runs x games) on every row at once."""
    return stats.trim_mean(samples.reshape(len(samples), -1), proportiontocut=0.25, axis=1)


# Bytes ``stratified_resamples`` holds per run and game of each resample: the int64 index drawn and
# the float64 score it gathers.
RESAMPLE_BYTES = 16


def stratified_resamples(scores: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``[reps, runs, games]``: each game's runs drawn with replacement (rliable's StratifiedBootstrap)."""
    runs, games = scores.shape
    return scores[rng.integers(0, runs, size=(reps, runs, games)), np.arange(games)]


@dataclass(frozen=True)
class Family:
    """The tests an effect is read with (``repro.power``'s module doc): ``correction`` over
    ``endpoints`` tests at ``alpha``, on ``sides`` ("two", or one-sided in the effect's direction);
    the default is one two-sided test at 0.05."""

    alpha: float = ALPHA
    correction: str = "none"
    endpoints: int = 1
    sides: str = "two"

    @property
    def level(self) -> float:
        """The level of the first step: alpha / k under a correction, alpha alone without one."""
        return self.alpha if self.correction == "none" else self.alpha / self.endpoints

    @property
    def text(self) -> str:
        sides = "two-sided" if self.sides == "two" else "one-sided"
        if self.correction == "none" or self.endpoints == 1:
            return f"{sides} t test, alpha {self.alpha:g}"
        return (
            f"{sides} t test at {self.correction}'s first step over the {self.endpoints} frozen endpoints, "
            f"alpha {self.alpha:g} / {self.endpoints} = {self.level:.3g}"
        )


def t_power(shift: float, df: float, family: Family = Family()) -> float:
    """Probability that ``family``'s t test with ``df`` degrees of freedom rejects when the true
    effect is ``shift`` standard errors: the noncentral t's mass beyond the critical values
    (two-sided: the lower tail as the upper tail of the opposite shift, scipy's ``nct.cdf`` far below
    a large shift being NaN; one-sided: the tail in the effect's direction)."""
    if family.sides != "two":
        return float(stats.nct.sf(stats.t.ppf(1 - family.level, df), df, shift))
    critical = stats.t.ppf(1 - family.level / 2, df)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.sf(critical, df, -shift))


def power_at(shift: float, se: float, alpha: float = ALPHA, df: float = math.inf) -> float:
    """Probability that a two-sided test at ``alpha`` detects a true difference ``shift`` measured with
    standard error ``se``: on t with ``df`` degrees of freedom (``t_power``), the normal distribution
    where ``df`` is infinite. ``power_at(0, se) == alpha``."""
    if math.isfinite(df):
        return t_power(shift / se, df, Family(alpha))
    z = stats.norm.ppf(1 - alpha / 2)
    return float(stats.norm.cdf(shift / se - z) + stats.norm.cdf(-shift / se - z))


def detectable_difference(
    se: float, power: float = POWER, alpha: float = ALPHA, df: float = math.inf
) -> float:
    """The smallest difference ``power_at`` detects with probability ``power``, solved exactly: about
    ``(z_{1 - alpha/2} + z_power) * se`` on the normal distribution (2.80 se at 80% and alpha 0.05),
    more on t with few degrees of freedom (2.87 se at 40 df, 3.20 at 8)."""
    if not power > alpha:
        raise ValueError(f"power {power} must exceed alpha {alpha}: a zero shift is detected at alpha")
    if se == 0:
        return 0.0
    critical = stats.t.ppf(1 - alpha / 2, df) if math.isfinite(df) else stats.norm.ppf(1 - alpha / 2)
    bound = 4 * (critical + stats.norm.ppf(power)) * se
    return float(optimize.brentq(lambda d: power_at(d, se, alpha, df) - power, 0.0, bound))
