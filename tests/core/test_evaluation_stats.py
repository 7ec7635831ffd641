"""The statistics behind evaluation, on data whose answers are known."""

from __future__ import annotations

import math
import random

import pytest

from art_core.stats import bootstrap_ci, pass_at_k, permutation_p_value, quantile


def test_quantile_interpolates_like_numpy() -> None:
    # numpy.quantile([1, 2, 3, 4], 0.25) = 1.75: position 0.75 between 1 and 2
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.25) == pytest.approx(1.75)
    assert quantile([1.0, 2.0, 3.0, 4.0], 1.0) == 4.0
    assert quantile([5.0], 0.5) == 5.0


def test_bootstrap_of_constant_data_has_zero_width() -> None:
    assert bootstrap_ci([0.7] * 20) == (0.7, 0.7)
    assert bootstrap_ci([0.3]) == (0.3, 0.3)
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ci([])


def test_bootstrap_matches_the_normal_interval_of_a_proportion() -> None:
    # 50 zeros and 50 ones: mean 0.5, standard error sqrt(0.25 / 100) = 0.05, so about 0.5 +- 0.098
    low, high = bootstrap_ci([0.0] * 50 + [1.0] * 50)
    assert low == pytest.approx(0.402, abs=0.015)
    assert high == pytest.approx(0.598, abs=0.015)


def test_bootstrap_is_seeded() -> None:
    rng = random.Random(1)
    data = [rng.random() for _ in range(30)]
    assert bootstrap_ci(data, seed=3) == bootstrap_ci(data, seed=3)
    assert bootstrap_ci(data, seed=3) != bootstrap_ci(data, seed=4)


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    # 200 samples of 40 draws from Bernoulli(0.3); a 95% interval should miss 0.3 about 10 times
    rng = random.Random(0)
    misses = 0
    for i in range(200):
        low, high = bootstrap_ci([float(rng.random() < 0.3) for _ in range(40)], n_boot=1000, seed=i)
        misses += not low <= 0.3 <= high
    assert 2 <= misses <= 24  # binomial(200, 0.05): mean 10, this range is > 99.9%


def test_sign_flip_p_value_exact_known_answers() -> None:
    # five equal positive differences: only all-plus and all-minus reach |mean| = 1 -> 2 / 2^5
    assert permutation_p_value([1.0] * 5) == pytest.approx(2 / 32)
    # [1, -1]: every sign pattern has |mean| >= 0 -> p = 1
    assert permutation_p_value([1.0, -1.0]) == 1.0
    assert permutation_p_value([0.0, 0.0, 0.0]) == 1.0
    # [3, 1, 1]: |sum| >= 5 for (+,+,+) and (-,-,-) only; |sum| is 3 for (+,-,+) etc. -> 2 / 8
    assert permutation_p_value([3.0, 1.0, 1.0]) == pytest.approx(2 / 8)
    # [3, 1, -1]: observed |sum| 3; the sums of +-3 +-1 +-1 are 5, 3, 3, 1, -1, -3, -3, -5 -> 6 / 8
    assert permutation_p_value([3.0, 1.0, -1.0]) == pytest.approx(6 / 8)


def test_sign_flip_p_value_monte_carlo_for_many_pairs() -> None:
    assert permutation_p_value([0.5] * 40, n_perm=2000) == pytest.approx(1 / 2001)
    # with many pairs the sign-flip sum is close to normal with variance sum(d^2), so
    # p ~ 2 (1 - Phi(|sum d| / sqrt(sum d^2)))
    rng = random.Random(2)
    for shift in (0.0, 0.2, 0.4):
        diffs = [rng.gauss(shift, 1) for _ in range(80)]
        z = abs(sum(diffs)) / math.sqrt(sum(d * d for d in diffs))
        normal_p = math.erfc(z / math.sqrt(2))
        assert permutation_p_value(diffs, n_perm=4000) == pytest.approx(normal_p, abs=0.02)


def test_pass_at_k_unbiased_estimator() -> None:
    # 4 samples, 1 correct, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)  # pass@1 is the fraction correct
    assert pass_at_k(10, 3, 3) == pytest.approx(1 - math.comb(7, 3) / math.comb(10, 3))
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
