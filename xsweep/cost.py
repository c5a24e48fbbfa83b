"""Total cost of ownership: what a cluster costs per hour and what one training run costs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from xsweep.spec.catalog import GpuSpec

HOURS_PER_YEAR = 24 * 365


@dataclass(frozen=True)
class CostModel:
    """How hardware turns into money.

    ``pricing="capex"``: purchase price amortized linearly over ``amortization_years``
    plus electricity (power x PUE x price). ``pricing="cloud"``: the catalog's on-demand
    price per GPU-hour, which already includes power.
    """

    pricing: str = "capex"
    amortization_years: float = 4.0
    electricity_usd_per_kwh: float = 0.10
    pue: float = 1.3


DEFAULT_COST = CostModel()


def cluster_rates(gpus: Iterable[GpuSpec], model: CostModel = DEFAULT_COST,
                  network_capex_usd: float = 0.0) -> dict[str, float]:
    """Capex and hourly cost rate of a cluster's GPUs (one entry per GPU) and network ports."""
    gpus = list(gpus)
    capex = float(sum(g.capex_usd for g in gpus)) + network_capex_usd
    if model.pricing == "cloud":
        rate = float(sum(g.cloud_usd_per_hour for g in gpus))
    elif model.pricing == "capex":
        amortized = capex / (model.amortization_years * HOURS_PER_YEAR)
        power_kw = sum(g.power_w for g in gpus) / 1000.0
        rate = amortized + power_kw * model.pue * model.electricity_usd_per_kwh
    else:
        raise ValueError(f"unknown pricing {model.pricing!r}")
    return {"capex_usd": capex, "cost_rate_usd_per_hour": rate}


def node_rates(nodes, model: CostModel = DEFAULT_COST) -> dict[str, float]:
    """:func:`cluster_rates` of topology nodes (``NodeHw``): every GPU and NIC port counts,
    whether or not the plan keeps it busy, since the whole node is bought or rented."""
    gpus = [n.gpu for n in nodes for _ in range(n.num_gpus)]
    ports = sum(n.nic.capex_usd * n.num_gpus for n in nodes)
    return cluster_rates(gpus, model, ports if model.pricing == "capex" else 0.0)


def run_costs(iteration_time_s, tokens_per_iteration, total_tokens, capex_usd,
              cost_rate_usd_per_hour) -> dict[str, np.ndarray]:
    """Cost of training ``total_tokens``, and of a million tokens, element-wise over arrays
    (or numbers).

    ``cost_per_million_tokens_usd`` is the hourly cost rate divided by the tokens trained
    per hour (``tokens_per_iteration / iteration_time_s x 3600``), times a million: it
    needs no run length, so it is known without ``total_tokens``. ``paper_tco`` is the
    seed paper's figure of merit, capex divided by the training time in hours (lower is
    better only for equal capex; kept for comparison). Without ``total_tokens`` (0) the
    run's length is unknown: its three figures are NaN.
    """
    t = np.asarray(iteration_time_s, dtype=float)
    tokens = np.asarray(tokens_per_iteration, dtype=float)
    total = np.asarray(total_tokens, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        iterations = np.where(tokens > 0, total / np.where(tokens > 0, tokens, 1.0), 0.0)
        hours = t * iterations / 3600.0
        tco = np.where(hours > 0, capex_usd / np.where(hours > 0, hours, 1.0), np.inf)
        hours_per_token = np.where(tokens > 0, t / 3600.0 / np.where(tokens > 0, tokens, 1.0),
                                   np.nan)
    unknown = total <= 0
    return {
        "training_time_s": np.where(unknown, np.nan, hours * 3600.0),
        "cost_per_run_usd": np.where(unknown, np.nan, hours * cost_rate_usd_per_hour),
        "cost_per_million_tokens_usd": hours_per_token * 1e6 * np.asarray(
            cost_rate_usd_per_hour, dtype=float),
        "paper_tco": np.where(unknown, np.nan, tco),
    }
