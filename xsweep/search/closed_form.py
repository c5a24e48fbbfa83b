"""The closed-form tier: a lower bound on a plan's iteration time, before it is lowered.

The bound level (``kernels/bound.py``) runs every task of the program at its uncontended
duration, each starting when its last predecessor ends, and the program spells the
order of the tasks on a device group's compute stream out as dependencies. So on the
bound level, and hence on the exact level and in the simulator, an iteration lasts at
least, for every device group:

- the compute of all its passes: ``m x (forward + backward)`` of one micro-batch on its
  stage (:func:`xsweep.plan.workload.stage_cost`, the numbers the lowering's compute
  tasks sum to; communication and the optimizer's step only add to it); and, without
  interleaving,
- the pipeline's fill and drain: its first pass is a forward that waits for the first
  micro-batch's forward on every earlier stage of its replica, and its last pass is a
  backward whose micro-batch still runs backward on every earlier stage after it.

The largest of these, shrunk by :data:`MARGIN` for the float32 rounding of the batched
kernels, is the point's ``iteration_time_s`` at the ``closed_form`` level. Its
``tokens_per_s`` is the matching upper bound (tokens of an iteration over that time);
every other metric has no closed form and stays NaN, which the funnel never prunes on.
"""

from __future__ import annotations

import functools

from xsweep.plan.stack import Stack
from xsweep.plan.workload import stage_cost
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import Catalog, GpuSpec, ModelSpec
from xsweep.spec.resolve import resolve_model

#: The bound shrunk by this share: below the batched kernels' float32 rounding, so that
#: it stays under the bound level's time whatever the dtype.
MARGIN = 1e-4
#: The metrics the tier gives (the others have no closed form: NaN).
METRICS = ("iteration_time_s", "tokens_per_s")


def stack_of(plan: pb.DeploymentPlan) -> Stack:
    """The training-stack options of ``plan`` that set its stages' compute."""
    t = plan.training
    names = {pb.NO_RECOMPUTE: "none", pb.SELECTIVE: "selective", pb.FULL: "full"}
    return Stack(sequence_parallel=t.sequence_parallel, flash_attention=t.flash_attention,
                 recompute=names.get(t.recompute, "none"), zero_stage=t.zero_stage,
                 virtual_pipeline_stages=t.virtual_pipeline_stages or 1)


def iteration_lower_bound(plan: pb.DeploymentPlan, catalog: Catalog) -> float:
    """A lower bound on ``plan``'s iteration time in seconds (see the module docstring)."""
    model = resolve_model(plan, catalog)
    stack = stack_of(plan)
    gpu_of_rank = []
    for node in plan.cluster.nodes:
        gpu_of_rank += [node.gpu] * node.num_gpus
    stages: dict[int, dict[int, tuple[float, float, int]]] = {}
    for group in plan.device_groups:
        gpu = catalog.gpu(gpu_of_rank[group.ranks[0]])
        forward, backward = _pass_times(model, gpu, len(group.ranks), group.micro_batch_size,
                                        group.first_layer, group.last_layer, stack)
        stages.setdefault(group.dp_replica, {})[group.pp_stage] = (
            forward, backward, group.num_micro_batches)
    fill = stack.virtual_pipeline_stages == 1
    best = 0.0
    for replica in stages.values():
        before = 0.0  # the first micro-batch's forward and the last's backward upstream
        for index in sorted(replica):
            forward, backward, m = replica[index]
            best = max(best, (before if fill else 0.0) + m * (forward + backward))
            before += forward + backward
    return best * (1.0 - MARGIN)


@functools.lru_cache(maxsize=65536)
def _pass_times(model: ModelSpec, gpu: GpuSpec, tp: int, b: int, first: int, last: int,
                stack: Stack) -> tuple[float, float]:
    c = stage_cost(model, gpu, tp, b, first, last, stack=stack)
    return c.forward_time_s, c.backward_time_s


def closed_form_metrics(plan: pb.DeploymentPlan, catalog: Catalog) -> dict[str, float]:
    """The tier's metrics of ``plan`` (:data:`METRICS`)."""
    seconds = iteration_lower_bound(plan, catalog)
    model = resolve_model(plan, catalog)
    tokens = plan.training.global_batch_size * model.seq_length
    return {"iteration_time_s": seconds,
            "tokens_per_s": tokens / seconds if seconds > 0 else float("inf")}
