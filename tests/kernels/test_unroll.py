"""Unrolled loops give the same schedules: the exact level's passes and the bound's scan
steps, several per iteration of the compiled loop (an accelerator's loop pays a fixed
cost per iteration), equal bit for bit to one per iteration."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from xsweep.kernels import MAX_ROUNDS, blocked_bound, exact

from xsweep.evaluator.blocks import MAX_PREDS, block_layout, encode_blocks
from xsweep.evaluator.encode import encode
from xsweep.evaluator.shapes import BlockShape

SLOTS = 32


def _same(a, b) -> None:
    for got, want in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("unroll", [2, 3])
def test_the_exact_level_unrolled_is_the_same_batched(random_programs, unroll):
    arrays = encode(random_programs[:6])
    run = jax.jit(jax.vmap(functools.partial(exact, slots=SLOTS, max_rounds=MAX_ROUNDS,
                                             batched=True, unroll=unroll)))
    once = jax.jit(jax.vmap(functools.partial(exact, slots=SLOTS, max_rounds=MAX_ROUNDS,
                                              batched=True)))
    unrolled, plain = run(arrays), once(arrays)
    _same(unrolled, plain)
    assert np.asarray(plain.steps).min() > unroll  # several iterations, a partial last one


def test_the_exact_level_unrolled_is_the_same_one_by_one(random_programs):
    one = jax.tree.map(lambda x: x[0], encode(random_programs[:1]))
    run = jax.jit(functools.partial(exact, slots=SLOTS, max_rounds=MAX_ROUNDS, batched=False,
                                    unroll=4))
    _same(run(one), jax.jit(functools.partial(exact, slots=SLOTS, max_rounds=MAX_ROUNDS,
                                              batched=False))(one))


def test_the_bound_unrolled_is_the_same(random_programs):
    layouts = [block_layout(p, 4) for p in random_programs[:6]]
    blocks = max(layout.slot_pred.shape[0] for layout in layouts)
    shape = BlockShape(tasks=max(p.num_tasks for p in random_programs[:6]), blocks=blocks + 3,
                       width=4, preds=MAX_PREDS)
    arrays = encode_blocks(layouts, shape)
    _same(jax.jit(jax.vmap(functools.partial(blocked_bound, unroll=4)))(arrays),
          jax.jit(jax.vmap(blocked_bound))(arrays))
