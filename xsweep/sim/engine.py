"""The exact event-driven simulator of the program IR (semantics: ``xsweep.plan.program``).

Tasks and flow latencies are events on the :class:`~xsweep.sim.events.EventQueue`.
Transferring flows are fluid: their rates are the exact max-min fair allocation
(:mod:`xsweep.sim.maxmin`), recomputed once per instant at which a flow started
or stopped transferring, after every event of that instant has been applied. A
flow's finish time follows from its remaining bytes and rate; the engine keeps
these per flow in arrays and asks only for the earliest, so flows whose rates
did not change cost nothing at an instant.
"""

from __future__ import annotations

import math

import numpy as np

from xsweep.plan.program import Program, TaskKind
from xsweep.sim.events import EventQueue, Observer
from xsweep.sim.maxmin import LinkIncidence
from xsweep.sim.result import SimResult

#: A flow whose remaining bytes are below this fraction of its size at an instant
#: has finished at that instant (so symmetric flows finish together despite rounding).
FINISH_REL_TOL = 1e-12

# event kinds, which are also their priorities within one instant
_TASK_END = 0
_FLOW_ACTIVE = 1


class Simulation:
    """One run of one program; call :meth:`run` once."""

    def __init__(self, program: Program, observers: tuple[Observer, ...] = ()):
        p = program
        self.program = p
        self.observers = tuple(observers)
        self.queue = EventQueue()
        T, F = p.num_tasks, p.num_flows
        order = np.argsort(p.dep_idx, kind="stable")
        owner = np.repeat(np.arange(T), np.diff(p.dep_ptr))
        succ_ptr = np.searchsorted(p.dep_idx[order], np.arange(T + 1)).tolist()
        succ = owner[order].tolist()
        self._successors = [succ[succ_ptr[t]:succ_ptr[t + 1]] for t in range(T)]
        self._waiting = np.diff(p.dep_ptr).tolist()
        self._is_compute = (p.task_kind == TaskKind.COMPUTE).tolist()
        self._duration_s = p.task_duration_s.tolist()
        self._flow_ptr = p.flow_ptr.tolist()
        self._flows_left = np.diff(p.flow_ptr).tolist()
        self._flow_task = np.repeat(np.arange(T), np.diff(p.flow_ptr)).tolist()
        self._flow_latency_s = p.flow_latency_s.tolist()
        self._flow_bytes_list = p.flow_bytes.tolist()
        self._flow_bytes = p.flow_bytes
        self._links = LinkIncidence(p.path_ptr, p.path_links, p.link_capacity)

        self.task_start_s = [math.nan] * T
        self.task_end_s = [math.nan] * T
        self.flow_start_s = np.full(F, np.nan)
        self.flow_active_s = np.full(F, np.nan)
        self.flow_end_s = np.full(F, np.nan)
        # transferring flows: sorted ids, and per flow its rate, bytes left at `stamp`,
        # finish time and finishing tolerance (seconds)
        self._active = np.zeros(0, np.int64)
        self._arrived: list[int] = []
        self._rate = np.zeros(F)
        self._left = np.zeros(F)
        self._stamp_s = np.zeros(F)
        self._finish_s = np.full(F, np.inf)
        self._slack_s = np.zeros(F)
        self._next_finish_s = math.inf
        self._next_due_s = math.inf
        self._flows_changed = False
        self.num_events = 0
        self.num_rate_updates = 0

    # -- tasks -----------------------------------------------------------------------------
    def _start_task(self, t: int) -> None:
        now = self.queue.now_s
        self.task_start_s[t] = now
        for obs in self.observers:
            obs.on_task_start(now, t)
        if self._is_compute[t]:
            self.queue.schedule(now + self._duration_s[t], _TASK_END, _TASK_END, t)
            return
        lo, hi = self._flow_ptr[t], self._flow_ptr[t + 1]
        if lo == hi:
            self.queue.schedule(now, _TASK_END, _TASK_END, t)
            return
        self.flow_start_s[lo:hi] = now
        latency = self._flow_latency_s
        for f in range(lo, hi):
            self.queue.schedule(now + latency[f], _FLOW_ACTIVE, _FLOW_ACTIVE, f)

    def _end_task(self, t: int) -> None:
        now = self.queue.now_s
        self.task_end_s[t] = now
        for obs in self.observers:
            obs.on_task_end(now, t)
        waiting = self._waiting
        for s in self._successors[t]:
            waiting[s] -= 1
            if waiting[s] == 0:
                self._start_task(s)

    # -- flows -----------------------------------------------------------------------------
    def _flow_active(self, f: int) -> None:
        now = self.queue.now_s
        self.flow_active_s[f] = now
        for obs in self.observers:
            obs.on_flow_active(now, f)
        if self._flow_bytes_list[f] > 0.0:
            self._arrived.append(f)
            self._left[f] = self._flow_bytes_list[f]
            self._stamp_s[f] = now
            self._flows_changed = True
        else:
            self._flow_end(f)

    def _flow_end(self, f: int) -> None:
        now = self.queue.now_s
        self.flow_end_s[f] = now
        for obs in self.observers:
            obs.on_flow_end(now, f)
        t = self._flow_task[f]
        self._flows_left[t] -= 1
        if self._flows_left[t] == 0:
            self._end_task(t)

    def _finish_due_flows(self) -> None:
        """End every transferring flow that is finished (within tolerance) now."""
        now = self.queue.now_s
        if self._next_due_s > now:
            return
        active = self._active
        due = self._finish_s[active] - self._slack_s[active] <= now
        done = active[due]
        self._active = active[~due]
        self._rate[done] = 0.0
        self._left[done] = 0.0
        self._finish_s[done] = np.inf
        self._flows_changed = True
        self.num_events += done.shape[0]
        for f in done.tolist():
            self._flow_end(f)

    def _update_rates(self) -> None:
        """Recompute max-min rates and finish times after the flow set changed."""
        now = self.queue.now_s
        if self._arrived:
            arrived = np.array(self._arrived, np.int64)
            self._arrived.clear()
            self._active = np.union1d(self._active, arrived)
        active = self._active
        new_rate = self._links.rates(active)
        changed = new_rate != self._rate[active]
        flows, rate = active[changed], new_rate[changed]
        left = self._left[flows] - self._rate[flows] * (now - self._stamp_s[flows])
        np.maximum(left, 0.0, out=left)
        self._left[flows] = left
        self._stamp_s[flows] = now
        self._rate[flows] = rate
        self._finish_s[flows] = now + left / rate
        self._slack_s[flows] = FINISH_REL_TOL * self._flow_bytes[flows] / rate
        if active.shape[0]:
            finish = self._finish_s[active]
            self._next_finish_s = float(finish.min())
            self._next_due_s = float((finish - self._slack_s[active]).min())
        else:
            self._next_finish_s = self._next_due_s = math.inf
        self._flows_changed = False
        self.num_rate_updates += 1
        for obs in self.observers:
            obs.on_rates(now, active, self._rate[active])

    # -- main loop -------------------------------------------------------------------------
    def run(self) -> SimResult:
        """Simulate the iteration and return its timeline."""
        queue = self.queue
        for t, n in enumerate(self._waiting):
            if n == 0:
                self._start_task(t)
        while True:
            now = min(queue.next_time_s(), self._next_finish_s)
            if now == math.inf:
                break
            queue.advance(now)
            self._finish_due_flows()
            while (event := queue.pop_due()) is not None:
                self.num_events += 1
                kind, item = event
                if kind == _TASK_END:
                    self._end_task(item)
                else:
                    self._flow_active(item)
            if self._flows_changed:
                self._update_rates()
        start = np.array(self.task_start_s, np.float64)
        end = np.array(self.task_end_s, np.float64)
        assert not np.isnan(end).any(), "some tasks never finished"
        return SimResult(
            task_start_s=start, task_end_s=end, flow_start_s=self.flow_start_s,
            flow_active_s=self.flow_active_s, flow_end_s=self.flow_end_s,
            iteration_time_s=float(end.max()) if end.shape[0] else 0.0,
            num_events=self.num_events, num_rate_updates=self.num_rate_updates,
        )
