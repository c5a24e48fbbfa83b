"""No reader changes a number or a boolean: sweeps are validated strictly (YAML 1.2)."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.spec.reader import parse_yaml
from xsweep.spec.sweep import sweep_from_dict

SWEEP = """\
name: strict
model: llama2-7b
training: {global_batch_size: 64}
cluster: {pools: [{gpu: H100-SXM, nodes: [1, 2]}]}
parallelism: {tp: {H100-SXM: [2, 4]}, pp: [1, 2]}
"""


def sweep_with(old: str, new: str):
    text = SWEEP.replace(old, new)
    assert text != SWEEP
    return sweep_from_dict(parse_yaml(text, "s.yaml"), "s.yaml")


@pytest.mark.parametrize(("new", "field", "value"), [
    ("global_batch_size: 64, dp_overlap: yes", "training.dp_overlap[0]", "yes"),
    ("global_batch_size: 64, sequence_parallel: [true, off]",
     "training.sequence_parallel[1]", "off"),
    ("global_batch_size: 64, flash_attention: 1", "training.flash_attention[0]", 1),
    ("global_batch_size: 64, flash_attention: 'true'", "training.flash_attention[0]", "true"),
    ("global_batch_size: '64'", "training.global_batch_size[0]", "64"),
    ("global_batch_size: 64, zero_stage: true", "training.zero_stage[0]", True),
    ("global_batch_size: 64, zero_stage: 1.0", "training.zero_stage[0]", 1.0),
    ("global_batch_size: 64, zero_stage: '1'", "training.zero_stage[0]", "1"),
    ("global_batch_size: 64, total_tokens: '1e9'", "training.total_tokens", "1e9"),
])
def test_sweep_fields_take_no_strings_for_numbers_and_no_numbers_for_booleans(new, field,
                                                                              value):
    with pytest.raises(InputError) as info:
        sweep_with("global_batch_size: 64", new)
    assert (info.value.field, info.value.value) == (field, value)


@pytest.mark.parametrize("written", ["1:30", "0100", "0x40", "1_000"])
def test_a_sweep_number_in_a_yaml_1_1_form_is_refused_with_its_path_and_line(written):
    with pytest.raises(InputError, match="write it in decimal digits") as info:
        sweep_with("global_batch_size: 64", f"global_batch_size: {written}")
    assert (info.value.field, info.value.value) == ("training.global_batch_size", written)
    assert "(line 3)" in str(info.value)


def test_floats_still_take_integers_and_zero_stages_take_0_1_3():
    sweep = sweep_with("global_batch_size: 64}",
                       "global_batch_size: 64, zero_stage: [0, 1, 3], total_tokens: 1e9}\n"
                       "cost: {amortization_years: 3, pue: 1}")
    sweep = sweep_from_dict({**sweep.model_dump(by_alias=True),
                             "cluster": {"oversubscription": 2,
                                         "pools": [{"gpu": "H100-SXM", "nodes": [1, 2]}]}})
    assert sweep.training.zero_stage == [0, 1, 3]
    assert sweep.training.total_tokens == 1e9 and sweep.cost.amortization_years == 3.0
    assert sweep.cluster.oversubscription == [2.0]
