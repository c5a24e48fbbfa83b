"""Layer-aware DP groups, LCM multi-rings and LCM gradient chunking.

Device groups of different pipeline depths cover overlapping but different
layer ranges, so the set of replicas that must average a layer's gradients
changes along the model. The sweep line (paper Algorithm 1) cuts the model at
every stage boundary; each resulting segment that two or more device groups
hold becomes one DP group. Inside a DP group the TP degrees may differ, so the
gradient is cut into ``L = lcm(t_1, ..., t_k)`` equal chunks and every chunk
gets its own ring (Algorithm 2) holding, from each device group, the rank that
owns that chunk; each rank then moves ``d / L`` bytes per chunk it owns
(Algorithm 3).

Under context parallelism a device group holds ``tp x cp`` ranks (TP fastest) and its
weights are replicated over its CP ranks, so gradients are reduced over DP x CP (Megatron's
data-parallel-with-context group): the ring of chunk ``c`` holds, from each member, the
rank owning the chunk in each of its CP ranks, and a lone replica with ``cp > 1`` still
forms a DP group of its CP ranks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GroupSpan:
    """One device group as the grouping sees it: id, layer range, ranks in TP order (TP
    fastest, then CP), CP ranks.

    ``first_layer`` and ``last_layer`` are 1-based and inclusive; ``tp == len(ranks) / cp``.
    """

    id: int
    first_layer: int
    last_layer: int
    ranks: tuple[int, ...]
    cp: int = 1

    def __post_init__(self) -> None:
        if self.first_layer > self.last_layer:
            raise ValueError(f"device group {self.id}: empty layer range "
                             f"[{self.first_layer}, {self.last_layer}]")
        if not self.ranks:
            raise ValueError(f"device group {self.id}: no ranks")

    @property
    def tp(self) -> int:
        return len(self.ranks) // self.cp


@dataclass(frozen=True)
class Ring:
    """The communicator of one LCM chunk: one rank per device group, in device-group id order."""

    chunk: int
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class DpGroup:
    """The device groups that synchronise the gradients of one layer segment.

    ``device_groups`` are sorted ids and ``tps`` their TP degrees in the same
    order; ``ranks`` is the sorted union of their ranks; ``lcm`` is the number
    of gradient chunks, and ``rings[c]`` is the ring of chunk ``c``.
    """

    first_layer: int
    last_layer: int
    device_groups: tuple[int, ...]
    tps: tuple[int, ...]
    ranks: tuple[int, ...]
    lcm: int
    rings: tuple[Ring, ...]


def lcm_of(values: Iterable[int]) -> int:
    """Least common multiple of positive integers (1 for none)."""
    return math.lcm(*values)


def sweep_line_segments(spans: Sequence[GroupSpan]) -> list[tuple[int, int]]:
    """The unique layer segments ``(first, last)`` cut at every group's boundaries (Algorithm 1).

    Boundaries are each group's first layer and one past its last, so two
    adjacent groups produce adjacent segments; a gap no group covers still
    forms a segment (and no DP group).
    """
    points = sorted({p for s in spans for p in (s.first_layer, s.last_layer + 1)})
    return [(lo, hi - 1) for lo, hi in zip(points, points[1:], strict=False)]


def dp_groups(spans: Sequence[GroupSpan]) -> list[DpGroup]:
    """One DP group per segment that at least two device groups cover, in layer order.

    The position in the returned list is the DP group's id (Algorithm 1 numbers
    them in this order).
    """
    ordered = sorted(spans, key=lambda s: s.id)
    groups = []
    for first, last in sweep_line_segments(ordered):
        members = [s for s in ordered if s.first_layer <= first and s.last_layer >= last]
        if sum(s.cp for s in members) < 2:
            continue
        chunks = lcm_of(s.tp for s in members)
        groups.append(DpGroup(
            first_layer=first,
            last_layer=last,
            device_groups=tuple(s.id for s in members),
            tps=tuple(s.tp for s in members),
            ranks=tuple(sorted(r for s in members for r in s.ranks)),
            lcm=chunks,
            rings=tuple(_ring(c, members) for c in range(chunks)),
        ))
    return groups


def _ring(chunk: int, members: Sequence[GroupSpan]) -> Ring:
    # Interleaved ownership by the rank's index inside its group, not by its
    # global number: a group's ranks need not start at a multiple of its TP.
    return Ring(chunk, tuple(s.ranks[q * s.tp + chunk % s.tp] for s in members
                             for q in range(s.cp)))


def per_rank_bytes(total_bytes: float, tp: int) -> float:
    """Gradient bytes one rank of a TP-``tp`` group holds: ``d / t`` (Algorithm 3)."""
    return total_bytes / tp


def chunks_per_rank(tps: Iterable[int], tp: int) -> int:
    """How many of the ``lcm(tps)`` chunks one rank of a TP-``tp`` member owns: ``L / t``."""
    chunks = lcm_of(tps)
    if chunks % tp:
        raise ValueError(f"TP {tp} does not divide lcm {chunks} of the group's TP degrees")
    return chunks // tp


def chunk_bytes_per_rank(total_bytes: float, tps: Iterable[int]) -> float:
    """Bytes each rank contributes to each chunk it owns: ``(d / t) / (L / t) = d / L``.

    The same for every member whatever its TP degree, which is what lets one
    ring per chunk reduce equally sized buffers.
    """
    return total_bytes / lcm_of(tps)
