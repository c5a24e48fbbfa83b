"""Cluster network graph: directed links with capacity and latency, and deterministic routes.

Each GPU reaches the other GPUs of its node through one scale-up switch (NVLink,
or PCIe on nodes without NVLink) and the rest of the cluster through its own
PCIe path to its own NIC, as the seed paper's htsim extension models it (scale-up
layer, PCIe-switch/NIC layer, then the scale-out fabric). NICs attach to a
top-of-rack switch: one per rail (local GPU index) on a rail-optimized fabric,
one per rack on a fat tree. Every ToR has one aggregated uplink to the spine of
its site; sites are joined spine to spine by an inter-cluster link.

Latency placement: a link carries the delay of the medium it models (scale-up,
PCIe, NIC) plus ``switch_latency_ns`` when it enters a ToR or spine switch, so a
path's latency counts each traversed scale-out switch exactly once. The scale-up
switch has no extra delay: the scale-up latency already stands for it.

Every link also carries what NCCL makes of its kind (:mod:`xsweep.plan.transport`
reads them): the bus-bandwidth fraction of its line rate and the fixed time of one
NCCL operation, from the catalog's link kinds (scale-up and PCIe) and NICs. ToR
uplinks and inter-site links carry the network's figures (the lowest efficiency and
the highest launch latency of the NICs below them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import permutations
from typing import NamedTuple

import numpy as np

from xsweep.spec.catalog import GpuSpec, LinkSpec, NicSpec

RAIL_OPTIMIZED = "rail_optimized"
FAT_TREE = "fat_tree"
FABRIC_KINDS = (RAIL_OPTIMIZED, FAT_TREE)

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
    scale_up_link: LinkSpec  # link kind of the scale-up fabric (the node's override, else the GPU's)
    pcie_link: LinkSpec  # link kind of the GPU's PCIe path
    cluster: int = 0  # index of the site the node sits in


@dataclass(frozen=True)
class FabricHw:
    """Scale-out fabric: kind, ToR oversubscription, rack size, switch and inter-site figures."""

    kind: str  # RAIL_OPTIMIZED or FAT_TREE
    oversubscription: float = 1.0  # ToR NIC-facing capacity : uplink capacity
    nodes_per_rack: int = DEFAULT_NODES_PER_RACK  # FAT_TREE only
    switch_latency_ns: float = DEFAULT_SWITCH_LATENCY_NS  # per ToR or spine traversed
    inter_cluster_gbps: float = 0.0  # spine-to-spine link between sites, each direction
    inter_cluster_latency_ns: float = 0.0


class _RankLinks(NamedTuple):
    """Link ids that start or end at one GPU, and the ToR its NIC is cabled to."""

    scale_up_out: int
    scale_up_in: int
    pcie_out: int
    pcie_in: int
    nic_out: int
    nic_in: int
    tor: int


@dataclass(frozen=True, eq=False)
class Topology:
    """Directed links (capacity in bytes/s, latency in seconds) and routes between ranks.

    Build it with :func:`build_topology`. Link ``i`` has ``capacity[i]``,
    ``latency_s[i]`` and the readable name ``names[i]`` (``"tail->head"``).
    """

    capacity: np.ndarray  # float64[L], bytes/s
    latency_s: np.ndarray  # float64[L], s
    bus_efficiency: np.ndarray  # float64[L], fraction of capacity NCCL's bus bandwidth reaches
    launch_latency_s: np.ndarray  # float64[L], fixed time of one NCCL operation over the link
    names: tuple[str, ...]
    nodes: tuple[NodeHw, ...]
    fabric: FabricHw
    _rank_node: tuple[int, ...]
    _rank_local: tuple[int, ...]
    _rank_links: tuple[_RankLinks, ...]
    _tor_up: tuple[int, ...]
    _tor_down: tuple[int, ...]
    _tor_site: tuple[int, ...]
    _inter_cluster: dict[tuple[int, int], int]
    _paths: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict, repr=False,
                                                           init=False)

    @property
    def num_ranks(self) -> int:
        return len(self._rank_node)

    @property
    def num_links(self) -> int:
        return int(self.capacity.shape[0])

    def node_of(self, rank: int) -> int:
        """Index (in the plan's node order) of the node holding global ``rank``."""
        return self._rank_node[self._checked(rank)]

    def local_index(self, rank: int) -> int:
        """Position of ``rank`` inside its node (its rail on a rail-optimized fabric)."""
        return self._rank_local[self._checked(rank)]

    def path(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids from ``src`` to ``dst``, in order (deterministic, cached)."""
        key = (int(src), int(dst))
        route = self._paths.get(key)
        if route is None:
            route = self._paths[key] = self._route(*key)
        return route

    def paths(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The routes of many (``src``, ``dst``) pairs as CSR: ``(ptr, links)``, each route
        as :meth:`path` gives it, all found at once."""
        src, dst = np.asarray(src, np.int64).ravel(), np.asarray(dst, np.int64).ravel()
        if len(src) == 0:
            return np.zeros(1, np.int64), np.zeros(0, np.int64)
        bad = (src < 0) | (src >= self.num_ranks) | (dst < 0) | (dst >= self.num_ranks) \
            | (src == dst)
        if bad.any():
            first = int(np.argmax(bad))
            self._route(int(src[first]), int(dst[first]))  # raises what path() would
        ranks, node, tor_site, tor_up, tor_down, inter = self._route_arrays
        s, d = ranks[src], ranks[dst]
        same = node[src] == node[dst]
        s_tor, d_tor = s[:, 6], d[:, 6]
        far = ~same & (s_tor != d_tor)
        s_site, d_site = tor_site[s_tor], tor_site[d_tor]
        # every route in one row: scale-up out and in, or PCIe, NIC, [ToR up, inter-site,
        # ToR down,] NIC, PCIe; the links a route does not take are masked out
        route = np.stack([np.where(same, s[:, 0], s[:, 2]), np.where(same, d[:, 1], s[:, 4]),
                          tor_up[s_tor], inter[s_site, d_site], tor_down[d_tor],
                          d[:, 5], d[:, 3]], axis=1)
        taken = np.stack([np.ones_like(same), np.ones_like(same), far, far & (s_site != d_site),
                          far, ~same, ~same], axis=1)
        return np.concatenate([[0], np.cumsum(taken.sum(axis=1))]), route[taken]

    @cached_property
    def _route_arrays(self) -> tuple[np.ndarray, ...]:
        """The route tables as arrays: per rank its links and ToR (as ``_RankLinks``), its
        node; per ToR its site and up and down links; inter-site links by site pair."""
        sites = max(self._tor_site, default=0) + 1
        inter = np.full((sites, sites), -1, np.int64)
        for (a, b), link in self._inter_cluster.items():
            inter[a, b] = link
        return (np.array(self._rank_links, np.int64).reshape(-1, 7),
                np.array(self._rank_node, np.int64), np.array(self._tor_site, np.int64),
                np.array(self._tor_up, np.int64), np.array(self._tor_down, np.int64), inter)

    def shape_key(self) -> tuple:
        """What the links and routes depend on (not their capacities or latencies)."""
        fabric = self.fabric
        return (tuple((n.num_gpus, n.cluster) for n in self.nodes), fabric.kind,
                fabric.nodes_per_rack if fabric.kind == FAT_TREE else 0)

    def rank_nodes(self) -> np.ndarray:
        """int32[R]: the node index of every global rank."""
        return np.array(self._rank_node, np.int32)

    def path_latency_s(self, path: Sequence[int]) -> float:
        """Sum of the latencies of the links on ``path``."""
        return float(sum(float(self.latency_s[link]) for link in path))

    def _checked(self, rank: int) -> int:
        if not 0 <= rank < self.num_ranks:
            raise ValueError(f"rank {rank} outside 0..{self.num_ranks - 1}")
        return rank

    def _route(self, src: int, dst: int) -> tuple[int, ...]:
        if self._checked(src) == self._checked(dst):
            raise ValueError(f"no path from rank {src} to itself")
        s, d = self._rank_links[src], self._rank_links[dst]
        if self._rank_node[src] == self._rank_node[dst]:
            return (s.scale_up_out, d.scale_up_in)
        middle: tuple[int, ...] = ()
        if s.tor != d.tor:
            s_site, d_site = self._tor_site[s.tor], self._tor_site[d.tor]
            crossing = (self._inter_cluster[s_site, d_site],) if s_site != d_site else ()
            middle = (self._tor_up[s.tor], *crossing, self._tor_down[d.tor])
        return (s.pcie_out, s.nic_out, *middle, d.nic_in, d.pcie_in)


class _Kind(NamedTuple):
    """What NCCL makes of a link: bus-bandwidth fraction and launch latency in us."""

    bus_efficiency: float
    launch_latency_us: float


class _LinkTable:
    """Accumulates links, converting Gb/s to bytes/s and ns, us to s in one place."""

    def __init__(self) -> None:
        self.capacity: list[float] = []
        self.latency_s: list[float] = []
        self.efficiency: list[float] = []
        self.launch_s: list[float] = []
        self.names: list[str] = []

    def add(self, tail: str, head: str, gbps: float, latency_ns: float, kind: _Kind) -> int:
        self.capacity.append(gbps * 1e9 / 8)
        self.latency_s.append(latency_ns * 1e-9)
        self.efficiency.append(kind.bus_efficiency)
        self.launch_s.append(kind.launch_latency_us * 1e-6)
        self.names.append(f"{tail}->{head}")
        return len(self.names) - 1


def _kind(spec: LinkSpec | NicSpec) -> _Kind:
    return _Kind(spec.bus_efficiency, spec.launch_latency_us)


def _network_kind(kinds: list[_Kind]) -> _Kind:
    """A fabric link shared by several NICs: the least efficient, slowest to launch."""
    return _Kind(min(k.bus_efficiency for k in kinds), max(k.launch_latency_us for k in kinds))


def build_topology(nodes: Sequence[NodeHw], fabric: FabricHw) -> Topology:
    """Build the link graph of ``nodes`` (global ranks numbered node by node) on ``fabric``."""
    nodes = tuple(nodes)
    if fabric.kind not in FABRIC_KINDS:
        raise ValueError(f"unknown fabric kind {fabric.kind!r}; expected one of {FABRIC_KINDS}")
    switch_ns = fabric.switch_latency_ns
    links = _LinkTable()
    rank_node: list[int] = []
    rank_local: list[int] = []
    rank_tor_key: list[tuple[int, int]] = []
    per_rank: list[tuple[int, ...]] = []
    tor_port_gbps: dict[tuple[int, int], float] = {}
    tor_kinds: dict[tuple[int, int], list[_Kind]] = {}
    nodes_seen_in_site: dict[int, int] = {}
    for n, node in enumerate(nodes):
        rack = nodes_seen_in_site.get(node.cluster, 0) // fabric.nodes_per_rack
        nodes_seen_in_site[node.cluster] = nodes_seen_in_site.get(node.cluster, 0) + 1
        for local in range(node.num_gpus):
            rank = len(rank_node)
            gpu, su, nic = f"gpu{rank}", f"su{n}", f"nic{rank}"
            key = (node.cluster, local if fabric.kind == RAIL_OPTIMIZED else rack)
            tor = _tor_name(fabric.kind, key)
            nic_gbps = node.nic.bandwidth_gbps
            up, pcie, net = _kind(node.scale_up_link), _kind(node.pcie_link), _kind(node.nic)
            per_rank.append((
                links.add(gpu, su, node.scale_up_gbps, node.scale_up_latency_ns, up),
                links.add(su, gpu, node.scale_up_gbps, node.scale_up_latency_ns, up),
                links.add(gpu, nic, node.gpu.pcie_gbps, node.gpu.pcie_latency_ns, pcie),
                links.add(nic, gpu, node.gpu.pcie_gbps, node.gpu.pcie_latency_ns, pcie),
                links.add(nic, tor, nic_gbps, node.nic.latency_ns + switch_ns, net),
                links.add(tor, nic, nic_gbps, node.nic.latency_ns, net),
            ))
            tor_port_gbps[key] = tor_port_gbps.get(key, 0.0) + nic_gbps
            tor_kinds.setdefault(key, []).append(net)
            rank_node.append(n)
            rank_local.append(local)
            rank_tor_key.append(key)

    tor_keys = sorted(tor_port_gbps)
    tor_index = {key: i for i, key in enumerate(tor_keys)}
    tor_up, tor_down = [], []
    for key in tor_keys:
        tor, spine = _tor_name(fabric.kind, key), _spine_name(key[0])
        uplink_gbps = tor_port_gbps[key] / fabric.oversubscription
        kind = _network_kind(tor_kinds[key])
        tor_up.append(links.add(tor, spine, uplink_gbps, switch_ns, kind))
        tor_down.append(links.add(spine, tor, uplink_gbps, switch_ns, kind))
    network = _network_kind([k for kinds in tor_kinds.values() for k in kinds])
    inter_cluster = {
        (a, b): links.add(_spine_name(a), _spine_name(b), fabric.inter_cluster_gbps,
                          fabric.inter_cluster_latency_ns + switch_ns, network)
        for a, b in permutations(sorted(nodes_seen_in_site), 2)
    }

    _check_links(links)
    arrays = [np.array(values, dtype=np.float64) for values in
              (links.capacity, links.latency_s, links.efficiency, links.launch_s)]
    for array in arrays:
        array.setflags(write=False)
    capacity, latency_s, efficiency, launch_s = arrays
    return Topology(
        capacity=capacity,
        latency_s=latency_s,
        bus_efficiency=efficiency,
        launch_latency_s=launch_s,
        names=tuple(links.names),
        nodes=nodes,
        fabric=fabric,
        _rank_node=tuple(rank_node),
        _rank_local=tuple(rank_local),
        _rank_links=tuple(_RankLinks(*ids, tor=tor_index[key])
                          for ids, key in zip(per_rank, rank_tor_key, strict=True)),
        _tor_up=tuple(tor_up),
        _tor_down=tuple(tor_down),
        _tor_site=tuple(site for site, _ in tor_keys),
        _inter_cluster=inter_cluster,
    )


def _tor_name(kind: str, key: tuple[int, int]) -> str:
    site, index = key
    return f"tor{site}.{'rail' if kind == RAIL_OPTIMIZED else 'rack'}{index}"


def _spine_name(site: int) -> str:
    return f"spine{site}"


def _check_links(links: _LinkTable) -> None:
    """Every link must carry data and take a non-negative time: a validated plan ensures it
    (``xsweep.spec.validate``), so a failure here is a caller's error, not the user's."""
    for name, capacity, latency in zip(links.names, links.capacity, links.latency_s,
                                       strict=True):
        if not (0 < capacity < math.inf and 0 <= latency < math.inf):
            raise ValueError(f"link {name}: capacity {capacity} bytes/s and latency "
                             f"{latency} s; build topologies from validated plans")
