"""The lowering (structures cached, numbers refilled) equals the per-task reference lowering.

Programs are compared field by field and bit for bit: tasks, labels, dependencies,
flows, paths, bytes, durations, latencies, link capacities and task names. Numeric
variants of each plan (other GPU and NIC models, micro-batch size, recompute, sequence
parallelism, flash attention, oversubscription) go through one shared template cache, so every variant after the
first is filled into a structure built from another variant.
"""

from __future__ import annotations

import random

import pytest

from tests.plan.reference_lowering import reference_lower
from tests.support.lowering import assert_identical
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import FP8_GPU_TYPES, GPU_TYPES, NICS, random_plan
from xsweep.plan.lower import TemplateCache, lower, structure_key
from xsweep.spec import validate_plan
from xsweep.spec import xsweep_pb2 as pb


def numeric_variant(plan, rng: random.Random):
    """The same structure with other numbers: GPU and NIC models, micro-batch size, recompute,
    sequence parallelism, flash attention, oversubscription, precision (FP8 where every GPU
    has it; the ZeRO stage, interleaving and gradient buckets change the structure)."""
    out = type(plan)()
    out.CopyFrom(plan)
    # FP8 parameter gathers (a structure option: their payloads are keys of their own)
    # keep FP8, so GPUs with FP8 tensor cores
    gathers = plan.training.fp8_param_gather
    for node in out.cluster.nodes:
        node.gpu = rng.choice(FP8_GPU_TYPES if gathers else GPU_TYPES)
        node.nic = rng.choice(NICS)
    size = rng.choice((1, 2, 4))
    for group in out.device_groups:
        group.micro_batch_size = size
    out.training.global_batch_size = size * sum(
        g.num_micro_batches for g in out.device_groups if g.pp_stage == 0)
    out.training.recompute = rng.choice((pb.NO_RECOMPUTE, pb.SELECTIVE, pb.FULL))
    draw = rng.random() < 0.5  # TP overlap (a structure option) keeps sequence parallelism
    out.training.sequence_parallel = out.training.tp_comm_overlap or draw
    cp = max(out.device_groups[0].context_parallel, 1)  # CP needs fused attention
    out.training.flash_attention = rng.random() < 0.5 or cp > 1
    out.cluster.fabric.oversubscription = rng.choice((1.0, 2.0, 3.0))
    fp8 = all(node.gpu in FP8_GPU_TYPES for node in out.cluster.nodes)
    out.training.precision = pb.FP8 if fp8 and (gathers or rng.random() < 0.5) else pb.BF16
    return out


def _check(plans, catalog):
    cache = TemplateCache()
    for plan in plans:
        validate_plan(plan, catalog)
        a = analyze(plan, catalog)
        assert_identical(lower(a, templates=cache), reference_lower(a))


def test_random_catalogue(catalog):
    _check([random_plan(seed, max_gpus=64) for seed in range(24)], catalog)


def test_numeric_variants_share_a_structure(catalog):
    rng = random.Random(7)
    cache = TemplateCache()
    for seed in range(8):
        plan = random_plan(100 + seed, max_gpus=64)
        variants = [plan] + [numeric_variant(plan, rng) for _ in range(3)]
        analyses = [analyze(v, catalog) for v in variants]
        assert len({structure_key(a) for a in analyses}) == 1
        for a in analyses:
            assert_identical(lower(a, templates=cache), reference_lower(a))
    assert len(cache) == 8  # one structure per plan, its variants refilled


@pytest.mark.slow
def test_larger_random_catalogue(catalog):
    _check([random_plan(seed, min_gpus=64, max_gpus=256, num_layers=16)
            for seed in range(200, 240)], catalog)
