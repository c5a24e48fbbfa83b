"""What the host keeps between plans never changes a result or an error.

Validation, analysis, lowering and the bound's durations keep what they computed for
parts of plans (``xsweep.memo``, templates, per-structure classes of flows). Two plans
identical but for one number must come out exactly as each does in a process that has
seen nothing: compared here with the memos emptied, and with a real new process.
"""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys

import numpy as np
import pytest

from tests.support.invalid_plans import set_path
from tests.support.lowering import assert_identical
from tests.support.paths import REPO_ROOT
from xsweep.errors import InputError
from xsweep.evaluator.blocks import contention_free_durations
from xsweep.memo import clear_memos
from xsweep.plan.analysis import PlanAnalysis, analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import TemplateCache, lower
from xsweep.spec import load_catalog, validate_plan
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.plan_io import plan_from_text, plan_to_text
from xsweep.spec.program_size import estimate_program_size
from xsweep.spec.validate import typed_plan


def _micro_batch_size(size: int):
    def change(plan: pb.DeploymentPlan) -> None:
        for group in plan.device_groups:
            group.micro_batch_size = size
        plan.training.global_batch_size = size * sum(
            g.num_micro_batches for g in plan.device_groups if g.pp_stage == 0)
    return change


#: One number each: GPU and NIC models, recompute, sequence parallelism, ZeRO's
#: buckets, oversubscription, a node's scale-up bandwidth, the model's sequence, the
#: micro-batch size (with the batch it makes), the run's tokens.
CHANGES = {
    "gpu": set_path("cluster.nodes.0.gpu", "H200"),
    "nic": set_path("cluster.nodes.0.nic", "cx8"),
    "recompute": set_path("training.recompute", pb.FULL),
    "sequence_parallel": lambda plan: (set_path("training.sequence_parallel", False)(plan),
                                       set_path("training.tp_comm_overlap", False)(plan)),
    "buckets": set_path("training.dp_bucket_params", 20_000_000),
    "oversubscription": set_path("cluster.fabric.oversubscription", 3.0),
    "scale_up": set_path("cluster.nodes.0.scale_up.bandwidth_gbps", 1200.0),
    "sequence": set_path("model.seq_length", 2048),
    "micro_batch_size": _micro_batch_size(3),
    "tokens": set_path("training.total_tokens", 2e9),
}


def changed(plan: pb.DeploymentPlan, name: str) -> pb.DeploymentPlan:
    out = pb.DeploymentPlan()
    out.CopyFrom(plan)
    CHANGES[name](out)
    return out


def assert_same_analysis(got: PlanAnalysis, want: PlanAnalysis) -> None:
    for field in dataclasses.fields(PlanAnalysis):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if field.name == "topology":  # compared by identity: compare what it holds
            for name in ("capacity", "latency_s", "bus_efficiency", "launch_latency_s"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
            assert a.names == b.names and a.shape_key() == b.shape_key()
        else:
            assert a == b, field.name


def prepare(plan, catalog, templates):
    validate_plan(plan, catalog)
    a = analyze(plan, catalog)
    return a, lower(a, templates=templates), estimate_program_size(plan)


def assert_same(got, want) -> None:
    assert_same_analysis(got[0], want[0])
    assert_identical(got[1], want[1])
    np.testing.assert_array_equal(contention_free_durations(got[1]),
                                  contention_free_durations(want[1]))
    assert got[2] == want[2]


def _numbers(prepared) -> tuple:
    a, program, _ = prepared
    return (program.task_duration_s.tobytes(), program.flow_bytes.tobytes(),
            program.flow_latency_s.tobytes(), a.total_tokens,
            tuple(g.memory for g in a.groups), a.dp_buckets)


def test_one_number_apart_as_in_a_fresh_process(catalog):
    moved = dict.fromkeys(CHANGES, False)
    # 323 draws context parallelism and holds gradient buckets of several layers
    for seed in (300, 302, 323):
        base = random_plan(seed, max_gpus=32)
        pairs = [(base, changed(base, name)) for name in CHANGES]
        warm = TemplateCache()
        kept = [(prepare(a, catalog, warm), prepare(b, catalog, warm)) for a, b in pairs]
        for name, (a, b), (got_a, got_b) in zip(CHANGES, pairs, kept, strict=True):
            clear_memos()
            assert_same(got_b, prepare(b, catalog, TemplateCache()))
            clear_memos()
            assert_same(got_a, prepare(a, catalog, TemplateCache()))
            moved[name] |= _numbers(got_a) != _numbers(got_b)
    # each change reaches the numbers of some plan: the comparisons above are not idle
    assert all(moved.values()), moved


def test_the_same_plans_in_a_new_process(catalog, tmp_path):
    """Programs prepared after their neighbours equal those a new process makes."""
    base = random_plan(311, max_gpus=32)
    plans = [base] + [changed(base, name) for name in ("gpu", "nic", "recompute", "sequence")]
    warm = TemplateCache()
    programs = [prepare(plan, catalog, warm)[1] for plan in plans]
    for i, plan in enumerate(plans):
        (tmp_path / f"{i}.pbtxt").write_text(plan_to_text(plan))
    script = (
        "import sys, numpy as np\n"
        "from xsweep.pipeline import prepare\n"
        "from xsweep.evaluator.blocks import contention_free_durations\n"
        "for path in sys.argv[1:]:\n"
        "    p = prepare(path).program\n"
        "    np.savez(path + '.npz', durations=p.task_duration_s, bytes=p.flow_bytes,\n"
        "             latency=p.flow_latency_s, capacity=p.link_capacity,\n"
        "             bound=contention_free_durations(p))\n")
    paths = [str(tmp_path / f"{i}.pbtxt") for i in range(len(plans))]
    subprocess.run([sys.executable, "-c", script, *paths], cwd=REPO_ROOT, check=True,
                   timeout=120)
    for path, program in zip(paths, programs, strict=True):
        fresh = np.load(path + ".npz")
        for name, got in (("durations", program.task_duration_s), ("bytes", program.flow_bytes),
                          ("latency", program.flow_latency_s),
                          ("capacity", program.link_capacity),
                          ("bound", contention_free_durations(program))):
            np.testing.assert_array_equal(got, fresh[name], err_msg=name)


@pytest.mark.parametrize(("path", "value", "field"), [
    ("cluster.nodes.0.gpu", "H900", "cluster.nodes[0].gpu"),
    ("cluster.nodes.0.num_gpus", 0, "cluster.nodes[0].num_gpus"),
    ("model.num_layers", 2, "device_groups[0].last_layer"),
    ("training.global_batch_size", 7, "training.global_batch_size"),
    ("device_groups.0.micro_batch_size", 0, "device_groups[0].micro_batch_size"),
])
def test_a_plan_broken_after_its_valid_twin_gets_the_fresh_error(catalog, path, value, field):
    plan = plan_from_text(plan_to_text(random_plan(320, max_gpus=16)))
    validate_plan(plan, catalog, "p.pbtxt")  # every part of it now kept as valid
    set_path(path, value)(plan)  # the same message object, one number broken
    with pytest.raises(InputError) as kept:
        validate_plan(plan, catalog, "p.pbtxt")
    clear_memos()
    with pytest.raises(InputError) as fresh:
        validate_plan(plan, catalog, "p.pbtxt")
    assert str(kept.value) == str(fresh.value)
    assert kept.value.field == field


def test_a_catalog_entry_replaced_after_use_is_read_again():
    catalog = load_catalog()
    plan = random_plan(330, max_gpus=16)
    gpu = plan.cluster.nodes[0].gpu
    validate_plan(plan, catalog)
    before = analyze(plan, catalog)
    canonical = catalog.lookup("gpus", gpu).name
    catalog.gpus[canonical] = dataclasses.replace(catalog.gpus[canonical],
                                                  peak_bf16_tflops=1.0, hbm_gib=1e5)
    validate_plan(plan, catalog)
    after = analyze(plan, catalog)
    assert after.peak_flops_per_s != before.peak_flops_per_s
    clear_memos()
    assert_same_analysis(after, analyze(plan, catalog))


def test_a_copy_of_the_catalog_reads_as_the_catalog_until_an_entry_changes(catalog):
    """A worker process receives a copy of the catalog: what was checked and resolved
    against the original holds for the copy, and an entry changed in the copy is read."""
    plan = random_plan(331, max_gpus=16)
    before = analyze(validate_plan(plan, catalog), catalog)
    copy = pickle.loads(pickle.dumps(catalog))
    again = typed_plan(plan, copy)
    assert again.catalog is copy and again.cluster is validate_plan(plan, catalog).cluster
    assert_same_analysis(analyze(plan, copy), before)
    canonical = copy.lookup("gpus", plan.cluster.nodes[0].gpu).name
    copy.gpus[canonical] = dataclasses.replace(copy.gpus[canonical], peak_bf16_tflops=1.0)
    after = analyze(plan, copy)
    assert after.peak_flops_per_s != before.peak_flops_per_s
    clear_memos()
    assert_same_analysis(after, analyze(plan, copy))
    assert_same_analysis(before, analyze(plan, catalog))


def test_the_same_groups_on_nodes_of_other_sizes_sit_on_other_gpus(catalog):
    """Equal device groups and node GPUs, but nodes of other sizes: the ranks' GPUs
    differ, and so do the groups' figures."""
    small = build_plan("x", "llama2-7b", [NodeReq("A100-80GB", 4), NodeReq("H100-SXM", 4)],
                       [ReplicaReq((StageReq("A100-80GB", 4, 16), StageReq("H100-SXM", 4, 16)),
                                   1, 8)])
    large = pb.DeploymentPlan()
    large.CopyFrom(small)
    for node in large.cluster.nodes:
        node.num_gpus = 8  # ranks 0-7, both groups, now on the first node
    kept = [analyze(plan, catalog) for plan in (small, large)]
    clear_memos()
    assert_same_analysis(kept[1], analyze(large, catalog))
    assert [g.gpu.name for g in kept[1].groups] == ["A100-80GB", "A100-80GB"]


def test_bound_durations_by_class_equal_those_flow_by_flow(catalog):
    """The contention-free durations per class of flows (a program's structure) equal
    those of the same program without one (every flow its own class)."""
    templates = TemplateCache()
    for seed in range(12):
        program = lower(analyze(random_plan(340 + seed, max_gpus=64), catalog),
                        templates=templates)
        alone = dataclasses.replace(program, structure=None)
        np.testing.assert_array_equal(contention_free_durations(program),
                                      contention_free_durations(alone))


def _other_ep(plan: pb.DeploymentPlan) -> None:
    """EP 1 for EP above 1 (no all-to-all left to dispatch in FP8), else EP 2."""
    if plan.training.expert_parallel > 1:
        plan.training.expert_parallel = 1
        plan.training.moe_fp8_dispatch = False
    else:
        plan.training.expert_parallel = 2


def _other_dispatch(plan: pb.DeploymentPlan) -> None:
    """The other dispatch precision of a plan in FP8 (a plan in BF16 has only one)."""
    if plan.training.precision == pb.FP8:
        plan.training.moe_fp8_dispatch = not plan.training.moe_fp8_dispatch


#: One number each of a plan with experts: the assumed imbalance, the expert parallelism,
#: the capacity factor, the shared experts, the dispatch precision.
MOE_CHANGES = {
    "imbalance": set_path("training.moe_imbalance", 1.7),
    "expert_parallel": _other_ep,
    "capacity": set_path("model.moe_capacity_factor", 1.1),
    "shared_experts": set_path("model.num_shared_experts", 2),
    "fp8_dispatch": _other_dispatch,
}


def test_one_moe_number_apart_as_in_a_fresh_process(catalog):
    moved = dict.fromkeys(MOE_CHANGES, False)
    for seed in (1, 3, 4):  # Mixtral plans with expert parallelism 2 (random_plan's draw)
        base = random_plan(seed, max_gpus=32, model="mixtral-8x7b")
        base.training.moe_imbalance = 1.3
        assert base.training.expert_parallel == 2
        pairs = []
        for change in MOE_CHANGES.values():
            other = pb.DeploymentPlan()
            other.CopyFrom(base)
            change(other)
            pairs.append((base, other))
        warm = TemplateCache()
        kept = [(prepare(a, catalog, warm), prepare(b, catalog, warm)) for a, b in pairs]
        for name, (a, b), (got_a, got_b) in zip(MOE_CHANGES, pairs, kept, strict=True):
            clear_memos()
            assert_same(got_b, prepare(b, catalog, TemplateCache()))
            clear_memos()
            assert_same(got_a, prepare(a, catalog, TemplateCache()))
            moved[name] |= _numbers(got_a) != _numbers(got_b)
    assert all(moved.values()), moved
def _context_parallel(plan: pb.DeploymentPlan, cp: int) -> pb.DeploymentPlan:
    out = pb.DeploymentPlan()
    out.CopyFrom(plan)
    for group in out.device_groups:
        group.context_parallel = cp
    return out


def test_context_parallel_apart_as_in_a_fresh_process(catalog):
    """The same ranks as TP 4, as TP 2 x CP 2 and as TP 1 x CP 4: three structures, each
    as a fresh process makes it, after the others were kept; and a sequence that CP cannot
    cut, after its valid twin, gets the fresh error."""
    replica = ReplicaReq((StageReq("H100-SXM", 4, 2), StageReq("H100-SXM", 4, 2)), 1, 4)
    base = build_plan("cp", "llama2-7b", [NodeReq("H100-SXM", 8, "cx7")] * 2,
                      [replica, replica], num_layers=4, seq_length=1024)
    plans = [base, _context_parallel(base, 2), _context_parallel(base, 4)]
    warm = TemplateCache()
    kept = [prepare(plan, catalog, warm) for plan in plans]
    assert len(warm) == 3  # one structure each
    for plan, got in zip(plans, kept, strict=True):
        clear_memos()
        assert_same(got, prepare(plan, catalog, TemplateCache()))
    assert len({_numbers(got) for got in kept}) == 3
    broken = plans[2]
    validate_plan(broken, catalog, "p.pbtxt")
    broken.model.seq_length = 1028  # not in 2 x 4 chunks
    with pytest.raises(InputError) as kept_error:
        validate_plan(broken, catalog, "p.pbtxt")
    clear_memos()
    with pytest.raises(InputError) as fresh:
        validate_plan(broken, catalog, "p.pbtxt")
    assert str(kept_error.value) == str(fresh.value)
    assert fresh.value.field == "device_groups[0].context_parallel"
