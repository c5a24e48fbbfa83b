"""What the names of a plan mean: its model, enum values, nodes and device groups resolved.

Pure functions from the parts of a ``DeploymentPlan`` (and the catalog) to values.
Validation (:mod:`xsweep.spec.validate`) calls them once per distinct part and hands
the results to the plan's users in a :class:`~xsweep.spec.valid_plan.ValidPlan`; the
functions that take a whole plan are the library's own way to ask one question of a
message (``xsweep.spec.schedule_name(plan)``, say).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from xsweep.errors import InputError
from xsweep.spec import xsweep_pb2
from xsweep.spec.catalog import (
    REFERENCE_SOFTWARE,
    Catalog,
    GpuSpec,
    ModelSpec,
    NicSpec,
    SoftwareSpec,
)
from xsweep.spec.enums import (
    FABRIC,
    MLP,
    MOE_DISPATCHER,
    PRECISION,
    RECOMPUTE,
    RESHARDING,
    SCHEDULE,
    enum_name,
)
from xsweep.spec.stack import DEFAULT_STACK, Stack
from xsweep.spec.valid_plan import ClusterHw, FabricHw, Group, NodeHw, TrainingOptions

DeploymentPlan = xsweep_pb2.DeploymentPlan

_MODEL_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                 "num_kv_heads", "vocab_size", "seq_length")
#: Mixture-of-experts fields: the plan's, else the preset's, else 0 (a dense model).
_MOE_FIELDS = ("num_experts", "moe_top_k", "expert_ffn_hidden_size", "num_shared_experts",
               "shared_expert_ffn_hidden_size", "moe_first_dense_layers", "moe_capacity_factor",
               "moe_max_nodes")


class RankPlace(NamedTuple):
    """Where one global rank sits: its node, its index inside the node, its GPU and NIC."""

    node: int
    local: int
    gpu: GpuSpec
    nic: NicSpec


def resolve_model(plan: DeploymentPlan, catalog: Catalog, file: str | None = None) -> ModelSpec:
    """The plan's model: the preset's dimensions with the explicit fields laid over them.

    ``mlp`` comes from the plan's enum, else the preset, else GELU.
    """
    model = plan.model
    preset = catalog.model(model.preset, file=file, field="model.preset") if model.preset else None
    values: dict[str, object] = {}
    for name in _MODEL_FIELDS:
        if model.HasField(name):
            values[name] = getattr(model, name)
        elif preset is not None:
            values[name] = getattr(preset, name)
        else:
            raise InputError(file, f"model.{name}", None,
                             "required when model.preset is empty")
    values["mlp"] = (enum_name(MLP, model.mlp, file)
                     or (preset.mlp if preset is not None else "gelu"))
    if model.HasField("dropout"):
        values["dropout"] = model.dropout
    elif preset is not None:
        values["dropout"] = preset.dropout
    for name in _MOE_FIELDS:
        if model.HasField(name):
            values[name] = getattr(model, name)
        elif preset is not None:
            values[name] = getattr(preset, name)
    name = preset.name if preset is not None else (plan.name or "custom")
    return ModelSpec(name=name, **values)


def schedule_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"gpipe"`` or ``"1f1b"`` (unspecified means 1F1B, as in Megatron-LM; an unknown
    value is an InputError)."""
    return enum_name(SCHEDULE, plan.training.schedule, file)


def recompute_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"none"``, ``"selective"`` or ``"full"`` (unspecified means none)."""
    return enum_name(RECOMPUTE, plan.training.recompute, file)


def precision_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"bf16"`` or ``"fp8"`` (unspecified means BF16)."""
    return enum_name(PRECISION, plan.training.precision, file)


def resharding_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"lcm"``, ``"hetauto"`` or ``"alpacomm"`` (unspecified means LCM)."""
    return enum_name(RESHARDING, plan.training.resharding, file)


def fabric_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"rail_optimized"`` or ``"fat_tree"`` (unspecified means rail-optimized)."""
    return enum_name(FABRIC, plan.cluster.fabric.kind, file)


def resolve_training(training: xsweep_pb2.Training,
                     software: SoftwareSpec = REFERENCE_SOFTWARE) -> TrainingOptions:
    """The training options of a valid plan, unset ones at Megatron-LM's recipe defaults
    (a new :class:`Stack`: callers that share stacks intern it); ``software`` is the
    profile ``training.software`` names (:func:`resolve_software`)."""
    t = training
    stack = Stack(
        sequence_parallel=t.sequence_parallel if t.HasField("sequence_parallel")
        else DEFAULT_STACK.sequence_parallel,
        flash_attention=t.flash_attention if t.HasField("flash_attention")
        else DEFAULT_STACK.flash_attention,
        recompute=enum_name(RECOMPUTE, t.recompute),
        zero_stage=int(t.zero_stage),
        virtual_pipeline_stages=max(1, int(t.virtual_pipeline_stages)),
        dp_overlap=bool(t.dp_overlap),
        dp_bucket_params=int(t.dp_bucket_params),
        precision=enum_name(PRECISION, t.precision),
        tp_comm_overlap=bool(t.tp_comm_overlap),
        expert_parallel=max(1, int(t.expert_parallel)),
        moe_imbalance=float(t.moe_imbalance) or 1.0,
        pp_p2p_overlap=t.pp_p2p_overlap if t.HasField("pp_p2p_overlap")
        else DEFAULT_STACK.pp_p2p_overlap,
        fp8_param_gather=bool(t.fp8_param_gather),
        moe_dispatcher=enum_name(MOE_DISPATCHER, t.moe_dispatcher),
        moe_fp8_dispatch=bool(t.moe_fp8_dispatch),
        software=software,
    )
    return TrainingOptions(global_batch_size=int(t.global_batch_size),
                           total_tokens=float(t.total_tokens),
                           schedule=enum_name(SCHEDULE, t.schedule),
                           resharding=enum_name(RESHARDING, t.resharding), stack=stack)


def resolve_software(training: xsweep_pb2.Training, catalog: Catalog,
                     file: str | None = None) -> SoftwareSpec:
    """The software profile ``training.software`` names (empty: ``reference``); InputError
    naming the field, with the close names, for an unknown one."""
    return catalog.software_profile(training.software, file=file, field="training.software")


def resolve_nodes(cluster: xsweep_pb2.Cluster, catalog: Catalog,
                  file: str | None = None) -> tuple[NodeHw, ...]:
    """Every node's hardware: its GPU and NIC (an empty ``nic``: the GPU's default), and
    its scale-up figures and link kind (the node's where it gives them, else the GPU's);
    InputError naming the node's field for an unknown GPU, link kind or NIC.

    Nodes alike (a cluster of 64 is mostly one kind) are resolved once per call: the
    catalog is read again on every call, so an entry replaced in it is seen."""
    nodes, alike = [], {}
    for index, node in enumerate(cluster.nodes):
        up = node.scale_up
        key = (node.gpu, node.nic, node.num_gpus, node.cluster, up.link, up.bandwidth_gbps,
               up.latency_ns)
        hw = alike.get(key)
        if hw is None:  # the first node of its kind: an unknown name is reported there
            hw = alike[key] = _resolve_node(node, index, catalog, file)
        nodes.append(hw)
    return tuple(nodes)


def _resolve_node(node: xsweep_pb2.Node, index: int, catalog: Catalog,
                  file: str | None) -> NodeHw:
    where = f"cluster.nodes[{index}]"
    gpu = catalog.gpu(node.gpu, file=file, field=f"{where}.gpu")
    up = node.scale_up
    link = (catalog.link(up.link, file=file, field=f"{where}.scale_up.link") if up.link
            else catalog.link(gpu.scale_up_link))
    nic = (catalog.nic(node.nic, file=file, field=f"{where}.nic") if node.nic
           else catalog.nic(gpu.default_nic, file=file, field=f"{where}.gpu"))
    return NodeHw(gpu=gpu, nic=nic, num_gpus=node.num_gpus,
                  scale_up_gbps=up.bandwidth_gbps or gpu.scale_up_gbps,
                  scale_up_latency_ns=up.latency_ns or gpu.scale_up_latency_ns,
                  scale_up_link=link, pcie_link=catalog.link(gpu.pcie_link),
                  cluster=node.cluster)


def resolve_fabric(fabric: xsweep_pb2.Fabric) -> FabricHw:
    """The scale-out fabric of a valid plan; unset figures at their defaults."""
    kwargs = {}
    if fabric.oversubscription:
        kwargs["oversubscription"] = fabric.oversubscription
    if fabric.nodes_per_rack:
        kwargs["nodes_per_rack"] = fabric.nodes_per_rack
    if fabric.switch_latency_ns:
        kwargs["switch_latency_ns"] = fabric.switch_latency_ns
    if fabric.HasField("inter_cluster"):
        kwargs["inter_cluster_gbps"] = fabric.inter_cluster.bandwidth_gbps
        kwargs["inter_cluster_latency_ns"] = fabric.inter_cluster.latency_ns
    return FabricHw(kind=enum_name(FABRIC, fabric.kind), **kwargs)


def resolve_cluster(cluster: xsweep_pb2.Cluster, catalog: Catalog,
                    file: str | None = None) -> ClusterHw:
    """:func:`resolve_nodes` and :func:`resolve_fabric` of a cluster."""
    return ClusterHw(resolve_nodes(cluster, catalog, file), resolve_fabric(cluster.fabric))


def resolve_groups(plan: DeploymentPlan) -> tuple[Group, ...]:
    """The device groups of a valid plan, ordered by (replica, stage)."""
    ordered = sorted(plan.device_groups, key=lambda d: (d.dp_replica, d.pp_stage))
    return tuple(Group(d.id, tuple(d.ranks), d.pp_stage, d.dp_replica, d.first_layer,
                       d.last_layer, d.micro_batch_size, d.num_micro_batches,
                       max(d.context_parallel, 1))
                 for d in ordered)


def groups_bytes(plan: DeploymentPlan) -> bytes:
    """The plan's device groups, serialized: a key that equal groups share (memos use it)."""
    groups = DeploymentPlan()
    groups.CopyFrom(plan)  # one copy in C, then the other parts go: no walk over groups
    for name in ("name", "model", "training", "cluster"):
        groups.ClearField(name)
    return groups.SerializeToString()


def cluster_entries(cluster: xsweep_pb2.Cluster, catalog: Catalog) -> tuple[tuple, ...]:
    """(section, name, entry) of every catalog entry the nodes of a valid cluster name or
    imply (GPU, NIC, scale-up and PCIe link kinds), once each."""
    entries: dict[tuple[str, str], object] = {}
    for node in cluster.nodes:
        gpu = catalog.gpu(node.gpu)
        for section, name in (("gpus", node.gpu), ("nics", node.nic or gpu.default_nic),
                              ("links", node.scale_up.link or gpu.scale_up_link),
                              ("links", gpu.pcie_link)):
            if (section, name) not in entries:
                entries[section, name] = catalog.lookup(section, name)
    return tuple((section, name, entry) for (section, name), entry in entries.items())


def rank_layout(plan: DeploymentPlan, catalog: Catalog, file: str | None = None) -> list[RankPlace]:
    """For each global rank, in order: (node index, local index, GpuSpec, NicSpec).

    Ranks are numbered node by node. A node's ``scale_up`` fields, where non-zero,
    replace the GPU's scale-up bandwidth and latency; an empty ``nic`` means the
    GPU's default NIC.
    """
    places: list[RankPlace] = []
    for index, node in enumerate(plan.cluster.nodes):
        gpu = catalog.gpu(node.gpu, file=file, field=f"cluster.nodes[{index}].gpu")
        overrides = {}
        if node.scale_up.bandwidth_gbps:
            overrides["scale_up_gbps"] = node.scale_up.bandwidth_gbps
        if node.scale_up.latency_ns:
            overrides["scale_up_latency_ns"] = node.scale_up.latency_ns
        if node.scale_up.link:
            link = catalog.link(node.scale_up.link, file=file,
                                field=f"cluster.nodes[{index}].scale_up.link")
            overrides["scale_up_link"] = link.name
        if overrides:
            gpu = dataclasses.replace(gpu, **overrides)
        nic_name, nic_field = ((node.nic, f"cluster.nodes[{index}].nic") if node.nic
                               else (gpu.default_nic, f"cluster.nodes[{index}].gpu"))
        nic = catalog.nic(nic_name, file=file, field=nic_field)
        places.extend(RankPlace(index, local, gpu, nic) for local in range(node.num_gpus))
    return places
