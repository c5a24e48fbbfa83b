"""Deployment plans in and out: protobuf text format and JSON, model resolution, rank layout.

Conversions between strings and messages are pure; ``load_plan`` is the only
function here that touches the file system.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

from google.protobuf import json_format, text_format

from xsweep.errors import InputError
from xsweep.spec import xsweep_pb2
from xsweep.spec.catalog import Catalog, GpuSpec, ModelSpec, NicSpec, load_catalog
from xsweep.spec.enums import FABRIC, MLP, RECOMPUTE, RESHARDING, SCHEDULE, enum_name
from xsweep.spec.reader import parse_json, read_text_file

DeploymentPlan = xsweep_pb2.DeploymentPlan

TEXT_SUFFIXES = (".pbtxt", ".textproto", ".txtpb")
JSON_SUFFIXES = (".json",)

_MODEL_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                 "num_kv_heads", "vocab_size", "seq_length")


class RankPlace(NamedTuple):
    """Where one global rank sits: its node, its index inside the node, its GPU and NIC."""

    node: int
    local: int
    gpu: GpuSpec
    nic: NicSpec


def load_plan(path: str | Path, catalog: Catalog | None = None) -> DeploymentPlan:
    """Read a plan from ``.pbtxt`` (text format) or ``.json`` (protobuf JSON) and validate it.

    Raises:
        InputError: naming the file and the field (parse errors: the line).
    """
    from xsweep.spec.validate import validate_plan  # validate imports this module

    file = str(path)
    suffix = Path(file).suffix.lower()
    if suffix not in TEXT_SUFFIXES + JSON_SUFFIXES:
        raise InputError(file, None, suffix or None,
                         "unknown plan format; expected .pbtxt (text format) or .json")
    text = read_text_file(file)
    plan = plan_from_json(text, file) if suffix in JSON_SUFFIXES else plan_from_text(text, file)
    validate_plan(plan, catalog if catalog is not None else load_catalog(), file)
    return plan


def plan_from_text(text: str, file: str | None = None) -> DeploymentPlan:
    """Parse protobuf text format; a syntax error names its line."""
    try:
        return text_format.Parse(text, DeploymentPlan())
    except text_format.ParseError as error:
        reason = str(error).split(" : ", 1)[-1] if error.GetLine() else str(error)
        where = f"line {error.GetLine()}" if error.GetLine() else None
        raise InputError(file, where, None, reason) from None


def plan_from_json(text: str, file: str | None = None) -> DeploymentPlan:
    """Parse the protobuf JSON mapping; a syntax error names its line.

    A field given twice, also under its two spellings (``firstLayer`` and
    ``first_layer``), is an error rather than the last one winning.
    """
    document = parse_json(text, file)
    if not isinstance(document, dict):
        raise InputError(file, None, type(document).__name__,
                         "a plan in JSON is an object of plan fields")
    _check_json_fields(document, DeploymentPlan.DESCRIPTOR, "", file)
    try:
        return json_format.ParseDict(document, DeploymentPlan())
    except json_format.ParseError as error:
        raise InputError(file, None, None, str(error).split("\n", 1)[0]) from None


def _check_json_fields(document: dict, descriptor, path: str, file: str | None) -> None:
    """Reject a field named twice in one JSON object (as ``name`` and as ``jsonName``)."""
    seen: dict[str, str] = {}
    for key, value in document.items():
        field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
        if field is None:
            continue  # ParseDict reports unknown fields
        where = f"{path}{field.name}"
        if field.name in seen:
            raise InputError(file, where, None, f"given twice (as {seen[field.name]!r} and {key!r})")
        seen[field.name] = key
        if field.message_type is None:
            continue
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            if isinstance(item, dict):
                at = f"{where}[{index}]." if isinstance(value, list) else f"{where}."
                _check_json_fields(item, field.message_type, at, file)


def plan_to_text(plan: DeploymentPlan) -> str:
    """The plan in protobuf text format."""
    return text_format.MessageToString(plan)


def plan_to_json(plan: DeploymentPlan) -> str:
    """The plan in the protobuf JSON mapping (camelCase keys, enums by name)."""
    return json_format.MessageToJson(plan, indent=2) + "\n"


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
    name = preset.name if preset is not None else (plan.name or "custom")
    return ModelSpec(name=name, **values)


def schedule_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"gpipe"`` or ``"1f1b"`` (unspecified means 1F1B, as in Megatron-LM; an unknown
    value is an InputError)."""
    return enum_name(SCHEDULE, plan.training.schedule, file)


def recompute_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"none"``, ``"selective"`` or ``"full"`` (unspecified means none)."""
    return enum_name(RECOMPUTE, plan.training.recompute, file)


def resharding_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"lcm"``, ``"hetauto"`` or ``"alpacomm"`` (unspecified means LCM)."""
    return enum_name(RESHARDING, plan.training.resharding, file)


def fabric_name(plan: DeploymentPlan, file: str | None = None) -> str:
    """``"rail_optimized"`` or ``"fat_tree"`` (unspecified means rail-optimized)."""
    return enum_name(FABRIC, plan.cluster.fabric.kind, file)


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
