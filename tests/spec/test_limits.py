"""Limits: defaults, raising them through the environment, and the program-size count."""

from __future__ import annotations

import pytest

from tests.support.hostile_inputs import PLAN
from xsweep.errors import InputError
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import lower
from xsweep.spec.limits import Limits, active_limits
from xsweep.spec.plan_io import plan_from_text
from xsweep.spec.program_size import estimate_program_size, program_cost
from xsweep.spec.validate import typed_plan, validate_plan


def lowered_size(plan, catalog) -> int:
    program = lower(analyze(plan, catalog))
    return program.num_tasks + program.num_flows


def test_defaults_and_environment(monkeypatch):
    assert active_limits() == Limits()
    monkeypatch.setenv("XSWEEP_MAX_PROGRAM_SIZE", "5_000_000")
    monkeypatch.setenv("XSWEEP_MAX_GPUS", " 12 ")
    limits = active_limits()
    assert (limits.program_size, limits.gpus, limits.device_groups) == (5_000_000, 12,
                                                                         Limits().device_groups)


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1e6", "9" * 40, "²"])
def test_a_bad_limit_in_the_environment_is_an_input_error(monkeypatch, value):
    monkeypatch.setenv("XSWEEP_MAX_GPUS", value)
    with pytest.raises(InputError, match="^environment: XSWEEP_MAX_GPUS: must be a positive"):
        active_limits()


#: How far above the lowered program the bound may be (measured on 160 random plans: at
#: most 3.5x); more would refuse plans long before they are too large.
BOUND_FACTOR = 4


def assert_bounds(plan, catalog) -> None:
    actual = lowered_size(plan, catalog)
    assert actual <= estimate_program_size(plan) <= BOUND_FACTOR * actual


@pytest.mark.parametrize("seed", range(40))
def test_program_size_is_bounded_from_the_plan(catalog, seed):
    plan = random_plan(seed, max_gpus=48)  # every training-stack option, drawn at random
    validate_plan(plan, catalog)
    assert_bounds(plan, catalog)


@pytest.mark.parametrize("resharding", ["lcm", "hetauto", "alpacomm"])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_program_size_of_uneven_tp_pipelines(catalog, resharding, schedule):
    # TP 6 -> 4 -> 3 -> 2 stages over two replicas of different depth: every resharding
    # phase and DP segment boundary the lowering makes
    nodes = [NodeReq("H100-SXM", 8)] * 3 + [NodeReq("A100-40GB", 8)] * 2
    replicas = [
        ReplicaReq((StageReq("H100-SXM", 6, 10), StageReq("H100-SXM", 4, 12),
                    StageReq("A100-40GB", 3, 10)), micro_batch_size=1, num_micro_batches=5),
        ReplicaReq((StageReq("H100-SXM", 2, 7), StageReq("A100-40GB", 4, 25)),
                   micro_batch_size=2, num_micro_batches=3),
    ]
    plan = build_plan("uneven", "llama2-7b", nodes, replicas, schedule=schedule,
                      resharding=resharding, seq_length=512)
    validate_plan(plan, catalog)
    assert_bounds(plan, catalog)


def test_huge_programs_are_refused_before_anything_is_built(catalog, monkeypatch):
    text = (PLAN.replace("num_micro_batches: 4", "num_micro_batches: 60000")
            .replace("global_batch_size: 8", "global_batch_size: 120000"))
    plan = plan_from_text(text)
    size = estimate_program_size(plan)  # 2.6 million: within the default limit
    validate_plan(plan, catalog, "p.pbtxt")
    monkeypatch.setenv("XSWEEP_MAX_PROGRAM_SIZE", "1_000_000")
    with pytest.raises(InputError) as error:
        validate_plan(plan, catalog, "p.pbtxt")
    assert error.value.field == "device_groups" and error.value.value == size
    memory, seconds = program_cost(size)
    assert (f"({size:,} tasks and flows of one iteration, estimated: about "
            f"{memory / 1e9:.1f} GB and {seconds:,.0f} s to evaluate exactly) exceeds the "
            "limit of 1,000,000 (set XSWEEP_MAX_PROGRAM_SIZE to raise it)") in str(error.value)
    monkeypatch.setenv("XSWEEP_MAX_PROGRAM_SIZE", str(estimate_program_size(plan)))
    validate_plan(plan, catalog, "p.pbtxt")  # raised to exactly its size: accepted


@pytest.mark.parametrize(("variable", "field"), [
    ("XSWEEP_MAX_GPUS", "cluster.nodes[0].num_gpus"),
    ("XSWEEP_MAX_DEVICE_GROUPS", "device_groups"),
    ("XSWEEP_MAX_MICRO_BATCHES", "device_groups[0].num_micro_batches"),
])
def test_each_count_limit_names_itself_and_can_be_raised(catalog, monkeypatch, variable, field):
    plan = plan_from_text(PLAN)  # 8 GPUs, 4 groups, 4 micro-batches
    monkeypatch.setenv(variable, "3")
    with pytest.raises(InputError, match=f"set {variable} to raise it") as error:
        validate_plan(plan, catalog)
    assert error.value.field == field
    monkeypatch.setenv(variable, "8")
    validate_plan(plan, catalog)


def test_a_plan_that_passed_is_typed_again_under_the_limits_it_passed(catalog, monkeypatch):
    """``typed_plan`` (how the pipeline takes a message checked before) finds the plan as it
    passed; ``validate_plan`` checks it against the limits in force."""
    plan = plan_from_text(PLAN)
    valid = validate_plan(plan, catalog)
    monkeypatch.setenv("XSWEEP_MAX_GPUS", "3")
    typed = typed_plan(plan, catalog)
    assert (typed.model, typed.training, typed.cluster.nodes, typed.cluster.fabric,
            typed.groups, typed.program_size) == (
        valid.model, valid.training, valid.cluster.nodes, valid.cluster.fabric, valid.groups,
        valid.program_size)
    with pytest.raises(InputError, match="set XSWEEP_MAX_GPUS to raise it"):
        validate_plan(plan, catalog)
    other = plan_from_text(PLAN.replace('name: "', 'name: "other-'))  # never checked here
    with pytest.raises(InputError, match="set XSWEEP_MAX_GPUS to raise it"):
        typed_plan(other, catalog)
