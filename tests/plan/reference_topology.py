"""The topology builder as first written, one link at a time: ``test_topology.py`` checks that
:func:`xsweep.plan.topology.build_topology` (laid out with numpy) makes the same links, in
the same order, with the same figures, names and routes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import permutations
from typing import NamedTuple

from xsweep.plan.topology import (
    FABRIC_KINDS,
    RAIL_OPTIMIZED,
    FabricHw,
    NodeHw,
    _spine_name,
    _tor_name,
)
from xsweep.spec.catalog import LinkSpec, NicSpec


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


def reference_links(nodes: Sequence[NodeHw], fabric: FabricHw) -> dict:
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
    return {"capacity": links.capacity, "latency_s": links.latency_s,
            "bus_efficiency": links.efficiency, "launch_latency_s": links.launch_s,
            "names": links.names, "rank_node": rank_node, "rank_local": rank_local,
            "rank_links": [(*ids, tor_index[key]) for ids, key in zip(per_rank, rank_tor_key, strict=True)],
            "tor_up": tor_up, "tor_down": tor_down, "tor_site": [site for site, _ in tor_keys],
            "inter_cluster": inter_cluster}


def _check_links(links: _LinkTable) -> None:
    """Every link must carry data and take a non-negative time: a validated plan ensures it
    (``xsweep.spec.validate``), so a failure here is a caller's error, not the user's."""
    for name, capacity, latency in zip(links.names, links.capacity, links.latency_s,
                                       strict=True):
        if not (0 < capacity < math.inf and 0 <= latency < math.inf):
            raise ValueError(f"link {name}: capacity {capacity} bytes/s and latency "
                             f"{latency} s; build topologies from validated plans")
