"""Semantic checks of a DeploymentPlan: everything text format and JSON cannot express.

This is the one validation of a plan, whatever its origin (a file, the JSON
mapping, a message built in memory): ``load_plan``, ``xsweep.evaluate`` and every
command run it before anything is analysed, so the analysis and the network
model may assume a valid plan. Checks run from the cheapest to the most
expensive, and sizes are bounded (``xsweep.spec.limits``) before anything is
built per GPU, per group or per task. What validation resolves on the way (the
model, the training options, every node's hardware, the device groups, the program
size) it returns, typed, as a :class:`~xsweep.spec.valid_plan.ValidPlan`.

The parts of a plan that passed (model, training options, cluster, device groups) are
remembered by their bytes (``xsweep.memo``) with what they resolved to, so the variants
of a sweep, which repeat them, are checked in microseconds and share the resolved
parts; a whole plan that passed is remembered too, so that typing a plan validated
before (:func:`typed_plan`: ``xsweep.pipeline.prepare_valid`` of a message) costs one
lookup.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence

from xsweep.errors import InputError
from xsweep.memo import Memo
from xsweep.spec import ranges, xsweep_pb2
from xsweep.spec.catalog import Catalog, ModelSpec, SoftwareSpec, check_model_dimensions
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
from xsweep.spec.limits import Limits, active_limits, check_limit
from xsweep.spec.program_size import describe_program, estimate_program_size
from xsweep.spec.resolve import (
    cluster_entries,
    groups_bytes,
    resolve_cluster,
    resolve_groups,
    resolve_model,
    resolve_software,
    resolve_training,
)
from xsweep.spec.stack import DEFAULT_STACK, Stack, interned
from xsweep.spec.valid_plan import ClusterHw, Group, TrainingOptions, ValidPlan

# Parts of plans that passed their checks, keyed by their bytes and by everything else the
# checks read (catalog entries, limits, fields of other parts), with what they resolved
# to: the plans of a sweep share them, and a part checked once with the same inputs passes
# again. Failures are not kept. What a part read of the catalog is kept with it, as
# (section, name, entry) of each entry it named: the part passes again against a catalog
# that names the same entries or equal ones (a copy of the catalog, as worker processes
# receive it), and is checked again against one that changed.
#: plan bytes -> (the limits it passed under, the catalog entries it names, ModelSpec,
#: TrainingOptions, ClusterHw, device groups, program size)
_PLANS: Memo = Memo(4096, 32 * 2**20, lambda key, value: len(key))
#: (model bytes, preset entry, plan name without a preset, which names the model) ->
#: ModelSpec
_MODELS: Memo = Memo(256)
#: training bytes -> TrainingOptions (the options passed)
_TRAININGS: Memo = Memo(1024)
#: (cluster bytes, GPU limit) -> (the catalog entries the nodes name, ClusterHw)
_CLUSTERS: Memo = Memo(4096, 64 * 2**20, lambda key, value: len(key[0]))
#: device-group bytes -> the groups, typed (one object for equal groups, whatever else
#: differs)
_GROUP_LISTS: Memo = Memo(16384, 64 * 2**20, lambda key, value: 2 * len(key))
#: (device-group bytes, GPUs of each node, model and training fields, limits) -> (the
#: groups, program size estimate)
_GROUPS: Memo = Memo(16384, 64 * 2**20, lambda key, value: len(key[0]))


def validate_plan(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog, file: str | None = None,
                  limits: Limits | None = None) -> ValidPlan:
    """The plan, typed, as validation resolved it against ``catalog``.

    Args:
        limits: the size limits (default: :func:`xsweep.spec.limits.active_limits`).

    Raises:
        InputError: (file, field path such as ``device_groups[2].ranks``, value) if invalid.
    """
    return _valid(plan, catalog, file, limits if limits is not None else active_limits())


def typed_plan(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog,
               file: str | None = None) -> ValidPlan:
    """:func:`validate_plan` of a plan that passed it before (against ``catalog``, under
    whichever limits were active then): the plan typed again, in one lookup. A plan that
    did not pass before is validated now, under the active limits.

    Raises:
        InputError: as :func:`validate_plan`, for a plan that did not pass before.
    """
    return _valid(plan, catalog, file, None)


def _valid(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog, file: str | None,
           limits: Limits | None) -> ValidPlan:
    """The plan validated under ``limits`` (None: those it passed under before)."""
    if not isinstance(plan, xsweep_pb2.DeploymentPlan):
        raise InputError(file, None, type(plan).__name__, "expected a DeploymentPlan message")
    made = False

    def check() -> tuple:
        nonlocal made
        made = True
        under = limits if limits is not None else active_limits()
        return under, *_checked(plan, catalog, file, under)

    passed, entries, *parts = _PLANS.get(plan.SerializeToString(), check)
    if made:
        return ValidPlan(plan, catalog, *parts)
    if limits is None:
        limits = passed
    if (limits is not passed and limits != passed) or not _same_entries(catalog, entries):
        # other limits than it passed under, or the catalog changed since
        parts = _checked(plan, catalog, file, limits)[1:]
    return ValidPlan(plan, catalog, *parts)


def _same_entries(catalog: Catalog, entries: tuple) -> bool:
    """Whether ``catalog`` names each of ``entries`` (section, name, entry) as it did: the
    same entry, or an equal one."""
    for section, name, entry in entries:
        found = catalog.lookup(section, name)
        if found is not entry and found != entry:
            return False
    return True


def _checked(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog, file: str | None,
             limits: Limits) -> tuple:
    """Check every part of the plan (each part seen before with the same inputs passes
    again); return the catalog entries it names and its resolved parts."""
    training = plan.training
    for table, value in ((SCHEDULE, training.schedule), (RESHARDING, training.resharding),
                         (RECOMPUTE, training.recompute), (PRECISION, training.precision),
                         (MOE_DISPATCHER, training.moe_dispatcher),
                         (FABRIC, plan.cluster.fabric.kind), (MLP, plan.model.mlp)):
        enum_name(table, value, file)
    preset, model = _checked_model(plan, catalog, file)
    software = resolve_software(training, catalog, file)
    options = _TRAININGS.get((training.SerializeToString(), software),
                             lambda: _checked_training(training, software, file))
    hardware, cluster = _checked_cluster(plan, catalog, file, limits)
    if options.stack.precision == "fp8":
        _check_fp8(cluster, file)
    groups = groups_bytes(plan)
    key = (groups, cluster.gpus_per_node, model.num_attention_heads, model.num_layers,
           training.global_batch_size, training.virtual_pipeline_stages, training.schedule,
           training.zero_stage, training.dp_overlap, training.resharding,
           training.tp_comm_overlap, model.seq_length, options.stack.flash_attention, limits,
           training.expert_parallel)  # the program size counts the all-to-alls' flows
    typed, size = _GROUPS.get(key, lambda: _check_structure(plan, groups, model, cluster,
                                                            options.stack, file, limits))
    if model.is_moe or options.stack.expert_parallel > 1:
        _check_moe(model, options, typed, cluster.gpus_per_node, file)
    entries = (*((("models", plan.model.preset, preset),) if preset is not None else ()),
               *hardware, ("software", software.name, software))
    return entries, model, options, cluster, typed, size


def _checked_model(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog,
                   file: str | None) -> tuple[ModelSpec | None, ModelSpec]:
    """The model's preset entry (None without a preset) and the model, once it passed
    :func:`_check_model`."""
    preset = plan.model.preset
    entry = catalog.model(preset, file=file, field="model.preset") if preset else None
    key = (plan.model.SerializeToString(), entry, plan.name if entry is None else None)
    return entry, _MODELS.get(key, lambda: _check_model(plan, catalog, file))


def _checked_training(training: xsweep_pb2.Training, software: SoftwareSpec,
                      file: str | None) -> TrainingOptions:
    """The training options, once they passed :func:`_check_training`."""
    _check_training(training, file)
    options = resolve_training(training, software)
    stack = interned(options.stack)  # one object per value: users keep it by its id
    return options if stack is options.stack else dataclasses.replace(options, stack=stack)


def _checked_cluster(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog, file: str | None,
                     limits: Limits) -> tuple[tuple, ClusterHw]:
    """The catalog entries the nodes name and the cluster's hardware, once the cluster
    passed :func:`_check_cluster`: a cluster checked before passes again while the catalog
    names the same entries (or equal ones)."""
    key = (plan.cluster.SerializeToString(), limits.gpus)

    def check() -> tuple:
        cluster = _check_cluster(plan, catalog, file, limits)
        return cluster_entries(plan.cluster, catalog), cluster

    entries, cluster = _CLUSTERS.get(key, check)
    if _same_entries(catalog, entries):
        return entries, cluster
    return check()  # the catalog changed since the cluster was checked


def _check_fp8(cluster: ClusterHw, file: str | None) -> None:
    """A plan in FP8 needs FP8 tensor cores on every GPU it runs on (Hopper, Blackwell)."""
    index = cluster.first_node_without_fp8
    if index is not None:
        gpu = cluster.nodes[index].gpu
        raise InputError(file, "training.precision", PRECISION.enum.Name(xsweep_pb2.FP8),
                         f"needs FP8 tensor cores, and the {gpu.name} of cluster.nodes[{index}] "
                         "has none (its catalog entry gives no peak_fp8_tflops)")


def _check_structure(plan: xsweep_pb2.DeploymentPlan, groups: bytes, model: ModelSpec,
                     cluster: ClusterHw, stack: Stack, file: str | None,
                     limits: Limits) -> tuple[tuple[Group, ...], int]:
    """Check the device groups against the model, the cluster and the training options;
    return them typed, and the program size estimate."""
    node_of_rank = [node for node, gpus in enumerate(cluster.gpus_per_node)
                    for _ in range(gpus)]
    _check_groups(plan, model.num_attention_heads, model.num_layers, node_of_rank, file,
                  limits)
    _check_virtual_stages(plan, file)
    _check_fsdp(plan, file)
    _check_context_parallel(plan, model.seq_length, stack, file)
    size = estimate_program_size(plan)
    check_limit(size, limits, "program_size", describe_program(size), file, "device_groups")
    return _GROUP_LISTS.get(groups, lambda: resolve_groups(plan)), size


def _positive(value: float, file: str | None, field: str) -> None:
    if not value > 0:
        raise InputError(file, field, value, "must be positive")


def _not_negative(value: float, file: str | None, field: str) -> None:
    if value < 0:
        raise InputError(file, field, value, "must not be negative")


def _check_model(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog,
                 file: str | None) -> ModelSpec:
    """Check the model's dimensions; return the model."""
    model = resolve_model(plan, catalog, file)
    check_model_dimensions(model, file, "model")  # the rules a catalog's models obey too
    return model


def _check_training(training: xsweep_pb2.Training, file: str | None) -> None:
    ranges.PLAN["training.global_batch_size"].check(training.global_batch_size, file,
                                                    "training.global_batch_size")
    if training.zero_stage not in (0, 1, 3):
        raise InputError(file, "training.zero_stage", training.zero_stage,
                         "must be 0, 1 (distributed optimizer) or 3 (FSDP)")
    for name in ("total_tokens", "virtual_pipeline_stages", "dp_bucket_params"):
        ranges.PLAN[f"training.{name}"].check(getattr(training, name), file, f"training.{name}")
    sequence_parallel = (training.sequence_parallel if training.HasField("sequence_parallel")
                         else DEFAULT_STACK.sequence_parallel)
    for name in ("expert_parallel", "moe_imbalance"):
        ranges.PLAN[f"training.{name}"].check(getattr(training, name), file, f"training.{name}")
    if training.fp8_param_gather and (training.precision != xsweep_pb2.FP8
                                      or training.zero_stage not in (1, 3)):
        raise InputError(file, "training.fp8_param_gather", True,
                         "needs precision FP8 and zero_stage 1 (distributed optimizer) or 3 "
                         "(FSDP): only then are the parameters gathered, and in FP8")
    if training.moe_fp8_dispatch and training.precision != xsweep_pb2.FP8:
        raise InputError(file, "training.moe_fp8_dispatch", True,
                         "needs precision FP8: the tokens are cast for the experts' FP8 "
                         "GEMMs before they are dispatched")
    if training.moe_fp8_dispatch and training.expert_parallel <= 1:
        raise InputError(file, "training.moe_fp8_dispatch", True,
                         "needs expert_parallel above 1: at EP 1 no token is dispatched")
    if training.tp_comm_overlap and not sequence_parallel:
        raise InputError(file, "training.tp_comm_overlap", True, "needs sequence_parallel: "
                         "the overlap hides the sequence-parallel all-gathers and "
                         "reduce-scatters behind the GEMMs they feed")


def _check_moe(model: ModelSpec, options: TrainingOptions, groups: tuple[Group, ...],
               gpus_per_node: tuple[int, ...], file: str | None) -> None:
    """Expert parallelism against the model and the device groups: EP needs routed experts
    it divides; it either divides a group's TP degree (EP carved from the group's TP ranks,
    each CP rank's under context parallelism) or is a multiple of it: EP over the TP ranks
    of several replicas (:func:`_check_ep_across`), or under context parallelism over
    those of several CP ranks (:func:`_check_ep_folding_cp`); FP8 parameter gathers and TP
    overlap are not modelled with experts (FP8 compute is)."""
    stack = options.stack
    ep = stack.expert_parallel
    tps = [len(g.ranks) // g.cp for g in groups]
    if not model.is_moe:
        raise InputError(file, "training.expert_parallel", ep,
                         f"needs a model with routed experts ({model.name!r} has none)")
    if model.num_experts % ep:
        raise InputError(file, "training.expert_parallel", ep,
                         f"must divide the model's num_experts ({model.num_experts})")
    for i, tp in enumerate(tps):
        if tp % ep and ep % tp:
            raise InputError(file, f"device_groups[{i}].ranks", tp,
                             f"TP degree must be a multiple or a divisor of "
                             f"training.expert_parallel ({ep}): the experts are split over "
                             "the TP ranks of a group or of several replicas")
    if any(ep > tp for tp in tps):
        if groups[0].cp > 1:
            _check_ep_folding_cp(ep, tps, groups, gpus_per_node, stack.moe_dispatcher, file)
        else:
            _check_ep_across(ep, groups, file)
            if stack.moe_dispatcher == "deepep":
                _check_deepep(ep, groups, gpus_per_node, file)
    if stack.fp8_param_gather:
        raise InputError(file, "training.fp8_param_gather", True,
                         "is not modelled for a model with experts (FP8 compute is: set "
                         "it false)")
    if stack.tp_comm_overlap and ep > 1:
        raise InputError(file, "training.tp_comm_overlap", True,
                         "is not modelled with expert_parallel above 1 (the all-to-all would "
                         "ride beside the compute)")


def _check_ep_folding_cp(ep: int, tps: list[int], groups: tuple[Group, ...],
                         gpus_per_node: tuple[int, ...], dispatcher: str,
                         file: str | None) -> None:
    """EP above the TP degree under context parallelism, ``EP = TP x c``: every group needs
    one TP degree (the expert gradients' rings pair like ranks of every group). Where
    ``c`` divides the CP size, an EP group is the TP ranks of ``c`` consecutive CP ranks of
    one group (Megatron-Core's parallel folding of CP into EP), and DeepEP's dispatch is
    modelled only where such an EP group stays on one node; where ``c`` is a multiple of
    it, ``EP = TP x CP x r``, an EP group is every rank of ``r`` consecutive replicas'
    groups of a stage (:func:`_check_ep_across`)."""
    cp = groups[0].cp
    for i, tp in enumerate(tps):
        if tp != tps[0]:
            raise InputError(file, f"device_groups[{i}].ranks", len(groups[i].ranks),
                             f"with training.expert_parallel ({ep}) folding context-parallel "
                             f"ranks, every group needs one TP degree ({tps[0]}), not {tp}")
    tp = tps[0]
    if ep // tp > cp and (ep // tp) % cp == 0:  # whole groups of several replicas
        _check_ep_across(ep, groups, file)
        if dispatcher == "deepep":
            _check_deepep(ep, groups, gpus_per_node, file)
        return
    if cp % (ep // tp):
        raise InputError(file, "training.expert_parallel", ep,
                         f"is TP ({tp}) x {ep // tp} context-parallel ranks, and {ep // tp} "
                         f"must divide context_parallel ({cp}) or be a multiple of it (EP "
                         "over whole groups of several replicas)")
    if dispatcher != "deepep":
        return
    node_of_rank = [node for node, gpus in enumerate(gpus_per_node) for _ in range(gpus)]
    for i, g in enumerate(groups):
        for start in range(0, len(g.ranks), ep):
            if len({node_of_rank[r] for r in g.ranks[start:start + ep]}) > 1:
                raise InputError(file, "training.moe_dispatcher", "DEEPEP",
                                 f"is not modelled over EP groups that fold context-parallel "
                                 f"ranks across nodes, and one of device_groups[{i}] spans "
                                 "nodes (use ALLTOALL)")


def _check_ep_across(ep: int, groups: tuple[Group, ...], file: str | None) -> None:
    """EP a multiple of a stage's TP degree, ``EP = TP x r``: an EP group is the TP ranks of
    ``r`` consecutive replicas of the stage, so the stage's groups must share their TP
    degree, layers and micro-batches, and ``r`` must divide their number (at TP 1, ``r``
    is EP: a rank's all-to-alls alone make its MoE pieces' TP tasks). Under FSDP each
    layer's experts are gathered and reduced over the replicas that hold them. Under
    context parallelism a group's ranks are ``TP x CP`` and ``EP = TP x CP x r``."""
    field = "training.expert_parallel"
    stages: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        stages[g.stage].append(i)
    for members in stages.values():
        first = groups[members[0]]
        tp = len(first.ranks)
        if all(ep <= len(groups[i].ranks) for i in members):
            continue
        for i in members:
            g = groups[i]
            if len(g.ranks) != tp:
                raise InputError(file, f"device_groups[{i}].ranks", len(g.ranks),
                                 f"with {field} ({ep}) above the TP degree, every group of "
                                 f"pipeline stage {g.stage} needs the same TP degree ({tp})")
            if (g.first_layer, g.last_layer, g.micro_batch_size, g.num_micro_batches) != (
                    first.first_layer, first.last_layer, first.micro_batch_size,
                    first.num_micro_batches):
                raise InputError(file, f"device_groups[{i}].first_layer", g.first_layer,
                                 f"with {field} ({ep}) above the TP degree, every group of "
                                 f"pipeline stage {g.stage} needs the same layers and "
                                 "micro-batches (an EP group spans replicas)")
        if len(members) % (ep // tp):
            raise InputError(file, field, ep,
                             f"is TP ({tp}) x {ep // tp} replicas, and {ep // tp} must divide "
                             f"the {len(members)} replicas of pipeline stage {first.stage}")


def _check_deepep(ep: int, groups: tuple[Group, ...], gpus_per_node: tuple[int, ...],
                  file: str | None) -> None:
    """DeepEP's dispatch needs EP groups spread evenly over their nodes
    (:func:`uneven_ep_group`)."""
    uneven = uneven_ep_group(ep, [(g.stage, g.replica, g.ranks) for g in groups],
                             gpus_per_node)
    if uneven is not None:
        i, counts = uneven
        raise InputError(file, "training.moe_dispatcher", "DEEPEP",
                         f"needs each EP group spread evenly over its nodes, and the one of "
                         f"device_groups[{i}] holds {counts} ranks on its nodes")


def ep_groups_on_nodes(ep: int, groups: Sequence[tuple[int, int, Sequence[int]]],
                       gpus_per_node: Sequence[int]) -> list[tuple[int, Counter]]:
    """Each EP group that spans replicas, among ``groups`` ((stage, replica, ranks) each):
    the index of its first group and its ranks per node. An EP group is the TP ranks of
    ``EP / TP`` consecutive replicas of a stage; one inside a group's TP ranks (on one
    node) is left out."""
    node_of_rank = [node for node, gpus in enumerate(gpus_per_node) for _ in range(gpus)]
    stages: dict[int, list[int]] = defaultdict(list)
    for i, (stage, _, _) in enumerate(groups):
        stages[stage].append(i)
    out = []
    for members in stages.values():
        members.sort(key=lambda i: groups[i][1])
        fold = ep // len(groups[members[0]][2])
        if fold <= 1:  # EP inside TP: a group on one node
            continue
        out += [(members[start], Counter(node_of_rank[r] for i in members[start:start + fold]
                                         for r in groups[i][2]))
                for start in range(0, len(members), fold)]
    return out


def uneven_ep_group(ep: int, groups: Sequence[tuple[int, int, Sequence[int]]],
                    gpus_per_node: Sequence[int]) -> tuple[int, list[int]] | None:
    """The first EP group (:func:`ep_groups_on_nodes`) that holds more ranks on one of its
    nodes than on another, as (the index of its first group, its ranks per node, fewest
    first); None where there is none. DeepEP's dispatch pairs each rank with the rank at
    its place on every other node of its EP group, so every node needs as many."""
    return next(((first, sorted(per_node.values()))
                 for first, per_node in ep_groups_on_nodes(ep, groups, gpus_per_node)
                 if len(set(per_node.values())) > 1), None)


def _check_virtual_stages(plan: xsweep_pb2.DeploymentPlan, file: str | None) -> None:
    """Interleaved 1F1B, as Megatron-LM requires it: 1F1B, several stages, each stage's
    layers split evenly into the chunks, micro-batches a multiple of the stages."""
    v = plan.training.virtual_pipeline_stages
    if v <= 1:
        return
    field = "training.virtual_pipeline_stages"
    if plan.training.schedule == xsweep_pb2.GPIPE:
        raise InputError(file, field, v, "interleaving needs the ONE_F_ONE_B schedule")
    stages: dict[int, int] = defaultdict(int)
    for group in plan.device_groups:
        stages[group.dp_replica] += 1
    for index, group in enumerate(plan.device_groups):
        p = stages[group.dp_replica]
        if p < 2:
            raise InputError(file, field, v, f"replica {group.dp_replica} has one pipeline "
                             "stage; interleaving needs at least two")
        layers = group.last_layer - group.first_layer + 1
        if layers % v:
            raise InputError(file, f"device_groups[{index}].last_layer", group.last_layer,
                             f"the stage's {layers} layers do not split into {v} virtual stages")
        if group.num_micro_batches % p:
            raise InputError(file, f"device_groups[{index}].num_micro_batches",
                             group.num_micro_batches,
                             f"interleaving needs a multiple of the {p} pipeline stages")


def _context_parallel(group: xsweep_pb2.DeviceGroup) -> int:
    return max(group.context_parallel, 1)


def _check_context_parallel(plan: xsweep_pb2.DeploymentPlan, seq_length: int, stack: Stack,
                            file: str | None) -> None:
    """Context parallelism as Megatron-LM runs it: one CP size for the whole job, each
    sequence cut into 2 x cp chunks (load-balanced causal attention), attention as
    Transformer Engine's fused ring; what the model does not cover is refused."""
    groups = plan.device_groups
    cp = _context_parallel(groups[0])
    if cp == 1:
        return
    path = "device_groups[0].context_parallel"
    if seq_length % (2 * cp):
        raise InputError(file, path, cp, f"model.seq_length {seq_length} must be a multiple "
                         f"of 2 x context_parallel (load-balanced chunks)")
    if not stack.flash_attention:
        raise InputError(file, path, cp, "context parallelism needs flash_attention "
                         "(Transformer Engine's fused ring attention)")
    if plan.training.zero_stage == 3:
        raise InputError(file, path, cp, "context parallelism with zero_stage 3 (FSDP) is "
                         "not modelled")
    tp_of = {}
    for index, group in enumerate(groups):
        if _context_parallel(group) != cp:
            raise InputError(file, f"device_groups[{index}].context_parallel",
                             group.context_parallel, "every device group must share one "
                             f"context_parallel (device_groups[0] has {cp})")
        tp_of[group.dp_replica, group.pp_stage] = (len(group.ranks) // cp, index)
    for (replica, stage), (tp, index) in tp_of.items():
        before = tp_of.get((replica, stage - 1))
        if before is not None and before[0] != tp:
            raise InputError(file, f"device_groups[{index}].ranks", len(groups[index].ranks),
                             f"with context parallelism consecutive stages must share a TP "
                             f"degree (resharding is not modelled); the stage before has TP "
                             f"{before[0]}")


def _check_fsdp(plan: xsweep_pb2.DeploymentPlan, file: str | None) -> None:
    """FSDP gathers and reduces every layer over its data-parallel replicas, as collectives
    that each replica calls in the order of its passes: the replicas must run the same
    passes, so the same stages (layer ranges) and micro-batch counts."""
    if plan.training.zero_stage != 3:
        return
    shapes: dict[int, list] = defaultdict(list)
    for index, group in enumerate(plan.device_groups):
        shapes[group.dp_replica].append(
            (group.pp_stage, group.first_layer, group.last_layer, group.num_micro_batches, index))
    reference = sorted(shapes.get(0, []))
    for replica in sorted(shapes):
        stages = sorted(shapes[replica])
        if [x[:4] for x in stages] == [x[:4] for x in reference]:
            continue
        bad = next((x for x, y in zip(stages, reference, strict=False) if x[:4] != y[:4]),
                   stages[-1])
        raise InputError(file, f"device_groups[{bad[4]}]", f"replica {replica}",
                         "zero_stage 3 (FSDP) needs every replica to have replica 0's stages "
                         "(layer ranges) and micro-batch count")


def _check_cluster(plan: xsweep_pb2.DeploymentPlan, catalog: Catalog, file: str | None,
                   limits: Limits) -> ClusterHw:
    """Check nodes and fabric; return the cluster's hardware."""
    cluster = plan.cluster
    if not cluster.nodes:
        raise InputError(file, "cluster.nodes", None, "a plan needs at least one node")
    gpus = 0
    for index, node in enumerate(cluster.nodes):
        path = f"cluster.nodes[{index}]"
        _positive(node.num_gpus, file, f"{path}.num_gpus")
        gpus += node.num_gpus
        check_limit(gpus, limits, "gpus", "the cluster's GPU count", file, f"{path}.num_gpus")
        for name in ("bandwidth_gbps", "latency_ns"):
            ranges.PLAN[f"scale_up.{name}"].check(getattr(node.scale_up, name), file,
                                                  f"{path}.scale_up.{name}")
        if node.scale_up.link:
            catalog.link(node.scale_up.link, file=file, field=f"{path}.scale_up.link")
        ranges.PLAN["cluster"].check(node.cluster, file, f"{path}.cluster")
    fabric = cluster.fabric
    for name in ("oversubscription", "nodes_per_rack", "switch_latency_ns"):
        ranges.PLAN[f"fabric.{name}"].check(getattr(fabric, name), file,
                                            f"cluster.fabric.{name}")
    for name in ("bandwidth_gbps", "latency_ns"):
        ranges.PLAN[f"inter_cluster.{name}"].check(getattr(fabric.inter_cluster, name), file,
                                                   f"cluster.fabric.inter_cluster.{name}")
    sites = len({node.cluster for node in cluster.nodes})
    if sites > 1 and not fabric.inter_cluster.bandwidth_gbps > 0:
        raise InputError(file, "cluster.fabric.inter_cluster.bandwidth_gbps",
                         fabric.inter_cluster.bandwidth_gbps,
                         f"nodes sit in {sites} clusters, so the link between them needs a "
                         "positive bandwidth")
    return resolve_cluster(cluster, catalog, file)  # every node's GPU, NIC and link kind


def _check_groups(plan: xsweep_pb2.DeploymentPlan, heads: int, num_layers: int,
                  node_of_rank: list[int], file: str | None, limits: Limits) -> None:
    groups = plan.device_groups
    if not groups:
        raise InputError(file, "device_groups", None, "a plan needs at least one device group")
    check_limit(len(groups), limits, "device_groups", "the number of device groups", file,
                "device_groups")
    owner: dict[int, int] = {}
    ids: dict[int, int] = {}
    replicas: dict[int, list[int]] = defaultdict(list)
    for index, group in enumerate(groups):
        path = f"device_groups[{index}]"
        if group.id in ids:
            raise InputError(file, f"{path}.id", group.id,
                             f"already used by device_groups[{ids[group.id]}]")
        ids[group.id] = index
        _check_ranks(group, path, owner, index, node_of_rank, heads, file)
        _positive(group.first_layer, file, f"{path}.first_layer")
        _positive(group.last_layer, file, f"{path}.last_layer")
        if group.last_layer < group.first_layer:
            raise InputError(file, f"{path}.last_layer", group.last_layer,
                             f"is before first_layer ({group.first_layer})")
        if group.last_layer > num_layers:
            raise InputError(file, f"{path}.last_layer", group.last_layer,
                             f"the model has {num_layers} layers")
        ranges.PLAN["micro_batch_size"].check(group.micro_batch_size, file,
                                              f"{path}.micro_batch_size")
        _positive(group.num_micro_batches, file, f"{path}.num_micro_batches")
        check_limit(group.num_micro_batches, limits, "micro_batches",
                    "micro-batches per iteration", file, f"{path}.num_micro_batches")
        for name in ("pp_stage", "dp_replica"):
            _not_negative(getattr(group, name), file, f"{path}.{name}")
        replicas[group.dp_replica].append(index)
    if sorted(replicas) != list(range(len(replicas))):
        raise InputError(file, "device_groups.dp_replica", sorted(replicas)[:8],
                         "replicas must be numbered 0..R-1 without holes")
    sequences = 0
    for replica in sorted(replicas):
        sequences += _check_replica(groups, replica, replicas[replica], num_layers, file)
    if sequences != plan.training.global_batch_size:
        raise InputError(file, "training.global_batch_size", plan.training.global_batch_size,
                         f"replicas process {sequences} sequences per iteration "
                         "(sum of micro_batch_size x num_micro_batches)")


def _check_ranks(group: xsweep_pb2.DeviceGroup, path: str, owner: dict[int, int], index: int,
                 node_of_rank: list[int], num_heads: int, file: str | None) -> None:
    if not group.ranks:
        raise InputError(file, f"{path}.ranks", None, "a device group needs at least one rank")
    cp = _context_parallel(group)
    if group.context_parallel < 0 or len(group.ranks) % cp:
        raise InputError(file, f"{path}.context_parallel", group.context_parallel,
                         f"must be at least 1 and divide the group's {len(group.ranks)} ranks")
    tp = len(group.ranks) // cp
    if tp > num_heads:
        raise InputError(file, f"{path}.ranks", len(group.ranks),
                         f"TP degree {tp} exceeds the model's {num_heads} attention heads")
    for rank in group.ranks:
        if not 0 <= rank < len(node_of_rank):
            raise InputError(file, f"{path}.ranks", rank,
                             f"rank outside the cluster's {len(node_of_rank)} GPUs")
        if rank in owner:
            where = "this group" if owner[rank] == index else f"device_groups[{owner[rank]}]"
            raise InputError(file, f"{path}.ranks", rank, f"rank already used by {where}")
        owner[rank] = index
    for q in range(cp):  # each CP rank's TP group (TP fastest)
        ranks = group.ranks[q * tp:(q + 1) * tp]
        nodes = sorted({node_of_rank[rank] for rank in ranks})
        if len(nodes) > 1:
            raise InputError(file, f"{path}.ranks", list(ranks)[:8],
                             f"a TP group must sit in one node; these span nodes {nodes[:8]}")


def _check_replica(groups: Sequence[xsweep_pb2.DeviceGroup], replica: int, members: list[int],
                   num_layers: int, file: str | None) -> int:
    """Check one replica's stages; return the sequences it processes per iteration."""
    members = sorted(members, key=lambda i: groups[i].pp_stage)
    stages = [groups[i].pp_stage for i in members]
    if stages != list(range(len(members))):
        bad = members[next(k for k, s in enumerate(stages) if s != k)]
        raise InputError(file, f"device_groups[{bad}].pp_stage", groups[bad].pp_stage,
                         f"stages of replica {replica} must be numbered 0..{len(members) - 1}, "
                         f"each once")
    head = groups[members[0]]
    next_layer = 1
    for i in members:
        group, path = groups[i], f"device_groups[{i}]"
        if group.first_layer > next_layer:
            raise InputError(file, f"{path}.first_layer", group.first_layer,
                             f"layer gap in replica {replica}: layers {next_layer}.."
                             f"{group.first_layer - 1} are not assigned")
        if group.first_layer < next_layer:
            raise InputError(file, f"{path}.first_layer", group.first_layer,
                             f"layer overlap in replica {replica}: layers {group.first_layer}.."
                             f"{next_layer - 1} are already held by an earlier stage")
        next_layer = group.last_layer + 1
        for name in ("micro_batch_size", "num_micro_batches"):
            if getattr(group, name) != getattr(head, name):
                raise InputError(file, f"{path}.{name}", getattr(group, name),
                                 f"stages of replica {replica} must share {name} "
                                 f"(stage 0 has {getattr(head, name)})")
    if next_layer <= num_layers:
        last = members[-1]
        raise InputError(file, f"device_groups[{last}].last_layer", groups[last].last_layer,
                         f"layer gap in replica {replica}: layers {next_layer}..{num_layers} "
                         "are not assigned")
    return head.micro_batch_size * head.num_micro_batches
