"""The simulator reproduces the closed forms where they hold (relative error 1e-9)."""

from __future__ import annotations

import pytest

from tests.sim.rate_log import RateLog
from tests.support.programs import (
    bottleneck_program,
    gpipe_program,
    parking_lot_program,
    parking_lot_rates,
    ring_allreduce_program,
    two_replica_dp_program,
)
from xsweep.plan.program import Category, ProgramBuilder
from xsweep.sim import rank_metrics, simulate

REL = 1e-9


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_ring_allreduce_time(k):
    size, bandwidth, alpha = 1.5e9, 50e9, 3e-6
    result = simulate(ring_allreduce_program(k, size, bandwidth, alpha))
    assert result.iteration_time_s == pytest.approx(2 * (k - 1) * (alpha + size / (k * bandwidth)),
                                                    rel=REL)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m", "t_f", "t_b"),
                         [(1, 1, 1.0, 2.0), (4, 8, 0.01, 0.02), (3, 2, 0.7, 0.3), (8, 16, 1.0, 1.0)])
def test_pipeline_time(schedule, p, m, t_f, t_b):
    program = gpipe_program(p, m, t_f, t_b, schedule)
    result = simulate(program)
    expected = (m + p - 1) * (t_f + t_b)
    assert result.iteration_time_s == pytest.approx(expected, rel=REL)
    # every stage computes m (t_f + t_b) and idles for the rest of the iteration
    for row in rank_metrics(program, result):
        assert row["busy_s"] == pytest.approx(m * (t_f + t_b), rel=REL)
        assert row["idle_s"] == pytest.approx((p - 1) * (t_f + t_b), rel=REL, abs=1e-12)


@pytest.mark.parametrize(("p", "m", "v"), [(2, 4, 2), (4, 8, 2), (4, 8, 4), (3, 9, 3), (4, 4, 2)])
def test_interleaving_divides_the_1f1b_bubble_by_the_virtual_stages(p, m, v):
    """Megatron's interleaved 1F1B on equal stages: the bubble (p-1)(t_f + t_b) of 1F1B
    becomes (p-1)(t_f + t_b) / v (Narayanan et al., 2021, section 2.2.2)."""
    t_f, t_b = 0.010, 0.021
    program = gpipe_program(p, m, t_f, t_b, "1f1b", virtual_stages=v)
    result = simulate(program)
    assert result.iteration_time_s == pytest.approx(m * (t_f + t_b) + (p - 1) * (t_f + t_b) / v,
                                                    rel=REL)
    for row in rank_metrics(program, result):
        assert row["busy_s"] == pytest.approx(m * (t_f + t_b), rel=REL)
        assert row["idle_s"] == pytest.approx((p - 1) * (t_f + t_b) / v, rel=REL)


def test_gpipe_bubble_per_stage():
    """GPipe: stage s waits (p-1)(t_f + t_b) - s t_b before its last backward."""
    p, m, t_f, t_b = 4, 6, 1.0, 2.0
    program = gpipe_program(p, m, t_f, t_b)
    for row in rank_metrics(program, simulate(program)):
        s = row["stream"]
        assert row["bubble_s"] == pytest.approx((p - 1) * (t_f + t_b) - s * t_b, rel=REL)
        assert row["straggler_wait_s"] == 0.0
        assert [row[f"exposed_{k}_s"] for k in ("tp", "pp", "reshard", "dp")] == [0.0] * 4


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64])
def test_flows_on_one_bottleneck_share_it_equally(n):
    capacity, size, latency = 12.5e9, 2e9, 4e-6
    log = RateLog()
    result = simulate(bottleneck_program(n, capacity, size, latency), (log,))
    first_time, flows, rates = log.snapshots[0]
    assert first_time == latency and flows.tolist() == list(range(n))
    assert rates == pytest.approx([capacity / n] * n, rel=REL)
    expected_end = latency + n * size / capacity
    assert result.flow_end_s == pytest.approx([expected_end] * n, rel=REL)
    assert result.iteration_time_s == pytest.approx(expected_end, rel=REL)
    assert len(log.snapshots) == 2  # symmetric flows finish at one instant


@pytest.mark.parametrize(("capacities", "short_flows"),
                         [((1e9, 1e9), (2, 1)), ((1e9, 1e9), (1, 3)), ((3e9, 1e9), (2, 1)),
                          ((1e9, 4e9), (1, 1))])
def test_parking_lot_rates(capacities, short_flows):
    log = RateLog()
    program = parking_lot_program(capacities, short_flows)
    simulate(program, (log,))
    _, flows, rates = log.snapshots[0]
    long_rate, short0, short1 = parking_lot_rates(capacities, short_flows)
    a, c = short_flows
    assert flows.tolist() == list(range(1 + a + c))
    assert rates == pytest.approx([long_rate] + [short0] * a + [short1] * c, rel=REL)


def test_parking_lot_textbook_values():
    """One long flow and two short flows on link 0, one on link 1, unit capacities."""
    assert parking_lot_rates((1.0, 1.0), (2, 1)) == pytest.approx((1 / 3, 1 / 3, 2 / 3))


@pytest.mark.parametrize("delta", [0.0, 1e-4, 0.005, 0.3])
def test_straggler_wait_is_the_replica_gap(delta):
    alpha, dp_bytes, bandwidth = 5e-6, 0.5e9, 25e9
    program = two_replica_dp_program(delta, alpha_s=alpha, dp_bytes=dp_bytes,
                                     bandwidth_bytes_per_s=bandwidth)
    rows = rank_metrics(program, simulate(program))
    dp_time = 2 * (alpha + dp_bytes / 2 / bandwidth)
    for row in rows:
        fast = row["stream"] == 0
        assert row["straggler_wait_s"] == pytest.approx(delta if fast else 0.0, rel=REL, abs=1e-15)
        assert row["exposed_dp_s"] == pytest.approx(dp_time, rel=REL)
        assert row["bubble_s"] == 0.0
    assert [row["rank"] for row in rows] == [0, 1, 2, 3]


def test_flows_that_finish_together_up_to_rounding_end_at_one_instant():
    """S bytes at B and 5S bytes at 5B both take S/B = 3 s, where floats differ in the last bit."""
    size, bandwidth = 1e9 / 3, 1e9 / 9
    assert size / bandwidth != (5 * size) / (5 * bandwidth)
    b = ProgramBuilder([bandwidth, 5 * bandwidth], [0.0, 0.0], ["slow", "fast"],
                       rank_node=[0, 1])
    b.add_comm(Category.PP, [(0, 1, size, 0.0, [0]), (1, 0, 5 * size, 0.0, [1])])
    log = RateLog()
    result = simulate(b.build(), (log,))
    assert result.flow_end_s[0] == result.flow_end_s[1]
    assert result.flow_end_s[0] == pytest.approx(3.0, rel=REL)
    assert [flows.size for _, flows, _ in log.snapshots] == [2, 0]
