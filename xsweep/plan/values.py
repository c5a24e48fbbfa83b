"""Value keys: which number of a plan's analysis a duration, a payload or a hop count is.

The lowering builds a structure once (:mod:`xsweep.plan.lower`) and fills it with the
numbers of every analysis that shares it, so the structure holds keys, not numbers. A
key is one small ``NamedTuple`` per kind, whose fields say which number; the kind's
``number(analysis, *fields)`` computes it and ``placed(groups, dp_groups, *fields)``
gives the fields of the key a block's key stands for in a program. Group fields are
indices into ``analysis.groups``, DP fields into ``analysis.dp_groups``; layer spans
inside a group are offsets from its first layer, end exclusive. In a block of tasks
(:mod:`xsweep.plan.passes`) group fields hold the block's streams and DP fields its
stages. The numbers read nothing of the analysis but its groups, reshardings, DP
groups and model.

Keys are numbered by a :class:`KeyTable`, which files each with its kind (a
``NamedTuple`` equals any tuple of the same fields, so keys of two kinds could
otherwise be taken for one) and keeps them as :class:`Keys`: each key's kind and its
fields as plain tuples. Templates and blocks are kept for long, and the garbage
collector visits a ``NamedTuple`` at every collection for as long as it lives, while a
plain tuple of numbers and strings is left alone after the first: kept as
``NamedTuple`` objects, the keys of the 580 distinct plans of
``benchmarks/bench_prepare.py`` made the objects the collector tracks 184,000 rather
than 23,000 and a full collection 49 ms rather than 27.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from xsweep.plan.collectives import ALLGATHER, all_to_all_flow, pipelined_ring_flow
from xsweep.plan.groups import chunk_bytes_per_rank

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xsweep.plan.analysis import PlanAnalysis


class Zero(NamedTuple):
    """The constant 0: COMM tasks' durations, and flows without hop latencies."""

    @staticmethod
    def number(a: PlanAnalysis) -> float:
        return 0.0

    @staticmethod
    def placed(groups: Sequence[int], dp_groups: Sequence[int]) -> tuple:
        return ()


class One(NamedTuple):
    """The constant 1: a point-to-point send's hops and launches."""

    @staticmethod
    def number(a: PlanAnalysis) -> float:
        return 1.0

    @staticmethod
    def placed(groups: Sequence[int], dp_groups: Sequence[int]) -> tuple:
        return ()


def _piece_placed(groups: Sequence[int], dp_groups: Sequence[int], group: int, kind: str,
                  first: int, end: int) -> tuple:
    """The fields of a piece's key (group, kind, first, end) with the block stream
    ``group`` made the program's group."""
    return groups[group], kind, first, end


class PassTime(NamedTuple):
    """The compute time of a piece: layers ``first`` to ``end - 1`` of a forward
    (``kind`` "F") or backward ("B") pass of ``group``."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, kind: str, first: int, end: int) -> float:
        cost = a.groups[group].cost
        times = cost.layer_forward_time_s if kind == "F" else cost.layer_backward_time_s
        return sum(times[first:end])

    placed = staticmethod(_piece_placed)


def _tp_count(a: PlanAnalysis, group: int, kind: str, first: int, end: int) -> float:
    """TP all-reduces of a piece: its layers' where they differ, else the pass's in
    proportion to its layers."""
    cost = a.groups[group].cost
    per_layer = cost.tp_layer_forward if kind == "F" else cost.tp_layer_backward
    if per_layer:
        return float(sum(per_layer[first:end]))
    total = cost.tp_allreduces_forward if kind == "F" else cost.tp_allreduces_backward
    return total * (end - first) / len(cost.layer_forward_time_s)


def _tp_flow(a: PlanAnalysis, group: int, *span) -> tuple[float, float]:
    """(bytes, hops) of each flow of a piece's pipelined TP ring."""
    g = a.groups[group]
    return pipelined_ring_flow(g.tp, g.cost.tp_allreduce_bytes, _tp_count(a, group, *span))


class TpBytes(NamedTuple):
    """The payload of each flow of a piece's TP ring (fields as :class:`PassTime`'s)."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return _tp_flow(a, group, *span)[0]

    placed = staticmethod(_piece_placed)


class TpHops(NamedTuple):
    """The hop latencies each flow of a piece's TP ring waits for."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return _tp_flow(a, group, *span)[1]

    placed = staticmethod(_piece_placed)


class TpLaunches(NamedTuple):
    """The NCCL launches each flow of a piece's TP ring waits for."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return _tp_count(a, group, *span) * a.groups[group].cost.tp_ops_per_allreduce

    placed = staticmethod(_piece_placed)


def _a2a_count(a: PlanAnalysis, group: int, kind: str, first: int, end: int) -> float:
    """All-to-alls of a piece (MoE dispatch and combine): those of its layers."""
    cost = a.groups[group].cost
    counts = cost.a2a_forward if kind == "F" else cost.a2a_backward
    return float(sum(counts[first:end]))


class EpBytes(NamedTuple):
    """The payload of each flow of a piece's expert-parallel all-to-alls: what one rank
    sends each other rank of its group (fields as :class:`PassTime`'s)."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return all_to_all_flow(a.groups[group].cost.a2a_pair_bytes, _a2a_count(a, group, *span))[0]

    placed = staticmethod(_piece_placed)


class EpMateBytes(NamedTuple):
    """Under DeepEP's dispatch (``moe_dispatcher`` deepep) where an EP group spans nodes:
    the payload of each all-to-all flow of a piece to a rank on the sender's node, the
    tokens it dispatches there itself and those it passes on for the ranks at its place
    on the other nodes (:func:`xsweep.plan.workload.deepep_factors`; fields as
    :class:`PassTime`'s)."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return EpBytes.number(a, group, *span) * a.ep_dispatch(group)[0]

    placed = staticmethod(_piece_placed)


class EpRailBytes(NamedTuple):
    """Under DeepEP's dispatch where an EP group spans nodes: the payload of each flow of
    a piece's all-to-alls to the rank at the sender's place on another node, one copy of
    each token that has an expert there (fields as :class:`PassTime`'s)."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return EpBytes.number(a, group, *span) * a.ep_dispatch(group)[1]

    placed = staticmethod(_piece_placed)


class EpHops(NamedTuple):
    """The hop latencies (one per all-to-all) each flow of a piece's all-to-alls waits for."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return all_to_all_flow(0.0, _a2a_count(a, group, *span))[1]

    placed = staticmethod(_piece_placed)


class EpLaunches(NamedTuple):
    """The NCCL launches (one per all-to-all) each flow of a piece's all-to-alls waits for."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return _a2a_count(a, group, *span)

    placed = staticmethod(_piece_placed)


class OptimizerTime(NamedTuple):
    """The optimizer step of ``group``."""

    group: int

    @staticmethod
    def number(a: PlanAnalysis, group: int) -> float:
        return a.groups[group].optimizer_time_s

    @staticmethod
    def placed(groups: Sequence[int], dp_groups: Sequence[int], group: int) -> tuple:
        return (groups[group],)


class TransferBytes(NamedTuple):
    """The payload of move ``index`` of the resharding from group ``src`` to ``dst``."""

    src: int
    dst: int
    index: int

    @staticmethod
    def number(a: PlanAnalysis, src: int, dst: int, index: int) -> float:
        return a.transfers(src, dst)[index].bytes

    @staticmethod
    def placed(groups: Sequence[int], dp_groups: Sequence[int], src: int, dst: int,
               index: int) -> tuple:
        return groups[src], groups[dst], index


class RingBytes(NamedTuple):
    """The payload of each flow of a DP collective on the gradients (or parameters) of
    layers ``first`` to ``last``: a pipelined ring per LCM chunk, each on ``d / lcm``
    bytes, making ``passes`` passes (:mod:`xsweep.plan.collectives`). Where EP groups
    span replicas, ``d`` is the dense part only (:meth:`~xsweep.plan.analysis.
    PlanAnalysis.dp_bytes`; the experts' ride :class:`ExpertRingBytes`)."""

    dp_group: int
    first: int
    last: int
    passes: int

    @staticmethod
    def number(a: PlanAnalysis, dp_group: int, first: int, last: int, passes: int) -> float:
        dpg = a.dp_groups[dp_group]
        chunk = chunk_bytes_per_rank(a.dp_bytes(dp_group, first, last)[0], dpg.tps)
        return pipelined_ring_flow(len(dpg.rings[0].ranks), chunk, 1.0, passes)[0]

    @staticmethod
    def placed(groups: Sequence[int], dp_groups: Sequence[int], dp_group: int, first: int,
               last: int, passes: int) -> tuple:
        return dp_groups[dp_group], first, last, passes


class GatherBytes(NamedTuple):
    """The payload of each flow of an FP8 parameter all-gather (``fp8_param_gather``) of
    layers ``first`` to ``last``: :class:`RingBytes` of one pass on the bytes the FP8
    copies make (:meth:`~xsweep.plan.analysis.PlanAnalysis.fp8_gather_bytes`)."""

    dp_group: int
    first: int
    last: int

    @staticmethod
    def number(a: PlanAnalysis, dp_group: int, first: int, last: int) -> float:
        dpg = a.dp_groups[dp_group]
        chunk = chunk_bytes_per_rank(a.fp8_gather_bytes(first, last), dpg.tps)
        return pipelined_ring_flow(len(dpg.rings[0].ranks), chunk, 1.0, ALLGATHER)[0]

    @staticmethod
    def placed(groups: Sequence[int], dp_groups: Sequence[int], dp_group: int, first: int,
               last: int) -> tuple:
        return dp_groups[dp_group], first, last


def gather_bytes(fp8: bool, dp_group: int, first: int, last: int) -> tuple:
    """The payload key of a parameter all-gather of layers first..last: FP8 copies with
    ``fp8_param_gather`` (``fp8``), else the BF16 parameters."""
    return (GatherBytes(dp_group, first, last) if fp8
            else RingBytes(dp_group, first, last, ALLGATHER))


class RingHops(NamedTuple):
    """The hop latencies each flow of a DP collective of ``passes`` passes waits for."""

    dp_group: int
    passes: int

    @staticmethod
    def number(a: PlanAnalysis, dp_group: int, passes: int) -> float:
        members = len(a.dp_groups[dp_group].rings[0].ranks)  # DP x CP ranks
        return pipelined_ring_flow(members, 0.0, 1.0, passes)[1]

    @staticmethod
    def placed(groups: Sequence[int], dp_groups: Sequence[int], dp_group: int,
               passes: int) -> tuple:
        return dp_groups[dp_group], passes


def _expert_ring_size(a: PlanAnalysis, dp_group: int) -> int:
    """Members of each expert ring of a DP group: its replicas (times their CP ranks) over
    those an EP group spans."""
    return len(a.dp_groups[dp_group].rings[0].ranks) // a.expert_fold(dp_group)


class ExpertRingBytes(NamedTuple):
    """The payload of each flow of the expert rings of a DP collective on layers
    ``first`` to ``last`` (EP groups over replicas:
    :meth:`~xsweep.plan.analysis.PlanAnalysis.expert_rings`): the routed experts'
    gradients (or parameters), ``1 / lcm`` of their unsharded bytes per ring, over the
    ``d / r`` replicas that hold the same experts, making ``passes`` passes."""

    dp_group: int
    first: int
    last: int
    passes: int

    @staticmethod
    def number(a: PlanAnalysis, dp_group: int, first: int, last: int, passes: int) -> float:
        chunk = chunk_bytes_per_rank(a.dp_bytes(dp_group, first, last)[1],
                                     a.dp_groups[dp_group].tps)
        return pipelined_ring_flow(_expert_ring_size(a, dp_group), chunk, 1.0, passes)[0]

    placed = staticmethod(RingBytes.placed)


class ExpertRingHops(NamedTuple):
    """The hop latencies each flow of an expert ring of ``passes`` passes waits for."""

    dp_group: int
    passes: int

    @staticmethod
    def number(a: PlanAnalysis, dp_group: int, passes: int) -> float:
        return pipelined_ring_flow(_expert_ring_size(a, dp_group), 0.0, 1.0, passes)[1]

    placed = staticmethod(RingHops.placed)


def _cp_steps(a: PlanAnalysis, group: int, kind: str, first: int, end: int) -> float:
    """Steps of a piece's context-parallel ring: ``cp - 1`` per block of a forward pass,
    times the backward's factor (K/V and their gradients; with recompute the forward's
    ring again) in a backward pass."""
    cost = a.groups[group].cost
    factor = 1.0 if kind == "F" else cost.cp_backward_factor
    return cost.cp_steps * (end - first) * factor


class CpBytes(NamedTuple):
    """The payload of each flow of a piece's context-parallel ring (Transformer Engine's
    ring attention): a rank's K/V block per step to its CP successor, over the piece's
    steps (fields as :class:`PassTime`'s)."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return a.groups[group].cost.cp_step_bytes * _cp_steps(a, group, *span)

    placed = staticmethod(_piece_placed)


class CpSteps(NamedTuple):
    """The hop latencies and the NCCL launches each flow of a piece's context-parallel
    ring waits for: one per step, the steps running one after another."""

    group: int
    kind: str
    first: int
    end: int

    @staticmethod
    def number(a: PlanAnalysis, group: int, *span) -> float:
        return _cp_steps(a, group, *span)

    placed = staticmethod(_piece_placed)


ZERO, ONE = Zero(), One()

#: Every kind; a kept key names its kind by its index here.
KINDS = (Zero, One, PassTime, TpBytes, TpHops, TpLaunches, OptimizerTime, TransferBytes,
         RingBytes, RingHops, EpBytes, EpHops, EpLaunches, CpBytes, CpSteps, GatherBytes,
         ExpertRingBytes, ExpertRingHops, EpMateBytes, EpRailBytes)
_CODE = {kind: code for code, kind in enumerate(KINDS)}

#: Kinds whose number depends only on the group's stage cost and the span (their fields:
#: group, kind, first, end): replicas of a stage share their cost object, so one number
#: serves them all.
BY_COST = frozenset({PassTime, TpBytes, TpHops, TpLaunches, EpBytes, EpHops, EpLaunches,
                     CpBytes, CpSteps})


def tp_ring_keys(group: int, kind: str, first: int,
                 end: int) -> tuple[TpBytes, TpHops, TpLaunches]:
    """The payload, hops and launches keys of every flow of a piece's TP ring."""
    return (TpBytes(group, kind, first, end), TpHops(group, kind, first, end),
            TpLaunches(group, kind, first, end))


def ep_keys(group: int, kind: str, first: int,
            end: int) -> tuple[EpBytes, EpHops, EpLaunches]:
    """The payload, hops and launches keys of every flow of a piece's all-to-alls."""
    return (EpBytes(group, kind, first, end), EpHops(group, kind, first, end),
            EpLaunches(group, kind, first, end))


def cp_ring_keys(group: int, kind: str, first: int, end: int) -> tuple[CpBytes, CpSteps]:
    """The payload and the hops (and launches) keys of every flow of a piece's CP ring."""
    return CpBytes(group, kind, first, end), CpSteps(group, kind, first, end)


class Keys(NamedTuple):
    """Value keys as structures keep them (see the module's description): key ``i`` is
    of the kind ``KINDS[codes[i]]``, with the fields ``rows[i]``."""

    codes: tuple[int, ...]
    rows: tuple[tuple, ...]

    def kind(self, i: int) -> type:
        return KINDS[self.codes[i]]

    def key(self, i: int):
        """Key ``i`` as its ``NamedTuple``."""
        return self.kind(i)._make(self.rows[i])


class KeyTable:
    """Distinct value keys, numbered in the order they first come."""

    def __init__(self, *keys) -> None:
        self._index: dict[tuple[type, tuple], int] = {}  # (kind, fields) -> its number
        self._codes: list[int] = []
        self._rows: list[tuple] = []
        for key in keys:
            self.index(key)

    def __len__(self) -> int:
        return len(self._rows)

    def index(self, key) -> int:
        """The number of ``key`` (a ``NamedTuple`` of a kind), given now if it has none."""
        kind = type(key)
        i = self._index.get((kind, key))
        if i is None:
            i = self._index[kind, key] = len(self._rows)
            self._codes.append(_CODE[kind])
            self._rows.append(tuple(key))  # plain: see the module's description
        return i

    def like(self, i: int, kind: type) -> int:
        """The number of the key of ``kind`` with the fields of key ``i``."""
        return self.index(kind(*self._rows[i]))

    def placed(self, keys: Keys, groups: Sequence[int], dp_groups: Sequence[int]) -> list[int]:
        """The numbers of the keys a block's ``keys`` stand for (each kind's ``placed``),
        in order."""
        out, index, codes, rows = [], self._index, self._codes, self._rows
        for code, row in zip(keys.codes, keys.rows, strict=True):
            kind = KINDS[code]
            fields = kind.placed(groups, dp_groups, *row)
            i = index.setdefault((kind, fields), len(rows))
            if i == len(rows):
                codes.append(code)
                rows.append(fields)
            out.append(i)
        return out

    def frozen(self) -> Keys:
        return Keys(tuple(self._codes), tuple(self._rows))
