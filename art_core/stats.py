"""Small statistics for held-out evaluation: bootstrap intervals, a paired permutation test, pass@k.

Pure Python (no numpy), seeded, so the same data and seed always give the same interval.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

__all__ = ["bootstrap_ci", "pass_at_k", "permutation_p_value", "quantile"]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of already sorted values, interpolating linearly (numpy's default)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_ci(
    values: Sequence[float], *, confidence: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: resample `values` with replacement `n_boot` times.

    One value gives a zero-width interval at that value; no values is an error.
    """
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if n == 1 or min(values) == max(values):
        return values[0], values[0]
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(values, k=n)) / n for _ in range(n_boot))
    alpha = (1 - confidence) / 2
    return quantile(means, alpha), quantile(means, 1 - alpha)


def permutation_p_value(diffs: Sequence[float], *, n_perm: int = 10_000, seed: int = 0) -> float:
    """Two-sided p-value that paired differences have mean 0 (sign-flip permutation test).

    Under the null each difference is as likely negative as positive, so the observed |mean| is
    compared with the |mean| of every sign pattern: exactly for up to 12 pairs, else over `n_perm`
    random patterns (counting the observed one, so p is never 0).
    """
    diffs = [float(d) for d in diffs]
    n = len(diffs)
    if n == 0:
        raise ValueError("permutation_p_value needs at least one difference")
    observed = abs(math.fsum(diffs)) - 1e-12 * max(1.0, max(abs(d) for d in diffs)) * n
    if n <= 12:
        hits = sum(
            abs(math.fsum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed
            for signs in itertools.product((1, -1), repeat=n)
        )
        return hits / 2.0**n
    rng = random.Random(seed)
    hits = sum(abs(math.fsum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed for _ in range(n_perm))
    return (hits + 1) / (n_perm + 1)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from `n` samples of which `c` are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
