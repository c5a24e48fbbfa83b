"""Write the reference plans the validation benchmarks read, with their assumptions.

``python benchmarks/reference_plans.py`` (re)writes:

* ``spaces/paper/``: the seed paper's Table 4 configurations C1-C16, in three regimes
  (``testbed``: the paper's 10 GbE NICs and PCIe scale-up, the batch split evenly over
  the replicas; ``table6``: NVLink and ConnectX-7, the simulation-only set-up of its
  Table 6, split evenly; ``balanced``: Table 6's hardware, the batch split in proportion
  to each replica's speed);
* ``spaces/megatron/``: Narayanan et al. (2021), Table 1, the GPT runs of 1.7B-39.1B
  parameters on DGX A100 (they set the A100's sustained GEMM rate);
* ``spaces/deepspeed/``: Megatron-Turing NLG 530B's runs on 2,240-3,360 A100s with
  Megatron-DeepSpeed of 2021 (they set the deepspeed-2021 software profile, one held out);
* ``spaces/peers/``: the reference workloads of the peer comparison (Llama-2-7B on
  8 and 64 A100-80GB);
* ``spaces/published/``: the published real runs xsweep can express: FSDP runs in BF16
  (held out) and NeMo 24.07's FP8 runs on DGX-H100 without context parallelism (two set
  the Hopper FP8 GEMM fraction, two are held out).

Every file opens with a comment block stating where each number comes from and what
is assumed. The benchmarks (``reproduce_paper.py``, ``compare_peers.py``,
``real_runs.py``) read the files, not this module, so the files are the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.stack import Stack
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import load_catalog
from xsweep.spec.plan_io import plan_to_text

SPACES = Path(__file__).resolve().parent.parent / "spaces"

# -- the seed paper -----------------------------------------------------------------------
A100, H100 = "A100-40GB", "H100-SXM"
PAPER_GBS = 128  # assumed: the paper's small global batch (its Figures 15 and 16 use 128)


@dataclass(frozen=True)
class PaperConfig:
    """One Table 4 row: nodes as (gpu, GPUs per node), replicas as stage lists of
    (gpu, tp, layers)."""

    name: str
    cluster: str  # Table 4, column 2
    distribution: str  # Table 4, column 3
    nodes: tuple[tuple[str, int], ...]
    replicas: tuple[tuple[tuple[str, int, int], ...], ...]


def _dp(gpu: str, count: int) -> tuple:
    return tuple(((gpu, 1, 32),) for _ in range(count))


def _tp(gpu: str, tp: int, count: int) -> tuple:
    return tuple(((gpu, tp, 32),) for _ in range(count))


PAPER_CONFIGS = (
    PaperConfig("C1", "2 x H100", "DP", ((H100, 2),), _dp(H100, 2)),
    PaperConfig("C2", "2 x A100", "DP", ((A100, 2),), _dp(A100, 2)),
    PaperConfig("C3", "2 x (4 x H100)", "DP", ((H100, 4),) * 2, _dp(H100, 8)),
    PaperConfig("C4", "2 x (4 x A100)", "DP", ((A100, 4),) * 2, _dp(A100, 8)),
    PaperConfig("C5", "2 x (4 x H100)", "2 x ((4 x TP) - DP)", ((H100, 4),) * 2, _tp(H100, 4, 2)),
    PaperConfig("C6", "2 x (4 x A100)", "2 x ((4 x TP) - DP)", ((A100, 4),) * 2, _tp(A100, 4, 2)),
    PaperConfig("C7", "4 x (4 x H100)", "4 x ((4 x TP) - DP)", ((H100, 4),) * 4, _tp(H100, 4, 4)),
    PaperConfig("C8", "4 x (4 x A100)", "4 x ((4 x TP) - DP)", ((A100, 4),) * 4, _tp(A100, 4, 4)),
    PaperConfig("C9", "1 x A100, 1 x H100", "DP", ((A100, 1), (H100, 1)),
                _dp(A100, 1) + _dp(H100, 1)),
    PaperConfig("C10", "2 x A100, 2 x H100", "A (2 x DP) - DP - H (2 x DP)",
                ((A100, 2), (H100, 2)), _dp(A100, 2) + _dp(H100, 2)),
    PaperConfig("C11", "2 x A100, 2 x H100", "A (2 x TP) - DP - H (2 x TP)",
                ((A100, 2), (H100, 2)), _tp(A100, 2, 1) + _tp(H100, 2, 1)),
    PaperConfig("C12", "2 x A100, 2 x H100", "A (2 : 2 PP) - DP - H (2 : 2 PP)",
                ((A100, 2), (H100, 2)),
                (((A100, 1, 16), (A100, 1, 16)), ((H100, 1, 16), (H100, 1, 16)))),
    PaperConfig("C13", "4 x A100, 4 x H100", "A (4 x DP) - DP - H (4 x DP)",
                ((A100, 4), (H100, 4)), _dp(A100, 4) + _dp(H100, 4)),
    PaperConfig("C14", "4 x A100, 4 x H100", "A (4 x TP) - DP - H (4 x TP)",
                ((A100, 4), (H100, 4)), _tp(A100, 4, 1) + _tp(H100, 4, 1)),
    PaperConfig("C15", "4 x A100, 4 x H100", "A (3 x TP : 1) PP - DP - H (3 x TP : 1) PP",
                ((A100, 4), (H100, 4)),
                (((A100, 3, 24), (A100, 1, 8)), ((H100, 3, 24), (H100, 1, 8)))),
    PaperConfig("C16", "2 x (4 x A100), 2 x (4 x H100)", "2 x (A (4 x TP) - DP - H (4 x TP))",
                ((A100, 4), (A100, 4), (H100, 4), (H100, 4)),
                _tp(A100, 4, 2) + _tp(H100, 4, 2)),
)

TESTBED_NICS = {A100: "eth10g", H100: "x710"}
TESTBED_SCALE_UP = {A100: (256.0, 2 * 287.5, "pcie4"), H100: (512.0, 2 * 143.75, "pcie5")}
#: Regimes: NIC per GPU type, the scale-up override (None: the catalog's NVLink), and
#: whether the batch is split in proportion to the replicas' speed.
PAPER_REGIMES = {
    "testbed": (TESTBED_NICS, TESTBED_SCALE_UP, False),
    "table6": ({A100: "cx7", H100: "cx7"}, None, False),
    "balanced": ({A100: "cx7", H100: "cx7"}, None, True),
}

PAPER_HEADER = """\
# Seed paper (Xsim), Table 4, configuration {name}: {cluster},
# {distribution}; regime "{regime}".
# Stated or assumed, as xsweep cannot read it from the paper:
# - model: Llama-2-7B (the paper's "Llama 7B"; appendix A: hidden 4096, 32 layers, 32
#   heads, vocabulary 32000, sequence 2048; its FFN width 16384 is the GELU equivalent of
#   the SwiGLU 3 x 11008 here, within 1% of the FLOPs and weights).
# - global batch {gbs} sequences (assumed; the paper gives none for Table 4), one
#   sequence per micro-batch (assumed), {split_text}
# - nodes hold one GPU type each, as the paper's simulator assumes (footnote 1).
# - {regime_text}
# - training stack: xsweep's defaults (Megatron-LM's recipe: sequence parallelism and
#   flash attention on, no recompute, 1F1B); the paper names none.
# - layers: the whole model per stage, or as Table 4 splits it (C12 2:2 -> 16 + 16;
#   C15 "3 x TP : 1" -> a TP-3 stage of 24 layers and a TP-1 stage of 8, layers in
#   proportion to the GPUs).
"""

TESTBED_TEXT = ("the paper's real testbed (section 5): 10 Gb/s NICs (Intel X550-T on A100 "
                "nodes,\n#   X710 on H100 nodes, Table 5 delays) and PCIe scale-up (Gen4 "
                "256 Gb/s on A100,\n#   Gen5 512 Gb/s on H100, Table 5 delays), one NIC "
                "per GPU.")
TABLE6_TEXT = ("the paper's simulation-only set-up (Table 6): NVLink scale-up (2400 "
               "Gb/s\n#   on A100, 3600 on H100) and a 400 Gb/s ConnectX-7 per GPU.")
REGIME_TEXT = {
    "testbed": "regime testbed: " + TESTBED_TEXT,
    "table6": "regime table6: " + TABLE6_TEXT,
    "balanced": "regime balanced: " + TABLE6_TEXT,
}
SPLIT_TEXT = {
    False: "split evenly over the replicas\n#   whatever their speed (the straggler waits "
           "of the paper's Figure 18 need uneven speeds\n#   with even shares).",
    True: "split over the replicas in\n#   proportion to their speed (the inverse of their "
          "slowest stage's forward and backward\n#   time per micro-batch), as load-balancing "
          "planners do.",
}


def paper_plan(config: PaperConfig, regime: str, catalog) -> pb.DeploymentPlan:
    nics, scale_up, balanced = PAPER_REGIMES[regime]
    nodes = [NodeReq(gpu, count, nics[gpu]) for gpu, count in config.nodes]
    even = [PAPER_GBS // len(config.replicas)] * len(config.replicas)

    def build(shares):
        replicas = [ReplicaReq(tuple(StageReq(*stage) for stage in stages), 1, share)
                    for stages, share in zip(config.replicas, shares, strict=True)]
        plan = build_plan(f"paper-{config.name.lower()}-{regime}", "llama2-7b", nodes,
                          replicas, seq_length=2048)
        if scale_up is not None:
            for node in plan.cluster.nodes:
                gbps, ns, link = scale_up[node.gpu]
                node.scale_up.bandwidth_gbps, node.scale_up.latency_ns = gbps, ns
                node.scale_up.link = link
        return plan

    plan = build(even)
    if not balanced:
        return plan
    a = analyze(plan, catalog)
    speed = [1.0 / max(a.groups[i].cost.forward_time_s + a.groups[i].cost.backward_time_s
                       for i in members) for members in a.replicas.values()]
    return build(_proportional(PAPER_GBS, speed))


def _proportional(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights``, at least 1 each, by largest remainder."""
    exact = [total * w / sum(weights) for w in weights]
    shares = [max(1, int(x)) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


# -- Megatron-LM 2021 ---------------------------------------------------------------------
@dataclass(frozen=True)
class MegatronRun:
    """Narayanan et al. (2021), Table 1, and the run script of NVIDIA/Megatron-LM
    (examples/sc21/run_table_1.sh: micro-batch, DDP)."""

    name: str
    layers: int
    hidden: int
    heads: int
    tp: int
    pp: int
    gpus: int
    batch: int
    micro_batch: int
    tflops_per_gpu: float  # achieved teraFLOP/s per GPU, with recompute FLOPs (eq. 3)
    ddp: str  # "torch": PyTorch DDP (overlapped buckets); "local": Megatron's, after backward
    vp: int = 1  # model chunks per stage (--num-layers-per-virtual-pipeline-stage)


MEGATRON_RUNS = (
    MegatronRun("gpt-1.7b", 24, 2304, 24, 1, 1, 32, 512, 16, 137, "torch"),
    MegatronRun("gpt-3.6b", 30, 3072, 32, 2, 1, 64, 512, 16, 138, "torch"),
    MegatronRun("gpt-7.5b", 36, 4096, 32, 4, 1, 128, 512, 16, 142, "torch"),
    MegatronRun("gpt-18.4b", 40, 6144, 48, 8, 1, 256, 1024, 8, 135, "torch"),
    MegatronRun("gpt-39.1b", 48, 8192, 64, 8, 2, 512, 1536, 4, 138, "local"),
)
#: The deeper rows of the same table, held out: no number of the model was set with them.
#: Interleaved as the run script runs them (layers per virtual stage 5, 5, 3, 1; none for 1T).
MEGATRON_HELD_OUT = (
    MegatronRun("gpt-76.1b", 60, 10240, 80, 8, 4, 1024, 1792, 2, 140, "local", vp=3),
    MegatronRun("gpt-145.6b", 80, 12288, 96, 8, 8, 1536, 2304, 2, 148, "local", vp=2),
    MegatronRun("gpt-310.1b", 96, 16384, 128, 8, 16, 1920, 2160, 1, 155, "local", vp=2),
    MegatronRun("gpt-529.6b", 105, 20480, 128, 8, 35, 2520, 2520, 1, 163, "local", vp=3),
    MegatronRun("gpt-1008b", 128, 25600, 160, 8, 64, 3072, 3072, 1, 163, "local"),
)
#: PyTorch DDP's default bucket, bucket_cap_mb = 25 (MiB), in fp16 parameters.
TORCH_DDP_BUCKET_PARAMS = 25 * 2**20 // 2

MEGATRON_HEADER = """\
# {role}: Narayanan et al. (2021), "Efficient Large-Scale Language Model Training
# on GPU Clusters Using Megatron-LM", Table 1: GPT {params}, {gpus} A100-80GB GPUs (DGX
# A100 nodes of 8 on Selene), TP {tp}, PP {pp}, global batch {batch}: {tflops} achieved
# teraFLOP/s per GPU, counted with the recompute FLOPs of the paper's eq. 3.
# Micro-batch {micro} and data parallelism {ddp_text}:
#   NVIDIA/Megatron-LM examples/sc21/run_table_1.sh.{vp_text}
# Stated by the paper: vocabulary 51,200, sequence 2048, mixed precision (fp16; the
#   same peak as bf16), activation recompute of every layer ("--recompute-method
#   uniform"), 8 x 200 Gb/s InfiniBand HDR per node (ConnectX-6, one per GPU).
# Stack of 2021: no sequence parallelism, no fused (flash) attention, 1F1B.
{sends_text}# Assumed: GPT blocks with a 4h GELU FFN, dropout (0.1 in Megatron's GPT recipe),
#   rail-optimized fabric. {role_text}
# Software profile megatron-lm-2021 (software.yaml): {profile_role}
"""
MEGATRON_KIND = {
    True: ("Calibration run", "These runs set the A100's sustained GEMM rate (gpus.yaml)."),
    False: ("Held-out run", "Held out: no number of the model was set with this run."),
}
MEGATRON_ROLE = {True: "a calibration run of it.", False: "held out by it."}
#: Megatron-LM of 2021 waited for its pipeline sends: said in the header of every plan with
#: more than one stage, which sets ``pp_p2p_overlap: false``.
MEGATRON_SENDS_TEXT = (
    "# Pipeline sends waited for (pp_p2p_overlap false): megatron/p2p_communication.py of\n"
    "#   2021 posts a stage's sends and receives as one batch_isend_irecv and waits on every\n"
    "#   request before the next pass (schedules.py, 1F1B and interleaved); it has no\n"
    "#   overlap option.\n")
DDP_TEXT = {
    "torch": ("PyTorch DDP (DDP_impl torch):\n#   gradient all-reduce in buckets of "
              "25 MiB (its default, 13,107,200 fp16 parameters)\n#   overlapped with the "
              "backward pass"),
    "local": "Megatron's own DDP (DDP_impl\n#   local): one all-reduce after the backward pass",
}


def megatron_plan(run: MegatronRun, catalog) -> pb.DeploymentPlan:
    dp = run.gpus // (run.tp * run.pp)
    stages = tuple(StageReq("A100-80GB", run.tp, run.layers // run.pp) for _ in range(run.pp))
    replica = ReplicaReq(stages, run.micro_batch, run.batch // dp // run.micro_batch)
    torch_ddp = run.ddp == "torch"
    stack = Stack(sequence_parallel=False, flash_attention=False, recompute="full",
                  dp_overlap=torch_ddp, dp_bucket_params=TORCH_DDP_BUCKET_PARAMS if torch_ddp else 0,
                  virtual_pipeline_stages=run.vp, pp_p2p_overlap=run.pp == 1,
                  software=catalog.software_profile("megatron-lm-2021"))
    plan = build_plan(run.name, "", [NodeReq("A100-80GB", 8, "cx6")] * (run.gpus // 8),
                      [replica] * dp, stack=stack)
    _explicit_gpt(plan.model, run.layers, run.hidden, run.heads, vocab=51200, seq=2048,
                  dropout=True)
    return plan


# -- Megatron-DeepSpeed of 2021: Megatron-Turing NLG 530B ---------------------------------
DEEPSPEED_HEADER = """\
# Real run: Smith et al. (2022), "Using DeepSpeed and Megatron to Train Megatron-Turing
# NLG 530B", arXiv 2201.11990, section 2.4, as quoted by cli99/llm-analysis
# (examples/megatron-turing-nlg/README.md): global batch 1920 on {nodes} DGX A100 servers
# ({gpus} GPUs), {seconds} s per iteration, {tflops} achieved
# teraFLOP/s per GPU (Megatron's count, recompute FLOPs included: eq. 3 of Narayanan et
# al. gives {tflops} from the iteration time).
# Stated by the paper: 105 layers, hidden 20480, 128 heads, sequence 2048, Megatron-LM's
#   tensor parallelism 8 within a node, DeepSpeed's pipeline parallelism 35 across nodes
#   and its data parallelism over the rest, mixed precision; Selene's DGX A100 servers
#   (80 GB A100s, 8 x 200 Gb/s HDR InfiniBand each, per the NVIDIA and Microsoft posts).
# Stack of 2021: no sequence parallelism, no fused (flash) attention.
# Assumed: activation recompute of every layer and micro-batch 1 (Megatron's recipe for
#   models of this size); ZeRO stage 1 (DeepSpeed's data parallelism beside a pipeline);
#   DeepSpeed's 1F1B pipeline schedule with gradients reduced after the pipeline flush
#   (not overlapped); GPT blocks with a 4h GELU FFN and dropout; vocabulary 51,200 (GPT-2's
#   padded as Megatron pads it for TP 8); rail-optimized fabric, one ConnectX-6 per GPU.
# Pipeline sends waited for (pp_p2p_overlap false): DeepSpeed's pipeline engine
#   (deepspeed/runtime/pipe/engine.py) sends activations and gradients with p2p.send,
#   which refuses async_op and calls dist.send: each stage waits for every send.
# Software profile deepspeed-2021 (software.yaml): {role}
"""
DEEPSPEED_ROLE = {True: "a calibration run of it.", False: "held out."}


@dataclass(frozen=True)
class DeepSpeedRun:
    """One run of MT-NLG 530B's scaling table (arXiv 2201.11990, section 2.4)."""

    gpus: int
    seconds: float  # per iteration
    tflops_per_gpu: float  # achieved teraFLOP/s per GPU, with recompute FLOPs

    @property
    def name(self) -> str:
        return f"mt-nlg-530b-a100x{self.gpus}"


DEEPSPEED_RUNS = (DeepSpeedRun(2240, 60.1, 126), DeepSpeedRun(2800, 50.2, 121),
                  DeepSpeedRun(3360, 44.4, 113))


def deepspeed_plan(run: DeepSpeedRun, catalog) -> pb.DeploymentPlan:
    tp, pp, layers, batch = 8, 35, 105, 1920
    dp = run.gpus // (tp * pp)
    stack = Stack(sequence_parallel=False, flash_attention=False, recompute="full",
                  zero_stage=1, pp_p2p_overlap=False,
                  software=catalog.software_profile("deepspeed-2021"))
    replica = ReplicaReq(tuple(StageReq("A100-80GB", tp, layers // pp) for _ in range(pp)),
                         1, batch // dp)
    plan = build_plan(run.name, "", [NodeReq("A100-80GB", 8, "cx6")] * (run.gpus // 8),
                      [replica] * dp, stack=stack)
    _explicit_gpt(plan.model, layers, 20480, 128, vocab=51200, seq=2048, dropout=True)
    return plan


def _explicit_gpt(model: pb.Model, layers: int, hidden: int, heads: int, *, vocab: int,
                  seq: int, dropout: bool, ffn: int | None = None) -> None:
    model.Clear()
    model.num_layers, model.hidden_size = layers, hidden
    model.ffn_hidden_size = ffn or 4 * hidden
    model.num_attention_heads = model.num_kv_heads = heads
    model.vocab_size, model.seq_length = vocab, seq
    model.mlp, model.dropout = pb.GELU, dropout


# -- peers --------------------------------------------------------------------------------
PEER_HEADER = """\
# Peer comparison reference workload (peers.md): Llama-2-7B (32 layers, hidden 4096, FFN
# 11008 SwiGLU, 32 heads, vocabulary 32000, sequence 4096), bf16, {nodes} node(s) of 8
# A100-80GB (NVLink 300 GB/s per direction{nic_text}), global batch 64, micro-batch 1,
# Adam mixed precision, no ZeRO, no offload; layout {layout}.
# Stack: {stack_text}
# Dropout masks are counted (model dropout: true) because the peer's activation memory is
#   Korthikanti et al.'s formula, which keeps them; Llama-2 itself trains without dropout.
"""
PEER_STACK = Stack(sequence_parallel=False, flash_attention=False)
PEER_STACK_TEXT = ("the peer's assumptions (no sequence parallelism: norms and dropout "
                   "repeated on every TP\n#   rank; attention scores materialised), "
                   "{recompute}.")


def peer_plan(tp: int, pp: int, dp: int, *, stack: Stack, nodes: int = 1,
              name: str) -> pb.DeploymentPlan:
    stages = tuple(StageReq("A100-80GB", tp, 32 // pp) for _ in range(pp))
    replica = ReplicaReq(stages, 1, 64 // dp)
    plan = build_plan(name, "llama2-7b", [NodeReq("A100-80GB", 8, "cx6")] * nodes,
                      [replica] * dp, stack=stack)
    plan.model.dropout = True
    return plan


PEER_PLANS = {
    # name: (tp, pp, dp, nodes, stack, stack text)
    "llama2-7b-tp8": (8, 1, 1, 1, PEER_STACK, PEER_STACK_TEXT.format(recompute="no recompute")),
    "llama2-7b-tp8-full": (8, 1, 1, 1, Stack(sequence_parallel=False, flash_attention=False,
                                             recompute="full"),
                           PEER_STACK_TEXT.format(recompute="full recompute")),
    "llama2-7b-tp2pp2dp2": (2, 2, 2, 1, PEER_STACK,
                            PEER_STACK_TEXT.format(recompute="no recompute")),
    "llama2-7b-tp2pp2dp2-full": (2, 2, 2, 1, Stack(sequence_parallel=False,
                                                   flash_attention=False, recompute="full"),
                                 PEER_STACK_TEXT.format(recompute="full recompute")),
    "llama2-7b-64gpu-tp4dp16": (4, 1, 16, 8, PEER_STACK,
                                PEER_STACK_TEXT.format(recompute="no recompute")),
}


# -- published real runs ------------------------------------------------------------------
PUBLISHED_HEADER = """\
# Published real run (published.md): {source}
# {what}
# Stack as run: FSDP (ZeRO-3: each layer's parameters gathered before its forward and
# its backward, one layer prefetched, gradients reduce-scattered after each backward),
# flash attention, TP 1. Held out: no number of the model was set with it.
# Assumed: {assumed}
"""


def published_plans() -> dict[str, tuple[pb.DeploymentPlan, str]]:
    stack = Stack(zero_stage=3)
    out = {}
    mpt = dict(layers=32, hidden=4096, heads=32, vocab=50368, seq=2048, dropout=False)
    for gpu, nic, accum, key, what in (
            ("A100-80GB", "cx6", 2, "mpt-7b-a100x8",
             "MPT-7B, 8 x A100-80GB, seq 2048, micro-batch 6, gradient accumulation 2, no "
             "activation\n# checkpointing: 64.23% MFU, 4,641 tokens/s/GPU "
             "(mosaicml/llm-foundry, scripts/train/benchmarking)."),
            ("H100-SXM", "cx7", 2, "mpt-7b-h100x8",
             "MPT-7B, 8 x H100, seq 2048, micro-batch 6: 46.44% MFU, 10,643 tokens/s/GPU\n# "
             "(mosaicml/llm-foundry, scripts/train/benchmarking)."),
    ):
        replica = ReplicaReq((StageReq(gpu, 1, 32),), 6, accum)
        plan = build_plan(key, "", [NodeReq(gpu, 8, nic)], [replica] * 8, stack=stack)
        _explicit_gpt(plan.model, **mpt)
        assumed = ("MPT-7B as a GPT block (d_model 4096, 32 layers, 32 heads, GELU FFN "
                   "16384, vocabulary 50,368,\n#   no dropout; ALiBi's bias add is left "
                   "out), one node, " + ("gradient accumulation 2 as the A100 row"
                                         if gpu != "A100-80GB" else "the stated batch"))
        out[key] = (plan, PUBLISHED_HEADER.format(source="mosaicml/llm-foundry", what=what,
                                                  assumed=assumed))
    replica = ReplicaReq((StageReq("A100-80GB", 1, 32),), 1, 1)
    plan = build_plan("llama3-8b-a100x64", "llama3-8b", [NodeReq("A100-80GB", 8, "cx6")] * 8,
                      [replica] * 64, stack=stack)
    out["llama3-8b-a100x64"] = (plan, PUBLISHED_HEADER.format(
        source="pytorch/torchtitan, docs/performance.md",
        what="64 x A100, Llama-3-8B, FSDP2, local batch 1: 58.2% MFU.",
        assumed="A100-80GB, sequence 8192 (torchtitan's Llama 3 8B default), 8 nodes with "
                "one 200 Gb/s\n#   ConnectX-6 per GPU, rail-optimized."))
    return out


# -- NeMo 24.07 on DGX-H100, FP8 -----------------------------------------------------------
NEMO_HEADER = """\
# Published real run (published.md): NVIDIA NeMo 24.07, docs/source/performance/performance_summary.md
# {model}, {gpus} x H100 (DGX-H100), global batch {gbs}, micro-batch {mbs}, sequence {seq},
# TP {tp}, PP {pp}, CP {cp}, VP {vp}: {tokens:,} tokens/s/GPU, {tflops} model TFLOP/s/GPU.
# Stack as run: FP8 (Transformer Engine, hybrid format), flash attention, the distributed
# optimizer (ZeRO-1) with overlapped gradient reduce-scatters and parameter all-gathers{sp}{cp_text}.
# {role}
# Software profile nemo-24.07 (software.yaml).
# Assumed: no activation recompute (NeMo's performance recipes of that release); one
#   400 Gb/s ConnectX-7 per GPU, rail-optimized (DGX-H100).
"""


@dataclass(frozen=True)
class NemoRun:
    """One FP8 row of NeMo 24.07's DGX-H100 table."""

    name: str
    model: str
    gpus: int
    gbs: int
    mbs: int
    seq: int
    tp: int
    pp: int
    vp: int
    tokens_per_s_per_gpu: int
    tflops: int
    calibration: bool  # sets the Hopper FP8 GEMM fraction; else held out
    cp: int = 1  # context parallelism


NEMO_RUNS = (
    NemoRun("nemo-llama2-7b-h100x8", "llama2-7b", 8, 128, 1, 4096, 1, 1, 1, 16847, 776, True),
    NemoRun("nemo-llama2-13b-h100x16", "llama2-13b", 16, 128, 1, 4096, 1, 4, 10, 8646, 754,
            True),
    NemoRun("nemo-llama2-70b-h100x64", "llama2-70b", 64, 128, 1, 4096, 4, 4, 20, 1707, 759,
            False),
    NemoRun("nemo-gpt3-175b-h100x512", "gpt3-175b", 512, 2048, 2, 2048, 4, 8, 6, 782, 842,
            False),
    NemoRun("nemo-llama3-8b-h100x8", "llama3-8b", 8, 128, 1, 8192, 1, 1, 1, 12036, 697,
            False, cp=2),
    NemoRun("nemo-llama3-70b-h100x64", "llama3-70b", 64, 128, 1, 8192, 4, 4, 5, 1533, 738,
            False, cp=2),
)
#: What a context-parallel row adds to its stack's description.
NEMO_CP_TEXT = (",\n# context parallelism as Transformer Engine's ring attention (p2p: K/V "
                "blocks passed around\n# the CP ranks beside the attention compute), each "
                "device group's tp x cp GPUs in one node")
NEMO_ROLE = {True: "Calibration: with the other TP-1 row, it sets the Hopper FP8 GEMM fraction "
                   "(gpus.yaml [CAL-FP8]).",
             False: "Held out: no number of the model was set with it."}


def nemo_plan(run: NemoRun, catalog) -> pb.DeploymentPlan:
    dp = run.gpus // (run.tp * run.pp * run.cp)
    layers = catalog.models[run.model].num_layers
    stack = Stack(zero_stage=1, dp_overlap=True, virtual_pipeline_stages=run.vp,
                  precision="fp8", tp_comm_overlap=run.tp > 1,
                  software=catalog.software_profile("nemo-24.07"))
    replica = ReplicaReq(tuple(StageReq("H100-SXM", run.tp, layers // run.pp)
                               for _ in range(run.pp)), run.mbs, run.gbs // dp // run.mbs)
    return build_plan(run.name, run.model, [NodeReq("H100-SXM", 8, "cx7")] * (run.gpus // 8),
                      [replica] * dp, stack=stack, seq_length=run.seq, context_parallel=run.cp)


def _write(path: Path, header: str, plan: pb.DeploymentPlan) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + plan_to_text(plan), encoding="utf-8")


def main() -> None:
    catalog = load_catalog()
    megatron_2021 = catalog.software_profile("megatron-lm-2021")
    for config in PAPER_CONFIGS:
        for regime, (_, _, balanced) in PAPER_REGIMES.items():
            header = PAPER_HEADER.format(name=config.name, cluster=config.cluster,
                                         distribution=config.distribution, regime=regime,
                                         gbs=PAPER_GBS, regime_text=REGIME_TEXT[regime],
                                         split_text=SPLIT_TEXT[balanced])
            _write(SPACES / "paper" / f"{config.name.lower()}-{regime}.pbtxt", header,
                   paper_plan(config, regime, catalog))
    for run in MEGATRON_RUNS + MEGATRON_HELD_OUT:
        role, role_text = MEGATRON_KIND[run in MEGATRON_RUNS]
        header = MEGATRON_HEADER.format(
            params=run.name.removeprefix("gpt-").upper(), gpus=run.gpus, tp=run.tp, pp=run.pp,
            batch=run.batch, tflops=run.tflops_per_gpu, micro=run.micro_batch,
            ddp_text=DDP_TEXT[run.ddp], role=role, role_text=role_text,
            sends_text=MEGATRON_SENDS_TEXT if run.pp > 1 else "",
            profile_role=MEGATRON_ROLE[f"megatron/{run.name}" in megatron_2021.calibrated_on],
            vp_text=(f"\n# Interleaved 1F1B, {run.vp} model chunks per stage (the script's "
                     f"--num-layers-per-virtual-pipeline-stage {run.layers // run.pp // run.vp})."
                     if run.vp > 1 else ""))
        _write(SPACES / "megatron" / f"{run.name}.pbtxt", header, megatron_plan(run, catalog))
    deepspeed_2021 = catalog.software_profile("deepspeed-2021")
    for run in DEEPSPEED_RUNS:
        header = DEEPSPEED_HEADER.format(
            nodes=run.gpus // 8, gpus=run.gpus, seconds=run.seconds, tflops=run.tflops_per_gpu,
            role=DEEPSPEED_ROLE[f"deepspeed/{run.name}" in deepspeed_2021.calibrated_on])
        _write(SPACES / "deepspeed" / f"{run.name}.pbtxt", header, deepspeed_plan(run, catalog))
    for name, (tp, pp, dp, nodes, stack, stack_text) in PEER_PLANS.items():
        header = PEER_HEADER.format(
            nodes=nodes, layout=f"TP {tp}, PP {pp}, DP {dp}", stack_text=stack_text,
            nic_text=", one 200 Gb/s ConnectX-6 per GPU" if nodes > 1 else "")
        _write(SPACES / "peers" / f"{name}.pbtxt", header,
               peer_plan(tp, pp, dp, stack=stack, nodes=nodes, name=name))
    for key, (plan, header) in published_plans().items():
        _write(SPACES / "published" / f"{key}.pbtxt", header, plan)
    for run in NEMO_RUNS:
        header = NEMO_HEADER.format(
            model=run.model, gpus=run.gpus, gbs=run.gbs, mbs=run.mbs, seq=run.seq, tp=run.tp,
            pp=run.pp, cp=run.cp, vp=run.vp, tokens=run.tokens_per_s_per_gpu, tflops=run.tflops,
            cp_text=NEMO_CP_TEXT if run.cp > 1 else "",
            sp=(",\n# sequence parallelism, TP communication overlapped with the GEMMs (tp_comm_overlap)"
                if run.tp > 1 else ""), role=NEMO_ROLE[run.calibration])
        _write(SPACES / "published" / f"{run.name}.pbtxt", header, nemo_plan(run, catalog))


if __name__ == "__main__":
    main()
