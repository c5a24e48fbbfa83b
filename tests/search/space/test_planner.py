"""The grid planner: valid plans, splits in proportion to speed, and reasons for the rest."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import typing

import numpy as np
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from tests.support.documents import changed
from xsweep.plan.analysis import analyze
from xsweep.plan.workload import stage_cost
from xsweep.search.evaluation import plan_key
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import (
    REASON_KINDS,
    Built,
    Infeasible,
    Planner,
    per_point,
    reason_kind,
    unused_axes,
    varies_fast,
)
from xsweep.search.sweep.units import bound_walk
from xsweep.spec import load_sweep, sweep_from_dict, validate_plan
from xsweep.spec.sweep import _AXIS, AxisClass, Sweep, axis_class

BASE = {
    "name": "planner-test",
    "model": "llama2-7b",
    "training": {"global_batch_size": 64, "schedule": "1f1b", "recompute": "full",
                 "total_tokens": 1e9},
    "cluster": {"pools": [{"gpu": "H100-SXM", "nodes": 1}, {"gpu": "A100-40GB", "nodes": 1}]},
    "parallelism": {"tp": {"H100-SXM": 4, "A100-40GB": 4}, "pp": 2, "micro_batch_size": 1,
                    "pipeline_mix": "separate", "layer_split": "proportional"},
}


def plan_one(catalog, **changes) -> Built | Infeasible:
    """Plan the first point of BASE with ``changes`` (``__``-separated paths) applied."""
    sweep = sweep_from_dict(changed(BASE, **changes))
    grid = Grid(sweep)
    return Planner(sweep, catalog).plan(grid.point(0), "p")  # the first point


def stage_time_s(analysis, group) -> float:
    return group.cost.forward_time_s + group.cost.backward_time_s


def test_every_built_quickstart_plan_is_valid_and_its_memory_is_the_analysis_one(
        spaces_dir, catalog):
    sweep = load_sweep(spaces_dir / "quickstart.yaml", catalog)
    grid = Grid(sweep)
    planner = Planner(sweep, catalog)
    built = 0
    for index, point in enumerate(grid.points(np.arange(grid.size))):
        out = planner.plan(point, f"q-{index}")
        assert out == planner.plan(point, f"q-{index}")  # pure: the same point, the same plan
        if isinstance(out, Infeasible):
            assert out.reason and "\n" not in out.reason
            continue
        built += 1
        validate_plan(out.plan, catalog)
        analysis = analyze(out.plan, catalog)
        assert all(g.fits for g in analysis.groups)
        assert out.memory_per_gpu_gib == pytest.approx(
            max(g.memory.total_gib for g in analysis.groups), rel=1e-12)
        nodes = sum(point[f"cluster.pools[{i}].nodes"] for i in range(2))
        assert sum(n.num_gpus for n in out.plan.cluster.nodes) == 8 * nodes
    assert built >= 50


def test_micro_batches_follow_replica_throughput(catalog):
    out = plan_one(catalog, **{"parallelism__pp": 1})
    analysis = analyze(out.plan, catalog)
    replicas = {}
    for group in analysis.groups:
        replicas.setdefault(group.replica, []).append(group)
    counts = np.array([stages[0].num_micro_batches for stages in replicas.values()])
    speed = np.array([1.0 / max(stage_time_s(analysis, g) for g in stages)
                      for stages in replicas.values()])
    assert counts.sum() * 1 == 64  # every sequence of the global batch is used
    assert np.all(np.abs(counts - 64 * speed / speed.sum()) < 1)
    gpus = [stages[0].gpu.name for stages in replicas.values()]
    h100, a100 = (counts[[g == name for g in gpus]] for name in ("H100-SXM", "A100-40GB"))
    assert h100.min() > a100.max()  # the faster GPU takes more


def test_mixed_pipelines_split_layers_in_proportion_to_stage_speed(catalog):
    out = plan_one(catalog, **{"parallelism__pipeline_mix": "mixed"})
    analysis = analyze(out.plan, catalog)
    model = analysis.model
    stages = [g for g in analysis.groups if g.replica == 0]
    assert [g.gpu.name for g in stages] == ["H100-SXM", "A100-40GB"]  # pools in file order
    layers = np.array([g.last_layer - g.first_layer + 1 for g in stages])
    block = [stage_cost(model, g.gpu, g.tp, 1, 2, 2, stack=analysis.stack) for g in stages]
    speed = np.array([1.0 / (c.forward_time_s + c.backward_time_s) for c in block])
    assert layers.sum() == model.num_layers
    assert np.all(np.abs(layers - model.num_layers * speed / speed.sum()) < 1)
    assert layers[0] > layers[1]
    # every pipeline has the same stages, so each gets the same micro-batches (+-1)
    counts = {g.num_micro_batches for g in analysis.groups}
    assert max(counts) - min(counts) <= 1


def test_even_split_and_separate_replicas(catalog):
    out = plan_one(catalog, **{"parallelism__pipeline_mix": "mixed", "parallelism__layer_split": "even",
                               "parallelism__pp": 3, "parallelism__tp": {"H100-SXM": 4},
                               "cluster__pools": [{"gpu": "H100-SXM", "nodes": 3}]})
    layers = [g.last_layer - g.first_layer + 1 for g in out.plan.device_groups if g.dp_replica == 0]
    assert layers == [11, 11, 10]  # 32 layers over 3 stages: the first stages take the rest
    separate = plan_one(catalog)
    assert {n.gpu for n in separate.plan.cluster.nodes} == {"H100-SXM", "A100-40GB"}
    by_replica = {}  # a separate replica stays in one pool
    for group in separate.plan.device_groups:
        node = group.ranks[0] // 8
        by_replica.setdefault(group.dp_replica, set()).add(separate.plan.cluster.nodes[node].gpu)
    assert all(len(gpus) == 1 for gpus in by_replica.values())


@pytest.mark.parametrize(("changes", "reason"), [
    ({"parallelism__tp": {"H100-SXM": 3, "A100-40GB": 4}}, "TP 3 does not divide the 8 GPUs"),
    ({"parallelism__tp": {"H100-SXM": 64, "A100-40GB": 4},
      "cluster__pools": [{"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 64},
                         {"gpu": "A100-40GB", "nodes": 1}]}, "TP 64 exceeds the model's 32 attention heads"),
    ({"parallelism__tp": {"H100-SXM": 16, "A100-40GB": 4}}, "TP 16 exceeds the 8 GPUs of a H100-SXM node"),
    ({"parallelism__tp": {"H100-SXM": 8, "A100-40GB": 4}},
     "pool H100-SXM has 1 TP groups (TP 8 on 1 x 8 GPUs), fewer than pp 2"),
    ({"parallelism__pp": 33}, "33 pipeline stages but the model has 32 layers"),
    ({"parallelism__pp": 3, "parallelism__tp": {"H100-SXM": 2, "A100-40GB": 2}},
     "pp 3 does not divide the 4 TP groups of pool H100-SXM"),
    ({"parallelism__micro_batch_size": 3}, "global batch 64 is not a multiple of micro-batch size 3"),
    ({"training__global_batch_size": 1}, "1 micro-batches (global batch 1 / micro-batch 1) cannot feed 2"),
    ({"parallelism__pipeline_mix": "mixed", "parallelism__tp": {"H100-SXM": 2, "A100-40GB": 4}},
     "the 4 TP groups of pool H100-SXM do not spread evenly over 3 pipelines"),
    ({"cluster__pools": [{"gpu": "A100-40GB", "nodes": 1}], "parallelism__tp": {"A100-40GB": 2},
      "parallelism__pp": 1, "training__recompute": "none"},
     "does not fit in GPU memory"),
    ({"cluster__pools": [{"gpu": "H100-SXM", "nodes": [0, 1]}, {"gpu": "A100-40GB", "nodes": 0}],
      "parallelism__tp": {"H100-SXM": 4, "A100-40GB": 4}}, "empty cluster"),
])
def test_points_that_cannot_be_built_say_why(catalog, changes, reason):
    out = plan_one(catalog, **changes)
    assert isinstance(out, Infeasible)
    assert reason in out.reason


def test_a_plan_that_does_not_fit_reports_its_memory(catalog):
    out = plan_one(catalog, **{"cluster__pools": [{"gpu": "A100-40GB", "nodes": 1}],
                               "parallelism__tp": {"A100-40GB": 2}, "parallelism__pp": 1,
                               "training__recompute": "none"})
    hbm_gib = catalog.gpu("A100-40GB").hbm_gib
    assert out.memory_per_gpu_gib > hbm_gib
    assert f"{out.memory_per_gpu_gib:.1f} GiB per GPU on A100-40GB ({hbm_gib:g} GiB)" in out.reason


def test_grid_numbers_points_row_major(spaces_dir, catalog):
    sweep = load_sweep(spaces_dir / "quickstart.yaml", catalog)
    grid = Grid(sweep)
    expected = list(itertools.product(*grid.axes.values()))
    assert grid.size == len(expected)
    for index in (0, 1, 17, grid.size - 1):
        assert tuple(grid.point(index).values()) == expected[index]
    chunks = grid.walk(lambda path: False).chunks(50)  # no axis moved: the grid's order
    assert chunks[0] == (0, 50) and chunks[-1][1] == grid.size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    assert set(grid.dims) <= set(grid.paths) and not set(grid.dims) & set(grid.fixed)


def test_the_bound_walk_keeps_the_points_of_a_layout_together(spaces_dir, catalog):
    sweep = load_sweep(spaces_dir / "llama3-70b-512gpu.yaml", catalog)
    grid, walk = Grid(sweep), bound_walk(sweep)
    order = walk.points(0, walk.size)
    assert sorted(order.tolist()) == list(range(grid.size))  # every point once
    assert walk.points(5000, 5100).tolist() == order[5000:5100].tolist()
    assert walk.run == 54  # three NIC generations in each of three pools, two recomputes
    planner = Planner(sweep, catalog)
    for start in (0, 54 * 1000, grid.size - 54):  # a run: one layout per recompute, NICs varied
        points = list(grid.points(order[start: start + 54]))
        assert {tuple((k, v) for k, v in p.items() if not varies_fast(k)) for p in points} \
            == {tuple((k, v) for k, v in points[0].items() if not varies_fast(k))}
        for recompute in ("none", "full"):
            same = [p for p in points if p["training.recompute"] == recompute]
            assert len({tuple(p[f"cluster.pools[{i}].nic"] for i in range(3))
                        for p in same}) == 27
            built = [planner.plan(p, "x") for p in same]
            assert len({b.layout for b in built if isinstance(b, Built)}) <= 1
    chunks = walk.chunks(1000)
    assert chunks[0] == (0, 972) and chunks[-1][1] == grid.size  # whole runs of 54
    assert all(a[1] == b[0] and (b[0] % 54 == 0) for a, b in itertools.pairwise(chunks))
    assert Grid(sweep).walk(lambda path: False).points(0, grid.size).tolist() \
        == list(range(grid.size))  # no axis moved: the grid's own order


def test_points_of_one_variant_have_one_plan(spaces_dir, catalog):
    # NICs of pools without nodes make no difference to the plan: equal variants
    sweep = load_sweep(spaces_dir / "llama3-70b-512gpu.yaml", catalog)
    grid, walk, planner = Grid(sweep), bound_walk(sweep), Planner(sweep, catalog)
    keys: dict[tuple, set] = {}
    built_points = 0
    for start in (0, 40_000, 120_000):
        for point in grid.points(walk.points(start, start + 540)):
            built = planner.plan(point, "x")
            variant = planner.variant(point)
            assert (variant is None) == (not isinstance(built, Built))
            if variant is not None:
                keys.setdefault(variant, set()).add(plan_key(built.plan))
                built_points += 1
    assert all(len(plans) == 1 for plans in keys.values())
    assert len(keys) < built_points  # points merged: planned once per variant
    assert sum(len(v[1][-1]) < 3 for v in keys) > 0  # some layouts leave a pool out


@pytest.mark.parametrize("sequence", [
    {"sequence_parallel": False, "tp_comm_overlap": False},
    {"sequence_parallel": True, "tp_comm_overlap": True},  # the overlap needs it
])
def test_every_training_stack_option_reaches_the_plan(catalog, sequence):
    stack = {"recompute": "selective", **sequence, "flash_attention": False,
             "virtual_pipeline_stages": 2, "dp_overlap": True, "dp_bucket_params": 5_000_000,
             "zero_stage": 1, "precision": "fp8", "software": "nemo-24.07",
             "pp_p2p_overlap": False, "fp8_param_gather": True}
    hopper = {"cluster__pools": [{"gpu": "H100-SXM", "nodes": 1}, {"gpu": "H200", "nodes": 1}],
              "parallelism__tp": {"H100-SXM": 4, "H200": 4}}  # FP8 needs FP8 tensor cores
    out = plan_one(catalog, **{f"training__{k}": v for k, v in stack.items()}, **hopper)
    assert isinstance(out, Built), out
    validate_plan(out.plan, catalog)
    analysis = analyze(out.plan, catalog)
    # a dense model: no expert parallelism, no imbalance (tests/search/space/test_planner_moe.py)
    assert {**dataclasses.asdict(analysis.stack), "software": analysis.stack.software.name} \
        == {**stack, "expert_parallel": 1, "moe_imbalance": 1.0, "moe_dispatcher": "alltoall",
            "moe_fp8_dispatch": False}
    for group in out.plan.device_groups:  # interleaving: layers in multiples of 2, counts of pp
        assert (group.last_layer - group.first_layer + 1) % 2 == 0
        assert group.num_micro_batches % 2 == 0


def test_gradient_buckets_share_a_layout_and_change_only_their_fields(catalog):
    document = copy.deepcopy(BASE)
    document["training"].update(dp_overlap=[False, True], dp_bucket_params=[0, 1_000_000])
    sweep = sweep_from_dict(document)
    grid = Grid(sweep)
    planner = Planner(sweep, catalog)
    plans = [planner.plan(point, "p").plan for point in grid.points(np.arange(grid.size))]
    assert len(planner._layouts) == 1
    assert [(p.training.dp_overlap, p.training.dp_bucket_params) for p in plans] == [
        (False, 0), (False, 1_000_000), (True, 0), (True, 1_000_000)]
    for plan in plans:
        plan.training.ClearField("dp_overlap")
        plan.training.ClearField("dp_bucket_params")
    assert all(plan == plans[0] for plan in plans)


@pytest.mark.parametrize(("changes", "reason"), [
    ({"training__schedule": ["gpipe", "1f1b"], "training__virtual_pipeline_stages": 2},
     "interleaving (2 virtual stages) needs the 1f1b schedule, not gpipe"),
    ({"parallelism__pp": 1, "training__virtual_pipeline_stages": 2},
     "needs at least two pipeline stages, not 1"),
    ({"training__virtual_pipeline_stages": 3}, "the model's 32 layers are no multiple of 3"),
    ({"training__virtual_pipeline_stages": 32}, "2 stages of 32 virtual stages need 64 layers"),
    ({"parallelism__pp": 4, "training__virtual_pipeline_stages": 2,
      "training__global_batch_size": 66, "parallelism__tp": {"H100-SXM": 2, "A100-40GB": 2}},
     "66 micro-batches are no multiple of the 4 stages"),
    ({"parallelism__pp": 4, "training__virtual_pipeline_stages": 2,
      "training__global_batch_size": 4, "parallelism__tp": {"H100-SXM": 2, "A100-40GB": 2}},
     "cannot feed 2 replicas in multiples of the 4 stages"),
    ({"training__zero_stage": 3},
     "FSDP (zero_stage 3) needs replicas of one shape: replica 1 (A100-40GB) runs layers"),
    ({"training__zero_stage": 3, "training__global_batch_size": 66,
      "cluster__pools": [{"gpu": "H100-SXM", "nodes": 1}, {"gpu": "A100-40GB", "nodes": 0}],
      "parallelism__pp": 1, "parallelism__tp": {"H100-SXM": 2, "A100-40GB": 2}},
     "FSDP (zero_stage 3) needs replicas of one shape: replica 2 gets 16 micro-batches, "
     "replica 0 17"),
])
def test_training_stack_rules_give_reasons(catalog, changes, reason):
    out = plan_one(catalog, **changes)
    assert isinstance(out, Infeasible)
    assert reason in out.reason, out.reason


def test_fsdp_with_replicas_of_one_shape_is_built(catalog):
    out = plan_one(catalog, **{"training__zero_stage": 3, "parallelism__pipeline_mix": "mixed"})
    assert isinstance(out, Built), out
    validate_plan(out.plan, catalog)  # the FSDP rule of plan validation holds
    assert out.plan.training.zero_stage == 3


# -- the classes of the axes ------------------------------------------------------------
#: How the planner classed the axes before their classes were declared on the schema's
#: fields (regular expressions over the paths): the declarations must class them alike.
OLD_PER_POINT = re.compile(r"cluster\.pools\[\d+\]\.nic|training\.resharding|cluster\.fabric"
                           r"|cluster\.oversubscription|cost\.pricing"
                           r"|training\.dp_overlap|training\.dp_bucket_params"
                           r"|training\.pp_p2p_overlap|training\.moe_dispatcher"
                           r"|training\.moe_fp8_dispatch")
OLD_NUMERIC = re.compile(r"training\.(recompute|sequence_parallel|flash_attention|precision|software)")


def _axis_fields(model: type[BaseModel], prefix: str = "") -> dict[str, FieldInfo]:
    """Every axis field of the schema (a mapping of axes, such as ``parallelism.tp``,
    counted once) by its path, list items as ``[i]``; walked on the classes, so that a
    field no sweep sets is found too."""
    found = {}
    for name, info in model.model_fields.items():
        path, annotation = f"{prefix}{info.alias or name}", info.annotation
        if _AXIS in info.metadata or typing.get_origin(annotation) is dict:
            found[path] = info
            continue
        if typing.get_origin(annotation) is list:
            annotation, path = typing.get_args(annotation)[0], f"{path}[i]"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= _axis_fields(annotation, f"{path}.")
    return found


def test_every_axis_of_the_schema_declares_one_class():
    fields = _axis_fields(Sweep)
    assert {"model", "training.recompute", "cluster.pools[i].nic", "parallelism.tp",
            "cost.pricing"} <= set(fields)
    for path, info in fields.items():
        declared = [item for item in info.metadata if isinstance(item, AxisClass)]
        assert len(declared) == 1, f"{path} declares {declared}"


def test_the_declared_classes_are_those_the_paths_gave():
    document = changed(BASE, cluster__pools=[
        {"gpu": "H100-SXM", "nodes": [0, 1], "nic": ["cx7", "cx8"]},
        {"gpu": "A100-40GB", "nodes": 1, "gpus_per_node": [4, 8], "nic": "cx6"}],
        parallelism__ep=[1, 2])
    sweep = sweep_from_dict(document)
    fields = _axis_fields(Sweep)
    paths = list(sweep.domains())
    covered = {re.sub(r"\[\d+\]", "[i]", p) if not p.startswith("parallelism.tp.")
               else "parallelism.tp" for p in paths}
    assert covered == set(fields)  # the sweep above has every axis of the schema
    for path in paths:
        old = (AxisClass.PER_POINT if OLD_PER_POINT.fullmatch(path) else
               AxisClass.NUMERIC if OLD_NUMERIC.fullmatch(path) else AxisClass.LAYOUT)
        assert axis_class(path) is old, path
        assert per_point(path) == (old is AxisClass.PER_POINT)
        assert varies_fast(path) == (old is not AxisClass.LAYOUT)
    assert sweep.axis_classes() == {path: axis_class(path) for path in paths}
    with pytest.raises(ValueError, match="names no axis"):
        axis_class("training.total_tokens")


@pytest.mark.parametrize(("changes", "kind"), [
    ({"parallelism__tp": {"H100-SXM": 3, "A100-40GB": 4}}, "tp_node"),
    ({"parallelism__tp": {"H100-SXM": 16, "A100-40GB": 4}}, "tp_node"),
    ({"parallelism__tp": {"H100-SXM": 64, "A100-40GB": 4},
      "cluster__pools": [{"gpu": "H100-SXM", "nodes": 1, "gpus_per_node": 64},
                         {"gpu": "A100-40GB", "nodes": 1}]}, "tp_heads"),
    ({"parallelism__tp": {"H100-SXM": 8, "A100-40GB": 4}}, "pipeline"),
    ({"parallelism__pp": 33}, "pipeline"),
    ({"parallelism__pp": 3, "parallelism__tp": {"H100-SXM": 2, "A100-40GB": 2}}, "pipeline"),
    ({"parallelism__pipeline_mix": "mixed", "parallelism__tp": {"H100-SXM": 2, "A100-40GB": 4}},
     "pipeline"),
    ({"parallelism__micro_batch_size": 3}, "batch"),
    ({"training__global_batch_size": 1}, "batch"),
    ({"parallelism__pp": 1, "training__virtual_pipeline_stages": 2}, "interleaving"),
    ({"training__zero_stage": 3}, "fsdp"),
    ({"training__precision": "fp8"}, "precision"),
    ({"training__tp_comm_overlap": True, "training__sequence_parallel": False}, "tp_overlap"),
    ({"parallelism__cp": 4}, "cp"),  # 4 x TP 4 GPUs: more than a node
    ({"parallelism__cp": 2, "training__flash_attention": False}, "cp"),
    ({"cluster__pools": [{"gpu": "A100-40GB", "nodes": 1}], "parallelism__tp": {"A100-40GB": 2},
      "parallelism__pp": 1, "training__recompute": "none"}, "memory"),
    ({"cluster__pools": [{"gpu": "H100-SXM", "nodes": [0, 1]}, {"gpu": "A100-40GB", "nodes": 0}],
      "parallelism__tp": {"H100-SXM": 4, "A100-40GB": 4}}, "empty"),
])
def test_every_reason_has_its_kind(catalog, changes, kind):
    out = plan_one(catalog, **changes)
    assert isinstance(out, Infeasible)
    assert reason_kind(out.reason).name == kind, out.reason


def test_fp8_points_are_planned_in_fp8_where_every_pool_has_it(catalog):
    out = plan_one(catalog, training__precision="fp8")
    assert isinstance(out, Infeasible)
    assert out.reason == "FP8 needs FP8 tensor cores, and pool A100-40GB (A100-40GB) has none"
    h100_b200 = {"cluster__pools": [{"gpu": "H100-SXM", "nodes": 1}, {"gpu": "B200", "nodes": 1}],
                 "parallelism__tp": {"H100-SXM": 4, "B200": 4}}
    built = {precision: plan_one(catalog, training__precision=precision, **h100_b200)
             for precision in ("bf16", "fp8")}
    assert all(isinstance(out, Built) for out in built.values())
    assert built["fp8"].plan.training.precision == 2  # FP8
    assert validate_plan(built["fp8"].plan, catalog).training.stack.precision == "fp8"
    # the stages are split by FP8 speed, and they run faster
    times = {p: max(stage_time_s(None, g) for g in analyze(out.plan, catalog).groups)
             for p, out in built.items()}
    assert times["fp8"] < times["bf16"]
    # an A100 pool without nodes takes no part
    empty_a100 = {"cluster__pools": [{"gpu": "H100-SXM", "nodes": 1},
                                     {"gpu": "A100-40GB", "nodes": 0}]}
    assert isinstance(plan_one(catalog, training__precision="fp8", **empty_a100), Built)


def test_tp_overlap_points_overlap_their_tp_communication(catalog):
    built = {on: plan_one(catalog, training__tp_comm_overlap=on) for on in (False, True)}
    assert all(isinstance(out, Built) for out in built.values())
    assert built[True].plan.training.tp_comm_overlap
    assert not built[False].plan.training.tp_comm_overlap
    stacks = {on: validate_plan(out.plan, catalog).training.stack for on, out in built.items()}
    assert stacks[True].tp_comm_overlap and stacks[True].sequence_parallel
    # the same stages, memory and program size: only the TP tasks' order changes
    assert built[True].memory_per_gpu_gib == built[False].memory_per_gpu_gib
    assert plan_key(built[True].plan) != plan_key(built[False].plan)


def test_cp_points_split_their_sequences_over_tp_x_cp_groups(catalog):
    one_pool = {"cluster__pools": [{"gpu": "H100-SXM", "nodes": 2}],
                "parallelism__tp": {"H100-SXM": 2}, "training__zero_stage": 1}
    built = {cp: plan_one(catalog, parallelism__cp=cp, **one_pool) for cp in (1, 2, 4)}
    assert all(isinstance(out, Built) for out in built.values())
    for cp, out in built.items():
        analysis = analyze(validate_plan(out.plan, catalog), catalog)
        assert {g.cp for g in analysis.groups} == {cp}
        assert {g.tp for g in analysis.groups} == {2}
        assert len(analysis.groups) == 16 // (2 * cp)  # 16 GPUs in groups of tp x cp
        for g in analysis.groups:  # each group's ranks in one node, TP fastest
            assert list(g.ranks) == list(range(g.ranks[0], g.ranks[0] + 2 * cp))
        assert out.memory_per_gpu_gib == pytest.approx(
            max(g.memory.total_gib for g in analysis.groups), rel=1e-12)
    # fewer replicas, but activations split over the CP ranks and ZeRO over DP x CP
    assert built[2].memory_per_gpu_gib < built[1].memory_per_gpu_gib
    out = plan_one(catalog, parallelism__cp=2, training__zero_stage=3, **{
        k: v for k, v in one_pool.items() if k != "training__zero_stage"})
    assert isinstance(out, Infeasible) and out.reason.startswith("CP 2 with FSDP")


def test_a_size_limit_and_the_evaluators_words_have_their_kinds(catalog, monkeypatch):
    monkeypatch.setenv("XSWEEP_MAX_DEVICE_GROUPS", "2")  # the point has 4 TP groups
    out = plan_one(catalog)
    assert isinstance(out, Infeasible) and reason_kind(out.reason).name == "size_limit"
    assert reason_kind("does not fit in GPU memory").name == "memory"  # the evaluator's
    assert reason_kind("not_converged").name == "not_converged"
    assert reason_kind("overflow").name == "overflow"
    assert reason_kind("something new").name == "other"
    assert {k.name for k in REASON_KINDS} >= {"memory", "tp_node", "pipeline", "batch"}
    assert REASON_KINDS[0].count(1) == "1 does not fit in GPU memory"
    assert REASON_KINDS[0].count(3) == "3 do not fit in GPU memory"


def test_a_memory_reason_names_the_group_farthest_over(spaces_dir, catalog):
    # quickstart point 26: two stages of A100-40GB, the second needing more than the first
    sweep = load_sweep(spaces_dir / "quickstart.yaml", catalog)
    out = Planner(sweep, catalog).plan(Grid(sweep).point(26), "p")
    assert isinstance(out, Infeasible)
    assert f"{out.memory_per_gpu_gib:.1f} GiB per GPU on A100-40GB (40 GiB) at stage 1" \
        in out.reason


def test_the_axes_a_plan_does_not_use(spaces_dir, catalog):
    sweep = load_sweep(spaces_dir / "quickstart.yaml", catalog)
    grid = Grid(sweep)
    # a dense model (EP 1) has no all-to-alls, so the MoE dispatcher and its FP8 dispatch
    # are never used
    moe = {"training.moe_dispatcher", "training.moe_fp8_dispatch"}
    assert unused_axes(sweep, grid.point(240)) == {
        "cluster.pools[1].gpus_per_node", "parallelism.tp.A100-40GB", "parallelism.pipeline_mix",
        *moe}
    # both pools have a node
    assert unused_axes(sweep, grid.point(267)) == moe
    planner = Planner(sweep, catalog)
    keys = {plan_key(planner.plan(grid.point(i), "p").plan) for i in (240, 241, 246, 247)}
    assert len(keys) == 1  # they differ only in axes the plan does not use
