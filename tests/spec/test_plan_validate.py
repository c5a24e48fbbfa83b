"""Semantic plan checks: each rule rejects its case with the right field path."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.plan_io import load_plan
from xsweep.spec.validate import validate_plan


@pytest.fixture
def plan(spaces_dir) -> pb.DeploymentPlan:
    """The appendix-B plan, a fresh copy per test."""
    return load_plan(spaces_dir / "appendix-b.pbtxt")


def reject(plan, catalog, field: str, reason: str) -> InputError:
    with pytest.raises(InputError) as info:
        validate_plan(plan, catalog, "p.pbtxt")
    assert info.value.file == "p.pbtxt"
    assert info.value.field == field
    assert reason in info.value.reason
    return info.value


def test_shipped_examples_are_valid(spaces_dir, catalog):
    for path in sorted(spaces_dir.rglob("*.pbtxt")):
        validate_plan(load_plan(path, catalog), catalog, str(path))


def test_tp_need_not_divide_heads(plan, catalog):
    assert len(plan.device_groups[0].ranks) == 3  # 32 heads, TP 3: uneven shards are allowed
    validate_plan(plan, catalog)


def test_stage_numbering(plan, catalog):
    plan.device_groups[1].pp_stage = 2
    reject(plan, catalog, "device_groups[1].pp_stage", "numbered 0..1")


def test_duplicate_stage(plan, catalog):
    plan.device_groups[1].pp_stage = 0
    reject(plan, catalog, "device_groups[1].pp_stage", "each once")


def test_replica_numbering(plan, catalog):
    for group in plan.device_groups[2:]:
        group.dp_replica = 2
    reject(plan, catalog, "device_groups.dp_replica", "0..R-1")


def test_stages_share_micro_batches(plan, catalog):
    plan.device_groups[1].num_micro_batches = 4
    reject(plan, catalog, "device_groups[1].num_micro_batches", "share num_micro_batches")


def test_missing_tail_layers(plan, catalog):
    plan.device_groups[3].last_layer = 30
    reject(plan, catalog, "device_groups[3].last_layer", "layers 31..32 are not assigned")


def test_layers_beyond_model(plan, catalog):
    plan.device_groups[3].last_layer = 33
    reject(plan, catalog, "device_groups[3].last_layer", "32 layers")


def test_rank_repeated_inside_group(plan, catalog):
    plan.device_groups[0].ranks[2] = 0
    reject(plan, catalog, "device_groups[0].ranks", "already used by this group")


def test_duplicate_group_id(plan, catalog):
    plan.device_groups[3].id = 0
    reject(plan, catalog, "device_groups[3].id", "already used")


@pytest.mark.parametrize("stage", [2, -1, 4])
def test_zero_stage(plan, catalog, stage):
    plan.training.zero_stage = stage
    reject(plan, catalog, "training.zero_stage", "0, 1 (distributed optimizer) or 3 (FSDP)")


@pytest.mark.parametrize("stage", [0, 1])
def test_zero_stages_megatron_offers(plan, catalog, stage):
    plan.training.zero_stage = stage
    validate_plan(plan, catalog)


def test_fsdp_needs_replicas_of_one_shape(plan, catalog):
    plan.training.zero_stage = 3
    reject(plan, catalog, "device_groups[2]", "replica 0's stages (layer ranges)")
    plan.device_groups[2].last_layer, plan.device_groups[3].first_layer = 20, 21
    validate_plan(plan, catalog)  # TP degrees and GPUs may differ
    plan.device_groups[2].num_micro_batches = plan.device_groups[3].num_micro_batches = 4
    plan.training.global_batch_size -= 4
    reject(plan, catalog, "device_groups[2]", "micro-batch count")


def test_unknown_enum_numbers(plan, catalog):
    plan.training.recompute = 7  # an open proto3 enum keeps unknown numbers
    reject(plan, catalog, "training.recompute", "NO_RECOMPUTE, SELECTIVE, FULL")


@pytest.mark.parametrize("field", ["virtual_pipeline_stages", "dp_bucket_params"])
def test_negative_stack_sizes(plan, catalog, field):
    setattr(plan.training, field, -1)
    reject(plan, catalog, f"training.{field}", "must be at least 1 (or 0 for the default)")


def test_interleaving_needs_1f1b_several_stages_and_even_chunks(plan, catalog):
    plan.training.virtual_pipeline_stages = 2
    reject(plan, catalog, "training.virtual_pipeline_stages", "ONE_F_ONE_B")
    plan.training.schedule = pb.ONE_F_ONE_B
    # replica 0: DG1 holds layers 21-32 (12, even), DG0 1-20; replica 1: DG2 1-15 (odd)
    reject(plan, catalog, "device_groups[2].last_layer", "do not split into 2 virtual stages")
    plan.device_groups[2].last_layer, plan.device_groups[3].first_layer = 16, 17
    plan.device_groups[0].num_micro_batches = plan.device_groups[1].num_micro_batches = 3
    plan.training.global_batch_size = 3 + 8
    reject(plan, catalog, "device_groups[0].num_micro_batches", "multiple of the 2 pipeline")
    plan.device_groups[0].num_micro_batches = plan.device_groups[1].num_micro_batches = 4
    plan.training.global_batch_size = 4 + 8
    validate_plan(plan, catalog)


def test_unknown_scale_up_link(plan, catalog):
    plan.cluster.nodes[0].scale_up.link = "nvlink9"
    reject(plan, catalog, "cluster.nodes[0].scale_up.link", "unknown link")


def test_oversubscription(plan, catalog):
    plan.cluster.fabric.oversubscription = 0.5
    reject(plan, catalog, "cluster.fabric.oversubscription", "at least 1")
    plan.cluster.fabric.oversubscription = 3
    validate_plan(plan, catalog)


def test_unknown_nic(plan, catalog):
    plan.cluster.nodes[1].nic = "cx99"
    reject(plan, catalog, "cluster.nodes[1].nic", "unknown nic")


def test_kv_heads_above_heads(plan, catalog):
    plan.model.num_kv_heads = 64
    reject(plan, catalog, "model.num_kv_heads", "exceeds")


def test_sites_need_a_link(plan, catalog):
    plan.cluster.nodes[1].cluster = 1
    reject(plan, catalog, "cluster.fabric.inter_cluster.bandwidth_gbps", "positive")
    plan.cluster.fabric.inter_cluster.bandwidth_gbps = 100
    validate_plan(plan, catalog)


def test_unused_gpus_are_allowed(plan, catalog):
    plan.cluster.nodes[1].num_gpus = 8  # ranks 10-12 idle
    validate_plan(plan, catalog)
