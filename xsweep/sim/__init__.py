"""The exact event-driven simulator of the program IR, its metrics and its trace export.

Public API: :func:`simulate`, :func:`rank_metrics`, :func:`summary`,
:func:`write_trace`, :class:`SimResult` and :class:`Observer` (to watch a run,
e.g. every max-min rate allocation).
"""

from __future__ import annotations

from xsweep.plan.program import Program
from xsweep.sim.engine import Simulation
from xsweep.sim.events import Observer
from xsweep.sim.result import SimResult, rank_metrics, summary
from xsweep.sim.trace import write_trace

__all__ = ["Observer", "SimResult", "rank_metrics", "simulate", "summary", "write_trace"]


def simulate(program: Program, observers: tuple[Observer, ...] = ()) -> SimResult:
    """Run one iteration of ``program`` exactly and return its timeline."""
    return Simulation(program, observers).run()
