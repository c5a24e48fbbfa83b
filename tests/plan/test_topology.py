"""Topology: link figures, routing per fabric kind, inter-cluster links, determinism."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.plan.reference_topology import reference_links
from xsweep.plan.topology import (
    FAT_TREE,
    RAIL_OPTIMIZED,
    FabricHw,
    NodeHw,
    build_topology,
)
from xsweep.spec.catalog import GpuSpec, NicSpec, load_catalog
from xsweep.spec.valid_plan import DEFAULT_SWITCH_LATENCY_NS

# Scale-up, PCIe and NIC figures of the catalog: the paper's Table 5 (PCIe delay
# "2 x 143.75 ns" and "2 x 287.5 ns" taken as one traversal of the PCIe path);
# ConnectX-7 is a 400 Gb/s NIC, ConnectX-6 200 Gb/s, both 368 ns.
CATALOG = load_catalog()
H100, A100 = CATALOG.gpu("H100-SXM"), CATALOG.gpu("A100-40GB")
CX7, CX6 = CATALOG.nic("cx7"), CATALOG.nic("cx6")

NS = 1e-9
SWITCH_S = DEFAULT_SWITCH_LATENCY_NS * NS


def node(gpu: GpuSpec = H100, nic: NicSpec = CX7, num_gpus: int = 8, cluster: int = 0) -> NodeHw:
    return NodeHw(gpu=gpu, nic=nic, num_gpus=num_gpus, scale_up_gbps=gpu.scale_up_gbps,
                  scale_up_latency_ns=gpu.scale_up_latency_ns,
                  scale_up_link=CATALOG.link(gpu.scale_up_link),
                  pcie_link=CATALOG.link(gpu.pcie_link), cluster=cluster)


def names(topo, path) -> list[str]:
    return [topo.names[link] for link in path]


def link(topo, name: str) -> int:
    return topo.names.index(name)


def test_same_node_uses_only_the_scale_up_pair():
    topo = build_topology([node(), node()], FabricHw(RAIL_OPTIMIZED))
    path = topo.path(0, 3)
    assert names(topo, path) == ["gpu0->su0", "su0->gpu3"]
    assert topo.path_latency_s(path) == pytest.approx(2 * 20.44 * NS)
    assert names(topo, topo.path(9, 15)) == ["gpu9->su1", "su1->gpu15"]


def test_rail_optimized_same_local_index_stays_on_its_rail():
    topo = build_topology([node(), node()], FabricHw(RAIL_OPTIMIZED))
    path = topo.path(1, 9)
    assert names(topo, path) == ["gpu1->nic1", "nic1->tor0.rail1", "tor0.rail1->nic9",
                                 "nic9->gpu9"]
    # two PCIe traversals, two NICs, one ToR
    expected = (2 * 287.5 + 2 * 368.0) * NS + SWITCH_S
    assert topo.path_latency_s(path) == pytest.approx(expected)


def test_rail_optimized_other_local_index_crosses_the_spine():
    topo = build_topology([node(), node()], FabricHw(RAIL_OPTIMIZED))
    path = topo.path(1, 10)
    assert names(topo, path) == ["gpu1->nic1", "nic1->tor0.rail1", "tor0.rail1->spine0",
                                 "spine0->tor0.rail2", "tor0.rail2->nic10", "nic10->gpu10"]
    expected = (2 * 287.5 + 2 * 368.0) * NS + 3 * SWITCH_S  # ToR, spine, ToR
    assert topo.path_latency_s(path) == pytest.approx(expected)


def test_fat_tree_same_rack_stays_under_the_tor_and_other_racks_cross_the_spine():
    topo = build_topology([node()] * 4, FabricHw(FAT_TREE, nodes_per_rack=2))
    # nodes 0 and 1 share rack 0; a different local index does not matter on a fat tree
    assert names(topo, topo.path(0, 9)) == ["gpu0->nic0", "nic0->tor0.rack0", "tor0.rack0->nic9",
                                            "nic9->gpu9"]
    assert names(topo, topo.path(0, 16)) == ["gpu0->nic0", "nic0->tor0.rack0",
                                             "tor0.rack0->spine0", "spine0->tor0.rack1",
                                             "tor0.rack1->nic16", "nic16->gpu16"]


def test_fat_tree_racks_count_nodes_within_each_site():
    nodes = [node(cluster=0), node(cluster=1), node(cluster=0)]
    fabric = FabricHw(FAT_TREE, nodes_per_rack=2, inter_cluster_gbps=800.0)
    topo = build_topology(nodes, fabric)
    # nodes 0 and 2 are the first two nodes of site 0, so they share its first rack
    assert names(topo, topo.path(0, 16)) == ["gpu0->nic0", "nic0->tor0.rack0",
                                             "tor0.rack0->nic16", "nic16->gpu16"]


def test_capacities_are_the_gbps_figures_in_bytes_per_second():
    topo = build_topology([node(), node(A100, CX6)], FabricHw(RAIL_OPTIMIZED))
    assert topo.capacity[link(topo, "nic0->tor0.rail0")] == 5e10  # 400 Gb/s
    assert topo.capacity[link(topo, "tor0.rail0->nic0")] == 5e10
    assert topo.capacity[link(topo, "gpu0->su0")] == 4.5e11  # 3600 Gb/s
    assert topo.capacity[link(topo, "gpu0->nic0")] == 6.4e10  # 512 Gb/s
    assert topo.capacity[link(topo, "nic8->tor0.rail0")] == 2.5e10  # 200 Gb/s
    assert topo.capacity[link(topo, "su1->gpu8")] == 3e11  # 2400 Gb/s
    assert topo.capacity[link(topo, "nic8->gpu8")] == 3.2e10  # 256 Gb/s
    assert topo.latency_s[link(topo, "gpu8->nic8")] == pytest.approx(575 * NS)
    # a rail ToR's uplink carries the sum of its NIC-facing ports
    assert topo.capacity[link(topo, "tor0.rail0->spine0")] == pytest.approx(5e10 + 2.5e10)


def test_oversubscription_two_halves_the_tor_uplink():
    nodes = [node()] * 4
    for kind, tor, ports in ((RAIL_OPTIMIZED, "tor0.rail0", 4), (FAT_TREE, "tor0.rack0", 32)):
        full = build_topology(nodes, FabricHw(kind))
        half = build_topology(nodes, FabricHw(kind, oversubscription=2.0))
        for name in (f"{tor}->spine0", f"spine0->{tor}"):
            assert full.capacity[link(full, name)] == pytest.approx(ports * 5e10)
            assert half.capacity[link(half, name)] == pytest.approx(ports * 5e10 / 2)
        # NIC ports themselves keep their rate
        assert half.capacity[link(half, f"nic0->{tor}")] == 5e10


def test_inter_cluster_path_includes_the_spine_to_spine_link():
    fabric = FabricHw(RAIL_OPTIMIZED, inter_cluster_gbps=800.0, inter_cluster_latency_ns=10_000)
    topo = build_topology([node(cluster=0), node(cluster=1)], fabric)
    path = topo.path(0, 8)  # same rail, but another site
    assert names(topo, path) == ["gpu0->nic0", "nic0->tor0.rail0", "tor0.rail0->spine0",
                                 "spine0->spine1", "spine1->tor1.rail0", "tor1.rail0->nic8",
                                 "nic8->gpu8"]
    assert topo.capacity[path[3]] == 1e11
    expected = (2 * 287.5 + 2 * 368.0 + 10_000) * NS + 4 * SWITCH_S
    assert topo.path_latency_s(path) == pytest.approx(expected)
    assert "spine1->spine0" in names(topo, topo.path(8, 0))


def test_several_sites_without_an_inter_cluster_link_are_a_caller_error():
    # Plan validation refuses this (tests/spec/test_plan_validate.py); building it anyway
    # would leave a link that carries nothing.
    with pytest.raises(ValueError, match="spine0->spine1"):
        build_topology([node(cluster=0), node(cluster=1)], FabricHw(RAIL_OPTIMIZED))


@pytest.mark.parametrize(("nodes", "fabric", "match"), [
    ([node()], FabricHw("torus"), "unknown fabric kind"),
    ([dataclasses.replace(node(num_gpus=2), scale_up_gbps=0.0)],
     FabricHw(RAIL_OPTIMIZED), "gpu0->su0"),
    ([node()], FabricHw(FAT_TREE, switch_latency_ns=float("nan")), "nic0->tor0.rack0"),
])
def test_hardware_no_network_can_carry_is_a_caller_error(nodes, fabric, match):
    with pytest.raises(ValueError, match=match):
        build_topology(nodes, fabric)


def test_routes_to_self_or_to_missing_ranks_are_errors():
    topo = build_topology([node(num_gpus=2)], FabricHw(RAIL_OPTIMIZED))
    with pytest.raises(ValueError):
        topo.path(1, 1)
    with pytest.raises(ValueError):
        topo.path(0, 2)


def test_paths_are_deterministic_and_cached():
    nodes = [node(), node(A100, CX6, num_gpus=4), node(cluster=1)]
    fabric = FabricHw(FAT_TREE, nodes_per_rack=1, inter_cluster_gbps=400.0)
    first, second = build_topology(nodes, fabric), build_topology(nodes, fabric)
    assert first.names == second.names
    assert (first.capacity == second.capacity).all()
    assert (first.latency_s == second.latency_s).all()
    pairs = [(s, d) for s in range(first.num_ranks) for d in range(first.num_ranks) if s != d]
    assert [first.path(s, d) for s, d in pairs] == [second.path(s, d) for s, d in pairs]
    assert first.path(0, 12) is first.path(0, 12)


def test_ranks_are_numbered_node_by_node():
    topo = build_topology([node(num_gpus=2), node(num_gpus=4)], FabricHw(RAIL_OPTIMIZED))
    assert topo.num_ranks == 6
    assert [topo.node_of(r) for r in range(6)] == [0, 0, 1, 1, 1, 1]
    assert [topo.local_index(r) for r in range(6)] == [0, 1, 0, 1, 2, 3]


clusters = st.lists(
    st.tuples(st.sampled_from([(H100, CX7), (A100, CX6)]), st.integers(1, 8), st.integers(0, 1)),
    min_size=1, max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(clusters, st.sampled_from([RAIL_OPTIMIZED, FAT_TREE]), st.integers(1, 3), st.data())
def test_every_path_is_a_walk_from_source_to_destination(spec, kind, per_rack, data):
    nodes = [node(gpu, nic, num_gpus, site) for (gpu, nic), num_gpus, site in spec]
    fabric = FabricHw(kind, nodes_per_rack=per_rack, inter_cluster_gbps=100.0)
    topo = build_topology(nodes, fabric)
    ranks = st.integers(0, topo.num_ranks - 1)
    src = data.draw(ranks)
    dst = data.draw(ranks.filter(lambda r: r != src))
    path = topo.path(src, dst)
    hops = [name.split("->") for name in names(topo, path)]
    assert hops[0][0] == f"gpu{src}" and hops[-1][1] == f"gpu{dst}"
    assert all(a[1] == b[0] for a, b in zip(hops, hops[1:], strict=False))
    assert len(set(path)) == len(path)
    same_node = topo.node_of(src) == topo.node_of(dst)
    assert (len(path) == 2) == same_node
    assert len(path) in (2, 4, 6, 7)
    assert topo.path_latency_s(path) > 0


def test_links_carry_what_nccl_makes_of_their_kind():
    topo = build_topology([node(), node(A100, CX6)], FabricHw(RAIL_OPTIMIZED))
    nvlink4, nvlink3 = CATALOG.link("nvlink4"), CATALOG.link("nvlink3")
    for name, kind in (("gpu0->su0", nvlink4), ("su1->gpu9", nvlink3),
                       ("gpu8->nic8", CATALOG.link("pcie4")), ("nic0->tor0.rail0", CX7)):
        assert topo.bus_efficiency[link(topo, name)] == kind.bus_efficiency
        assert topo.launch_latency_s[link(topo, name)] == kind.launch_latency_us * 1e-6
    # a ToR shared by both nodes' NICs carries the least efficient of them
    up = link(topo, "tor0.rail0->spine0")
    assert topo.bus_efficiency[up] == min(CX7.bus_efficiency, CX6.bus_efficiency)


fabrics = st.builds(
    FabricHw, kind=st.sampled_from([RAIL_OPTIMIZED, FAT_TREE]),
    oversubscription=st.sampled_from([1.0, 1.5, 3.0]), nodes_per_rack=st.integers(1, 3),
    inter_cluster_gbps=st.sampled_from([100.0, 400.0]),
    inter_cluster_latency_ns=st.sampled_from([0.0, 1e4]))
mixed = st.lists(
    st.tuples(st.sampled_from([(H100, CX7), (A100, CX6), (CATALOG.gpu("B200"), CATALOG.nic("cx8"))]),
              st.integers(1, 8), st.integers(0, 2)),
    min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(mixed, fabrics)
def test_topologies_match_the_link_by_link_builder(spec, fabric):
    nodes = [node(gpu, nic, num_gpus=n, cluster=site) for (gpu, nic), n, site in spec]
    topo, ref = build_topology(nodes, fabric), reference_links(nodes, fabric)
    for name in ("capacity", "latency_s", "bus_efficiency", "launch_latency_s"):
        assert getattr(topo, name).tolist() == ref[name], name  # bit for bit
    assert list(topo.names) == ref["names"]
    assert list(topo._rank_node) == ref["rank_node"]
    assert list(topo._rank_local) == ref["rank_local"]
    assert topo._rank_table.tolist() == [list(r) for r in ref["rank_links"]]
    assert [list(topo._tor_up), list(topo._tor_down), list(topo._tor_site)] == [
        ref["tor_up"], ref["tor_down"], ref["tor_site"]]
    assert topo._inter_cluster == ref["inter_cluster"]
