"""The size of a plan's program (tasks + flows of one iteration), bounded from the plan alone.

Lowering a plan allocates per task and per flow, and so do both evaluators; the
count grows with replicas x micro-batches x stages x passes (x virtual stages), with
resharding transfers, with the DP collectives (LCM rings x buckets, twice under
ZeRO-1) and with FSDP's gathers per layer. Bounding it from the device groups costs a
sort of the groups, so validation can refuse a plan whose program would not fit
before anything is built. The bound is never below the lowered program and stays
within a small factor of it (a test holds both on random plans of every option).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from collections.abc import Callable

from xsweep.memo import Memo
from xsweep.spec import xsweep_pb2
from xsweep.spec.enums import RESHARDING, enum_name
from xsweep.spec.resolve import groups_bytes

#: Estimates by (device-group bytes, the training fields they read): validation and the
#: evaluator's host chunks both ask, and the variants of a sweep share their groups.
_SIZES: Memo = Memo(16384, 64 * 2**20, lambda key, value: len(key[0]))


#: What evaluating a program exactly costs, per task or flow and at least, measured on
#: Llama-3-405B plans of 2,048-65,536 H100s (1.2 million tasks and flows) on two cores:
#: the batched exact level's peak memory (1.1 GB at 1.28 million, its kernel compiled)
#: is the largest of the simulator's (0.47-0.65 GB) and the bound's (0.54-0.74 GB), and
#: its time (9-12 s with the compilation) above the simulator's (6-8 s).
COST_BYTES_BASE, COST_BYTES_PER_ELEMENT = 300e6, 700.0
COST_SECONDS_PER_ELEMENT = 9e-6


def program_cost(size: int) -> tuple[float, float]:
    """About the peak memory (bytes) and the time (seconds, on one core) of evaluating a
    program of ``size`` tasks and flows exactly: the limit on the program size is a limit
    on these (``docs/formats.md``)."""
    return COST_BYTES_BASE + COST_BYTES_PER_ELEMENT * size, COST_SECONDS_PER_ELEMENT * size


def describe_program(size: int) -> str:
    """``size`` with what it costs, for the message of a plan over the limit."""
    memory, seconds = program_cost(size)
    return (f"the plan's program ({size:,} tasks and flows of one iteration, estimated: "
            f"about {memory / 1e9:.1f} GB and {seconds:,.0f} s to evaluate exactly)")


def estimate_program_size(plan: xsweep_pb2.DeploymentPlan, groups: bytes | None = None) -> int:
    """At least the tasks plus flows of the plan's lowered program.

    The plan must have passed the structural checks of ``validate_plan`` (each
    replica's stages cover the layers once, in order). ``groups``: the plan's
    :func:`~xsweep.spec.resolve.groups_bytes`, where the caller knows them (a planner's
    variants of one layout share them).
    """
    t = plan.training
    return program_size(size_key(groups_bytes(plan) if groups is None else groups,
                                 t.virtual_pipeline_stages, t.zero_stage, t.dp_overlap,
                                 t.resharding, t.tp_comm_overlap, t.expert_parallel),
                        lambda: plan)


def size_key(groups: bytes, virtual_pipeline_stages: int, zero_stage: int, dp_overlap: bool,
             resharding: int, tp_comm_overlap: bool, expert_parallel: int) -> tuple:
    """What a program's size estimate reads of its plan: its device groups (serialized)
    and these training fields (``resharding``: the enum's number)."""
    return (groups, int(virtual_pipeline_stages), int(zero_stage), bool(dp_overlap),
            int(resharding), bool(tp_comm_overlap), int(expert_parallel))


def program_size(key: tuple, plan: Callable[[], xsweep_pb2.DeploymentPlan]) -> int:
    """:func:`estimate_program_size` of the plan whose :func:`size_key` is ``key``;
    ``plan()`` makes the plan where no plan of that key was estimated before."""
    return _SIZES.get(key, lambda: _estimate(plan()))


def _estimate(plan: xsweep_pb2.DeploymentPlan) -> int:
    training = plan.training
    v = max(1, training.virtual_pipeline_stages)
    fsdp, zero1 = training.zero_stage == 3, training.zero_stage == 1
    groups = plan.device_groups
    replicas: dict[int, list[xsweep_pb2.DeviceGroup]] = defaultdict(list)
    for group in groups:
        replicas[group.dp_replica].append(group)
    num_replicas = len(replicas)
    cp = max(groups[0].context_parallel, 1)  # one for the whole plan (validation)
    # weights are replicated over the CP ranks: gradients are reduced over DP x CP
    size = (_dp_size(groups, num_replicas, cp, training.dp_overlap, zero1,
                     training.expert_parallel) if not fsdp else 0)
    points = sorted({p for g in groups for p in (g.first_layer, g.last_layer + 1)})
    stage_tps: dict[int, list[int]] = defaultdict(list)  # FSDP: one DP group per stage
    for group in groups:
        stage_tps[group.pp_stage].append(len(group.ranks))
    for group in groups:
        tp, m = len(group.ranks) // cp, group.num_micro_batches
        layers = group.last_layer - group.first_layer + 1
        if fsdp and num_replicas > 1:  # every pass cut into its layers, each gathered (and
            # its gradients reduce-scattered) over the stage's DP group: LCM rings of one
            # rank per replica (and where EP spans replicas, the experts' rings beside them)
            passes = 2 * m * layers
            rings = math.lcm(*stage_tps[group.pp_stage])
            fold = training.expert_parallel // tp if training.expert_parallel > tp else 1
            if fold > 1 and num_replicas // fold >= 2:  # the expert rings too, as many flows
                rings *= 2
            size += (2 * passes + 1) * (1 + rings * num_replicas) // num_replicas + passes
        else:  # passes of each chunk, the last backward (and under ZeRO-1 with overlap
            # the first forward, which waits for gathers) cut at DP or bucket boundaries
            cuts = 0
            if num_replicas * cp > 1:
                cuts = (layers if training.dp_overlap
                        else _inside(points, group.first_layer, group.last_layer))
            passes = 2 * m * v + cuts * (2 if zero1 and training.dp_overlap else 1)
        size += passes + 1 + passes * _pass_comm(training, tp, cp)  # + the optimizer step
    return size + _transfers(replicas, enum_name(RESHARDING, training.resharding), v)


def _pass_comm(training, tp: int, cp: int) -> int:
    """Tasks + flows of a pass's communication beside its compute task."""
    ep = training.expert_parallel
    if cp > 1:  # a CP ring (and TP rings) beside the compute, and a join; with expert
        # parallelism the all-to-all flows of EP groups of w ranks (w = tp, or the TP ranks
        # of ep / tp CP ranks)
        return 2 + 2 * tp * cp + (cp * tp * (max(tp, ep) - 1) if ep > 1 else 0)
    if tp > 1:  # one blocking TP task of tp flows per pass; overlapped, its join too;
        # with expert parallelism also an all-to-all's flows, tp (w - 1) for an EP
        # group of w ranks (tp, or EP over tp x EP / tp ranks of several replicas)
        flows = tp * tp * max(ep // tp, 1) if ep > 1 else tp
        return 1 + flows + bool(training.tp_comm_overlap)
    if training.expert_parallel > 1:  # TP 1: a task of the all-to-all's ep - 1 flows alone
        return training.expert_parallel
    return 0


def _transfers(replicas: dict, scheme: str, v: int) -> int:
    """Tasks + flows of the transfers between consecutive stages of every replica."""
    size = 0
    for members in replicas.values():
        members.sort(key=lambda g: g.pp_stage)
        if len(members) > 1:
            tps = {len(g.ranks) for g in members}  # the TP degrees, each once
            largest = max(_transfer_size(scheme, a, b) for a in tps for b in tps)
            # activations forward and gradients back, per micro-batch and chunk boundary
            size += 2 * members[0].num_micro_batches * (len(members) * v - 1) * largest
    return size


def _dp_size(groups, num_replicas: int, cp: int, overlap: bool, zero1: bool,
             ep: int = 1) -> int:
    """Tasks + flows of DP synchronisation: per layer segment held by a group of each
    replica, per bucket (at most one a layer with overlap), a barrier and a collective of
    an LCM ring of ``R`` flows per chunk (ZeRO-1: a reduce-scatter and an all-gather).
    Under context parallelism the rings hold every CP rank too (DP x CP): a group's
    ``len(ranks)`` is ``tp x cp``, and with one CP size the LCM of those is ``cp`` times
    the TP degrees'. Where EP groups span ``r = EP / TP`` replicas (one TP degree; under
    CP, CP ranks) and ``R cp / r`` is at least 2, the collective also holds the expert
    rings: ``R cp`` more flows per chunk (overlapped, in tasks of their own: a barrier
    and a collective more per bucket)."""
    if num_replicas * cp < 2:
        return 0
    starts: dict[int, list[int]] = defaultdict(list)
    ends: dict[int, list[int]] = defaultdict(list)
    for group in groups:
        starts[group.first_layer].append(len(group.ranks))
        ends[group.last_layer + 1].append(len(group.ranks))
    points = sorted(set(starts) | set(ends))
    holding: Counter[int] = Counter()
    size = 0
    for point, following in zip(points, points[1:], strict=False):
        holding.subtract(ends.get(point, ()))
        holding.update(starts.get(point, ()))
        chunks = math.lcm(*(tp for tp, n in holding.items() if n > 0))
        buckets = following - point if overlap else 1
        collective = 1 + chunks * num_replicas
        apart = 0  # overlapped, the expert rings have buckets of their own: a barrier and
        # a collective (two under ZeRO-1) more per bucket at most
        tp = chunks // cp  # (EP above TP: one TP degree, the validation's)
        if ep > tp and num_replicas * cp // (ep // tp) >= 2:  # expert rings
            collective += chunks * num_replicas
            apart = buckets * (1 + (2 if zero1 else 1)) if overlap else 0
        size += buckets * (1 + collective * (2 if zero1 else 1)) + apart
    return size


def _inside(points: list[int], first_layer: int, last_layer: int) -> int:
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
