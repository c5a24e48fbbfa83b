"""Training-stack options: the switches Megatron-LM users set that change work and memory.

Defaults follow Megatron-LM's common recipe for GPT and Llama models: sequence
parallelism and fused (flash) attention on, no activation recompute, the 1F1B
schedule (see :mod:`xsweep.plan.schedule`), one model chunk per pipeline stage,
gradient reduction after the backward pass, no ZeRO sharding.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsweep.frozen import hash_once
from xsweep.memo import cached
from xsweep.spec.catalog import REFERENCE_SOFTWARE, SoftwareSpec

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
MOE_DISPATCHERS = ("alltoall", "deepep")
ZERO_STAGES = (0, 1, 3)


@hash_once
@dataclass(frozen=True)
class Stack:
    """Training-stack options of one plan.

    Attributes:
        sequence_parallel: norms, dropout and residual additions run on ``1/tp`` of the
            tokens per rank, and each TP all-reduce becomes a reduce-scatter plus an
            all-gather of the same volume (Korthikanti et al., 2022).
        flash_attention: the attention core is one fused kernel that never stores the
            ``s x s`` scores (Dao et al., 2022).
        recompute: ``"none"``; ``"selective"``: the attention core is recomputed in the
            backward pass, so its scores are not kept; ``"full"``: only each block's
            input is kept and the whole block's forward runs again in the backward pass.
        zero_stage: 0; 1: optimizer states sharded over data parallelism (Megatron's
            distributed optimizer); 3: weights, gradients and optimizer states sharded
            (fully sharded data parallelism, FSDP).
        virtual_pipeline_stages: model chunks per pipeline stage (interleaved 1F1B).
        dp_overlap: gradient reduction overlapped with the backward pass, in buckets;
            with ZeRO-1 the parameter all-gathers also overlap the first forward pass
            (Megatron-LM's ``--overlap-param-gather``). FSDP always overlaps.
        dp_bucket_params: parameters per gradient bucket; 0 means Megatron-LM's
            ``max(40M, 1M x DP)``.
        precision: ``"bf16"``; ``"fp8"``: the GEMMs of the transformer blocks (QKV,
            attention projection, MLP) run in FP8 as Transformer Engine runs them (its
            delayed-scaling recipe, E4M3 forward and E5M2 backward), with the casts to
            FP8, the FP8 weight copies and the FP8 saved GEMM inputs that brings
            (:mod:`xsweep.plan.workload`, :mod:`xsweep.plan.memory`); the attention core,
            norms, embedding, LM head, gradients and optimizer stay as in BF16.
        tp_comm_overlap: the TP communication of a pass runs beside the pass's compute, as
            Transformer Engine overlaps the sequence-parallel all-gathers and
            reduce-scatters with the GEMMs they feed (userbuffers; Megatron-LM's
            ``--tp-comm-overlap``, NeMo's ``tp_comm_overlap``): a pass takes the longer of
            its compute and its TP traffic instead of their sum. Needs sequence parallelism;
            no effect at TP 1.
        expert_parallel: the routed experts of a MoE layer are split over this many ranks
            of each device group, and the rest of the group's ranks split each expert's FFN
            (expert TP = TP / EP; Megatron-Core's MoE parallel folding, with EP carved from
            the TP ranks); tokens reach their experts' ranks by an all-to-all
            (:mod:`xsweep.plan.workload`). 1 for dense models.
        moe_imbalance: the assumed load of the busiest expert over the mean (1.0: tokens
            spread evenly); the busiest rank's expert work and all-to-all traffic scale by
            it (by the capacity factor when that is lower); none at EP 1.
        pp_p2p_overlap: a stage's sends to the next (or previous) pipeline stage run beside
            its compute: its next pass starts as soon as the output is handed over (the
            overlapped point-to-point communication of Megatron-Core's interleaved
            schedule, ``overlap_p2p_comm``). False: the stage waits for each send to finish
            before its next pass, as Megatron's batched ``isend``/``irecv`` are waited on
            without overlap. No effect without pipeline parallelism.
        fp8_param_gather: with FP8 and ZeRO-1 or FSDP, the parameter all-gathers move the
            GEMM weights' FP8 copies (1 byte an element; the other parameters stay BF16)
            and the model keeps FP8 weights instead of BF16 ones (Transformer Engine's FP8
            parameters, Megatron-Core's ``--fp8-param-gather``, NeMo's ``fp8_params``).
        moe_dispatcher: how MoE tokens reach their experts' ranks across nodes:
            ``"alltoall"``, one all-to-all in which every rank sends straight to every
            rank of its EP group; ``"deepep"``, DeepEP's dispatch and combine, which send
            a token over the NICs once per node it reaches, to the rank at the same place
            there, which passes it on over NVLink (:mod:`xsweep.plan.workload`). The same
            traffic where an EP group lies on one node.
        moe_fp8_dispatch: with FP8, the dispatch-direction all-to-all of each pass (the
            forward's tokens, the backward's gradients into the experts' down
            projections) moves FP8 elements with a float32 scale per 128, the combines
            BF16 (DeepSeek-V3's recipe, DeepEP's FP8 dispatch).
        software: the software profile (a catalog entry): factors on the GPUs' compute
            fractions for what the framework and its version achieve where the model does
            not spell out the mechanism; the reference profile's factors are all 1.
    """

    sequence_parallel: bool = True
    flash_attention: bool = True
    recompute: str = "none"
    zero_stage: int = 0
    virtual_pipeline_stages: int = 1
    dp_overlap: bool = False
    dp_bucket_params: int = 0
    precision: str = "bf16"
    tp_comm_overlap: bool = False
    expert_parallel: int = 1
    moe_imbalance: float = 1.0
    pp_p2p_overlap: bool = True
    fp8_param_gather: bool = False
    moe_dispatcher: str = "alltoall"
    moe_fp8_dispatch: bool = False
    software: SoftwareSpec = REFERENCE_SOFTWARE

    def __post_init__(self):
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {RECOMPUTE}, got {self.recompute!r}")
        if self.zero_stage not in ZERO_STAGES:
            raise ValueError(f"zero_stage must be one of {ZERO_STAGES}, got {self.zero_stage}")
        if self.virtual_pipeline_stages < 1:
            raise ValueError("virtual_pipeline_stages must be at least 1, "
                             f"got {self.virtual_pipeline_stages}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise ValueError("tp_comm_overlap needs sequence_parallel")
        if self.expert_parallel < 1:
            raise ValueError(f"expert_parallel must be at least 1, got {self.expert_parallel}")
        if not self.moe_imbalance >= 1.0:
            raise ValueError(f"moe_imbalance must be at least 1, got {self.moe_imbalance}")
        if self.fp8_param_gather and (self.precision != "fp8" or self.zero_stage not in (1, 3)):
            raise ValueError("fp8_param_gather needs precision fp8 and zero_stage 1 or 3")
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise ValueError(f"moe_dispatcher must be one of {MOE_DISPATCHERS}, "
                             f"got {self.moe_dispatcher!r}")
        if self.moe_fp8_dispatch and self.precision != "fp8":
            raise ValueError("moe_fp8_dispatch needs precision fp8")
        if self.dp_bucket_params < 0:
            raise ValueError(f"dp_bucket_params must not be negative, got {self.dp_bucket_params}")



#: Megatron-LM's common recipe (the defaults of every field).
DEFAULT_STACK = Stack()

#: One Stack object per value, for the callers that make stacks over and over (a sweep's
#: layouts, the closed form's plans): memos keyed by a stack then find it by identity,
#: without comparing its fields (about 0.3 s of a large sweep's planning).
interned = cached(256)(lambda stack: stack)
