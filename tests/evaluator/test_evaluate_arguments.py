"""``xsweep.evaluate`` refuses bad arguments and invalid plans with InputError, before any work.

The invalid plans of the issue that reported these (a layer gap, overlapping layers, a
global batch that does not add up, TP above the heads, a NaN latency) each used to come
back feasible with wrong numbers; ``tests/test_every_rule.py`` covers every other rule.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import xsweep
from tests.support.hostile_inputs import PLAN, plan_with
from xsweep.cost import CostModel
from xsweep.errors import InputError
from xsweep.spec.plan_io import plan_from_text

VALID = plan_from_text(PLAN)


@pytest.mark.parametrize(("plans", "field", "reason"), [
    ([], "plans", "no plans to evaluate"),
    ("spaces/appendix-b.pbtxt", "plans", "not a single one"),
    (pathlib.Path("spaces/appendix-b.pbtxt"), "plans", "not a single one"),
    (VALID, "plans", "not a single one"),
    (42, "plans", "expected a list of plans or paths"),
    ([VALID, {"name": "x"}], "plans[1]", "expected a DeploymentPlan message or the path"),
    ([None], "plans[0]", "expected a DeploymentPlan"),
    (iter([]), "plans", "no plans"),
])
def test_bad_plan_arguments(plans, field, reason):
    with pytest.raises(InputError, match=reason) as error:
        xsweep.evaluate(plans, level="bound")
    assert (error.value.file, error.value.field) == ("xsweep.evaluate", field)


@pytest.mark.parametrize(("options", "field"), [
    ({"chunk_size": -1}, "chunk_size"),
    ({"chunk_size": 0}, "chunk_size"),
    ({"chunk_size": 2.5}, "chunk_size"),
    ({"chunk_size": True}, "chunk_size"),
    ({"catalog": ["gpus.yaml"]}, "catalog"),
    ({"profile": 3}, "profile"),
    ({"progress": "yes"}, "progress"),
    ({"cost": "capex"}, "cost"),
    ({"cost": CostModel(pricing="spot")}, "cost.pricing"),
    ({"cost": CostModel(pue=float("nan"))}, "cost.pue"),
    ({"cost": CostModel(amortization_years=0)}, "cost.amortization_years"),
    ({"level": "approximate"}, "level"),
    ({"dtype": "float16"}, "dtype"),
])
def test_bad_options(options, field):
    with pytest.raises(InputError) as error:
        xsweep.evaluate([VALID], **{"level": "bound", **options})
    assert error.value.field == field


def test_a_profile_path_that_does_not_exist_is_named(tmp_path):
    missing = tmp_path / "profile.yaml"
    with pytest.raises(InputError) as error:
        xsweep.evaluate([VALID], level="bound", profile=missing)
    assert error.value.file == str(missing)


@pytest.mark.parametrize(("old", "new", "field"), [
    ("first_layer: 17 last_layer: 32 micro_batch_size: 1 num_micro_batches: 4 }\n"
     "device_groups { id: 2", "first_layer: 18 last_layer: 32 micro_batch_size: 1 "
     "num_micro_batches: 4 }\ndevice_groups { id: 2", "device_groups[1].first_layer"),
    ("first_layer: 17 last_layer: 32 micro_batch_size: 1 num_micro_batches: 4 }\n"
     "device_groups { id: 2", "first_layer: 12 last_layer: 32 micro_batch_size: 1 "
     "num_micro_batches: 4 }\ndevice_groups { id: 2", "device_groups[1].first_layer"),
    ("global_batch_size: 8", "global_batch_size: 64", "training.global_batch_size"),
    ('preset: "llama2-7b"', 'preset: "llama2-7b" num_attention_heads: 1 num_kv_heads: 1',
     "device_groups[0].ranks"),
    ("num_gpus: 8 }", "num_gpus: 8 scale_up { latency_ns: nan } }",
     "cluster.nodes[0].scale_up.latency_ns"),
])
def test_the_reported_invalid_plans_raise(old, new, field, catalog):
    plan = plan_from_text(plan_with(old, new))
    plan.name = "broken"
    with pytest.raises(InputError) as error:
        xsweep.evaluate([VALID, plan], level="bound", catalog=catalog)
    assert (error.value.file, error.value.field) == ("plans[1] ('broken')", field)


def test_a_generator_of_valid_plans_and_paths_is_evaluated(spaces_dir, catalog):
    plans = (p for p in [VALID, str(spaces_dir / "appendix-b.pbtxt")])
    ds = xsweep.evaluate(plans, level="bound", catalog=catalog, chunk_size=4)
    assert list(ds["name"].values) == ["hostile-base", "appendix-b"]
    assert bool(ds["feasible"].all())


# -- coords -------------------------------------------------------------------------------
@pytest.mark.parametrize(("coords", "field", "reason"), [
    ([("x", [1])], "coords", "expected a mapping"),
    ("x", "coords", "expected a mapping"),
    ({"x": [1, 2]}, "coords.x", r"one value per plan \(1\)"),
    ({"x": []}, "coords.x", r"one value per plan \(1\)"),
    ({"x": "a"}, "coords.x", "one value per plan"),
    ({"x": 5}, "coords.x", "one value per plan"),
    ({"x": {"a": 1}}, "coords.x", "one value per plan"),
    ({"x": [[1, 2]]}, "coords.x", "1-D"),
    ({"x": [[1], [1, 2]]}, "coords.x", "one value per plan"),
    ({"x": (v for v in [1])}, "coords.x", "one value per plan"),
    ({3: [1]}, "coords", "name must be a non-empty string"),
    ({"": [1]}, "coords", "name must be a non-empty string"),
    ({"name": ["a"]}, "coords.name", "already a name of the results"),
    ({"status": ["a"]}, "coords.status", "already a name of the results"),
    ({"iteration_time_s": [1]}, "coords.iteration_time_s", "already a name of the results"),
])
def test_bad_coords(coords, field, reason):
    with pytest.raises(InputError, match=reason) as error:
        xsweep.evaluate([VALID], level="bound", coords=coords)
    assert (error.value.file, error.value.field) == ("xsweep.evaluate", field)
    assert "\n" not in str(error.value)


def test_coords_of_plans_from_an_iterator_are_counted_once_listed(catalog):
    with pytest.raises(InputError, match="one value per plan"):
        xsweep.evaluate(iter([VALID]), level="bound", catalog=catalog, coords={"x": [1, 2]})
    ds = xsweep.evaluate(iter([VALID]), level="bound", catalog=catalog,
                         coords={"x": (7,), "label": np.array(["a"])})
    assert list(ds["x"].values) == [7] and list(ds["label"].values) == ["a"]


@pytest.mark.parametrize(("options", "field"), [
    ({"dtype": ["float32"]}, "dtype"),  # unhashable: once a TypeError
    ({"level": None}, "level"),
    ({"level": ["bound"]}, "level"),
    ({"catalog": []}, "catalog"),  # falsy: once taken for "the default catalog"
    ({"catalog": "catalog.yaml"}, "catalog"),
    ({"profile": b"profile.yaml"}, "profile"),
    ({"profile": ""}, "profile"),
    ({"chunk_size": "8"}, "chunk_size"),
    ({"progress": lambda: None}, "progress"),  # called as progress(done, total)
    ({"progress": lambda done: None}, "progress"),
    ({"cost": CostModel(pricing=["capex"])}, "cost.pricing"),
    ({"cost": CostModel(pue="1.3")}, "cost.pue"),
])
def test_more_bad_options(options, field):
    with pytest.raises(InputError) as error:
        xsweep.evaluate([VALID], **{"level": "bound", **options})
    assert (error.value.file, error.value.field) == ("xsweep.evaluate", field)


# -- the Evaluator's constructor ------------------------------------------------------------
def jax_devices() -> list:
    import jax

    return jax.devices()


@pytest.mark.parametrize(("arguments", "field", "reason"), [
    ({"devices": []}, "devices", "no devices"),
    ({"devices": ()}, "devices", "no devices"),
    ({"devices": "cpu"}, "devices", "expected a list of JAX devices"),
    ({"devices": 0}, "devices", "expected a list of JAX devices"),
    ({"devices": ["cpu"]}, "devices[0]", "expected a JAX device"),
    ({"devices": [None]}, "devices[0]", "expected a JAX device"),
    ({"processes": -1}, "processes", "at least 1"),
    ({"processes": 0}, "processes", "at least 1"),
    ({"processes": 2.0}, "processes", "positive integer"),
    ({"processes": True}, "processes", "positive integer"),
    ({"processes": "4"}, "processes", "positive integer"),
    ({"processes": 10**6}, "processes", "at most 1,024"),
    ({"max_rounds": 0}, "max_rounds", "at least 1"),
    ({"max_rounds": -3}, "max_rounds", "at least 1"),
    ({"max_rounds": 2**31}, "max_rounds", "at most 2,147,483,647"),
    ({"max_rounds": 64.0}, "max_rounds", "positive integer"),
    ({"template_bytes": -1}, "template_bytes", "at least 0"),
    ({"template_bytes": 1e9}, "template_bytes", "integer"),
    ({"parallel_min": -1}, "parallel_min", "at least 0"),
    ({"parallel_min": None}, "parallel_min", "integer"),
    ({"chunk_size": "8"}, "chunk_size", "positive integer"),
    ({"chunk_size": 0}, "chunk_size", "at least 1"),
    ({"chunk_size": [8]}, "chunk_size", "positive integer"),
    ({"dtype": "float16"}, "dtype", "float32, float64"),
    ({"dtype": None}, "dtype", "float32, float64"),
    ({"catalog": "catalog.yaml"}, "catalog", "expected a Catalog"),
    ({"profile": 3}, "profile", "expected a Profile"),
    ({"cost": None}, "cost", "expected a CostModel"),
    ({"cost": CostModel(amortization_years=-1)}, "cost.amortization_years", "at least"),
    ({"cpu_devices": 0}, "cpu_devices", "at least 1"),
    ({"cpu_devices": 10**9}, "cpu_devices", "at most 4,096"),
    ({"compile_cache": "yes"}, "compile_cache", "True or False"),
])
def test_bad_evaluator_arguments(arguments, field, reason):
    with pytest.raises(InputError, match=reason) as error:
        xsweep.Evaluator(**arguments)
    assert (error.value.file, error.value.field) == ("xsweep.Evaluator", field)
    assert "\n" not in str(error.value)


def test_devices_are_distinct_jax_devices():
    device = jax_devices()[0]
    with pytest.raises(InputError, match="given twice"):
        xsweep.Evaluator(devices=[device, device])
    with pytest.raises(InputError, match=r"devices\[1\]"):
        xsweep.Evaluator(devices=[device, "cpu"])
    evaluator = xsweep.Evaluator(devices=(device,), processes=1, compile_cache=False,
                                 max_rounds=np.int64(8), parallel_min=0, template_bytes=0)
    assert evaluator.devices == (device,) and evaluator.max_rounds == 8


def test_an_evaluator_with_a_low_round_cap_still_evaluates(catalog):
    evaluator = xsweep.Evaluator(devices=jax_devices()[:1], processes=1, max_rounds=1)
    ds = evaluator.evaluate([VALID], level="bound", catalog=catalog)
    assert ds.sizes["variant"] == 1


# -- the other entry points -----------------------------------------------------------------
@pytest.mark.parametrize(("call", "caller", "field"), [
    (lambda: xsweep.load_plan(42), "xsweep.load_plan", "path"),
    (lambda: xsweep.load_plan(None), "xsweep.load_plan", "path"),
    (lambda: xsweep.load_plan(["spaces/appendix-b.pbtxt"]), "xsweep.load_plan", "path"),
    (lambda: xsweep.load_plan("a\0b.pbtxt"), "xsweep.load_plan", "path"),
    (lambda: xsweep.load_plan("spaces/appendix-b.pbtxt", "x"), "xsweep.load_plan", "catalog"),
    (lambda: xsweep.prepare(42), "xsweep.prepare", "plan"),
    (lambda: xsweep.prepare([VALID]), "xsweep.prepare", "plan"),
    (lambda: xsweep.prepare(VALID, catalog=3), "xsweep.prepare", "catalog"),
    (lambda: xsweep.prepare(VALID, profile=3), "xsweep.prepare", "profile"),
    (lambda: xsweep.prepare(VALID, templates=3), "xsweep.prepare", "templates"),
    (lambda: xsweep.prepare(VALID, names="no"), "xsweep.prepare", "names"),
    (lambda: xsweep.use_cpu_devices(0), "xsweep.use_cpu_devices", "count"),
    (lambda: xsweep.use_cpu_devices(-5), "xsweep.use_cpu_devices", "count"),
    (lambda: xsweep.use_cpu_devices(2.5), "xsweep.use_cpu_devices", "count"),
    (lambda: xsweep.use_cpu_devices("4"), "xsweep.use_cpu_devices", "count"),
    (lambda: xsweep.use_cpu_devices(10**9), "xsweep.use_cpu_devices", "count"),
])
def test_bad_arguments_of_the_other_entry_points(call, caller, field):
    with pytest.raises(InputError) as error:
        call()
    assert (error.value.file, error.value.field) == (caller, field)
    assert "\n" not in str(error.value)


def test_the_checked_entry_points_still_work(spaces_dir, catalog):
    plan = xsweep.load_plan(spaces_dir / "appendix-b.pbtxt", catalog)
    assert plan.name == "appendix-b"
    assert xsweep.prepare(plan, catalog, names=False).name == "appendix-b"
    assert xsweep.prepare(str(spaces_dir / "appendix-b.pbtxt")).name == "appendix-b"
