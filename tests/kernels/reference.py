"""Textbook float64 references written independently of the kernels."""

from __future__ import annotations

import numpy as np


def progressive_fill(capacity, paths) -> np.ndarray:
    """Max-min fair rates by progressive filling, one bottleneck level at a time.

    All unfrozen flows grow together by the largest increment no link can refuse;
    the links that fill up freeze every flow crossing them.

    Args:
      capacity: float[L].
      paths: list of link-id lists, one per flow.
    """
    residual = np.array(capacity, float)
    rates = np.zeros(len(paths))
    frozen = np.zeros(len(paths), bool)
    while not frozen.all():
        count = np.zeros(len(residual))
        for f, path in enumerate(paths):
            if not frozen[f]:
                count[path] += 1
        used = count > 0
        step = np.min(residual[used] / count[used])
        rates[~frozen] += step
        residual -= step * count
        full = used & (residual <= 1e-12 * np.asarray(capacity))
        for f, path in enumerate(paths):
            if not frozen[f] and full[path].any():
                frozen[f] = True
    return rates
