"""Seeds planned before running: how many seeds per arm and game a study needs to detect a stated IQM
difference with 80% power, from a pilot's seed-to-seed spread.

The statistics it shares with the verdict (``analysis.verdict``) live in ``protocol.stats``, below
both. The pilot enters as data, not as code: the tidy result table that ``python -m analysis study
EXPERIMENT --csv PATH`` writes (one row per run, normalised final score in ``normalised``), committed
under docs/results/ or written for any experiment directory; normalising scores is analysis's job.

Model (the verdict's, analysis/verdict.py): the IQM over runs x games of a stratified bootstrap has
standard error ``s_arm`` per arm, estimated on the pilot's ``n0`` seeds per game and widened by
sqrt(n0 / (n0 - 1)); the IQM difference of two arms of ``n`` seeds has ``se(n) = sqrt(s_a^2 + s_b^2)
* sqrt(n0 / n)`` (a mean-like statistic of n independent runs per game). The planned arms are not
the pilot's, so both take the largest pilot arm's spread: ``se(n) = sqrt(2) * max s_arm * sqrt(n0 /
n)``. A pilot of few seeds estimates that spread loosely, and a spread guessed low plans too few
seeds: the plan uses the one-sided ``PILOT_CONFIDENCE`` upper confidence limit of the spread,
``s * sqrt(df / chi2_{1 - PILOT_CONFIDENCE}(df))`` with ``df = games * (n0 - 1)`` (Browne 1995, "On the
use of a pilot sample for sample size determination", Statistics in Medicine 14(17)). The difference
is tested on t with the Welch degrees of freedom of two equal arms, ``2 games (n - 1)`` (the
bootstrap-t of ``analysis.intervals``), at the level of the plan's frozen family (below), so a shift
``delta`` is detected with the noncentral t's probability ``difference_power``; ``seeds_needed`` is
the smallest n (at least ``MIN_SEEDS``) that reaches the planned power.
Measured on simulated pilots with the normal approximation this planner used before the t (8 seeds
x 4 games of normal scores, SD 0.447, shift 0.3; 12 pilot draws, 80 simulated verdicts each,
2026-12-04; the t plans at least as many seeds): the planned seeds (median 15.5) detected the shift
in 91% of verdicts on average, 90% with the pilot's own SD (median 14.5 seeds); one earlier pilot draw
planned with its own SD gave 6 seeds and 57%. The planner errs high: both planned arms take the wider
pilot arm's spread. ``tests/test_repro_power.py`` checks the rate averaged over pilot draws.

A designed ablation (``design`` in a plan, protocol/design.py) is planned for its main effects instead
(``plan_design_seeds``). With M arms of s seeds (N = M s runs), a main effect is the mean of the N/2
runs with the switch on minus the mean of the N/2 with it off, so its standard error is
``sigma * sqrt(2/(N/2)) = 2 sigma / sqrt(N)`` (``effect_se``; Montgomery, *Design and Analysis of
Experiments*, 8th ed., 2013, section 6.2: the effect's variance is sigma^2 / (n 2^(k-2)) for n
replicates of 2^k runs); sigma / (2 sqrt(s)) for 16 arms. sigma is the seed-to-seed SD of a run's
score (the mean over the plan's games of its normalised scores, ``analysis.factorial``'s aggregate
response), pooled within the pilot's arms and taken at its ``PILOT_CONFIDENCE`` upper limit as above
(df: the pilot's runs less its arms). The test of a main effect is a t test on the pooled
within-arm variance with ``M (s - 1)`` degrees of freedom, so its power is that of the noncentral t
(``design_power``), exact for normal scores; ``tests/test_factorial_effects.py`` checks it and the
standard error against simulated designs. Each arm runs at least ``MIN_DESIGN_SEEDS`` seeds, the
fewest that give a within-arm variance.

A pre-registered design tests its main effects as one frozen family (``Family``: the plan's
``[analysis]`` correction over its k endpoints, each on its sides), so the power planned is the
family's: an effect must reach Holm's first step, alpha / k (Holm 1979, "A simple sequentially
rejective multiple test procedure", Scandinavian Journal of Statistics 6(2); Bonferroni's level, and
Benjamini-Hochberg's for one true effect among nulls), one- or two-sided as frozen. That is the
power of the smallest p; Holm's later steps only add to it when another endpoint is rejected first
(``tests/test_factorial_effects.py`` checks it against simulated families).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from algorithms.configs import ConfigError
from protocol.registration import parse_section
from protocol.stats import (
    POWER,
    Family,
    iqm_rows,
    stratified_resamples,
    t_power,
)

# A study runs at least this many seeds per arm and game (Agarwal et al. 2021 use 5 as a floor for
# interval estimates; fewer make the widened bootstrap interval of analysis/verdict.py very wide).
MIN_SEEDS = 5
# The IQM difference a study is planned to detect by default: 10 points of a normalised score in
# percent (0.10 as a fraction).
DETECT_POINTS = 10.0
PILOT_COLUMNS = ("arm", "env", "seed", "normalised")
# Browne (1995): planning with the 80% upper limit of the pilot's SD reaches the planned power for
# most pilot draws, where the pilot's own SD falls short for about half of them.
PILOT_CONFIDENCE = 0.8


def pilot_inflation(games: int, seeds: int, confidence: float = PILOT_CONFIDENCE) -> float:
    """Factor from a pilot's spread to its one-sided ``confidence`` upper limit (module doc)."""
    return upper_limit_factor(games * (seeds - 1), confidence)


def upper_limit_factor(df: int, confidence: float = PILOT_CONFIDENCE) -> float:
    """Factor from an SD estimated with ``df`` degrees of freedom to its one-sided ``confidence`` upper
    limit (Browne 1995, module doc)."""
    return math.sqrt(df / stats.chi2.ppf(1 - confidence, df))


def arm_iqm_se(scores: np.ndarray, reps: int = 2000, seed: int = 0) -> float:
    """Standard error of one arm's IQM over ``[runs, games]``: the stratified bootstrap's SD widened by
    sqrt(n / (n - 1)) (analysis/verdict.py); NaN with one run per game."""
    n = scores.shape[0]
    if n < 2:
        return float("nan")
    resampled = iqm_rows(stratified_resamples(scores, reps, np.random.default_rng(seed)))
    return float(np.sqrt(n / (n - 1)) * np.std(resampled, ddof=1))


@dataclass(frozen=True)
class PowerPlan:
    """The seeds a study needs (module doc): ``seeds`` per arm and game (at least ``MIN_SEEDS``) to
    detect ``delta`` with ``power``; ``se_per_seed``: the IQM difference's SE at one seed per game."""

    source: str
    games: tuple[str, ...]
    pilot_seeds: int
    arm_se: dict[str, float]
    delta: float
    power: float
    se_per_seed: float  # with the pilot's upper limit (``upper``) applied
    seeds: int
    upper: float = 1.0  # ``pilot_inflation`` of the widest arm
    family: Family = Family()

    def se(self, n: int) -> float:
        return self.se_per_seed / math.sqrt(n)

    def power_with(self, n: int) -> float:
        return difference_power(self.delta, self.se_per_seed, len(self.games), n, self.family)

    def detectable_with(self, n: int) -> float:
        """The smallest IQM difference detected with ``power`` at ``n`` seeds per game."""

        def short(d: float) -> float:
            return difference_power(d, self.se_per_seed, len(self.games), n, self.family) - self.power

        return float(optimize.brentq(short, 0.0, 20 * self.se(n)))


def difference_power(
    delta: float, se_per_seed: float, games: int, seeds: int, family: Family = Family()
) -> float:
    """Probability that ``family``'s test of the IQM difference of two arms of ``seeds`` runs per game
    detects a true ``delta`` (module doc): t on the bootstrap's standard error with the Welch
    degrees of freedom of two equal arms, ``2 games (seeds - 1)`` (``analysis.intervals.bootstrap_t``)."""
    return t_power(delta / (se_per_seed / math.sqrt(seeds)), 2 * games * (seeds - 1), family)


def seeds_needed(
    se_per_seed: float,
    delta: float,
    games: int,
    power: float = POWER,
    family: Family = Family(),
    minimum: int = MIN_SEEDS,
) -> int:
    """The smallest n >= ``minimum`` (at most ``MAX_SEEDS``) whose ``difference_power`` at ``delta``
    reaches ``power``."""
    from protocol.plan_args import MAX_SEEDS

    if not (delta > 0 and math.isfinite(se_per_seed)):
        raise ValueError(f"need delta > 0 and a finite standard error, got {delta}, {se_per_seed}")
    for n in range(minimum, MAX_SEEDS + 1):
        if difference_power(delta, se_per_seed, games, n, family) >= power:
            return n
    return MAX_SEEDS


def read_pilot(
    path: Path | str, envs: Sequence[str] | None = None
) -> tuple[dict[str, np.ndarray], list[str]]:
    """``({arm: [runs, games]}, games)`` of a tidy result table (``PILOT_COLUMNS``), on the games of
    ``envs`` it has (all of its games when it has none of them), each arm cut to the seeds every game
    has. A directory must hold the table as ``results.csv``. Problems are one-line ``ConfigError``s."""
    path = Path(path)
    if path.is_dir():
        table = path / "results.csv"
        if not table.is_file():
            raise ConfigError(
                f"--pilot {path}: no tidy result table {table}; write it with python -m analysis study "
                f"{path} --csv {table}"
            )
        path = table
    if not path.is_file():
        raise ConfigError(f"--pilot {path}: no such file or experiment directory")
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"--pilot {path}: not a CSV table ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise ConfigError(f"--pilot {path}: cannot be read: {e.strerror or e}") from None
    absent = [c for c in PILOT_COLUMNS if rows and c not in rows[0]]
    if not rows or absent:
        raise ConfigError(f"--pilot {path}: expected a tidy result table with columns {list(PILOT_COLUMNS)}")
    scores: dict[str, dict[str, list[float]]] = {}
    seen: dict[tuple[str, str, str], int] = {}
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        where = f"--pilot {path} line {line}"
        try:
            value = float(row["normalised"])
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            raise ConfigError(f"{where}: normalised score {row['normalised']!r} is not a finite number")
        key = (row["arm"], row["env"], row["seed"])
        if key in seen:  # one run twice would count as two seeds and understate the spread
            raise ConfigError(f"{where}: arm {key[0]} on {key[1]} seed {key[2]} repeats line {seen[key]}")
        seen[key] = line
        scores.setdefault(row["arm"], {}).setdefault(row["env"], []).append(value)
    all_games = sorted({g for per_arm in scores.values() for g in per_arm})
    games = [g for g in all_games if envs and g in envs] or all_games
    matrices = {}
    for arm, per_game in scores.items():
        if not all(g in per_game for g in games):
            continue
        n = min(len(per_game[g]) for g in games)
        matrices[arm] = np.array([per_game[g][:n] for g in games], float).T
    if not matrices or max(m.shape[0] for m in matrices.values()) < 2:
        raise ConfigError(f"--pilot {path}: no arm has two or more seeds on every game of {games}")
    return matrices, games


def plan_seeds(
    path: Path | str,
    envs: Sequence[str] | None = None,
    delta: float = DETECT_POINTS / 100,
    power: float = POWER,
    reps: int = 2000,
    family: Family = Family(),
) -> PowerPlan:
    """The ``PowerPlan`` of a study on ``envs`` from the pilot table at ``path`` (module doc), for
    ``family``'s test (``frozen_family``: a plan's frozen correction over its endpoints)."""
    matrices, games = read_pilot(path, envs)
    arm_se = {arm: arm_iqm_se(m, reps) for arm, m in matrices.items() if m.shape[0] >= 2}
    if not any(se > 0 for se in arm_se.values()):
        raise ConfigError(
            f"--pilot {path}: every arm scores the same on every seed of {games} (no seed-to-seed spread "
            "to plan from: runs that all failed or all hit a bound?)"
        )
    n0 = max(m.shape[0] for m in matrices.values())
    widest = max(arm_se, key=lambda a: arm_se[a] * math.sqrt(matrices[a].shape[0]))
    n_widest = matrices[widest].shape[0]
    upper = pilot_inflation(len(games), n_widest)
    se_per_seed = math.sqrt(2) * arm_se[widest] * math.sqrt(n_widest) * upper
    return PowerPlan(
        str(path),
        tuple(games),
        n0,
        arm_se,
        delta,
        power,
        se_per_seed,
        seeds_needed(se_per_seed, delta, len(games), power, family),
        upper,
        family,
    )


MIN_DESIGN_SEEDS = 2


def effect_se(sigma: float, arms: int, seeds: int) -> float:
    """Standard error of a two-level design's main effect over ``arms`` x ``seeds`` runs of SD
    ``sigma``: 2 sigma / sqrt(N) (module doc)."""
    return 2 * sigma / math.sqrt(arms * seeds)


def design_power(delta: float, sigma: float, arms: int, seeds: int, family: Family = Family()) -> float:
    """Probability that the t test of a main effect (pooled within-arm variance, ``arms * (seeds - 1)``
    degrees of freedom) at ``family``'s first-step level detects a true effect ``delta``: the
    noncentral t's mass beyond the critical values (two-sided: the lower tail as the upper tail of the
    opposite shift, scipy's ``nct.cdf`` far below a large shift being NaN; one-sided: the tail in the
    effect's direction)."""
    return t_power(delta / effect_se(sigma, arms, seeds), arms * (seeds - 1), family)


@dataclass(frozen=True)
class DesignPowerPlan:
    """The seeds per arm a designed ablation of ``arms`` arms needs to detect a main effect ``delta``
    with ``power`` (module doc). ``pilot_sd``: the pilot's pooled within-arm SD of the run score,
    ``pilot_df`` its degrees of freedom; ``sigma``: its upper limit (x ``upper``), what is planned with."""

    source: str
    games: tuple[str, ...]
    arms: int
    pilot_sd: float
    pilot_df: int
    upper: float
    delta: float
    power: float
    seeds: int
    family: Family = Family()

    @property
    def sigma(self) -> float:
        return self.pilot_sd * self.upper

    def se(self, n: int) -> float:
        return effect_se(self.sigma, self.arms, n)

    def power_with(self, n: int) -> float:
        return design_power(self.delta, self.sigma, self.arms, n, self.family)

    def detectable_with(self, n: int, family: Family | None = None) -> float:
        """The smallest main effect detected with ``power`` at ``n`` seeds per arm (by ``family``'s
        test, the plan's by default)."""

        def short(d: float) -> float:
            return design_power(d, self.sigma, self.arms, n, family or self.family) - self.power

        return float(optimize.brentq(short, 0.0, 10 * self.se(n)))


def design_seeds_needed(
    delta: float, sigma: float, arms: int, power: float = POWER, family: Family = Family()
) -> int:
    """The fewest seeds per arm (at least ``MIN_DESIGN_SEEDS``, at most ``MAX_SEEDS``) whose
    ``design_power`` at ``delta`` by ``family``'s test reaches ``power``."""
    from protocol.plan_args import MAX_SEEDS

    if not (delta > 0 and sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"need delta > 0 and a positive finite SD, got {delta}, {sigma}")
    for n in range(MIN_DESIGN_SEEDS, MAX_SEEDS + 1):
        if design_power(delta, sigma, arms, n, family) >= power:
            return n
    return MAX_SEEDS


def pooled_run_sd(matrices: dict[str, np.ndarray]) -> tuple[float, int]:
    """``(SD, df)`` of a run's score (the mean over games of its row) pooled within ``matrices``'
    arms of two or more runs: the root of the summed squared deviations from each arm's mean over
    the runs less the arms."""
    runs = [m.mean(axis=1) for m in matrices.values() if m.shape[0] >= 2]
    df = sum(len(r) - 1 for r in runs)
    squares = sum(float(((r - r.mean()) ** 2).sum()) for r in runs)
    return math.sqrt(squares / df), df


def plan_design_seeds(
    path: Path | str,
    envs: Sequence[str] | None,
    arms: int,
    delta: float,
    power: float = POWER,
    family: Family = Family(),
) -> DesignPowerPlan:
    """The ``DesignPowerPlan`` of a designed ablation of ``arms`` arms on ``envs`` from the pilot table
    at ``path`` (``read_pilot``); ``delta`` in the pilot's normalised units; ``family``: the frozen
    family its main effects are tested in (``frozen_family``)."""
    matrices, games = read_pilot(path, envs)
    sd, df = pooled_run_sd(matrices)
    if not sd > 0:
        raise ConfigError(f"--pilot {path}: every arm's runs score the same: no spread to plan with")
    upper = upper_limit_factor(df)
    seeds = design_seeds_needed(delta, sd * upper, arms, power, family)
    return DesignPowerPlan(str(path), tuple(games), arms, sd, df, upper, delta, power, seeds, family)


def frozen_family(analysis: dict | None, where: str) -> Family:
    """The ``Family`` of a plan's ``[analysis]`` table (``protocol.registration``): its alpha and
    correction over all its endpoints, two-sided if any effect endpoint is (the more demanding test;
    a plan without effect endpoints: if any endpoint is); the default family without a table."""
    if not analysis:
        return Family()
    section = parse_section(analysis, where, None, None, None)
    primary = [e for e in section.endpoints if not e.secondary]
    planned = [e for e in primary if e.kind == "effect"] or primary
    sides = "two" if any(e.sides == "two" for e in planned) else "one"
    return Family(section.alpha, section.correction, len(primary), sides)
