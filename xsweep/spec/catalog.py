"""Hardware and model catalogs: GPUs, NICs and model presets.

Defaults ship as package data (``xsweep/spec/data/*.yaml``, every number with its
source in a comment); users merge their own YAML over them with ``--catalog``.
Units live in the field names: ``gbps`` is gigabits per second, ``gb`` gigabytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_bf16_tflops: float  # dense BF16 tensor-core peak, TFLOP/s
    hbm_gb: float  # HBM capacity, GB (1e9 bytes)
    hbm_tb_per_s: float  # HBM bandwidth, TB/s (1e12 bytes/s)
    scale_up_gbps: float  # scale-up (NVLink) bandwidth per GPU, Gb/s
    scale_up_latency_ns: float
    pcie_gbps: float  # GPU <-> NIC PCIe bandwidth, Gb/s
    pcie_latency_ns: float  # one traversal of the PCIe path (switch in and out)
    default_nic: str
    capex_usd: float  # purchase price per GPU, server share included
    power_w: float  # per GPU, server share included
    cloud_usd_per_hour: float  # on-demand price per GPU-hour
    efficiency: float  # achieved fraction of peak on transformer GEMMs

    @property
    def peak_flops(self) -> float:
        return self.peak_bf16_tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_per_s * 1e12


@dataclass(frozen=True)
class NicSpec:
    name: str
    bandwidth_gbps: float
    latency_ns: float


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int
    seq_length: int
    mlp: str  # "gelu" (two FFN matrices) or "swiglu" (three)
