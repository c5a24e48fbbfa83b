"""The accepted range of every number a plan, a catalog, a profile or a sweep holds.

Each number must be finite and inside its range (``docs/formats.md`` lists them).
The bounds keep every value the evaluators compute finite in float32: no time,
size or price can overflow or divide by zero, and no per-layer or per-GPU list can
grow past what a real job needs. They are far from anything deployed today: 4,096
layers, million-wide hidden sizes, 16 M-token sequences, 10 Pb/s links.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xsweep.errors import InputError


@dataclass(frozen=True)
class Range:
    """``low <= value <= high``; with ``zero_is_default``, 0 (meaning "unset") too."""

    low: float
    high: float
    integer: bool = False
    zero_is_default: bool = False

    def describe(self) -> str:
        text = f"between {_number(self.low)} and {_number(self.high)}"
        return f"0 (the default) or {text}" if self.zero_is_default else text

    def check(self, value: object, file: str | None, field: str) -> None:
        """Raise InputError unless ``value`` is a finite number in the range."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(file, field, value, "expected a number")
        if not math.isfinite(value):
            raise InputError(file, field, value, "must be a finite number")
        if self.integer and not float(value).is_integer():
            raise InputError(file, field, value, "expected an integer")
        if self.zero_is_default and value == 0:
            return
        if value < self.low:
            unset = " (or 0 for the default)" if self.zero_is_default else ""
            raise InputError(file, field, value, f"must be at least {_number(self.low)}{unset}")
        if value > self.high:
            raise InputError(file, field, value, f"must be at most {_number(self.high)}")


def _number(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e10:
        return f"{int(x):,}"
    return f"{x:g}"


def count(high: float) -> Range:
    """A positive integer up to ``high``."""
    return Range(1, high, integer=True)


# Bounds shared by plans, catalogs, profiles and sweeps.
MAX_LAYERS = 4_096
MAX_HEADS = 16_384  # attention heads, hence TP degree
MAX_MICRO_BATCH_SIZE = 65_536
MAX_NODES = 65_536  # nodes of a sweep's pool, GPUs of one of its nodes
MAX_SITES = 64  # distinct ``cluster`` indices: links between sites grow with their square
BANDWIDTH_GBPS = Range(1e-3, 1e7)  # 1 Mb/s .. 10 Pb/s
LATENCY_NS = Range(0, 1e9)  # up to one second
POSITIVE_LATENCY_NS = Range(1e-3, 1e9)
PRICE_USD = Range(0, 1e9)
FRACTION = Range(1e-3, 1)  # efficiencies: achieved fractions of a peak
LAUNCH_US = Range(0, 1e6)  # fixed time of one NCCL operation, up to a second

MODEL = {
    "num_layers": count(MAX_LAYERS),
    "hidden_size": count(2**20),
    "ffn_hidden_size": count(2**22),
    "num_attention_heads": count(MAX_HEADS),
    "num_kv_heads": count(MAX_HEADS),
    "vocab_size": count(2**24),
    "seq_length": count(2**24),
}

#: Mixture-of-experts fields of a model; 0 is a dense model's value (checked against each
#: other by ``catalog.check_moe_fields``).
MOE_MODEL = {
    "num_experts": Range(0, 2**16, integer=True),
    "moe_top_k": Range(0, 2**16, integer=True),
    "expert_ffn_hidden_size": Range(0, 2**22, integer=True),
    "num_shared_experts": Range(0, 2**10, integer=True),
    "shared_expert_ffn_hidden_size": Range(0, 2**22, integer=True),
    "moe_first_dense_layers": Range(0, MAX_LAYERS, integer=True),
    "moe_capacity_factor": Range(0, 2**10),
    "moe_max_nodes": Range(0, 2**16, integer=True),
}

PLAN = {
    "training.global_batch_size": count(1e15),
    "training.virtual_pipeline_stages": Range(1, MAX_LAYERS, integer=True, zero_is_default=True),
    "training.dp_bucket_params": Range(1, 1e15, integer=True, zero_is_default=True),
    "training.total_tokens": Range(0, 1e18),
    "training.expert_parallel": Range(1, 2**16, integer=True, zero_is_default=True),
    "training.moe_imbalance": Range(1, 2**10, zero_is_default=True),
    "scale_up.bandwidth_gbps": Range(BANDWIDTH_GBPS.low, BANDWIDTH_GBPS.high,
                                     zero_is_default=True),
    "scale_up.latency_ns": LATENCY_NS,
    "cluster": Range(0, MAX_SITES - 1, integer=True),
    "fabric.oversubscription": Range(1, 1e4, zero_is_default=True),
    "fabric.nodes_per_rack": Range(1, 2**20, integer=True, zero_is_default=True),
    "fabric.switch_latency_ns": LATENCY_NS,
    "inter_cluster.bandwidth_gbps": Range(BANDWIDTH_GBPS.low, BANDWIDTH_GBPS.high,
                                          zero_is_default=True),
    "inter_cluster.latency_ns": LATENCY_NS,
    "micro_batch_size": count(MAX_MICRO_BATCH_SIZE),
}

CATALOG = {
    "gpus": {
        "peak_bf16_tflops": Range(1e-3, 1e6),
        "hbm_gib": Range(1e-3, 1e6),
        "hbm_tb_per_s": Range(1e-6, 1e4),
        "scale_up_gbps": BANDWIDTH_GBPS,
        "scale_up_latency_ns": POSITIVE_LATENCY_NS,
        "pcie_gbps": BANDWIDTH_GBPS,
        "pcie_latency_ns": POSITIVE_LATENCY_NS,
        "capex_usd": PRICE_USD,
        "power_w": Range(1e-3, 1e6),
        "cloud_usd_per_hour": Range(0, 1e6),
        "num_sms": count(2**16),
        "gemm_efficiency": FRACTION,
        "flash_attention_efficiency": FRACTION,
        "hbm_efficiency": FRACTION,
        "peak_fp8_tflops": Range(1e-3, 1e6, zero_is_default=True),
        "fp8_gemm_efficiency": Range(FRACTION.low, FRACTION.high, zero_is_default=True),
    },
    "nics": {
        "bandwidth_gbps": BANDWIDTH_GBPS,
        "latency_ns": POSITIVE_LATENCY_NS,
        "bus_efficiency": FRACTION,
        "launch_latency_us": LAUNCH_US,
        "capex_usd": PRICE_USD,
    },
    "links": {
        "bus_efficiency": FRACTION,
        "launch_latency_us": LAUNCH_US,
    },
    "models": {**MODEL, **MOE_MODEL},
    # a software profile's factors only slow the catalog's rates, so a factor times any
    # GPU's fraction stays a fraction (docs/model.md, "Software profiles")
    "software": {
        "gemm_factor": FRACTION,
        "attention_factor": FRACTION,
    },
}

PRICING = ("capex", "cloud")
COST = {
    "amortization_years": Range(1e-3, 100),
    "electricity_usd_per_kwh": Range(0, 1000),
    "pue": Range(1, 10),
}

PROFILE = {
    "tp": count(MAX_HEADS),
    "micro_batch_size": count(MAX_MICRO_BATCH_SIZE),
    "forward_s": Range(1e-12, 1e6),
    "backward_s": Range(1e-12, 1e6),
}
