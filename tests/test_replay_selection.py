"""Sum tree against a naive cumulative sum; selectors' frequencies (chi-square), IS weights, priorities."""

import numpy as np
import pytest
from scipy import stats

from algorithms.replay.selectors import PrioritizedSelector, UniformSelector
from algorithms.replay.sum_tree import SumTree

# Frequencies are tested with fixed seeds at a p-value threshold of 1e-3: a correct selector fails
# with probability 0.1% per seed (the seeds below pass); the negative controls show the test has power.
P_THRESHOLD = 1e-3


@pytest.mark.parametrize("capacity, branching", [(1, 2), (7, 2), (1000, 4), (5000, 16), (100_000, 16)])
def test_sum_tree_matches_naive_cumsum(capacity, branching):
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity, branching=branching)
    priorities = np.zeros(capacity)
    for _ in range(20):  # batched updates, with duplicate indices and zeros
        idx = rng.integers(0, capacity, size=min(64, capacity))
        values = rng.random(idx.size) * (rng.random(idx.size) > 0.3)
        tree.set(idx, values)
        _, last = np.unique(idx[::-1], return_index=True)  # numpy assignment: the last duplicate wins
        priorities[np.unique(idx)] = values[::-1][last]
    if priorities.sum() == 0:
        priorities[0] = 1.0
        tree.set(np.array([0]), np.array([1.0]))
    np.testing.assert_allclose(tree.get(np.arange(capacity)), priorities)
    cumsum = np.cumsum(priorities)
    assert tree.total == pytest.approx(cumsum[-1], rel=1e-12)
    fractions = np.sort(rng.random(2000))
    leaves, values, total = tree.find(fractions)
    expected = np.searchsorted(cumsum, fractions * cumsum[-1], side="right")
    np.testing.assert_array_equal(leaves, expected)
    np.testing.assert_array_equal(values, priorities[leaves])
    assert total == pytest.approx(tree.total, rel=1e-12)
    assert (priorities[leaves] > 0).all()


def test_sum_tree_never_returns_zero_leaves_at_edges():
    tree = SumTree(100, branching=4)
    tree.set(np.array([3, 50]), np.array([1e-300, 2.0]))
    leaves, _, _ = tree.find(np.array([0.0, 1 - 1e-17, np.nextafter(1.0, 0.0)]))
    assert set(leaves.tolist()) <= {3, 50}


def test_sum_tree_errors():
    tree = SumTree(10)
    with pytest.raises(ValueError, match="non-negative"):
        tree.set(np.array([1]), np.array([-1.0]))
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        tree.set(np.array([10]), np.array([1.0]))
    with pytest.raises(ValueError, match="all priorities are zero"):
        tree.find(np.array([0.5]))


def _all_valid(selector, n):
    selector.on_write(np.arange(n))
    selector.set_valid(np.arange(n), np.ones(n, dtype=bool))


def _counts(selector, n, draws=800, batch=64):
    counts = np.zeros(n)
    for _ in range(draws):
        items, _ = selector.sample(batch)
        np.add.at(counts, items, 1)
    return counts


def test_prioritized_frequencies_match_priorities_chi_square():
    n, alpha = 50, 0.6
    selector = PrioritizedSelector(n, alpha=alpha, beta=0.4, seed=1)
    _all_valid(selector, n)
    raw = np.random.default_rng(2).random(n) * 5 + 0.01
    selector.update_priorities(np.arange(n), raw)
    counts = _counts(selector, n)
    expected = raw**alpha / (raw**alpha).sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > P_THRESHOLD
    # Negative control: the same counts are far from what alpha = 0 (uniform) would give.
    assert stats.chisquare(counts, np.full(n, counts.sum() / n)).pvalue < 1e-9


def test_uniform_selector_draws_only_valid_items_uniformly():
    n = 40
    selector = UniformSelector(n, seed=3)
    selector.on_write(np.arange(n))
    valid = np.arange(n) % 5 != 0
    selector.set_valid(np.arange(n), valid)
    assert selector.num_valid == valid.sum()
    counts = _counts(selector, n, draws=400)
    assert counts[~valid].sum() == 0
    assert stats.chisquare(counts[valid]).pvalue > P_THRESHOLD
    items, weights = selector.sample(16)
    assert (weights == 1).all()


def test_importance_weights_and_beta_annealing():
    n = 8
    selector = PrioritizedSelector(n, alpha=1.0, beta=0.5, beta_final=1.0, beta_anneal_draws=4, seed=0)
    _all_valid(selector, n)
    raw = np.arange(1, n + 1, dtype=float)
    selector.update_priorities(np.arange(n), raw)
    probabilities = raw / raw.sum()
    betas = []
    for _ in range(6):
        betas.append(selector.beta)
        items, weights = selector.sample(8)
        w = (n * probabilities[items]) ** -betas[-1]
        np.testing.assert_allclose(weights, w / w.max(), rtol=1e-6)
    assert betas == pytest.approx([0.5, 0.625, 0.75, 0.875, 1.0, 1.0])


def test_new_items_enter_at_max_priority_or_given_priorities():
    selector = PrioritizedSelector(10, alpha=0.5, beta=0.4, seed=0)
    _all_valid(selector, 4)
    np.testing.assert_allclose(selector.tree.get(np.arange(4)), 1.0)  # default priority 1
    selector.update_priorities(np.array([0, 1]), np.array([16.0, 4.0]))
    assert selector.max_priority == pytest.approx(4.0)  # 16 ** 0.5
    selector.on_write(np.array([4, 5]))
    selector.on_write(np.array([6]), priorities=np.array([9.0]))
    selector.set_valid(np.array([4, 5, 6]), np.ones(3, dtype=bool))
    np.testing.assert_allclose(selector.tree.get(np.array([4, 5, 6])), [4.0, 4.0, 3.0])
    # rlpyt 2019 (R2D1 deviation 2): input priorities stored without the exponent.
    raw = PrioritizedSelector(10, alpha=0.5, input_priorities_alpha=False)
    raw.on_write(np.array([0]), priorities=np.array([9.0]))
    raw.set_valid(np.array([0]), np.array([True]))
    np.testing.assert_allclose(raw.tree.get(np.array([0])), [9.0])


def test_priorities_of_invalid_items_wait_until_valid():
    selector = PrioritizedSelector(6, alpha=1.0, seed=0)
    selector.on_write(np.arange(6))
    selector.set_valid(np.arange(3), np.ones(3, dtype=bool))
    selector.update_priorities(np.array([4]), np.array([7.0]))  # not valid yet: out of the tree
    assert selector.tree.total == pytest.approx(3.0)
    assert set(_counts(selector, 6, draws=20, batch=8).nonzero()[0]) <= {0, 1, 2}
    selector.set_valid(np.array([4]), np.array([True]))
    assert selector.tree.total == pytest.approx(10.0)
    selector.set_valid(np.array([0]), np.array([False]))
    assert selector.tree.total == pytest.approx(9.0) and selector.num_valid == 3


def test_sampler_errors():
    with pytest.raises(ValueError, match="no valid items"):
        PrioritizedSelector(4).sample(2)
    with pytest.raises(ValueError, match="beta=1.5"):
        PrioritizedSelector(4, beta=1.5)
    with pytest.raises(ValueError, match="uniform"):
        UniformSelector(4).on_write(np.arange(2), priorities=np.ones(2))
    selector = PrioritizedSelector(4)
    with pytest.raises(ValueError, match="differs from items"):
        selector.update_priorities(np.arange(2), np.ones(3))


def test_same_seed_same_draws():
    def draws(seed):
        selector = PrioritizedSelector(100, alpha=0.6, seed=seed)
        _all_valid(selector, 100)
        selector.update_priorities(np.arange(100), np.linspace(0.1, 3.0, 100))
        return np.concatenate([selector.sample(32)[0] for _ in range(5)])

    np.testing.assert_array_equal(draws(7), draws(7))
    assert not np.array_equal(draws(7), draws(8))


def test_uniform_selector_with_rare_valid_items():
    selector = UniformSelector(10_000, seed=0)
    selector.on_write(np.arange(10_000))
    selector.set_valid(np.array([17, 4242]), np.array([True, True]))
    items, _ = selector.sample(256)
    assert set(items.tolist()) == {17, 4242}
