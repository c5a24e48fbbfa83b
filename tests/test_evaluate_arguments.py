"""``xsweep.evaluate`` refuses bad arguments and invalid plans with InputError, before any work.

The invalid plans of the issue that reported these (a layer gap, overlapping layers, a
global batch that does not add up, TP above the heads, a NaN latency) each used to come
back feasible with wrong numbers; ``tests/test_every_rule.py`` covers every other rule.
"""

from __future__ import annotations

import pathlib

import pytest

import xsweep
from tests.hostile_inputs import PLAN, plan_with
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
