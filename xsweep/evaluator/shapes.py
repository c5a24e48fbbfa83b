"""Sizes of encoded programs and the rounded shapes batches share.

Programs of one batch share one shape: for the exact level a :class:`Shape`
``(T, E, F, P, L)`` (tasks, dependency edges, flows, links per path, links), for the
bound a :class:`BlockShape` (tasks, blocks, slots per block, predecessors per
slot). Sizes are rounded up to the ladder 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and
1.5 x 2^k), so that batches of similar programs repeat shapes and reuse compiled
kernels, with at most a third of each axis spare.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from xsweep.plan.program import Program
from xsweep.ragged import ptr_counts


class Shape(NamedTuple):
    """Array sizes of one encoded batch (per variant)."""

    tasks: int
    edges: int
    flows: int
    hops: int
    links: int


class BlockShape(NamedTuple):
    """Array sizes of one batch of block layouts (per variant)."""

    tasks: int
    blocks: int
    width: int  # slots per block
    preds: int  # predecessors per slot


def program_sizes(programs: Sequence[Program]) -> np.ndarray:
    """int64[N, 5]: each program's sizes in the order of :class:`Shape` (hops: longest path)."""
    out = np.zeros((len(programs), len(Shape._fields)), np.int64)
    if not programs:
        return out
    out[:, 0] = [p.num_tasks for p in programs]
    out[:, 1] = [int(p.dep_ptr[-1]) for p in programs]
    out[:, 2] = [p.num_flows for p in programs]
    out[:, 4] = [p.num_links for p in programs]
    # longest path of each program: one max-reduction over all programs' path lengths
    lengths = ptr_counts([p.path_ptr for p in programs])
    has = out[:, 2] > 0  # reduceat needs non-empty groups
    if has.any():
        out[has, 3] = np.maximum.reduceat(lengths, (np.cumsum(out[:, 2]) - out[:, 2])[has])
    return out


def predicted_size(sizes: np.ndarray) -> np.ndarray:
    """Tasks + flows of each row of ``sizes``: predicts the number of events well."""
    return sizes[:, 0] + sizes[:, 2]


def power_of_two(n):
    """Smallest power of two >= n (and >= 1); works on ints and integer arrays."""
    n = np.maximum(np.asarray(n, np.int64), 1)
    out = np.left_shift(1, np.ceil(np.log2(n)).astype(np.int64))
    return int(out) if out.ndim == 0 else out


def ladder(n):
    """Smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 1.5 * 2^k) that is >= n.

    Works on ints and integer arrays.
    """
    power = np.asarray(power_of_two(n))
    three_quarters = power * 3 // 4
    out = np.where((three_quarters >= np.asarray(n)) & (three_quarters >= 1), three_quarters,
                   power)
    return int(out) if out.ndim == 0 else out


def program_shapes(sizes: np.ndarray) -> np.ndarray:
    """Rounded :class:`Shape` of every row of ``sizes`` (from :func:`program_sizes`)."""
    sizes = np.asarray(sizes)
    return ladder(np.asarray(sizes))


def batch_shape(sizes: np.ndarray) -> Shape:
    """Rounded shape that fits every row of ``sizes`` (from :func:`program_sizes`)."""
    largest = sizes.max(axis=0) if len(sizes) else np.zeros(len(Shape._fields), np.int64)
    return Shape(*(int(n) for n in program_shapes(largest)))


def cells(shape: Shape | BlockShape) -> int:
    """Array cells of one encoded variant.

    :class:`Shape`: tasks, edges, flows and their path slots, links;
    :class:`BlockShape`: slots with their predecessors, tasks.
    """
    if isinstance(shape, BlockShape):
        return shape.blocks * shape.width * (1 + shape.preds) + shape.tasks
    return shape.tasks + shape.edges + shape.flows * (1 + shape.hops) + shape.links


def padding_overhead(sizes: np.ndarray, shape: Shape | BlockShape,
                     num_variants: int | None = None) -> float:
    """Padded cells per real cell of the encoded arrays (0 means no padding).

    ``sizes``: rows of the shape's fields. A program's path slots count by its
    longest path, a fair floor.
    """
    real = sum(cells(type(shape)(*row)) for row in sizes.tolist())
    rows = len(sizes) if num_variants is None else num_variants
    return float(rows * cells(shape) / max(real, 1) - 1.0)
