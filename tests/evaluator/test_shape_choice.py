"""How variants are grouped into compiled shapes: a key keeps the shape it was given,
whatever else a later call holds, so reruns compile nothing; and those choices reach
other processes through the kernel store."""

from __future__ import annotations

import jax
import numpy as np
from xsweep.kernels import Status

from xsweep.evaluator.blocks import block_work
from xsweep.evaluator.driver import (
    _row_chunks,
    _rows_alone,
    _rungs,
    _shape_groups,
    run_programs,
    shapes_known,
)
from xsweep.evaluator.kernel_store import KernelStore
from xsweep.evaluator.tuning import ROW_CELLS, tuning

CONFIG = ("bound", "float32", 64, True)
BOUND, EXACT = tuning("cpu", "bound"), tuning("cpu", "exact")


def _work(keys):
    return block_work(np.asarray(keys)[..., :4], 32)


def _keys(rng, n):
    """Block keys (tasks, blocks, width, preds) and one metric size, powers of two."""
    return np.stack([2 ** rng.integers(6, 12, n), 2 ** rng.integers(4, 10, n),
                     2 ** rng.integers(0, 4, n), 2 ** rng.integers(0, 3, n),
                     2 ** rng.integers(2, 6, n), np.ones(n, int), np.ones(n, int)], axis=1)


def _shape_of(groups, keys):
    """The shape each row of ``keys`` runs at."""
    out = {}
    for shape, rows in groups:
        for row in rows:
            assert all(a >= b for a, b in zip(shape, keys[row], strict=True))  # it fits
            out[tuple(keys[row].tolist())] = shape
    return out


def test_a_key_keeps_its_shape_whatever_else_the_call_holds():
    rng = np.random.default_rng(0)
    keys = _keys(rng, 200)
    groups, chosen = _shape_groups(keys, np.ones(len(keys)), _work, 3, [], {})
    first = _shape_of(groups, keys)
    assert len(groups) <= 3 and first == chosen  # every key was new and got a shape
    # later calls: a part of the same keys mixed with new ones, with the first call's
    # shapes compiled and its choices known
    compiled = [shape for shape, _ in groups]
    for seed in (1, 2):
        part = keys[rng.choice(len(keys), 50, replace=False)]
        mixed = np.concatenate([part, _keys(np.random.default_rng(seed), 30)])
        groups, chosen = _shape_groups(mixed, np.ones(len(mixed)), _work, 3, compiled, first)
        again = _shape_of(groups, mixed)
        for key in map(tuple, part.tolist()):
            assert again[key] == first[key] and key not in chosen
        assert set(chosen) == set(again) - set(first)  # only new keys are chosen for


def test_without_earlier_choices_a_small_call_merges_less():
    """The merge depends on the call: why the choices must be kept (the same keys alone
    would run at other shapes than inside the larger call)."""
    rng = np.random.default_rng(3)
    keys = _keys(rng, 300)
    groups, _ = _shape_groups(keys, np.ones(len(keys)), _work, 2, [], {})
    first = _shape_of(groups, keys)
    part = keys[:40]
    alone = _shape_of(_shape_groups(part, np.ones(len(part)), _work, BOUND.max_shapes,
                                    [], {})[0], part)
    assert any(alone[k] != first[k] for k in map(tuple, part.tolist()))


def test_rows_come_in_few_sizes_and_pad_vmapped_chunks_little():
    # the bound's rows in steps of 2 (as multiples of the devices), the exact's of 4
    assert _rungs(BOUND, 64, 1) == [1, 2, 4, 8, 16, 32, 64]
    assert _rungs(BOUND, 128, 2) == [2, 4, 8, 16, 32, 64, 128]
    assert _rungs(EXACT, 64, 2) == [2, 4, 16, 64]
    rungs = set(_rungs(BOUND, 128, 2))
    for n in range(1, 1000):
        vmapped = _row_chunks(n, BOUND, 128, 2, split=True)  # large programs
        assert set(vmapped) <= rungs and n <= sum(vmapped) < n + 2
        one_size = _row_chunks(n, BOUND, 128, 2, split=False)  # small ones
        assert len(set(one_size)) == 1 and n <= sum(one_size) < n + 128
        if n <= 128:  # at most half the rows spare (and one for the second device)
            assert sum(one_size) <= 2 * n + 1
        whole = _row_chunks(n, EXACT, 64, 2, split=False)
        assert len(set(whole)) == 1 and n <= sum(whole) < n + 64
    assert _row_chunks(9, BOUND, 128, 2, split=True) == [8, 2]  # not 16 rows
    assert _row_chunks(15, BOUND, 128, 2, split=True) == [16]  # pads no more than [8, 4, 4]
    assert _row_chunks(300, BOUND, 128, 2, split=True) == [128, 128, 32, 8, 4]
    assert _row_chunks(9, BOUND, 128, 2, split=False) == [16]
    assert _row_chunks(9, EXACT, 64, 2, split=False) == [16]


def test_variants_run_one_after_another_take_one_row_count_per_shape():
    # as many rows as fit ROW_CELLS, on the rungs, whatever the group's size
    assert _rows_alone(1000, EXACT, 32, 1) == 32
    assert _rows_alone(ROW_CELLS // 20, EXACT, 32, 1) == 16
    assert _rows_alone(ROW_CELLS // 4, EXACT, 32, 1) == 4
    assert _rows_alone(ROW_CELLS // 2, EXACT, 32, 1) == 1
    assert _rows_alone(ROW_CELLS * 3, EXACT, 32, 1) == 1  # one row even past the limit
    assert _rows_alone(1000, EXACT, 32, 2) == 32 and _rows_alone(ROW_CELLS * 3, EXACT, 32, 2) == 2


def test_choices_reach_another_process_through_the_store(tmp_path):
    devices = tuple(jax.devices()[:1])
    KernelStore(tmp_path).assign(CONFIG, devices, {(1, 2, 3): (4, 4, 4)})
    KernelStore(tmp_path).assign(CONFIG, devices, {(1, 2, 3): (8, 8, 8), (5, 6): (8, 8)})
    store = KernelStore(tmp_path)
    # a key keeps its first shape; other configurations have choices of their own
    assert store.assignments(CONFIG, devices) == {(1, 2, 3): (4, 4, 4), (5, 6): (8, 8)}
    assert store.assignments(("exact", *CONFIG[1:]), devices) == {}
    (path,) = tmp_path.glob("*.shapes.json")
    path.write_text("{not json")
    assert store.assignments(CONFIG, devices) == {}  # damaged: chosen again, nothing worse
    assert KernelStore(None).assignments(CONFIG, devices) == {}


def test_merges_are_judged_by_what_they_cost_each_member():
    """A chain of keys, each a little costlier than the one before: merging neighbours
    one at a time must not carry the cheapest keys into shapes far above their own."""
    keys = np.array([[n, 1] for n in range(10, 200, 10)])

    def work(k):
        return np.asarray(k)[..., 0].astype(float)

    groups, _ = _shape_groups(keys, np.ones(len(keys)), work, len(keys), [], {})
    for shape, rows in groups:
        for row in rows:
            assert work(shape) <= BOUND.merge_factor * work(keys[row])
    assert len(groups) < len(keys)  # neighbours did share shapes


def test_a_few_variants_share_a_larger_shape_when_that_costs_less_than_an_executable():
    """Past the merge and reuse factors, a group runs at a larger shape only while the
    work it adds in all stays within ``spare`` (its load counts) and the shape costs at
    most MAX_STRETCH times its own."""
    def work(keys):
        return np.asarray(keys, float)[..., 0]

    keys = np.array([[10, 1], [10, 1], [25, 1]])  # 2.5 times apart: past both factors

    def shapes(keys, load, fixed=(), spare=50.0):
        groups, chosen = _shape_groups(keys, np.asarray(load, float), work, 8, list(fixed), {},
                                       1.5, 1.5, spare)
        return sorted(shape for shape, _ in groups), chosen

    assert shapes(keys, [1, 1, 1])[0] == [(25, 1)]  # adds 15 x 2 = 30 <= 50: one shape
    assert shapes(keys, [10, 10, 10])[0] == [(10, 1), (25, 1)]  # adds 300: two
    assert shapes(keys, [1, 1, 1], spare=0.0)[0] == [(10, 1), (25, 1)]  # the factors alone
    far = np.array([[10, 1], [40, 1]])
    assert len(shapes(far, [1, 1], spare=1e9)[0]) == 2  # 4 times: past MAX_STRETCH
    assert shapes(keys[:1], [1], fixed=[(25, 1)])[1] == {(10, 1): (25, 1)}  # reused
    assert shapes(keys[:1], [10], fixed=[(25, 1)])[1] == {(10, 1): (10, 1)}  # its own


def test_a_store_is_warm_for_a_level_once_an_evaluation_kept_its_shapes(tmp_path):
    """What decides whether worker processes start together on their first call: shapes
    of the level, for these settings, kept on disk by any earlier process."""
    from tests.support.programs import random_program
    from xsweep.evaluator.derived import Derived
    from xsweep.evaluator.executables import Executables

    devices = tuple(jax.devices()[:1])
    programs = [random_program(seed) for seed in range(3)]
    executables = Executables(devices, store=tmp_path)
    assert not shapes_known(executables, "bound", "float32", 64)
    run_programs(programs, "bound", executables=executables, derived=Derived(),
                 max_rounds=64)
    later = Executables(devices, store=tmp_path)  # another process's view of the store
    assert shapes_known(later, "bound", "float32", 64)
    assert not shapes_known(later, "exact", "float32", 64)
    assert not shapes_known(later, "bound", "float64", 64)
    assert not shapes_known(Executables(devices, store=None), "bound", "float32", 64)


def test_the_exact_level_on_a_cpu_runs_a_shape_at_one_row_count(tmp_path):
    """Calls of 1, 3 and 6 variants of one program load one exact executable, not one per
    row count: empty rows cost a variant run one after another nothing."""
    from tests.support.programs import random_program
    from xsweep.evaluator.derived import Derived
    from xsweep.evaluator.executables import Executables

    devices = tuple(jax.devices()[:1])
    program = random_program(3)
    executables = Executables(devices, store=None)
    derived = Derived()
    for count in (1, 3, 6):
        out = run_programs([program] * count, "exact", executables=executables,
                           derived=derived, max_rounds=64)
        assert (out["status"] == Status.OK).all()
    exact = [kernel for (level, *_), (kernel, _) in executables._kernels.items()
             if level == "exact"]
    assert sum(len(kernel._executables) for kernel in exact) == 1
