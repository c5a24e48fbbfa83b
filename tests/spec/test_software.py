"""Software profiles in the catalog and in plans: what ships, how a name resolves, and the
one-line refusal of a name the catalog does not hold."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.spec import load_plan, load_sweep
from xsweep.spec.catalog import REFERENCE_SOFTWARE, load_catalog
from xsweep.spec.stack import DEFAULT_STACK
from xsweep.spec.validate import validate_plan

PLAN = "h100x8-baseline.pbtxt"


def plan_naming(spaces_dir, software: str):
    plan = load_plan(spaces_dir / PLAN)
    plan.training.software = software
    return plan


def test_the_reference_profile_has_factors_of_one_and_is_the_default_stack(catalog):
    reference = catalog.software_profile("reference")
    assert reference == REFERENCE_SOFTWARE
    assert (reference.gemm_factor, reference.attention_factor) == (1.0, 1.0)
    assert catalog.software_profile("") is reference  # empty: the reference profile
    assert DEFAULT_STACK.software == reference


def test_each_shipped_profile_names_runs_whose_plans_name_it(catalog, spaces_dir):
    """A factor is set only from the stack's own runs: each run a profile lists is a plan
    under spaces/ that names that profile, and no run both sets and checks it."""
    for profile in catalog.software.values():
        assert not set(profile.calibrated_on) & set(profile.held_out), profile.name
        for run in (*profile.calibrated_on, *profile.held_out):
            plan = load_plan(spaces_dir / f"{run}.pbtxt", catalog)
            assert plan.training.software == profile.name, run
    assert catalog.software["nemo-24.07"].held_out  # each fitted profile holds runs out
    assert catalog.software["megatron-lm-2021"].held_out


def test_a_plan_resolves_its_profile_by_name_or_alias_in_any_case(catalog, spaces_dir):
    nemo = catalog.software_profile("nemo-24.07")
    for name in ("nemo-24.07", "NeMo-24.07", "nemo-2407"):
        valid = validate_plan(plan_naming(spaces_dir, name), catalog)
        # equal, not necessarily the same object: validation keeps the first of equal
        # stacks it met, which another test's catalog may have made
        assert valid.training.stack.software == nemo
    assert validate_plan(plan_naming(spaces_dir, ""), catalog).training.stack == DEFAULT_STACK


def test_an_unknown_profile_is_refused_naming_the_field_and_the_close_name(catalog, spaces_dir):
    with pytest.raises(InputError) as raised:
        validate_plan(plan_naming(spaces_dir, "nemo-24.7"), catalog, file="p.pbtxt")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("p.pbtxt: training.software: unknown software profile; "
                              "did you mean 'nemo-24.07'?")
    assert message.endswith("(got 'nemo-24.7')")


def test_a_plan_validated_before_takes_the_profile_of_the_catalog_it_is_validated_against(
        catalog, spaces_dir, tmp_path):
    """The same plan bytes against a catalog that gives the name other factors: the new
    factors, not the memo of the first validation."""
    plan = plan_naming(spaces_dir, "nemo-24.07")
    assert validate_plan(plan, catalog).training.stack.software.gemm_factor == 1.0
    mine = tmp_path / "slow.yaml"
    mine.write_text("software:\n  nemo-24.07: {gemm_factor: 0.5}\n")
    slower = validate_plan(plan, load_catalog([mine]))
    assert slower.training.stack.software.gemm_factor == 0.5


def test_a_user_catalog_adds_profiles_but_cannot_change_the_reference(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("software:\n  stack-x-1.0:\n    gemm_factor: 0.8\n"
                    "    calibrated_on: [published/run-a]\n    held_out: [published/run-b]\n")
    added = load_catalog([mine]).software_profile("STACK-X-1.0")
    assert (added.gemm_factor, added.attention_factor) == (0.8, 1.0)
    assert added.calibrated_on == ("published/run-a",) and added.held_out == ("published/run-b",)
    mine.write_text("software:\n  reference: {gemm_factor: 0.9}\n")
    with pytest.raises(InputError, match=r"mine.yaml: software.reference: the reference "):
        load_catalog([mine])
    mine.write_text("software:\n  stack-y: {held_out: run-b}\n")
    with pytest.raises(InputError, match=r"software.stack-y.held_out: expected a list"):
        load_catalog([mine])


SWEEP = """\
name: software
model: llama2-7b
training: {{global_batch_size: 16, software: {software}}}
cluster:
  pools: [{{gpu: H100-SXM, nodes: 1}}]
parallelism:
  tp: {{H100-SXM: 8}}
"""


def test_a_sweep_refuses_an_unknown_profile_and_one_profile_twice(catalog, tmp_path):
    path = tmp_path / "software.yaml"

    def sweep_of(software: str):
        path.write_text(SWEEP.format(software=software))
        return load_sweep(path, catalog)

    assert sweep_of("[reference, nemo-24.07]").training.software == ["reference", "nemo-24.07"]
    with pytest.raises(InputError, match=r"training.software\[1\]: unknown software profile; "
                                         r"did you mean 'megatron-lm-2021'\?"):
        sweep_of("[reference, megatron-lm-2012]")
    with pytest.raises(InputError, match=r"training.software\[1\]: names the same software "
                                         r"profile as training.software\[0\]"):
        sweep_of("[nemo-24.07, NEMO-2407]")
