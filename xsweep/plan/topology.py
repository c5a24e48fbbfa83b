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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import permutations
from typing import NamedTuple

import numpy as np

from xsweep.spec.catalog import LinkSpec, NicSpec

# The hardware of a plan's nodes and fabric, as validation resolves it (the fabric's
# defaults with it), is the spec's: a ValidPlan holds it.
from xsweep.spec.valid_plan import FabricHw, NodeHw

RAIL_OPTIMIZED = "rail_optimized"
FAT_TREE = "fat_tree"
FABRIC_KINDS = (RAIL_OPTIMIZED, FAT_TREE)


class LinkNames(Sequence):
    """A topology's link names as a sequence, made only when one is read: most programs
    are evaluated, never traced, and a 512-GPU topology has thousands of links."""

    __slots__ = ("_topology",)

    def __init__(self, topology: Topology):
        self._topology = topology

    def __len__(self) -> int:
        return self._topology.num_links

    def __getitem__(self, index):
        return self._topology.names[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._topology.names)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # like a list: compared by value, never a key


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
    nodes: tuple[NodeHw, ...]
    fabric: FabricHw
    _rank_node: tuple[int, ...]
    _rank_local: tuple[int, ...]
    _rank_table: np.ndarray  # int64[R, 7]: each rank's links and ToR (as _RankLinks)
    _tor_keys: tuple[tuple[int, int], ...]  # (site, rail or rack) of each ToR
    _tor_up: tuple[int, ...]
    _tor_down: tuple[int, ...]
    _inter_cluster: dict[tuple[int, int], int]
    _paths: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict, repr=False,
                                                           init=False)

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Each link's readable name, ``"tail->head"`` (made when first asked for)."""
        names = []
        for rank, (node, (*_, tor)) in enumerate(zip(self._rank_node, self._rank_table.tolist(),
                                                     strict=True)):
            gpu, su, nic = f"gpu{rank}", f"su{node}", f"nic{rank}"
            switch = _tor_name(self.fabric.kind, self._tor_keys[tor])
            names += [f"{gpu}->{su}", f"{su}->{gpu}", f"{gpu}->{nic}", f"{nic}->{gpu}",
                      f"{nic}->{switch}", f"{switch}->{nic}"]
        for key in self._tor_keys:
            switch, spine = _tor_name(self.fabric.kind, key), _spine_name(key[0])
            names += [f"{switch}->{spine}", f"{spine}->{switch}"]
        names += [f"{_spine_name(a)}->{_spine_name(b)}" for a, b in self._inter_cluster]
        return tuple(names)

    @cached_property
    def _rank_links(self) -> tuple[_RankLinks, ...]:
        return tuple(_RankLinks(*row) for row in self._rank_table.tolist())

    @cached_property
    def _tor_site(self) -> tuple[int, ...]:
        return tuple(site for site, _ in self._tor_keys)

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
        return (self._rank_table,
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


def _kind(spec: LinkSpec | NicSpec) -> tuple[float, float]:
    """What NCCL makes of a link: bus-bandwidth fraction and launch latency in us."""
    return spec.bus_efficiency, spec.launch_latency_us


def build_topology(nodes: Sequence[NodeHw], fabric: FabricHw) -> Topology:
    """Build the link graph of ``nodes`` (global ranks numbered node by node) on ``fabric``.

    Links are numbered rank by rank (scale-up out and in, PCIe out and in, NIC out and
    in), then each ToR's uplink and downlink (ToRs ordered by site, then rail or rack),
    then the inter-site links (by site pair); all laid out at once with numpy.
    """
    nodes = tuple(nodes)
    if fabric.kind not in FABRIC_KINDS:
        raise ValueError(f"unknown fabric kind {fabric.kind!r}; expected one of {FABRIC_KINDS}")
    switch_ns = fabric.switch_latency_ns
    count = np.array([n.num_gpus for n in nodes], np.int64)
    rank_node = np.repeat(np.arange(len(nodes)), count)
    rank_local = np.arange(len(rank_node)) - np.repeat(np.cumsum(count) - count, count)
    seen: dict[int, int] = {}
    rack = []  # a fat tree's rack of each node: its place among its site's nodes
    for node in nodes:
        rack.append(seen.get(node.cluster, 0) // fabric.nodes_per_rack)
        seen[node.cluster] = seen.get(node.cluster, 0) + 1
    site = np.array([n.cluster for n in nodes], np.int64)[rank_node]
    index = rank_local if fabric.kind == RAIL_OPTIMIZED else np.array(rack, np.int64)[rank_node]
    tor_keys, tor = np.unique(np.stack([site, index], axis=1), axis=0, return_inverse=True)
    tor = tor.reshape(-1)
    # per node: (Gb/s, ns, bus efficiency, launch us) of its scale-up, PCIe and NIC links
    figures = np.array([[(n.scale_up_gbps, n.scale_up_latency_ns, *_kind(n.scale_up_link)),
                         (n.gpu.pcie_gbps, n.gpu.pcie_latency_ns, *_kind(n.pcie_link)),
                         (n.nic.bandwidth_gbps, n.nic.latency_ns, *_kind(n.nic))]
                        for n in nodes], np.float64).reshape(len(nodes), 3, 4)[rank_node]
    per_rank = np.repeat(figures, 2, axis=1)  # [R, 6, 4]: each kind out, then in
    per_rank[:, 4, 1] = figures[:, 2, 1] + switch_ns  # the NIC's uplink enters its ToR
    nic = figures[:, 2]
    num_tors = len(tor_keys)
    port_gbps = np.bincount(tor, weights=nic[:, 0], minlength=num_tors)  # in rank order
    tor_efficiency = np.full(num_tors, np.inf)
    np.minimum.at(tor_efficiency, tor, nic[:, 2])
    tor_launch = np.full(num_tors, -np.inf)
    np.maximum.at(tor_launch, tor, nic[:, 3])
    uplink = np.stack([port_gbps / fabric.oversubscription, np.full(num_tors, switch_ns),
                       tor_efficiency, tor_launch], axis=1)
    sites = sorted(seen)
    pairs = list(permutations(sites, 2))
    network = (nic[:, 2].min(initial=np.inf), nic[:, 3].max(initial=-np.inf))
    inter = np.tile([fabric.inter_cluster_gbps, fabric.inter_cluster_latency_ns + switch_ns,
                     *network], (len(pairs), 1))
    table = np.concatenate([per_rank.reshape(-1, 4), np.repeat(uplink, 2, axis=0),
                            inter.reshape(-1, 4)])
    capacity, latency_s = table[:, 0] * 1e9 / 8, table[:, 1] * 1e-9
    efficiency, launch_s = table[:, 2].copy(), table[:, 3] * 1e-6
    num_ranks = len(rank_node)
    first_tor_link = 6 * num_ranks
    rank_table = np.concatenate([np.arange(6 * num_ranks).reshape(num_ranks, 6),
                                 tor[:, None]], axis=1)
    topology = Topology(
        capacity=capacity, latency_s=latency_s, bus_efficiency=efficiency,
        launch_latency_s=launch_s, nodes=nodes, fabric=fabric,
        _rank_node=tuple(rank_node.tolist()), _rank_local=tuple(rank_local.tolist()),
        _rank_table=rank_table, _tor_keys=tuple(map(tuple, tor_keys.tolist())),
        _tor_up=tuple(range(first_tor_link, first_tor_link + 2 * num_tors, 2)),
        _tor_down=tuple(range(first_tor_link + 1, first_tor_link + 2 * num_tors, 2)),
        _inter_cluster={pair: first_tor_link + 2 * num_tors + i
                        for i, pair in enumerate(pairs)},
    )
    for array in (capacity, latency_s, efficiency, launch_s, rank_table):
        array.setflags(write=False)
    _check_links(topology)
    return topology


def _tor_name(kind: str, key: tuple[int, int]) -> str:
    site, index = key
    return f"tor{site}.{'rail' if kind == RAIL_OPTIMIZED else 'rack'}{index}"


def _spine_name(site: int) -> str:
    return f"spine{site}"


def _check_links(topology: Topology) -> None:
    """Every link must carry data and take a non-negative time: a validated plan ensures it
    (``xsweep.spec.validate``), so a failure here is a caller's error, not the user's."""
    capacity, latency = topology.capacity, topology.latency_s
    bad = ~((capacity > 0) & (capacity < math.inf) & (latency >= 0) & (latency < math.inf))
    if bad.any():
        first = int(np.argmax(bad))
        raise ValueError(f"link {topology.names[first]}: capacity {capacity[first]} bytes/s "
                         f"and latency {latency[first]} s; build topologies from validated "
                         "plans")
