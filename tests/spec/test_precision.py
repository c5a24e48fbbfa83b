"""The plan's and the sweep's ``precision``: FP8 only where every GPU has FP8 tensor cores,
names of the fixed set in any case, and an unknown one refused with the close names."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.spec import precision_name, sweep_from_dict
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.plan_io import load_plan, plan_from_json, plan_from_text, plan_to_json
from xsweep.spec.validate import validate_plan


@pytest.fixture
def mixed(spaces_dir) -> pb.DeploymentPlan:
    """The appendix-B plan: H100 (cluster.nodes[0]) and A100-40GB (cluster.nodes[1])."""
    return load_plan(spaces_dir / "appendix-b.pbtxt")


@pytest.fixture
def h100(spaces_dir) -> pb.DeploymentPlan:
    return load_plan(spaces_dir / "h100x8-baseline.pbtxt")


def test_bf16_is_the_default_and_fp8_runs_on_hopper(h100, catalog):
    assert precision_name(h100) == "bf16"
    assert validate_plan(h100, catalog).training.stack.precision == "bf16"
    h100.training.precision = pb.FP8
    assert validate_plan(h100, catalog, "p.pbtxt").training.stack.precision == "fp8"
    h100.cluster.nodes[0].gpu = "B200"
    assert validate_plan(h100, catalog).training.stack.precision == "fp8"


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_refused(mixed, catalog):
    validate_plan(mixed, catalog)  # in BF16 it is valid
    mixed.training.precision = pb.FP8
    with pytest.raises(InputError) as info:
        validate_plan(mixed, catalog, "p.pbtxt")
    error = info.value
    assert (error.file, error.field, error.value) == ("p.pbtxt", "training.precision", "FP8")
    assert "needs FP8 tensor cores" in error.reason
    assert "A100-40GB of cluster.nodes[1]" in error.reason
    assert "\n" not in str(error)
    # the H100 node alone runs it
    mixed.cluster.nodes[1].gpu = "H200"
    validate_plan(mixed, catalog)


def test_a_refused_plan_stays_refused_after_an_accepted_one(h100, catalog):
    # the parts of plans are remembered: the H100 cluster passed in BF16 and in FP8, the
    # FP8 training options passed with it; on an A100 cluster they must still be refused
    h100.training.precision = pb.FP8
    validate_plan(h100, catalog)
    h100.cluster.nodes[0].gpu = "A100-80GB"
    with pytest.raises(InputError, match="A100-80GB of cluster.nodes\\[0\\]"):
        validate_plan(h100, catalog)


def test_an_unknown_precision_number_is_refused(h100, catalog):
    h100.training.precision = 7  # an open proto3 enum keeps unknown numbers
    with pytest.raises(InputError) as info:
        validate_plan(h100, catalog, "p.pbtxt")
    assert info.value.field == "training.precision" and "BF16, FP8" in info.value.reason


def test_text_and_json_name_it_in_any_case_and_refuse_a_typo(spaces_dir):
    text = (spaces_dir / "h100x8-baseline.pbtxt").read_text()
    assert "training {\n" in text
    for written in ("FP8", "fp8", "Fp8"):
        plan = plan_from_text(text.replace("training {\n", f"training {{\n  precision: {written}\n"),
                              "p.pbtxt")
        assert plan.training.precision == pb.FP8
        assert plan_from_json(plan_to_json(plan), "p.json").training.precision == pb.FP8
    for typo, hint in (("FP4", "did you mean 'FP8'?"), ("BF61", "did you mean 'BF16'?")):
        with pytest.raises(InputError) as info:
            plan_from_text(text.replace("training {\n", f"training {{\n  precision: {typo}\n"),
                           "p.pbtxt")
        assert hint in str(info.value) and "(expected one of BF16, FP8)" in str(info.value)
        assert "\n" not in str(info.value)


SWEEP = {"name": "precision", "model": "llama2-7b", "training": {"global_batch_size": 16},
         "cluster": {"pools": [{"gpu": "H100-SXM", "nodes": 1}]},
         "parallelism": {"tp": {"H100-SXM": 8}}}


def test_the_sweep_axis_defaults_to_bf16_and_takes_both_in_any_case():
    assert sweep_from_dict(SWEEP).axes()["training.precision"] == ["bf16"]
    document = {**SWEEP, "training": {"global_batch_size": 16, "precision": ["BF16", "Fp8"]}}
    assert sweep_from_dict(document).axes()["training.precision"] == ["bf16", "fp8"]


@pytest.mark.parametrize(("value", "hint"), [("fp4", "did you mean 'fp8'?"),
                                             (["bf16", "fp9"], "did you mean 'fp8'?"),
                                             ("bf61", "did you mean 'bf16'?")])
def test_an_unknown_sweep_precision_names_the_close_one(value, hint):
    document = {**SWEEP, "training": {"global_batch_size": 16, "precision": value}}
    with pytest.raises(InputError) as info:
        sweep_from_dict(document, "s.yaml")
    line = str(info.value)
    assert line.startswith("s.yaml: training.precision[")
    assert "Input should be 'bf16' or 'fp8'" in line and hint in line and "\n" not in line
