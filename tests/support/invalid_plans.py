"""One invalid plan per rule of plan validation, for the CLI and the library alike.

Each entry breaks one rule of ``xsweep.spec.validate`` in the valid base plan of
``tests/support/hostile_inputs.py`` and names the field the error must name. Some rules
are reached by lowering a limit through its environment variable rather than by
building a huge plan. ``tests/test_every_rule.py`` checks that the entries reach
every ``raise`` of the validation, that ``xsweep check`` refuses each, and that the
library refuses the very same plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.hostile_inputs import PLAN
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.plan_io import plan_from_text


@dataclass(frozen=True)
class Invalid:
    name: str
    field: str  # the field path the error names
    mutate: Callable[[pb.DeploymentPlan], None]
    env: dict[str, str] = field(default_factory=dict)  # limits lowered for this case

    def plan(self) -> pb.DeploymentPlan:
        plan = plan_from_text(PLAN)
        self.mutate(plan)
        return plan


def set_path(path: str, value: object) -> Callable[[pb.DeploymentPlan], None]:
    """Assign ``value`` at a dotted path such as ``device_groups.1.first_layer``."""
    def mutate(plan: pb.DeploymentPlan) -> None:
        *parents, last = path.split(".")
        target = plan
        for part in parents:
            target = target[int(part)] if part.isdigit() else getattr(target, part)
        setattr(target, last, value)
    return mutate


def _both(*mutations: Callable[[pb.DeploymentPlan], None]) -> Callable[[pb.DeploymentPlan], None]:
    def mutate(plan: pb.DeploymentPlan) -> None:
        for m in mutations:
            m(plan)
    return mutate


def _one_stage_replica(plan: pb.DeploymentPlan) -> None:
    """Replica 1 runs every layer on one stage."""
    del plan.device_groups[3]
    plan.device_groups[2].last_layer = 32


def _micro_batches(count: int) -> Callable[[pb.DeploymentPlan], None]:
    def mutate(plan: pb.DeploymentPlan) -> None:
        for group in plan.device_groups:
            group.num_micro_batches = count
        plan.training.global_batch_size = 2 * count
    return mutate


def _clear(name: str) -> Callable[[pb.DeploymentPlan], None]:
    def mutate(plan: pb.DeploymentPlan) -> None:
        plan.ClearField(name)
    return mutate


def _ranks(group: int, ranks: list[int]) -> Callable[[pb.DeploymentPlan], None]:
    def mutate(plan: pb.DeploymentPlan) -> None:
        del plan.device_groups[group].ranks[:]
        plan.device_groups[group].ranks.extend(ranks)
    return mutate


def _clear_preset(plan: pb.DeploymentPlan) -> None:
    plan.model.preset = ""


def _second_node(plan: pb.DeploymentPlan) -> None:
    plan.cluster.nodes.add(gpu="H100-SXM", num_gpus=8, cluster=1)


def _duplicate_layers(plan: pb.DeploymentPlan) -> None:  # both stages of replica 1 cover 1-16
    plan.device_groups[3].first_layer = 1
    plan.device_groups[3].last_layer = 16


def _stage_numbers(plan: pb.DeploymentPlan) -> None:
    plan.device_groups[1].pp_stage = 0


def _context_parallel(cp: int) -> Callable[[pb.DeploymentPlan], None]:
    def mutate(plan: pb.DeploymentPlan) -> None:
        for group in plan.device_groups:
            group.context_parallel = cp
    return mutate


def _cp_unequal_stages(plan: pb.DeploymentPlan) -> None:
    """One replica: stage 0 at TP 1 and stage 1 at TP 2, both with two CP ranks."""
    del plan.device_groups[2:]
    plan.training.global_batch_size = 4
    _ranks(1, [2, 3, 4, 5])(plan)
    _context_parallel(2)(plan)


def _deepep_uneven(plan: pb.DeploymentPlan) -> None:
    """Mixtral on nodes of 6 and 2 GPUs, eight replicas of one TP-1 stage, EP 8 over all
    of them: the EP group holds 6 ranks on one node and 2 on the other."""
    plan.model.preset = "mixtral-8x7b"
    plan.cluster.nodes[0].num_gpus = 6
    plan.cluster.nodes.add(gpu="H100-SXM", num_gpus=2)
    del plan.device_groups[:]
    for rank in range(8):
        plan.device_groups.add(id=rank, ranks=[rank], pp_stage=0, dp_replica=rank,
                               first_layer=1, last_layer=32, micro_batch_size=1,
                               num_micro_batches=1)
    plan.training.expert_parallel = 8
    plan.training.moe_dispatcher = pb.DEEPEP


def _cp_three_ep_four(plan: pb.DeploymentPlan) -> None:
    """Mixtral on one group of TP 2 x CP 3 at EP 4: EP / TP = 2 CP ranks, which neither
    divides the 3 nor is a multiple of them."""
    plan.model.preset = "mixtral-8x7b"
    plan.model.seq_length = 1026  # in 2 x 3 chunks
    del plan.device_groups[1:]
    plan.device_groups[0].last_layer = 32
    _ranks(0, [0, 1, 2, 3, 4, 5])(plan)
    _context_parallel(3)(plan)
    plan.training.global_batch_size = 4
    plan.training.expert_parallel = 4


def _cp_unequal_replicas(plan: pb.DeploymentPlan) -> None:
    """Mixtral at CP 2 and EP 2 on two one-stage replicas, one at TP 1 (EP folds its CP
    ranks) and one at TP 2 (EP inside TP)."""
    plan.model.preset = "mixtral-8x7b"
    del plan.device_groups[2:]
    plan.device_groups[0].last_layer = 32
    group = plan.device_groups[1]
    group.pp_stage, group.dp_replica, group.first_layer = 0, 1, 1
    _ranks(1, [2, 3, 4, 5])(plan)
    _context_parallel(2)(plan)
    plan.training.expert_parallel = 2


def _deepep_cp_across(plan: pb.DeploymentPlan) -> None:
    """Mixtral at CP 2 and EP 2 (each group's two CP ranks, TP 1) under DeepEP, on nodes of
    5 and 3 GPUs: device group 2's ranks 4 and 5 sit on both."""
    plan.model.preset = "mixtral-8x7b"
    _context_parallel(2)(plan)
    plan.training.expert_parallel = 2
    plan.training.moe_dispatcher = pb.DEEPEP
    plan.cluster.nodes[0].num_gpus = 5
    plan.cluster.nodes.add(gpu="H100-SXM", num_gpus=3)


NAN, INF = float("nan"), float("inf")
G = "device_groups"

RULES: tuple[Invalid, ...] = (
    # enums
    Invalid("unknown schedule", "training.schedule", set_path("training.schedule", 9)),
    Invalid("unknown resharding", "training.resharding", set_path("training.resharding", 9)),
    Invalid("unknown fabric", "cluster.fabric.kind", set_path("cluster.fabric.kind", 9)),
    Invalid("unknown mlp", "model.mlp", set_path("model.mlp", 9)),
    # model
    Invalid("unknown preset", "model.preset", set_path("model.preset", "llama9-1t")),
    Invalid("no preset and no size", "model.num_layers", _clear_preset),
    Invalid("layers above the range", "model.num_layers", set_path("model.num_layers", 5000)),
    Invalid("zero hidden size", "model.hidden_size", set_path("model.hidden_size", 0)),
    Invalid("sequence above the range", "model.seq_length", set_path("model.seq_length", 2**30)),
    Invalid("kv heads above heads", "model.num_kv_heads", set_path("model.num_kv_heads", 64)),
    # training
    Invalid("negative global batch", "training.global_batch_size",
            set_path("training.global_batch_size", -8)),
    Invalid("zero stage 2", "training.zero_stage", set_path("training.zero_stage", 2)),
    Invalid("TP overlap without sequence parallelism", "training.tp_comm_overlap",
            _both(set_path("training.tp_comm_overlap", True),
                  set_path("training.sequence_parallel", False))),
    Invalid("FP8 parameter gathers in BF16", "training.fp8_param_gather",
            _both(set_path("training.fp8_param_gather", True),
                  set_path("training.zero_stage", 1))),
    Invalid("FP8 on a GPU without FP8 tensor cores", "training.precision",
            _both(set_path("training.precision", pb.FP8),
                  set_path("cluster.nodes.0.gpu", "A100-80GB"))),
    # mixture of experts (Mixtral: 8 experts; the base plan's groups are TP 2)
    Invalid("expert parallelism of a dense model", "training.expert_parallel",
            set_path("training.expert_parallel", 2)),
    Invalid("expert parallelism not dividing the experts", "training.expert_parallel",
            _both(set_path("model.preset", "mixtral-8x7b"),
                  set_path("training.expert_parallel", 3))),
    Invalid("expert parallelism neither dividing TP nor a multiple of it", f"{G}[0].ranks",
            _both(set_path("model.preset", "mixtral-8x7b"), set_path("model.num_experts", 6),
                  set_path("model.moe_top_k", 2), set_path("training.expert_parallel", 3))),
    Invalid("expert parallelism across replicas not dividing the replicas",
            "training.expert_parallel",
            _both(set_path("model.preset", "mixtral-8x7b"),
                  set_path("training.expert_parallel", 8))),
    Invalid("expert parallelism across replicas of unequal TP", f"{G}[2].ranks",
            _both(set_path("model.preset", "mixtral-8x7b"), _ranks(2, [4]),
                  set_path("training.expert_parallel", 4))),
    Invalid("expert parallelism across replicas of unlike stages", f"{G}[2].first_layer",
            _both(set_path("model.preset", "mixtral-8x7b"), set_path("training.expert_parallel", 4),
                  set_path("device_groups.2.last_layer", 15),
                  set_path("device_groups.3.first_layer", 16))),
    Invalid("FP8 parameter gathers with experts", "training.fp8_param_gather",
            _both(set_path("model.preset", "mixtral-8x7b"), set_path("training.precision", pb.FP8),
                  set_path("training.zero_stage", 1),
                  set_path("training.fp8_param_gather", True))),
    Invalid("TP overlap with expert parallelism", "training.tp_comm_overlap",
            _both(set_path("model.preset", "mixtral-8x7b"), set_path("training.expert_parallel", 2),
                  set_path("training.tp_comm_overlap", True))),
    Invalid("EP over CP ranks it neither divides nor spans whole", "training.expert_parallel",
            _cp_three_ep_four),
    Invalid("EP folding CP ranks at unlike TP degrees", f"{G}[1].ranks",
            _cp_unequal_replicas),
    Invalid("DeepEP over EP groups folding CP ranks across nodes", "training.moe_dispatcher",
            _deepep_cp_across),
    Invalid("DeepEP over an EP group spread unevenly over its nodes", "training.moe_dispatcher",
            _deepep_uneven),
    Invalid("unknown MoE dispatcher", "training.moe_dispatcher",
            set_path("training.moe_dispatcher", 9)),
    Invalid("FP8 dispatch in BF16", "training.moe_fp8_dispatch",
            _both(set_path("model.preset", "mixtral-8x7b"), set_path("training.expert_parallel", 2),
                  set_path("training.moe_fp8_dispatch", True))),
    Invalid("FP8 dispatch without expert parallelism", "training.moe_fp8_dispatch",
            _both(set_path("model.preset", "mixtral-8x7b"), set_path("training.precision", pb.FP8),
                  set_path("training.moe_fp8_dispatch", True))),
    Invalid("imbalance below 1", "training.moe_imbalance",
            set_path("training.moe_imbalance", 0.5)),
    Invalid("top-k above the experts", "model.moe_top_k",
            _both(set_path("model.preset", "mixtral-8x7b"), set_path("model.moe_top_k", 9))),
    Invalid("FSDP over unlike replicas", "device_groups[2]",
            _both(set_path("training.zero_stage", 3), set_path("device_groups.2.last_layer", 15),
                  set_path("device_groups.3.first_layer", 16))),
    Invalid("heads not dividing the width", "model.num_attention_heads",
            set_path("model.hidden_size", 4095)),
    Invalid("interleaved GPipe", "training.virtual_pipeline_stages",
            _both(set_path("training.virtual_pipeline_stages", 2),
                  set_path("training.schedule", pb.GPIPE))),
    Invalid("interleaved one-stage replica", "training.virtual_pipeline_stages",
            _both(set_path("training.virtual_pipeline_stages", 2), _one_stage_replica)),
    Invalid("interleaved uneven chunks", "device_groups[0].last_layer",
            set_path("training.virtual_pipeline_stages", 3)),
    Invalid("interleaved micro-batches", "device_groups[0].num_micro_batches",
            _both(set_path("training.virtual_pipeline_stages", 2), _micro_batches(3))),
    Invalid("NaN tokens", "training.total_tokens", set_path("training.total_tokens", NAN)),
    Invalid("infinite tokens", "training.total_tokens", set_path("training.total_tokens", INF)),
    Invalid("negative tokens", "training.total_tokens", set_path("training.total_tokens", -1.0)),
    # cluster
    Invalid("no nodes", "cluster.nodes", lambda plan: plan.cluster.ClearField("nodes")),
    Invalid("zero GPUs in a node", "cluster.nodes[0].num_gpus", set_path("cluster.nodes.0.num_gpus", 0)),
    Invalid("more GPUs than the limit", "cluster.nodes[0].num_gpus", lambda plan: None,
            {"XSWEEP_MAX_GPUS": "4"}),
    Invalid("NaN scale-up latency", "cluster.nodes[0].scale_up.latency_ns",
            set_path("cluster.nodes.0.scale_up.latency_ns", NAN)),
    Invalid("negative scale-up bandwidth", "cluster.nodes[0].scale_up.bandwidth_gbps",
            set_path("cluster.nodes.0.scale_up.bandwidth_gbps", -1.0)),
    Invalid("site index above the range", "cluster.nodes[0].cluster",
            set_path("cluster.nodes.0.cluster", 64)),
    Invalid("infinite oversubscription", "cluster.fabric.oversubscription",
            set_path("cluster.fabric.oversubscription", INF)),
    Invalid("oversubscription below 1", "cluster.fabric.oversubscription",
            set_path("cluster.fabric.oversubscription", 0.5)),
    Invalid("negative rack size", "cluster.fabric.nodes_per_rack",
            set_path("cluster.fabric.nodes_per_rack", -4)),
    Invalid("NaN switch latency", "cluster.fabric.switch_latency_ns",
            set_path("cluster.fabric.switch_latency_ns", NAN)),
    Invalid("infinite inter-cluster bandwidth", "cluster.fabric.inter_cluster.bandwidth_gbps",
            set_path("cluster.fabric.inter_cluster.bandwidth_gbps", INF)),
    Invalid("negative inter-cluster latency", "cluster.fabric.inter_cluster.latency_ns",
            set_path("cluster.fabric.inter_cluster.latency_ns", -1.0)),
    Invalid("two sites without a link", "cluster.fabric.inter_cluster.bandwidth_gbps",
            _second_node),
    Invalid("unknown gpu", "cluster.nodes[0].gpu", set_path("cluster.nodes.0.gpu", "V100")),
    Invalid("unknown nic", "cluster.nodes[0].nic", set_path("cluster.nodes.0.nic", "cx99")),
    # device groups
    Invalid("no device groups", G, _clear("device_groups")),
    Invalid("more groups than the limit", G, lambda plan: None,
            {"XSWEEP_MAX_DEVICE_GROUPS": "2"}),
    Invalid("duplicate group id", f"{G}[1].id", set_path("device_groups.1.id", 0)),
    Invalid("group without ranks", f"{G}[0].ranks", _ranks(0, [])),
    Invalid("TP above the heads", f"{G}[0].ranks",
            _both(set_path("model.num_attention_heads", 1), set_path("model.num_kv_heads", 1))),
    Invalid("rank outside the cluster", f"{G}[1].ranks", _ranks(1, [2, 8])),
    Invalid("rank used twice", f"{G}[1].ranks", _ranks(1, [1, 2])),
    Invalid("TP group across nodes", f"{G}[1].ranks",
            _both(set_path("cluster.nodes.0.num_gpus", 4),
                  lambda plan: plan.cluster.nodes.add(gpu="H100-SXM", num_gpus=4),
                  _ranks(1, [3, 4]))),
    Invalid("zero first layer", f"{G}[0].first_layer", set_path("device_groups.0.first_layer", 0)),
    Invalid("zero last layer", f"{G}[0].last_layer", set_path("device_groups.0.last_layer", 0)),
    Invalid("last layer before the first", f"{G}[1].last_layer",
            set_path("device_groups.1.last_layer", 10)),
    Invalid("layers beyond the model", f"{G}[1].last_layer",
            set_path("device_groups.1.last_layer", 40)),
    Invalid("micro-batch size above the range", f"{G}[0].micro_batch_size",
            set_path("device_groups.0.micro_batch_size", 100_000)),
    Invalid("zero micro-batches", f"{G}[0].num_micro_batches",
            set_path("device_groups.0.num_micro_batches", 0)),
    Invalid("more micro-batches than the limit", f"{G}[0].num_micro_batches", lambda plan: None,
            {"XSWEEP_MAX_MICRO_BATCHES": "3"}),
    Invalid("negative stage", f"{G}[0].pp_stage", set_path("device_groups.0.pp_stage", -1)),
    Invalid("negative replica", f"{G}[0].dp_replica", set_path("device_groups.0.dp_replica", -1)),
    Invalid("replica numbers with a hole", f"{G}.dp_replica",
            _both(set_path("device_groups.2.dp_replica", 2), set_path("device_groups.3.dp_replica", 2))),
    Invalid("stage numbered twice", f"{G}[1].pp_stage", _stage_numbers),
    Invalid("layer gap", f"{G}[1].first_layer", set_path("device_groups.1.first_layer", 18)),
    Invalid("layer overlap", f"{G}[3].first_layer", _duplicate_layers),
    Invalid("stages with different micro-batches", f"{G}[1].num_micro_batches",
            set_path("device_groups.1.num_micro_batches", 2)),
    Invalid("missing tail layers", f"{G}[1].last_layer", set_path("device_groups.1.last_layer", 30)),
    Invalid("global batch does not add up", "training.global_batch_size",
            set_path("training.global_batch_size", 10)),
    Invalid("program larger than the limit", G, lambda plan: None,
            {"XSWEEP_MAX_PROGRAM_SIZE": "100"}),
    # context parallelism
    Invalid("CP not dividing the ranks", f"{G}[0].context_parallel",
            set_path("device_groups.0.context_parallel", 3)),
    Invalid("negative CP", f"{G}[0].context_parallel",
            set_path("device_groups.0.context_parallel", -2)),
    Invalid("CP on some groups only", f"{G}[1].context_parallel",
            set_path("device_groups.0.context_parallel", 2)),
    Invalid("sequence not in 2 x CP chunks", f"{G}[0].context_parallel",
            _both(_context_parallel(2), set_path("model.seq_length", 1026))),
    Invalid("CP without flash attention", f"{G}[0].context_parallel",
            _both(_context_parallel(2), set_path("training.flash_attention", False))),
    Invalid("CP under FSDP", f"{G}[0].context_parallel",
            _both(_context_parallel(2), set_path("training.zero_stage", 3))),
    Invalid("CP across unequal TP stages", f"{G}[1].ranks", _cp_unequal_stages),
)
