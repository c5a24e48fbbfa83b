"""Max-min fair rates of flows over shared links, by parallel water-filling.

Progressive filling raises every unfrozen flow's rate together until some link
is full, freezes the flows on it, and repeats: one bottleneck level per round.
The parallel variant freezes, in one round, every link that is already a
bottleneck of all the unfrozen flows crossing it: its fair share (remaining
capacity / unfrozen flows on it) is no larger than the smallest fair share on
the path of each of those flows. Such a link would be filled at that level by
progressive filling whatever happens elsewhere, so freezing all of them at once
gives the same allocation in fewer rounds (the global minimum-share link always
qualifies, so every round freezes at least one link).

Link sums use segment sums over the (flow, hop) pairs, never a dense flow x link
matrix. Where the fabric has more links than the flows have path entries, the
links are first renamed to local ids, one per distinct link the active flows cross
(the position of its first hop), so every round costs time linear in the number of
path entries, whatever the number of links in the program: a large fabric has
thousands of links, of which one step's flows may cross a few dozen.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array, lax

from .slotops import prefix_sum, scatter, segment

#: Default cap on rounds; measured programs need at most a handful.
MAX_ROUNDS = 64
#: The prefix sizes :func:`packed_waterfill` chooses from: 8 slots, then this many times
#: more at each size up, and all the slots.
PACKED_SMALLEST = 8
PACKED_GROWTH = 4


def waterfill(capacity: Array, paths: Array, active: Array, max_rounds: int = MAX_ROUNDS,
              sequential: bool = False) -> tuple[Array, Array, Array]:
    """Max-min fair rates of the active flows.

    Args:
      capacity: float[L], link capacities (bytes/s), all positive.
      paths: int32[S, P], link ids of each flow's path, ``-1`` pad.
      active: bool[S], which flows (slots) take part.
      max_rounds: round cap (the first round always runs); reaching it reports
        ``converged = False``.
      sequential: link sums one hop after another
        (:func:`~xsweep.kernels.slotops.scatter`), for callers not under ``vmap``.

    Returns:
      ``(rates[S], converged, rounds)``. Inactive flows get rate 0. When the cap is
      hit, the flows still unfrozen get their last-round path share, which keeps the
      allocation feasible (no link over capacity) though not max-min fair.
    """
    inf = jnp.asarray(jnp.inf, capacity.dtype)
    on = (paths >= 0) & active[:, None]  # [S, P] real hops of active flows
    if on.size < capacity.shape[0]:  # (static) fewer hops than links: local ids
        hop, local_capacity = _local_links(capacity, paths, on, sequential)
    else:
        hop, local_capacity = jnp.where(on, paths, capacity.shape[0]).reshape(-1), capacity
    num_links = local_capacity.shape[0]  # off hops go to a spare segment past the links

    def link_sum(values: Array) -> Array:
        """Per-link sums of per-hop values ([S, P] or [S, P, C])."""
        flat = values.reshape(hop.shape[0], *values.shape[2:])
        return segment(flat, hop, num_links + 1, "add", sequential)

    def freeze(residual: Array, count: Array, frozen: Array) -> tuple[Array, Array]:
        """One round: the flows frozen now, and every unfrozen flow's path share."""
        crossing = on & ~frozen[:, None]
        share = jnp.where(count > 0, residual / jnp.maximum(count, 1), inf)
        path_share = jnp.min(jnp.where(crossing, share[hop].reshape(on.shape), inf), axis=1)
        link_min = segment(jnp.where(crossing, path_share[:, None], inf).reshape(-1), hop,
                           num_links + 1, "min", sequential)
        bottleneck = (count > 0) & (share <= link_min)
        newly = ~frozen & jnp.any(on & bottleneck[hop].reshape(on.shape), axis=1)
        return newly, path_share

    def cond(state):
        frozen, rounds = state[1], state[-1]
        return jnp.any(~frozen) & (rounds < max_rounds)

    def body(state):
        # first the last round's frozen flows leave their links (count and capacity),
        # in one scatter; a fill that converges in one round never pays for it
        rates, frozen, residual, count, newly, path_share, rounds = state
        leaving = on & newly[:, None]
        taken = link_sum(jnp.stack([leaving.astype(capacity.dtype),
                                    jnp.where(leaving, path_share[:, None], 0)], axis=-1))
        residual, count = jnp.maximum(residual - taken[:, 1], 0), count - taken[:, 0]
        newly, path_share = freeze(residual, count, frozen)
        return (rates + jnp.where(newly, path_share, 0), frozen | newly, residual, count,
                newly, path_share, rounds + 1)

    residual = jnp.concatenate([local_capacity, jnp.zeros((1,), capacity.dtype)])
    count = link_sum(on.astype(capacity.dtype))
    newly, path_share = freeze(residual, count, ~active)
    rates, frozen, _, _, _, path_share, rounds = lax.while_loop(
        cond, body, (jnp.where(newly, path_share, 0), ~active | newly, residual, count,
                     newly, path_share, jnp.any(active).astype(jnp.int32)))
    # Giving every flow still unfrozen its share from the last round is feasible:
    # on each link those flows together get at most count * (residual / count).
    rates = jnp.where(frozen, rates, jnp.where(active, path_share, 0))
    return rates, jnp.all(frozen), rounds


def _local_links(capacity: Array, paths: Array, on: Array,
                 sequential: bool) -> tuple[Array, Array]:
    """Local link ids of the hops ``on`` (int32[S * P]) and their capacities (float[S * P]).

    A link's local id is the flat index of its first hop; off hops get ``S * P``. The
    renaming touches the program's links once (a fill and a scatter), not per round.
    """
    num_hops = on.size
    flat = jnp.where(on, paths, capacity.shape[0]).reshape(-1)
    first = scatter(jnp.full((capacity.shape[0] + 1,), num_hops, jnp.int32), flat,
                    jnp.arange(num_hops, dtype=jnp.int32), "min", sequential)
    hop = jnp.where(on.reshape(-1), first[flat], num_hops)
    local_capacity = scatter(jnp.ones((num_hops,), capacity.dtype), hop,
                             capacity[jnp.minimum(flat, capacity.shape[0] - 1)], "set",
                             sequential)
    return hop, local_capacity


def packed_waterfill(capacity: Array, paths: Array, flows: Array, active: Array,
                     max_rounds: int = MAX_ROUNDS) -> tuple[Array, Array, Array]:
    """:func:`waterfill` of the slots ``active``, whose paths are rows ``flows`` of ``paths``.

    The active slots' rows are packed to the front and filled at the smallest of a
    few prefix sizes (8, 32, 128, ... slots, and all of them) that holds them, chosen
    by ``lax.switch``; only that prefix's paths are gathered. Outside ``vmap`` only that
    branch runs, so a kernel sized for its busiest moment pays for the flows actually
    moving; under ``vmap`` every branch would run, so batched callers use
    :func:`waterfill`. Each size is a compiled fill, so fewer sizes compile and load
    faster: measured on CPU, sizes 4x apart instead of 2x compiled the exact kernel in
    a quarter less time and loaded it from disk in a fifth to a third less, and
    stepped as fast (within 3% on twelve Llama-2-7B programs of 8-64 GPUs); sizes 1.5x
    apart ran no faster than 2x and took half as long again to compile. Being for
    callers outside ``vmap``, it updates at computed indices one after another
    (``sequential``), so its loops compile whole on a CPU.

    Args:
      capacity: float[L], as for :func:`waterfill`.
      paths: int32[F, P], a table of paths (``-1`` pad).
      flows: int32[S], each slot's row of ``paths`` (any value where not active).
      active: bool[S].

    Returns:
      ``(rates[S], converged, rounds)``, as :func:`waterfill` of ``paths[flows]``.
    """
    num_slots = active.shape[0]
    sizes = {num_slots}
    size = PACKED_SMALLEST
    while size < num_slots:
        sizes.add(size)
        size *= PACKED_GROWTH
    sizes = sorted(sizes)
    count = jnp.sum(active, dtype=jnp.int32)
    at = jnp.where(active, prefix_sum(active) - 1, num_slots)
    packed = scatter(jnp.zeros_like(flows), at, flows, "set", sequential=True)

    def fill(size: int):
        def branch(packed: Array):
            rates, converged, rounds = waterfill(capacity, paths[packed[:size]],
                                                 jnp.arange(size) < count, max_rounds,
                                                 sequential=True)
            return jnp.pad(rates, (0, num_slots - size)), converged, rounds
        return branch

    # the first size that holds them (a search would be a loop of several ops)
    which = jnp.sum(count > jnp.asarray(sizes[:-1]), dtype=jnp.int32)
    rates, converged, rounds = lax.switch(which, [fill(size) for size in sizes], packed)
    return jnp.where(active, rates[jnp.minimum(at, num_slots - 1)], 0), converged, rounds
