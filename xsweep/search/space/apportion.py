"""Dividing a whole number of items (layers, micro-batches) in proportion to weights."""

from __future__ import annotations

import math
from collections.abc import Sequence


def apportion(total: int, weights: Sequence[float], minimum: int = 1) -> list[int]:
    """Split ``total`` into ``len(weights)`` whole parts, each at least ``minimum``,
    in proportion to ``weights`` (largest-remainder method).

    Parts whose exact share would fall below ``minimum`` get ``minimum`` and the rest
    is shared among the others; every other part is its exact share rounded down or
    up, so it lies within 1 of that share. Ties go to the lower index. The parts always
    sum to ``total``.

    Raises:
      ValueError: no weights, a weight that is not positive, or ``total`` too small for
        every part to get ``minimum``.
    """
    n = len(weights)
    if n == 0 or min(weights) <= 0:
        raise ValueError(f"weights must be positive and at least one, got {list(weights)}")
    if total < n * minimum:
        raise ValueError(f"{total} cannot give {n} parts at least {minimum} each")
    at_minimum = [False] * n
    while True:
        free = [i for i in range(n) if not at_minimum[i]]
        left = total - minimum * (n - len(free))
        weight = math.fsum(weights[i] for i in free)
        share = {i: left * weights[i] / weight for i in free}
        below = [i for i in free if share[i] < minimum]
        if not below:
            break
        for i in below:
            at_minimum[i] = True
    parts = [minimum] * n
    for i in free:
        parts[i] = math.floor(share[i])
    missing = left - sum(parts[i] for i in free)
    for i in sorted(free, key=lambda i: (parts[i] - share[i], i))[:missing]:
        parts[i] += 1
    return parts
