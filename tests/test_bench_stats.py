"""The benchmarks' statistics (``bench.learning``): bootstrap CIs and paired speed ratios."""

import math

import numpy as np

from bench.learning import bootstrap_ci, paired_ratio


def test_paired_ratio_is_the_median_of_per_repeat_ratios_with_a_ci_around_it():
    # Ratios 2, 3, 2, 2.5, 2: median 2; the CI of a median lies within the sample's range.
    median, low, high = paired_ratio([2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 1.0, 2.0, 2.0, 3.0])
    assert median == 2.0
    assert 2.0 <= low <= median <= high <= 3.0


def test_paired_ratio_pairs_repeats_rather_than_dividing_medians():
    # Each repeat's pair ran under its own load; the medians' ratio would be 4 / 2 = 2.
    median, _, _ = paired_ratio([1.0, 4.0, 9.0], [1.0, 2.0, 9.0])
    assert median == 1.0


def test_bootstrap_ci_of_constant_values_is_that_value_and_undefined_for_one():
    assert paired_ratio([3.0, 6.0], [1.0, 2.0]) == (3.0, 3.0, 3.0)
    assert all(math.isnan(v) for v in bootstrap_ci([1.5]))


def test_bootstrap_ci_takes_the_statistic_it_is_given():
    values = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 100.0]
    mean_low, mean_high = bootstrap_ci(values)
    median_low, median_high = bootstrap_ci(values, np.median)
    assert (median_low, median_high) == (1.0, 1.0)  # at most 3 of 8 draws of 100 in 95% of resamples
    assert mean_high > 10.0
