"""The study's statistics that both planning (``repro.power``: how many seeds) and the verdict
(``analysis.verdict``, ``analysis.aggregate``, ``analysis.confirmatory``) use: the interval size, the
test's alpha and power, the stratified bootstrap of rliable and the normal-approximation power of a
difference. One copy, so that the seeds planned are the seeds the verdict needs."""

from __future__ import annotations

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


def power_at(shift: float, se: float, alpha: float = ALPHA) -> float:
    """Probability that a two-sided test at ``alpha`` detects a true difference ``shift`` measured with
    standard error ``se`` (normal approximation). ``power_at(0, se) == alpha``."""
    z = stats.norm.ppf(1 - alpha / 2)
    return float(stats.norm.cdf(shift / se - z) + stats.norm.cdf(-shift / se - z))


def detectable_difference(se: float, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest difference ``power_at`` detects with probability ``power``: about
    ``(z_{1 - alpha/2} + z_power) * se`` (2.80 se at 80% and alpha 0.05), solved exactly."""
    if not power > alpha:
        raise ValueError(f"power {power} must exceed alpha {alpha}: a zero shift is detected at alpha")
    if se == 0:
        return 0.0
    z_sum = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return float(optimize.brentq(lambda d: power_at(d, se, alpha) - power, 0.0, 2 * z_sum * se))
