"""Invariants of whole simulations of random programs (Hypothesis)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.sim.rate_log import RateLog
from tests.support.programs import random_program
from xsweep.plan.program import TaskKind
from xsweep.sim import rank_metrics, simulate, summary

seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=60, deadline=None)
@given(seeds)
def test_rates_respect_capacity_and_every_flow_has_a_bottleneck(seed):
    program = random_program(seed)
    log = RateLog()
    simulate(program, (log,))
    cap = program.link_capacity
    for _, flows, rates in log.snapshots:
        assert np.all(rates > 0)
        load = log.link_loads(program, flows, rates)
        assert np.all(load <= cap * (1 + 1e-9))
        for f, rate in zip(flows.tolist(), rates, strict=True):
            bottlenecked = False
            for x in program.path(f).tolist():
                on_link = [r for g, r in zip(flows.tolist(), rates, strict=True)
                           if x in program.path(g)]
                if load[x] >= cap[x] * (1 - 1e-9) and rate >= max(on_link) * (1 - 1e-9):
                    bottlenecked = True
            assert bottlenecked, f"flow {f} has no bottleneck"


@settings(max_examples=60, deadline=None)
@given(seeds)
def test_bytes_delivered_equal_bytes_sent(seed):
    program = random_program(seed)
    log = RateLog()
    result = simulate(program, (log,))
    if log.snapshots:  # the last allocation is the empty one after the last transfer
        assert log.snapshots[-1][1].size == 0
    assert np.allclose(log.delivered_bytes(program), program.flow_bytes, rtol=1e-9, atol=1e-3)
    # and every flow ran inside its task, after its latency
    task = np.repeat(np.arange(program.num_tasks), np.diff(program.flow_ptr))
    assert np.all(result.flow_start_s == result.task_start_s[task])
    assert np.allclose(result.flow_active_s, result.flow_start_s + program.flow_latency_s,
                       rtol=1e-12)
    assert np.all(result.flow_end_s >= result.flow_active_s)
    assert np.all(result.flow_end_s <= result.task_end_s[task])


@settings(max_examples=60, deadline=None)
@given(seeds)
def test_schedule_respects_the_program(seed):
    program = random_program(seed)
    r = simulate(program)
    for t in range(program.num_tasks):
        deps = program.deps(t)
        ready = r.task_end_s[deps].max() if deps.size else 0.0
        assert r.task_start_s[t] == ready  # a task starts the moment it is ready
        if program.task_kind[t] == TaskKind.COMPUTE:
            assert r.task_end_s[t] == r.task_start_s[t] + program.task_duration_s[t]
        else:
            flows = list(program.flows(t))
            last = r.flow_end_s[flows].max() if flows else r.task_start_s[t]
            assert r.task_end_s[t] == last
    assert r.iteration_time_s == r.task_end_s.max()


@settings(max_examples=40, deadline=None)
@given(seeds, st.data())
def test_more_bandwidth_never_slows_a_contention_free_program(seed, data):
    program = random_program(seed, private_links=True)
    assume(program.num_links > 0)
    before = simulate(program)
    link = data.draw(st.integers(0, program.num_links - 1))
    factor = data.draw(st.floats(1.0, 8.0))
    capacity = program.link_capacity.copy()
    capacity[link] *= factor
    after = simulate(dataclasses.replace(program, link_capacity=capacity))
    assert np.all(after.task_end_s <= before.task_end_s * (1 + 1e-12))
    assert after.iteration_time_s <= before.iteration_time_s * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(seeds)
def test_two_runs_are_identical(seed):
    program = random_program(seed)

    def report():
        result = simulate(program)
        return json.dumps({"ranks": rank_metrics(program, result),
                           "summary": summary(program, result),
                           "start": result.task_start_s.tolist(),
                           "end": result.task_end_s.tolist(),
                           "flow_end": result.flow_end_s.tolist(),
                           "events": result.num_events}, sort_keys=True)

    assert report() == report()
