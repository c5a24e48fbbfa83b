"""``xsweep.evaluate``: plans in, one xarray Dataset out."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xsweep
import xsweep.errors
from xsweep.evaluator.evaluator import HOST_CHUNK, _shares
from xsweep.figures import plan_figures
from xsweep.pipeline import prepare
from xsweep.plan.builder import random_plan
from xsweep.sim import simulate, summary

EXAMPLES = ("appendix-b", "figure1-llama2-7b", "h100x8-baseline")


@pytest.fixture(scope="module")
def plans(spaces_dir):
    return [xsweep.load_plan(spaces_dir / f"{name}.pbtxt") for name in EXAMPLES]


@pytest.fixture(scope="module")
def exact(plans):
    return xsweep.evaluate(plans, level="exact")


def test_dataset_has_the_design_metrics(exact):
    assert exact.sizes["variant"] == len(EXAMPLES)
    assert list(exact["name"].values) == list(EXAMPLES)
    for name in ("iteration_time_s", "tokens_per_s", "mfu", "busy_s_mean", "bubble_s_max",
                 "straggler_wait_s_mean", "exposed_dp_s_max", "memory_per_gpu_gib",
                 "memory_fits", "capex_usd", "cost_rate_usd_per_hour", "cost_per_run_usd",
                 "status", "feasible", "reason"):
        assert name in exact, name
    assert exact["busy_s"].dims == ("variant", "stream")
    assert exact.attrs["level"] == "exact"
    assert list(exact["status"].values) == ["ok"] * len(EXAMPLES)


def test_exact_level_matches_the_simulator(plans, exact, catalog):
    for i, plan in enumerate(plans):
        prepared = prepare(plan, catalog)
        program = prepared.program
        ref = summary(program, simulate(program))
        for key in ("iteration_time_s", "mfu", "bubble_s_mean", "straggler_wait_s_max"):
            assert float(exact[key][i]) == pytest.approx(ref[key], rel=1e-4, abs=1e-6), key
        costs = plan_figures([prepared.analysis], [ref["iteration_time_s"]])
        assert float(exact["capex_usd"][i]) == costs["capex_usd"][0]
        assert float(exact["memory_per_gpu_gib"][i]) == pytest.approx(
            costs["memory_per_gpu_gib"][0])


def test_bound_is_below_exact(plans, exact):
    bound = xsweep.evaluate(plans, level="bound")
    assert bound.attrs["level"] == "bound"
    assert np.all(bound["iteration_time_s"].values <= exact["iteration_time_s"].values * (1 + 1e-6))


def test_plans_that_do_not_fit_are_kept_and_flagged(spaces_dir):
    text = (spaces_dir / "h100x8-baseline.pbtxt").read_text()
    big = xsweep.spec.plan_from_text(text.replace("micro_batch_size: 1", "micro_batch_size: 64")
                                     .replace("global_batch_size: 32", "global_batch_size: 2048"))
    ds = xsweep.evaluate([big], level="bound")
    assert not bool(ds["memory_fits"][0]) and not bool(ds["feasible"][0])
    assert "memory" in str(ds["reason"][0])
    assert np.isfinite(ds["iteration_time_s"][0])  # still evaluated: the time is informative


def test_paths_are_accepted(spaces_dir):
    ds = xsweep.evaluate([spaces_dir / "appendix-b.pbtxt"], level="bound")
    assert ds.sizes["variant"] == 1


def test_values_that_identify_variants_travel_as_coordinates(plans):
    ds = xsweep.evaluate(plans, level="bound", coords={"pool_nodes": [2, 1, 1],
                                                       "label": ["a", "b", "c"]})
    assert list(ds["pool_nodes"].values) == [2, 1, 1] and ds["pool_nodes"].dims == ("variant",)
    assert "pool_nodes" in ds.coords and list(ds.sel(variant=ds["label"] == "b")["name"].values) \
        == ["figure1-llama2-7b"]
    with pytest.raises(xsweep.errors.InputError, match="coords.pool_nodes"):
        xsweep.evaluate(plans, level="bound", coords={"pool_nodes": [1, 2]})


def test_evaluators_on_other_devices_live_side_by_side(plans, exact):
    import jax

    one_device = xsweep.Evaluator(devices=jax.devices()[:1], dtype="float64")
    assert one_device.devices == tuple(jax.devices()[:1])
    again = one_device.evaluate(plans, level="exact")
    np.testing.assert_allclose(again["iteration_time_s"], exact["iteration_time_s"], rtol=1e-5)
    assert again.attrs["dtype"] == "float64" and exact.attrs["dtype"] == "float32"


def test_worker_processes_give_the_same_results(catalog):
    plans = [random_plan(seed) for seed in range(6)]
    pool = xsweep.Evaluator(processes=2, parallel_min=1)
    try:
        shared = pool.evaluate(plans, level="bound")
    finally:
        pool.close()
    alone = xsweep.Evaluator(processes=1).evaluate(plans, level="bound")
    # the schedules are the same; per-stream sums in float32 may round differently in
    # the last bit when a worker pads its share to other shapes
    np.testing.assert_array_equal(shared["iteration_time_s"].values,
                                  alone["iteration_time_s"].values)
    for name in ("bubble_s", "cost_per_run_usd", "memory_per_gpu_gib"):
        np.testing.assert_allclose(shared[name].values, alone[name].values, rtol=1e-6,
                                   err_msg=name)
    assert list(shared["name"].values) == [p.name for p in plans]


def test_worker_processes_run_one_per_core_and_a_bad_plan_late_in_the_list_stops_them():
    """Plans are validated piece by piece while the workers evaluate the pieces before;
    an invalid one still fails the whole call, naming it, and the pool serves the next."""
    plans = [random_plan(seed) for seed in range(8)]
    bad = random_plan(8)
    bad.cluster.nodes[0].gpu = "no-such-gpu"
    pool = xsweep.Evaluator(processes=2, parallel_min=1)
    try:
        with pytest.raises(xsweep.errors.InputError, match=r"plans\[8\].*gpu.*no-such-gpu"):
            pool.evaluate([*plans, bad], level="bound")
        again = pool.evaluate(plans, level="bound")
        assert (again["status"] == "ok").all()
        if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2:
            pinned = [os.sched_getaffinity(pid) for pid in pool._workers.pids()]
            assert all(len(cores) == 1 for cores in pinned)
            assert len(set().union(*pinned)) == 2  # each its own core
    finally:
        pool.close()


def test_worker_processes_report_progress_chunk_by_chunk_not_piece_by_piece(plans):
    """A worker reports each kernel chunk it finishes, so a first result shows before its
    first piece is done; the counts still add up to every plan once."""
    many = plans * 11  # 33 plans: pieces of 5, chunks of 2
    calls = []
    pool = xsweep.Evaluator(processes=2, parallel_min=1)
    try:
        ds = pool.evaluate(many, level="bound", chunk_size=2,
                           progress=lambda done, total: calls.append((done, total)))
    finally:
        pool.close()
    assert (ds["status"] == "ok").all()
    piece = _shares(len(many), 2)[0][1]
    assert calls[0][0] < piece  # before any piece was done
    done = [d for d, _ in calls]
    assert done == sorted(done) and len(set(done)) == len(done) and done[-1] == len(many)
    assert {total for _, total in calls} == {len(many)}


@settings(max_examples=200)
@given(st.integers(1, 100_000), st.integers(1, 16))
def test_worker_shares_cover_the_plans_in_pieces_of_one_size(n, processes):
    shares = _shares(n, processes)
    assert shares[0][0] == 0 and shares[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(shares[:-1], shares[1:], strict=True))
    sizes = [end - begin for begin, end in shares]
    assert all(0 < size <= HOST_CHUNK for size in sizes)
    assert len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0]
    assert len(shares) <= 4 * processes + n // HOST_CHUNK


def test_columns_are_the_dataset_before_it_is_made(plans, exact):
    """What a search's session keeps (``Evaluator.evaluate_columns``) holds the Dataset's
    values, with status codes where the Dataset has their names."""
    from xsweep.evaluator import default_evaluator
    from xsweep.evaluator.dataset import STATUS_NAMES

    columns, seconds = default_evaluator().evaluate_columns(plans, "exact")
    assert seconds["kernels_s"] >= 0 and "compile_s" in seconds
    assert columns["status"].dtype == np.int8
    assert [STATUS_NAMES[s] for s in columns["status"]] == list(exact["status"].values)
    for name in ("iteration_time_s", "mfu", "feasible", "reason", "steps"):
        np.testing.assert_array_equal(columns[name], exact[name].values, err_msg=name)
    assert columns["name"].tolist() == list(EXAMPLES)
