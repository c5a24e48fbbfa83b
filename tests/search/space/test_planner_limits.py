"""The planner decides by arithmetic what arithmetic can decide, and holds every point to
the size limits of a plan before it builds anything of that size."""

from __future__ import annotations

import re

import pytest

from tests.support.budget import in_process_budget
from tests.support.documents import changed
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Built, Infeasible, Planner
from xsweep.spec import validate_plan
from xsweep.spec.program_size import describe_program, estimate_program_size
from xsweep.spec.sweep import Sweep

BASE = {
    "name": "planner-limits",
    "model": "llama2-7b",
    "training": {"global_batch_size": 64, "recompute": "full"},
    "cluster": {"pools": [{"gpu": "H100-SXM", "nodes": 1}]},
    "parallelism": {"tp": {"H100-SXM": 2}, "pp": 2},
}
#: Time and memory a point may take however large its pools: far above what arithmetic needs.
SECONDS, BYTES = 10.0, 256 << 20


def sweep_with(**changes):
    document = changed(BASE, **changes)
    # the schema only: reading a file refuses pools over the GPU limit before any planning
    # (xsweep.spec.sweep.check_sweep_limits), and the planner must hold without that too
    return Sweep.model_validate(document)


def plan_all(sweep, catalog) -> list[Built | Infeasible]:
    grid = Grid(sweep)
    planner = Planner(sweep, catalog)
    return [planner.plan(grid.point(i), f"p{i}") for i in range(grid.size)]


def test_a_pool_of_four_billion_gpus_is_infeasible_at_once(catalog):
    sweep = sweep_with(cluster__pools=[{"gpu": "H100-SXM", "nodes": 65_536,
                                        "gpus_per_node": 65_536}],
                       parallelism__tp={"H100-SXM": 1}, parallelism__pp=1,
                       training__global_batch_size=32)
    with in_process_budget(SECONDS, BYTES):
        [out] = plan_all(sweep, catalog)
    assert out == Infeasible("32 micro-batches (global batch 32 / micro-batch 1) cannot feed "
                             "4294967296 replicas")


def test_an_all_infeasible_space_of_4096_by_4096_gpus_is_planned_in_seconds(catalog):
    sweep = sweep_with(cluster__pools=[{"gpu": "H100-SXM", "nodes": 4096,
                                        "gpus_per_node": 4096}],
                       parallelism__tp={"H100-SXM": [1, 2, 4, 8]}, parallelism__pp=[1, 2, 4, 8],
                       training__global_batch_size=[32, 64])
    with in_process_budget(SECONDS, BYTES):
        found = plan_all(sweep, catalog)
    grid = Grid(sweep)
    assert len(found) == grid.size == 32
    for index, out in enumerate(found):
        point = grid.point(index)
        batch = point["training.global_batch_size"]
        replicas = 4096 * 4096 // point["parallelism.tp.H100-SXM"] // point["parallelism.pp"]
        assert out.reason == (f"{batch} micro-batches (global batch {batch} / micro-batch 1) "
                              f"cannot feed {replicas} replicas")


@pytest.mark.parametrize(("changes", "reason"), [
    # the first pool forms its 8,388,608 replicas, the second none
    ({"cluster__pools": [{"gpu": "H100-SXM", "nodes": 4096, "gpus_per_node": 4096},
                         {"gpu": "A100-40GB", "nodes": 1}],
      "parallelism__tp": {"H100-SXM": 1, "A100-40GB": 8}},
     "pool A100-40GB has 1 TP groups (TP 8 on 1 x 8 GPUs), fewer than pp 2"),
    ({"cluster__pools": [{"gpu": "H100-SXM", "nodes": 4096, "gpus_per_node": 4096}],
      "parallelism__pipeline_mix": "mixed", "training__global_batch_size": 32},
     "32 micro-batches (global batch 32 / micro-batch 1) cannot feed 4194304 replicas"),
])
def test_layout_rules_are_arithmetic_on_any_pool(catalog, changes, reason):
    sweep = sweep_with(**changes)
    with in_process_budget(SECONDS, BYTES):
        [out] = plan_all(sweep, catalog)
    assert out.reason == reason


def test_a_point_over_the_gpu_limit_is_infeasible_before_it_is_built(catalog):
    sweep = sweep_with(cluster__pools=[{"gpu": "H100-SXM", "nodes": 65_536,
                                        "gpus_per_node": 65_536}],
                       parallelism__tp={"H100-SXM": 1}, parallelism__pp=1,
                       training__global_batch_size=10**15)  # enough micro-batches for all
    with in_process_budget(SECONDS, BYTES):
        [out] = plan_all(sweep, catalog)
    assert out.reason == ("the cluster's GPU count (4,294,967,296) exceeds the limit of 65,536 "
                          "(set XSWEEP_MAX_GPUS to raise it)")


def test_a_point_over_the_device_group_limit_is_infeasible_before_it_is_built(
        catalog, monkeypatch):
    monkeypatch.setenv("XSWEEP_MAX_DEVICE_GROUPS", "4096")  # the default is the GPU limit
    sweep = sweep_with(cluster__pools=[{"gpu": "H100-SXM", "nodes": 8192}],
                       parallelism__tp={"H100-SXM": 8}, parallelism__pp=1,
                       training__global_batch_size=8192)
    with in_process_budget(SECONDS, BYTES):
        [out] = plan_all(sweep, catalog)
    assert out.reason == ("the number of device groups (8,192 TP groups) exceeds the limit of "
                          "4,096 (set XSWEEP_MAX_DEVICE_GROUPS to raise it)")
    assert 0 < out.memory_per_gpu_gib < 80


def test_a_point_that_does_not_fit_keeps_that_reason_over_a_limit_too(catalog):
    # 65,536 device groups, but no plan of them fits: that is what the point reports
    sweep = sweep_with(cluster__pools=[{"gpu": "H100-SXM", "nodes": 8192}],
                       parallelism__tp={"H100-SXM": 1}, parallelism__pp=1,
                       training__global_batch_size=65_536)
    with in_process_budget(SECONDS, BYTES):
        [out] = plan_all(sweep, catalog)
    assert out.reason.startswith("does not fit in GPU memory: 102.4 GiB per GPU on H100-SXM")


def test_a_point_over_the_micro_batch_limit_is_infeasible(catalog, monkeypatch):
    monkeypatch.setenv("XSWEEP_MAX_MICRO_BATCHES", "16")
    [out] = plan_all(sweep_with(), catalog)  # 2 replicas of 32 micro-batches
    assert out.reason == ("the micro-batches of one replica (32) exceeds the limit of 16 "
                          "(set XSWEEP_MAX_MICRO_BATCHES to raise it)")
    assert out.memory_per_gpu_gib > 0


def test_the_program_size_limit_is_held_per_point(catalog, monkeypatch):
    # the DP overlap is a per-point field: it cuts the backward pass at every layer
    sweep = sweep_with(training__dp_overlap=[False, True])
    built = plan_all(sweep, catalog)
    sizes = [estimate_program_size(out.plan) for out in built]
    assert sizes[0] < sizes[1]
    monkeypatch.setenv("XSWEEP_MAX_PROGRAM_SIZE", str(sizes[0]))
    plain, overlapped = plan_all(sweep, catalog)
    assert isinstance(plain, Built)
    assert overlapped.reason == (
        f"{describe_program(sizes[1])} exceeds the limit of {sizes[0]:,} (set "
        "XSWEEP_MAX_PROGRAM_SIZE to raise it)")
    assert overlapped.memory_per_gpu_gib == plain.memory_per_gpu_gib


@pytest.mark.parametrize("limit", ["XSWEEP_MAX_GPUS", "XSWEEP_MAX_DEVICE_GROUPS",
                                   "XSWEEP_MAX_MICRO_BATCHES", "XSWEEP_MAX_PROGRAM_SIZE"])
def test_every_built_plan_passes_validation_under_low_limits(catalog, monkeypatch, limit):
    # a plan the planner builds is one the evaluator accepts: never an error mid-sweep
    monkeypatch.setenv(limit, {"XSWEEP_MAX_GPUS": "16", "XSWEEP_MAX_DEVICE_GROUPS": "6",
                               "XSWEEP_MAX_MICRO_BATCHES": "20",
                               "XSWEEP_MAX_PROGRAM_SIZE": "2000"}[limit])
    sweep = sweep_with(cluster__pools=[{"gpu": "H100-SXM", "nodes": [1, 2, 4]}],
                       parallelism__tp={"H100-SXM": [2, 4, 8]}, parallelism__pp=[1, 2],
                       training__dp_overlap=[False, True])
    found = plan_all(sweep, catalog)
    reasons = {out.reason for out in found if isinstance(out, Infeasible)}
    assert any(limit in reason for reason in reasons), reasons
    for out in found:
        if isinstance(out, Built):
            validate_plan(out.plan, catalog)
        else:
            assert re.fullmatch(r"[^\n]+", out.reason)
