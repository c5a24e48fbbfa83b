"""An observer that keeps every max-min allocation of a run, and checks on it."""

from __future__ import annotations

import numpy as np

from xsweep.plan.program import Program
from xsweep.sim import Observer


class RateLog(Observer):
    """Every rate allocation as (time, flows, rates), copied."""

    def __init__(self) -> None:
        self.snapshots: list[tuple[float, np.ndarray, np.ndarray]] = []

    def on_rates(self, time_s, flows, rates_bytes_per_s):
        self.snapshots.append((time_s, flows.copy(), rates_bytes_per_s.copy()))

    def link_loads(self, program: Program, flows, rates) -> np.ndarray:
        """Sum of the rates of ``flows`` on each link."""
        owner = np.repeat(np.arange(flows.shape[0]), np.diff(program.path_ptr)[flows])
        links = np.concatenate([program.path(int(f)) for f in flows]) if flows.size else owner
        return np.bincount(links, weights=rates[owner], minlength=program.num_links)

    def delivered_bytes(self, program: Program) -> np.ndarray:
        """Bytes each flow transferred: its rate integrated between allocations."""
        delivered = np.zeros(program.num_flows)
        for (t, flows, rates), (t_next, _, _) in zip(self.snapshots, self.snapshots[1:],
                                                     strict=False):
            delivered[flows] += rates * (t_next - t)
        return delivered
