"""The one record of tasks the lowering's writers share, and the value keys it points to.

That the records lower to the programs of the per-task reference, bit for bit, is
checked by ``test_lower_identity``; here: every writer gives the same columns, blocks
are never changed by placing them, and keys of different kinds stay apart.
"""

from __future__ import annotations

import gc
import inspect

import numpy as np
import pytest

from xsweep.plan import values
from xsweep.plan.lower import _placed_tasks
from xsweep.plan.passes import build_block
from xsweep.plan.program import Category, ProgramBuilder, TaskColumns, TaskKind, TaskRow

#: A replica of two stages, the second at another TP degree (a resharding), 4 micro-batches.
PIPELINE = (((2, 0, 7, 4), (4, 8, 15, 4)),)
#: Two replicas under FSDP: the stages' DP groups in ring order.
FSDP = (((2, 0, 3, 2), (1, 4, 7, 2)), ((1, 0, 3, 2), (2, 4, 7, 2)))


def assert_record(tasks: TaskColumns) -> None:
    """A record as every writer must give it: the named fields, each a contiguous int64
    array of its own, all of one length."""
    assert type(tasks) is TaskColumns and tasks._fields == TaskRow._fields
    for name, column in zip(tasks._fields, tasks, strict=True):
        assert column.dtype == np.int64 and column.ndim == 1, name
        assert column.flags.c_contiguous and len(column) == tasks.num_tasks, name
    for i, a in enumerate(tasks):
        assert not any(np.shares_memory(a, b) for b in tasks[i + 1:]), "columns share memory"


def test_rows_and_columns_have_the_same_fields():
    assert TaskRow._fields == TaskColumns._fields
    row = TaskRow(kind=TaskKind.COMM, category=Category.DP, stage=2)
    tasks = TaskColumns.of_rows([row, row._replace(value=5)])
    assert_record(tasks)
    assert tasks.stage.tolist() == [2, 2] and tasks.stream.tolist() == [-1, -1]
    assert tasks.value.tolist() == [0, 5]
    assert_record(TaskColumns.of_rows([]))


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), ("gpipe", 1), ("1f1b", 2)])
def test_blocks_laid_out_by_arrays_give_the_record(schedule, v):
    assert_record(build_block(schedule, "hetauto", v, PIPELINE, (4, 12), True, (), False).tasks)


def test_blocks_under_fsdp_give_the_record():
    block = build_block("1f1b", "hetauto", 1, FSDP, (), False, ((0, 1), (1, 0)))
    assert_record(block.tasks)
    assert set(block.tasks.category.tolist()) >= {int(Category.DP), int(Category.BARRIER)}


def test_the_builder_writes_its_tasks_as_rows_too():
    # (its programs and the lowering's agree field by field, dtypes included:
    # test_lower_identity)
    b = ProgramBuilder([1e9], [0.0], ["l0"], [0, 0])
    s = b.add_stream(0, [0])
    f = b.add_compute(Category.FORWARD, s, 0.5, stage=0, micro_batch=1)
    b.add_comm(Category.PP, [(0, 1, 10.0, 0.0, [0])], [f], phase=0)
    program = b.build()
    assert program.task_duration_s.tolist() == [0.5, 0.0]
    assert program.task_stage.tolist() == [0, -1] and program.task_phase.tolist() == [-1, 0]
    assert program.task_kind.dtype == np.int8 and program.task_stream.dtype == np.int32


def test_placing_a_block_leaves_it_as_it_was():
    # the replicas of a plan (and the plans of a sweep) share a cached block
    block = build_block("1f1b", "hetauto", 1, PIPELINE, (4, 12), False, (), False)
    before = [column.copy() for column in block.tasks]
    remap = np.arange(len(block.keys.rows)) + 100
    placed = _placed_tasks(block.tasks, [5, 6], np.array([50, 60]), [0, 0], remap)
    for column, kept in zip(block.tasks, before, strict=True):
        np.testing.assert_array_equal(column, kept)
    assert_record(placed)
    on_stream = block.tasks.stream >= 0
    assert set(placed.stream[on_stream].tolist()) == {5, 6}
    assert set(placed.device_group.tolist()) == {50, 60}  # every task is a stream's
    np.testing.assert_array_equal(placed.value, block.tasks.value + 100)


KINDS = [values.Zero, values.One, values.PassTime, values.TpBytes, values.TpHops,
         values.TpLaunches, values.OptimizerTime, values.TransferBytes, values.RingBytes,
         values.RingHops, values.ExpertRingBytes, values.ExpertRingHops]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_each_kind_computes_and_places_its_own_fields(kind):
    fields = kind._fields
    number = inspect.signature(kind.number).parameters
    varargs = any(p.kind is p.VAR_POSITIONAL for p in number.values())
    assert varargs or list(number)[1:] == list(fields)
    placed = list(inspect.signature(kind.placed).parameters)
    assert placed[2:] == list(fields)
    example = kind(*range(len(fields)))
    assert len(kind.placed([10, 11, 12, 13], [20, 21, 22, 23], *example)) == len(fields)


def test_keys_of_different_kinds_with_equal_fields_are_told_apart():
    table = values.KeyTable(values.ZERO, values.ONE)
    span = (0, "F", 0, 4)
    numbers = [table.index(kind(*span)) for kind in
               (values.PassTime, values.TpBytes, values.TpHops, values.TpLaunches)]
    assert numbers == [2, 3, 4, 5] and table.index(values.TpHops(*span)) == 4
    assert values.ZERO == values.ONE  # as tuples; the table keeps them apart
    assert (table.index(values.ZERO), table.index(values.ONE)) == (0, 1)
    assert table.frozen().key(3) == values.TpBytes(*span)
    assert type(table.frozen().key(3)) is values.TpBytes


def test_kept_keys_are_plain_tuples_the_collector_lets_go():
    table = values.KeyTable(values.ZERO, values.PassTime(1, "B", 0, 2),
                            values.RingBytes(0, 0, 7, 2))
    keys = table.frozen()
    assert all(type(row) is tuple for row in keys.rows)
    gc.collect()
    assert not any(gc.is_tracked(part) for part in (*keys.rows, keys.rows, keys.codes))


def test_placing_keys_maps_streams_to_groups_and_stages_to_dp_groups():
    block = values.KeyTable(values.ZERO, values.PassTime(1, "F", 0, 2),
                            values.TransferBytes(0, 1, 3), values.RingHops(0, 2), values.ONE)
    program = values.KeyTable(values.ZERO, values.ONE)
    numbers = program.placed(block.frozen(), groups=[7, 9], dp_groups=[4])
    keys = program.frozen()
    assert [keys.key(i) for i in numbers] == [
        values.ZERO, values.PassTime(9, "F", 0, 2), values.TransferBytes(7, 9, 3),
        values.RingHops(4, 2), values.ONE]
