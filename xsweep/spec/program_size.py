"""The size of a plan's program (tasks + flows of one iteration), counted from the plan alone.

Lowering a plan allocates per task and per flow, and so do both evaluators; the
count grows with replicas x micro-batches x stages x passes, with resharding
transfers, and with the DP rings (LCM chunks x ring steps x ranks). Counting it
from the device groups costs a sort of the groups, so validation can refuse a plan
whose program would not fit before anything is built. The count follows
``xsweep.plan.lower`` term by term (a test holds the two together).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict

from xsweep.spec import xsweep_pb2
from xsweep.spec.enums import RESHARDING, enum_name


def estimate_program_size(plan: xsweep_pb2.DeploymentPlan) -> int:
    """Tasks plus flows of the plan's lowered program.

    The plan must have passed the structural checks of ``validate_plan`` (each
    replica's stages cover the layers once, in order).
    """
    groups = plan.device_groups
    replicas: dict[int, list[xsweep_pb2.DeviceGroup]] = defaultdict(list)
    for group in groups:
        replicas[group.dp_replica].append(group)
    num_replicas = len(replicas)
    dp_size, cuts = _dp_sync_size(groups, num_replicas)
    size = dp_size
    for group in groups:
        tp, m = len(group.ranks), group.num_micro_batches
        # forward and backward passes; the last backward is cut at the DP segments inside
        passes = 2 * m + _cuts_inside(cuts, group.first_layer, group.last_layer)
        size += passes + 1  # + the optimizer step
        if tp > 1:
            size += passes * (1 + tp)  # one blocking TP task of tp flows per pass
    scheme = enum_name(RESHARDING, plan.training.resharding)
    for members in replicas.values():
        members.sort(key=lambda g: g.pp_stage)
        for src, dst in zip(members, members[1:], strict=False):
            # activations forward and gradients backward, one transfer per micro-batch each
            size += 2 * src.num_micro_batches * _transfer_size(scheme, len(src.ranks),
                                                               len(dst.ranks))
    return size


def _dp_sync_size(groups, num_replicas: int) -> tuple[int, list[int]]:
    """Tasks + flows of DP synchronisation, and the sorted layer boundaries that cut backward.

    Every layer segment between consecutive stage boundaries is held by one group of
    each replica: a barrier, then one ring per LCM chunk of ``2(R-1)`` steps of ``R``
    flows.
    """
    if num_replicas < 2:
        return 0, []
    starts: dict[int, list[int]] = defaultdict(list)
    ends: dict[int, list[int]] = defaultdict(list)
    for group in groups:
        starts[group.first_layer].append(len(group.ranks))
        ends[group.last_layer + 1].append(len(group.ranks))
    points = sorted(set(starts) | set(ends))
    holding: Counter[int] = Counter()
    size = 0
    steps = 2 * (num_replicas - 1)
    for point in points[:-1]:
        holding.subtract(ends.get(point, ()))
        holding.update(starts.get(point, ()))
        chunks = math.lcm(*(tp for tp, n in holding.items() if n > 0))
        size += 1 + chunks * steps * (1 + num_replicas)
    return size, points


def _cuts_inside(points: list[int], first_layer: int, last_layer: int) -> int:
    """Boundaries ``x`` with ``first_layer < x <= last_layer``."""
    return bisect.bisect_right(points, last_layer) - bisect.bisect_right(points, first_layer)


def _transfer_size(scheme: str, tp_src: int, tp_dst: int) -> int:
    """Tasks (phases) + flows of moving one tensor between stages (``xsweep.plan.reshard``)."""
    if tp_src == tp_dst:
        return 1 + tp_src  # rank to rank, whatever the scheme
    shared = math.gcd(tp_src, tp_dst)
    if scheme == "lcm":
        return 1 + math.lcm(tp_src, tp_dst)
    if scheme == "alpacomm":
        return 1 + tp_src + tp_dst - shared
    # hetauto: gather to the leaders (if a virtual group has several ranks), leader to
    # leader, scatter; phases that move nothing are not lowered
    phases = 1 + (tp_src > shared) + (tp_dst > shared)
    return phases + tp_src + tp_dst - shared
