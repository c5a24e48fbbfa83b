"""Encoding programs into padded arrays: round trip, padding convention, shapes."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.programs import random_program, ring_allreduce_program
from xsweep import metrics, timeline
from xsweep.evaluator.blocks import (
    block_form,
    block_layout,
    block_shapes,
    block_sizes,
    encode_blocks,
)
from xsweep.evaluator.derived import Derived
from xsweep.evaluator.driver import spread_rows
from xsweep.evaluator.encode import encode, metric_index_dims, pad_metric_index
from xsweep.evaluator.shapes import (
    BlockShape,
    Shape,
    batch_shape,
    ladder,
    padding_overhead,
    power_of_two,
    program_sizes,
)
from xsweep.plan.program import TaskKind
from xsweep.sim import simulate


def test_ladder():
    assert [ladder(n) for n in range(0, 14)] == [1, 1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12, 16]
    assert ladder(25) == 32 and ladder(33) == 48 and ladder(48) == 48
    assert [power_of_two(n) for n in (0, 1, 2, 3, 5, 64, 65)] == [1, 1, 2, 4, 8, 64, 128]


def _decode(arrays, row: int, program):
    """The program's fields read back from one row of the encoded arrays."""
    n_t, n_f = program.num_tasks, program.num_flows
    edges = int(np.sum(arrays.dep_task[row] >= 0))
    paths = arrays.flow_path[row, :n_f]
    return {
        "task_kind": np.where(arrays.task_is_comm[row, :n_t], TaskKind.COMM, TaskKind.COMPUTE),
        "task_duration_s": arrays.task_duration_s[row, :n_t],
        "dep_idx": arrays.dep_pred[row, :edges],
        "dep_ptr": np.searchsorted(arrays.dep_task[row, :edges], np.arange(n_t + 1)),
        "flow_ptr": np.searchsorted(arrays.flow_task[row, :n_f], np.arange(n_t + 1)),
        "flow_bytes": arrays.flow_bytes[row, :n_f],
        "flow_latency_s": arrays.flow_latency_s[row, :n_f],
        "path_links": np.concatenate([p[p >= 0] for p in paths] + [np.zeros(0, np.int32)]),
        "path_ptr": np.concatenate([[0], np.cumsum((paths >= 0).sum(axis=1))]),
        "link_capacity": arrays.link_capacity[row, : program.num_links],
    }


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=4))
def test_round_trip_and_padding(seeds):
    programs = [random_program(s) for s in seeds]
    arrays = encode(programs, dtype=np.float64, num_variants=len(programs) + 1)
    shape = Shape(arrays.task_valid.shape[1], arrays.dep_task.shape[1],
                  arrays.flow_path.shape[1], arrays.flow_path.shape[2],
                  arrays.link_capacity.shape[1])
    assert shape == batch_shape(program_sizes(programs))
    for row, p in enumerate(programs):
        for name, value in _decode(arrays, row, p).items():
            np.testing.assert_array_equal(value, getattr(p, name), err_msg=name)
        assert np.all(arrays.dep_task[row, len(p.dep_idx):] == -1)
        # successor lists: each predecessor's successors together, in ascending order of
        # predecessor, each list in the order of the program's edges
        tasks = np.repeat(np.arange(p.num_tasks), np.diff(p.dep_ptr))
        expected = [t for pred in range(p.num_tasks) for t, q in zip(tasks, p.dep_idx, strict=True)
                    if q == pred]
        assert arrays.succ_task[row, :len(tasks)].tolist() == expected
        assert np.all(arrays.succ_task[row, len(tasks):] == -1)
        # padding: zero-duration compute tasks without predecessors; flows of no task
        assert arrays.task_valid[row].sum() == p.num_tasks
        pad = ~arrays.task_valid[row]
        assert not arrays.task_is_comm[row, pad].any()
        assert np.all(arrays.task_duration_s[row, pad] == 0)
        assert not np.isin(np.flatnonzero(pad), arrays.dep_task[row]).any()
        assert np.all(arrays.flow_task[row, p.num_flows:] == -1)
        assert np.all(arrays.flow_path[row, p.num_flows:] == -1)
        assert np.all(arrays.link_capacity[row, p.num_links:] == 1)
    # a padded variant: zeros everywhere (no valid task; never filled, so never paid for)
    for array in arrays:
        assert not np.asarray(array[-1]).any()


def test_too_small_shape_is_refused():
    program = ring_allreduce_program(4, 1e9, 1e9, 0.0)
    with pytest.raises(ValueError, match="do not fit"):
        encode([program], Shape(tasks=2, edges=5, flows=24, hops=1, links=4))
    with pytest.raises(ValueError, match="do not fit"):
        encode([program, program], num_variants=1)


def test_padding_overhead():
    # 2 chained tasks (1 edge), 4 flows of one hop, 2 links: all sizes on the ladders
    ring = ring_allreduce_program(2, 1e9, 1e9, 0.0)
    sizes = program_sizes([ring])
    assert sizes.tolist() == [[2, 1, 4, 1, 2]]
    assert padding_overhead(sizes, batch_shape(sizes)) == 0.0
    assert padding_overhead(sizes, batch_shape(sizes), num_variants=2) == pytest.approx(1.0)
    both = program_sizes([ring, ring_allreduce_program(3, 1e9, 1e9, 0.0)])
    assert padding_overhead(both, batch_shape(both)) > 0


def test_metric_index_padding_keeps_metrics(random_programs):
    programs = random_programs[:5]
    shape = batch_shape(program_sizes(programs))
    indices = [timeline.metric_index(p) for p in programs]
    index = pad_metric_index(indices, shape.tasks, metric_index_dims(indices), dtype=np.float64,
                             num_variants=8)
    assert index.task_valid.shape == (8, shape.tasks)
    for field in index:
        assert all(n == ladder(n) for n in field.shape[1:])
    for row, p in enumerate(programs):
        result = simulate(p)
        start = np.zeros(shape.tasks)
        end = np.zeros(shape.tasks)
        start[: p.num_tasks], end[: p.num_tasks] = result.task_start_s, result.task_end_s
        padded = timeline.stream_metrics(np, timeline.MetricIndex(*(x[row] for x in index)),
                                        start, end)
        plain = timeline.stream_metrics(np, timeline.metric_index(p), result.task_start_s,
                                       result.task_end_s)
        for name in metrics.STREAM_METRICS:
            np.testing.assert_array_equal(padded[name][: p.num_streams], plain[name], name)


def test_block_encoding_round_trip_and_padding(random_programs):
    programs = random_programs[:6]
    sizes = block_sizes(programs, [block_form(p, 32) for p in programs])
    shape = BlockShape(*(int(n) for n in block_shapes(sizes.max(axis=0))))
    arrays = encode_blocks([block_layout(p, shape.width) for p in programs], shape,
                           dtype=np.float64, num_variants=8)
    assert arrays.slot_pred.shape == (8, shape.blocks, shape.width, shape.preds)
    for row, p in enumerate(programs):
        layout = block_layout(p, shape.width)
        blocks, _, preds = layout.slot_pred.shape
        assert blocks <= sizes[row, 1]  # as wide as its own blocks or wider: no more of them
        np.testing.assert_array_equal(arrays.slot_pred[row, :blocks, :, :preds], layout.slot_pred)
        np.testing.assert_array_equal(arrays.slot_duration_s[row, :blocks],
                                      layout.slot_duration_s)
        np.testing.assert_array_equal(arrays.task_slot[row, : p.num_tasks], layout.task_slot)
        # padding is zeros: slot 0 (none), duration 0
        assert not arrays.slot_pred[row, blocks:].any()
        assert not arrays.slot_pred[row, ..., preds:].any()
        assert not arrays.slot_duration_s[row, blocks:].any()
        assert not arrays.task_slot[row, p.num_tasks:].any()
    assert not arrays.slot_pred[6:].any() and not arrays.task_slot[6:].any()


def test_too_small_block_shape_is_refused(random_programs):
    program = max(random_programs, key=lambda p: p.num_tasks)
    width, preds, blocks = block_form(program, 32)
    fits = BlockShape(program.num_tasks, blocks, width, preds)
    layout = block_layout(program, width)
    encode_blocks([layout], fits)
    for smaller in (fits._replace(tasks=fits.tasks - 1), fits._replace(blocks=blocks - 1)):
        with pytest.raises(ValueError, match="do not fit"):
            encode_blocks([layout], smaller)
    with pytest.raises(ValueError, match="do not fit"):
        encode_blocks([layout, layout], fits, num_variants=1)


def test_block_padding_overhead():
    sizes = np.array([[4, 3, 2, 1]])
    shape = BlockShape(4, 3, 2, 1)
    assert padding_overhead(sizes, shape) == 0.0
    assert padding_overhead(sizes, shape, num_variants=2) == pytest.approx(1.0)
    assert padding_overhead(sizes, shape._replace(blocks=6)) > 0


def test_derived_layouts_are_kept_per_program_object(random_programs):
    derived = Derived()
    program = random_programs[0]
    copy = dataclasses.replace(program)
    width = derived.form(program, 32)[0]
    assert derived.layout(program, width) is derived.layout(program, width)
    assert derived.layout(copy, width) is not derived.layout(program, width)
    np.testing.assert_array_equal(derived.layout(copy, width).slot_pred,
                                  block_layout(program, width).slot_pred)
    assert derived.metric_index(program) is derived.metric_index(program)


def _moved(arrays, at, rows):
    """``arrays`` (programs in their first rows, padded after) with program ``i`` moved to
    row ``at[i]`` and the padded rows, in order, to the rest."""
    order = np.empty(rows, np.int64)
    order[at] = np.arange(len(at))
    order[np.setdiff1d(np.arange(rows), at)] = np.arange(len(at), rows)
    return jax.tree.map(lambda x: np.asarray(x)[order], arrays)


@pytest.mark.parametrize("at", [[0, 2, 4, 6, 1], [7, 3, 0, 5, 1], [0, 1, 2, 3, 4]])
def test_programs_encode_at_the_rows_asked(random_programs, at):
    """A chunk's programs placed at other rows (dealt out over the devices' shares) encode
    as the programs in their first rows with the rows moved: the exact level's arrays, the
    bound's blocks and the metrics' index, the padded rows as padded as before."""
    programs, at = random_programs[:5], np.array(at)
    shape = batch_shape(program_sizes(programs))
    for placed, first in (
            (encode(programs, shape, num_variants=8, at=at),
             encode(programs, shape, num_variants=8)),
            (pad_metric_index(*(index := ([timeline.metric_index(p) for p in programs],
                                          shape.tasks)), metric_index_dims(index[0]),
                              num_variants=8, at=at),
             pad_metric_index(*index, metric_index_dims(index[0]), num_variants=8))):
        for got, want in zip(placed, _moved(first, at, 8), strict=True):
            np.testing.assert_array_equal(got, want)
    sizes = block_sizes(programs, [block_form(p, 32) for p in programs])
    blocks = BlockShape(*(int(n) for n in block_shapes(sizes.max(axis=0))))
    layouts = [block_layout(p, blocks.width) for p in programs]
    for got, want in zip(encode_blocks(layouts, blocks, num_variants=8, at=at),
                         _moved(encode_blocks(layouts, blocks, num_variants=8), at, 8),
                         strict=True):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 16), st.data())
def test_programs_are_dealt_out_over_the_shares(devices, share, data):
    """The rows a chunk's programs take when its devices run their shares one after
    another: distinct rows of the chunk, each share holding as many programs as can be,
    in order within a share; None where that is the first rows."""
    rows = devices * share
    count = data.draw(st.integers(0, rows))
    at = spread_rows(count, rows, devices)
    placed = np.arange(count) if at is None else at
    if at is not None:
        assert not np.array_equal(at, np.arange(count))
    assert len(set(placed.tolist())) == count and np.all((placed >= 0) & (placed < rows))
    held = np.bincount(placed // share, minlength=devices)
    assert held.max() - held.min() <= 1 and held.max() == -(-count // devices)
    for d in range(devices):
        mine = placed[placed // share == d]
        assert np.all(np.diff(mine) > 0)
