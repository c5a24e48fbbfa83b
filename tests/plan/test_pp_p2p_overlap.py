"""Pipeline sends beside the compute or waited for (``pp_p2p_overlap``): closed forms,
agreement of the batched levels with the simulator, and plans without the field as they
were.

Overlapped (the field unset or true), a stage's next pass starts as soon as its output is
handed to the transfer; blocking (false), the stage waits for the transfer's last phase
first, as Megatron's batched ``isend``/``irecv`` are waited on without overlap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.evaluator.test_catalogue_agreement import _catalogue, _check
from tests.plan.reference_lowering import reference_lower
from tests.support.lowering import assert_identical
from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan, random_plan
from xsweep.plan.lower import TemplateCache, lower, structure_key
from xsweep.plan.program import Category, TaskKind
from xsweep.plan.stack import Stack
from xsweep.sim import simulate
from xsweep.spec import validate_plan

BLOCKING = Stack(pp_p2p_overlap=False)


def two_stages(stack: Stack, micro_batches: int = 4, schedule: str = "gpipe"):
    """Llama-2-7B cut to 8 layers on two H100s of one node, TP 1: four layers a stage (the
    second also runs the LM head, so it is the slower one), no data parallelism."""
    replica = ReplicaReq((StageReq("H100-SXM", 1, 4), StageReq("H100-SXM", 1, 4)), 1,
                         micro_batches)
    return build_plan("p2p", "llama2-7b", [NodeReq("H100-SXM", 8, "cx7")], [replica],
                      schedule=schedule, stack=stack, num_layers=8, seq_length=4096)


def _times(plan, catalog):
    """(program, simulation, per stage (forward, backward) compute seconds, transfer s)."""
    program = lower(analyze(plan, catalog))
    result = simulate(program)
    spans = result.task_end_s - result.task_start_s
    stage_times = []
    for stream in range(2):
        per = []
        for category in (Category.FORWARD, Category.BACKWARD):
            tasks = np.flatnonzero((program.task_stream == stream)
                                   & (program.task_category == category))
            assert np.ptp(program.task_duration_s[tasks]) == 0.0  # equal passes
            per.append(float(program.task_duration_s[tasks[0]]))
        stage_times.append(per)
    sends = np.flatnonzero(program.task_category == Category.PP)
    assert np.ptp(spans[sends]) < 1e-15  # every send alone on its links: one duration
    return program, result, stage_times, float(spans[sends[0]])


@pytest.mark.parametrize("m", [2, 4, 6])
def test_two_stage_gpipe_closed_form(catalog, m):
    """GPipe over two stages with ``f1 >= f0 + x`` and ``b1 >= b0`` (the second stage is
    the slower: it runs the LM head), ``x`` a transfer, shorter than any pass. The last
    backward on stage 0 ends at ``f0 + b0 + m (f1 + b1) + 2x`` with sends overlapped (stage
    1 runs back to back from the first activation's arrival; the last gradient reaches
    stage 0 ``x`` after stage 1's last backward), and at ``... + (m + 1) x`` with blocking
    sends: stage 1 waits for each of its ``m`` gradient sends before its next backward (its
    forwards send nothing, and stage 0's waits for its activation sends hide behind stage
    1's longer forwards)."""
    ends = {}
    for overlap in (True, False):
        program, result, ((f0, b0), (f1, b1)), x = _times(
            two_stages(Stack(pp_p2p_overlap=overlap), m), catalog)
        assert f1 >= f0 + x and b1 >= b0 and x < min(f0, b0)  # the closed form's premises
        backward = np.flatnonzero(program.task_category == Category.BACKWARD)
        ends[overlap] = float(result.task_end_s[backward].max())
        exposed = 2 * x if overlap else (m + 1) * x
        assert ends[overlap] == pytest.approx(f0 + b0 + m * (f1 + b1) + exposed, rel=1e-12)
    assert ends[False] - ends[True] == pytest.approx((m - 1) * x, rel=1e-9)


def _preds(program, task: int) -> set[int]:
    return set(program.dep_idx[program.dep_ptr[task]:program.dep_ptr[task + 1]].tolist())


def test_blocking_sends_order_the_stream_after_each_send(catalog):
    """The task after a send on the sender's stream waits for the send (one phase between
    equal TP degrees) instead of the pass that sent; the stream's last send is waited for
    by its optimizer step. Nothing else changes: the same tasks, flows and numbers."""
    over = lower(analyze(two_stages(Stack(), 3, "1f1b"), catalog))
    block = lower(analyze(two_stages(BLOCKING, 3, "1f1b"), catalog))
    for name in ("task_kind", "task_category", "task_stream", "task_duration_s", "flow_bytes",
                 "flow_src", "flow_dst"):
        np.testing.assert_array_equal(getattr(over, name), getattr(block, name), err_msg=name)
    sends = np.flatnonzero(block.task_category == Category.PP)
    assert len(sends) == 2 * 3  # an activation and a gradient per micro-batch
    assert (block.task_kind[sends] == TaskKind.COMM).all()
    for send in sends.tolist():
        (sender,) = _preds(block, send)
        stream = block.task_stream[sender]
        later = np.flatnonzero(block.task_stream == stream)
        following = int(later[later > sender][0])  # a pass, or the optimizer step
        assert send in _preds(block, following) and sender not in _preds(block, following)
        assert sender in _preds(over, following) and send not in _preds(over, following)


def test_unset_is_overlapped_and_plans_without_the_field_keep_their_bytes(catalog):
    plan = two_stages(Stack(), 4, "1f1b")
    assert not plan.training.HasField("pp_p2p_overlap")  # the builder leaves it out
    explicit = type(plan)()
    explicit.CopyFrom(plan)
    explicit.training.pp_p2p_overlap = True
    a, b = analyze(plan, catalog), analyze(explicit, catalog)
    assert structure_key(a) == structure_key(b)
    assert_identical(lower(a), lower(b))
    c = analyze(two_stages(BLOCKING, 4, "1f1b"), catalog)
    assert structure_key(c) != structure_key(a)


def _forced_blocking(seeds, max_gpus=64):
    """Random plans with blocking sends, whatever their own draw (pipelines of every kind:
    GPipe, 1F1B, interleaved, FSDP, ZeRO-1, context parallelism)."""
    out = []
    for seed in seeds:
        plan = random_plan(seed, max_gpus=max_gpus)
        plan.training.pp_p2p_overlap = False
        out.append(plan)
    return out


def test_blocking_plans_equal_the_reference_lowering(catalog):
    cache = TemplateCache()
    plans = _forced_blocking(range(20)) + _forced_blocking([26, 37, 45, 53])  # FSDP too
    assert any(p.training.zero_stage == 3 for p in plans)
    assert any(p.training.virtual_pipeline_stages > 1 for p in plans)
    for plan in plans:
        validate_plan(plan, catalog)
        a = analyze(plan, catalog)
        assert_identical(lower(a, templates=cache), reference_lower(a))


def test_blocking_never_speeds_a_plan_up(catalog):
    for plan in _forced_blocking(range(8)):
        overlapped = type(plan)()
        overlapped.CopyFrom(plan)
        overlapped.training.ClearField("pp_p2p_overlap")
        t_block = simulate(lower(analyze(plan, catalog))).iteration_time_s
        t_over = simulate(lower(analyze(overlapped, catalog))).iteration_time_s
        assert t_block >= t_over * (1 - 1e-12)


def test_blocking_plans_agree_with_the_simulator():
    plans = _forced_blocking([3, 22, 26, 37, 45, 53], max_gpus=32) + [
        two_stages(dataclasses.replace(BLOCKING), 4, "1f1b")]
    programs, reference = _catalogue([], max_gpus=32, plans=plans,
                                     options_needed={"interleaved", "fsdp", "zero1",
                                                     "blocking-p2p"})
    _check(programs, reference)
