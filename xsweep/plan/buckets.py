"""Gradient buckets: which layers of a DP segment reduce together.

With gradient reduction overlapped with the backward pass (Megatron-LM's
``--overlap-grad-reduce``, PyTorch DDP), gradients are grouped into buckets in the
order the backward pass produces them, last layers first; a bucket's collective
starts when the last of its gradients is ready on every member. Megatron closes a
bucket once it holds ``bucket_size`` parameters of the rank's own (TP-sharded) model
and keeps the rest, the first layers, as a last smaller bucket; its default size is
``max(40M, 1M x DP)`` parameters (``megatron/core/distributed/
distributed_data_parallel.py``).

xsweep cuts buckets at layer boundaries (the lowering knows when a layer's backward
ends, not each tensor's), counting the parameters of the DP group's largest shard (its
smallest TP degree), so that every member cuts at the same layers and each LCM ring
reduces equal buffers. A bucket therefore holds at least ``bucket_size`` parameters of
that shard, or a whole layer. With experts, a rank's routed experts count as it holds
them at the plan's expert parallelism (:func:`xsweep.plan.workload.rank_params`). Where
EP groups span replicas, Megatron-Core keeps the experts' gradients in buffers of their
own, reduced over the expert data-parallel groups, each buffer cut into buckets of the
same size: the dense buckets then count a rank's parameters but its routed experts
(``part="dense"``) and the expert buckets its routed experts alone (``part="experts"``:
``experts / EP`` whole experts per MoE layer), and each kind closes at its own layers.
"""

from __future__ import annotations

from xsweep.plan.workload import rank_expert_params, rank_params
from xsweep.spec.catalog import ModelSpec

#: What a bucket counts: every parameter of a rank, all but its routed experts, or those.
PARTS = ("all", "dense", "experts")

#: Megatron-LM's default bucket: max(40M, 1M x DP) parameters.
DEFAULT_BUCKET_PARAMS, DEFAULT_BUCKET_PARAMS_PER_RANK = 40_000_000, 1_000_000


def bucket_params(configured: int, dp: int) -> int:
    """Parameters per bucket: the configured size, or Megatron-LM's default for ``dp``."""
    return configured or max(DEFAULT_BUCKET_PARAMS, DEFAULT_BUCKET_PARAMS_PER_RANK * dp)


def bucket_starts(model: ModelSpec, first: int, last: int, tp: int,
                  size_params: int, ep: int = 1, part: str = "all") -> tuple[int, ...]:
    """First layers of the buckets of layers first..last (1-based), ascending.

    Layers are taken from ``last`` down; a bucket closes at the layer where it reaches
    ``size_params`` parameters of a TP-``tp`` shard at expert parallelism ``ep`` (of the
    ``part`` counted: :data:`PARTS`); what remains is the last bucket.
    """
    if size_params < 1:
        raise ValueError(f"a bucket holds at least one parameter, got {size_params}")
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    starts, held = [], 0
    for layer in range(last, first - 1, -1):
        experts = rank_expert_params(model, tp, layer, layer, ep) if part != "all" else 0
        held += experts if part == "experts" else rank_params(model, tp, layer, layer,
                                                               ep) - experts
        if held >= size_params:
            starts.append(layer)
            held = 0
    if held:
        starts.append(first)
    return tuple(reversed(starts))
