"""A validated plan, typed: the message and everything its validation resolved.

:func:`xsweep.spec.validate.validate_plan` returns a :class:`ValidPlan`. Its users
(the analysis, the pipeline, the commands) read the model, the training options, the
hardware of every node and the device groups from it as values, without going back to
the message and the catalog to resolve names again: each enum is a name, the model
preset is a :class:`~xsweep.spec.catalog.ModelSpec` with the plan's fields laid over it,
each node holds its catalog entries.

The parts are shared between plans: validation keeps each part it resolved by the bytes
it came from (``xsweep.memo``), so plans that repeat a part (the variants of a sweep)
hold the same object, and a memo may key what it derives from a part by the part's id.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from xsweep.spec import xsweep_pb2
from xsweep.spec.catalog import Catalog, GpuSpec, LinkSpec, ModelSpec, NicSpec
from xsweep.spec.stack import Stack

#: Port-to-port delay of one ToR or spine switch when the plan gives none. The paper's
#: Table 5 has no switch figure; cut-through data-centre switches forward in a few
#: hundred nanoseconds, and 500 ns is a round value in that range (an assumption).
DEFAULT_SWITCH_LATENCY_NS = 500.0

#: Nodes under one ToR on a fat tree when the plan gives none (the plan schema's default).
DEFAULT_NODES_PER_RACK = 4


@dataclass(frozen=True)
class NodeHw:
    """One server: its GPU and NIC models, GPU count, scale-up figures and site index."""

    gpu: GpuSpec
    nic: NicSpec
    num_gpus: int
    scale_up_gbps: float  # per GPU, Gb/s (the node's override, else the GPU's catalog value)
    scale_up_latency_ns: float
    scale_up_link: LinkSpec  # of the scale-up fabric (the node's override, else the GPU's)
    pcie_link: LinkSpec  # link kind of the GPU's PCIe path
    cluster: int = 0  # index of the site the node sits in


@dataclass(frozen=True)
class FabricHw:
    """Scale-out fabric: kind, ToR oversubscription, rack size, switch and inter-site figures."""

    kind: str  # "rail_optimized" or "fat_tree"
    oversubscription: float = 1.0  # ToR NIC-facing capacity : uplink capacity
    nodes_per_rack: int = DEFAULT_NODES_PER_RACK  # fat_tree only
    switch_latency_ns: float = DEFAULT_SWITCH_LATENCY_NS  # per ToR or spine traversed
    inter_cluster_gbps: float = 0.0  # spine-to-spine link between sites, each direction
    inter_cluster_latency_ns: float = 0.0


@dataclass(frozen=True, eq=False)
class ClusterHw:
    """The plan's cluster against the catalog: every node's hardware, in plan order (ranks
    are numbered node by node), and the fabric."""

    nodes: tuple[NodeHw, ...]
    fabric: FabricHw

    @functools.cached_property
    def gpus_per_node(self) -> tuple[int, ...]:
        return tuple(node.num_gpus for node in self.nodes)

    @functools.cached_property
    def first_node_without_fp8(self) -> int | None:
        """The index of the first node whose GPU has no FP8 tensor cores, or None."""
        return next((i for i, node in enumerate(self.nodes) if not node.gpu.has_fp8), None)

    @functools.cached_property
    def rank_gpus(self) -> tuple[GpuSpec, ...]:
        """The GPU of each global rank."""
        return tuple(node.gpu for node in self.nodes for _ in range(node.num_gpus))


@dataclass(frozen=True)
class TrainingOptions:
    """The plan's training options, unset ones at their defaults."""

    global_batch_size: int
    total_tokens: float  # of the whole run; 0 when the plan does not say
    schedule: str  # "gpipe" | "1f1b"
    resharding: str  # "lcm" | "hetauto" | "alpacomm"
    stack: Stack  # one object per value: plans with equal options share it


class Group(NamedTuple):
    """One device group: a TP group (times its CP ranks) running one pipeline stage of one
    replica. ``ranks`` holds ``tp x cp`` ranks, TP fastest: rank ``q * tp + i`` is TP rank
    ``i`` of CP rank ``q``."""

    id: int
    ranks: tuple[int, ...]
    stage: int
    replica: int
    first_layer: int
    last_layer: int
    micro_batch_size: int
    num_micro_batches: int
    cp: int = 1  # context-parallel ranks; tp = len(ranks) // cp


@dataclass(frozen=True, eq=False)
class ValidPlan:
    """A plan that passed :func:`~xsweep.spec.validate.validate_plan` against ``catalog``,
    with what validation resolved. The message must not change while this is in use."""

    message: xsweep_pb2.DeploymentPlan
    catalog: Catalog  # what the names were resolved against
    model: ModelSpec  # the preset with the plan's fields laid over it
    training: TrainingOptions
    cluster: ClusterHw
    groups: tuple[Group, ...]  # ordered by (replica, stage)
    program_size: int  # the validation's bound on the program's tasks plus flows

    @property
    def name(self) -> str:
        return self.message.name
