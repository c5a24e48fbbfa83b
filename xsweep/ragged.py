"""Ragged (CSR) array helpers shared by the metrics' index and the encoders."""

from __future__ import annotations

import numpy as np


def owners_and_places(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items grouped ``counts[i]`` per owner: each item's owner and place in its group."""
    counts = np.asarray(counts, np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    return owner, np.arange(len(owner)) - (np.cumsum(counts) - counts)[owner]


def ptr_counts(ptrs: list[np.ndarray]) -> np.ndarray:
    """Concatenated ``diff`` of many CSR pointer arrays, in one vectorised pass."""
    if not ptrs:
        return np.zeros(0, np.int64)
    joined = np.concatenate(ptrs).astype(np.int64)
    keep = np.ones(len(joined) - 1, bool)
    keep[np.cumsum([len(p) for p in ptrs])[:-1] - 1] = False  # diffs across program borders
    return np.diff(joined)[keep]


def padded_rows(rows) -> np.ndarray:
    """Ragged int rows -> int32[max(len(rows), 1), width] padded with -1 (width at least 1)."""
    width = max([len(r) for r in rows] + [1])
    out = np.full((max(len(rows), 1), width), -1, np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def run_starts(x: np.ndarray) -> np.ndarray:
    """bool[N]: where each run of equal values of ``x`` (1-D) begins (the first element
    always), in two passes over the array rather than ``np.diff``'s copies."""
    out = np.empty(len(x), bool)
    out[:1] = True
    np.not_equal(x[1:], x[:-1], out=out[1:])
    return out
