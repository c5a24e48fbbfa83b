"""Measured profiles: reading, validation, interpolation and their use in stage costs."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.plan.stack import Stack
from xsweep.plan.workload import stage_cost
from xsweep.spec.catalog import ModelSpec, load_catalog
from xsweep.spec.profile import load_profile

LLAMA2_7B = ModelSpec("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, "swiglu")
H100 = load_catalog().gpu("H100-SXM")

PROFILE_YAML = """\
model: llama2-7b
measurements:
  - {gpu: H100-SXM, tp: 2, micro_batch_size: 1, forward_s: 0.002, backward_s: 0.004}
  - {gpu: H100-SXM, tp: 2, micro_batch_size: 4, forward_s: 0.008, backward_s: 0.017}
  - {gpu: h100-sxm, tp: 2, micro_batch_size: 2, forward_s: 0.0041, backward_s: 0.0083}
  - {gpu: A100-40GB, tp: 4, micro_batch_size: 2, forward_s: 0.003, backward_s: 0.006}
  - {gpu: A100-40GB, tp: 4, micro_batch_size: 8, forward_s: 0.012, backward_s: 0.024}
"""

PROFILE_CSV = """\
gpu,tp,micro_batch_size,forward_s,backward_s
H100-SXM,2,1,0.002,0.004
H100-SXM,2,4,0.008,0.017
h100-sxm,2,2,0.0041,0.0083
A100-40GB,4,2,0.003,0.006
A100-40GB,4,8,0.012,0.024
"""


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE_YAML)
    return load_profile(path)


def test_measured_sizes_come_back_exactly(profile):
    assert profile.model == "llama2-7b"
    assert profile.lookup("H100-SXM", 2, 1) == (0.002, 0.004)
    assert profile.lookup("h100-SXM", 2, 2) == (0.0041, 0.0083)  # names in any case
    assert profile.lookup("A100-40GB", 4, 2) == (0.003, 0.006)


def test_interpolation_is_linear_between_measured_sizes(profile):
    assert profile.lookup("H100-SXM", 2, 3) == pytest.approx(
        ((0.0041 + 0.008) / 2, (0.0083 + 0.017) / 2), rel=1e-12)


@pytest.mark.parametrize("gpu,tp,size", [("H100-SXM", 2, 5), ("A100-40GB", 4, 1),
                                          ("A100-40GB", 4, 9), ("H100-SXM", 4, 1),
                                          ("B200", 2, 1)])
def test_no_extrapolation_and_no_guessing(profile, gpu, tp, size):
    assert profile.lookup(gpu, tp, size) is None


def test_csv_and_yaml_hold_the_same_measurements(tmp_path, profile):
    path = tmp_path / "profile.csv"
    path.write_text(PROFILE_CSV)
    from_csv = load_profile(path)
    assert from_csv.points == profile.points
    assert from_csv.model is None


def test_catalog_aliases_resolve_to_catalog_names(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("measurements:\n"
                    "  - {gpu: H100, tp: 1, micro_batch_size: 1, forward_s: 1.0, backward_s: 2.0}\n")
    catalog = load_catalog()
    resolved = load_profile(path, catalog)
    assert resolved.lookup(catalog.gpu("H100").name, 1, 1) == (1.0, 2.0)
    path.write_text("measurements:\n"
                    "  - {gpu: Z9, tp: 1, micro_batch_size: 1, forward_s: 1.0, backward_s: 2.0}\n")
    with pytest.raises(InputError) as error:
        load_profile(path, catalog)
    assert error.value.field == "measurements[0].gpu"


ROW = "{gpu: H100-SXM, tp: 2, micro_batch_size: 1, forward_s: 0.002, backward_s: 0.004}"


@pytest.mark.parametrize("text,field,value", [
    ("measurements:\n  - {gpu: H100-SXM, tp: 2, micro_batch_size: 1, forward_s: 0.002}\n",
     "measurements[0].backward_s", None),
    (f"measurements:\n  - {ROW}\n  - {ROW.replace('0.002', '-1')}\n",
     "measurements[1].forward_s", -1),
    (f"measurements:\n  - {ROW.replace('tp: 2', 'tp: 1.5')}\n", "measurements[0].tp", 1.5),
    (f"measurements:\n  - {ROW.replace('tp: 2', 'tp: true')}\n", "measurements[0].tp", True),
    (f"measurements:\n  - {ROW.replace('0.004', 'fast')}\n", "measurements[0].backward_s",
     "fast"),
    (f"measurements:\n  - {ROW.replace('0.004', '.nan')}\n", "measurements[0].backward_s",
     pytest.approx(float("nan"), nan_ok=True)),
    (f"measurements:\n  - {ROW}\n  - {ROW}\n", "measurements[1].micro_batch_size",
     "H100-SXM, tp 2, micro_batch_size 1"),
    (f"measurements:\n  - {ROW[:-1]}, warmup: 3}}\n", "measurements[0].warmup", None),
    (f"measurement:\n  - {ROW}\n", "measurement", None),
    ("measurements: 3\n", "measurements", 3),
    ("measurements: []\n", "measurements", None),
    ("measurements:\n  - 3\n", "measurements[0]", 3),
    ("- just a list\n", None, "list"),
    (f"model: [a]\nmeasurements:\n  - {ROW}\n", "model", ["a"]),
])
def test_malformed_yaml_names_field_and_value(tmp_path, text, field, value):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert (error.value.file, error.value.field, error.value.value) == (str(path), field, value)


@pytest.mark.parametrize("text,field", [
    ("gpu,tp,micro_batch_size,forward_s,backward_s\nH100-SXM,two,1,0.1,0.2\n", "line 2: tp"),
    ("gpu,tp,micro_batch_size,forward_s,backward_s\nH100-SXM,2,1,0.1\n", "line 2: backward_s"),
    ("gpu,tp,micro_batch_size,forward_s,backward_s\nH100-SXM,2,1,0.1,0.2,9\n",
     "line 2: extra column"),
    ("gpu,tp,batch,forward_s,backward_s\nH100-SXM,2,1,0.1,0.2\n", "line 1"),
    ("", None),
])
def test_malformed_csv_names_line_and_field(tmp_path, text, field):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert error.value.field == field


HEADER = "gpu,tp,micro_batch_size,forward_s,backward_s"


@pytest.mark.parametrize("text,field,value,reason", [
    ("H100-SXM,2,1,0.002,0.004\n", "line 1", "H100-SXM,2,1,0.002,0.004",
     f"the header line is missing: the first line must name the columns {HEADER}"),
    ("\ngpu,tp,micro_batch_size,forward_s\nH100-SXM,2,1,0.002\n", "line 2", None,
     f"the header lacks the column backward_s; expected {HEADER}"),
    (f"{HEADER},tp\n", "line 1", "tp", "column named twice"),
    (f"{HEADER}\n\n", None, None, "has no measurement: only a header line"),
])
def test_csv_header_problems_are_named(tmp_path, text, field, value, reason):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert (error.value.field, error.value.value, error.value.reason) == (field, value, reason)


def test_csv_header_may_name_the_columns_in_any_order_with_spaces(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("tp, gpu ,backward_s,forward_s,micro_batch_size\n2,H100-SXM,0.004,0.002,1\n")
    assert load_profile(path).lookup("H100-SXM", 2, 1) == (0.002, 0.004)


def test_csv_errors_name_the_line_each_value_starts_on(tmp_path):
    """A quoted value may hold a line break: the row then spans lines, and each value is
    reported on its own line, not on the row's last."""
    path = tmp_path / "bad.csv"
    path.write_text(f'{HEADER}\nH100-SXM,2,1,0.002,0.004\nH100-SXM,2,2,-0.002,"0.004\n"\n'
                    '"H100\r\nSXM",2,3,0.002,-1\n')
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert (error.value.field, error.value.value) == ("line 3: forward_s", "-0.002")
    path.write_text(f'{HEADER}\n"H100-SXM\n\n",2,3,0.002,-1\nH100-SXM,x,1,1,1\n')
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert error.value.field == "line 4: backward_s"
    path.write_text(f'{HEADER}\n"H100-SXM\n",2,3,0.002,0.004\nH100-SXM,x,1,1,1\n')
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert (error.value.field, error.value.value) == ("line 4: tp", "x")


@pytest.mark.parametrize("row,field,value", [
    ("H100-SXM,2,1,0.00_2,0.004", "line 2: forward_s", "0.00_2"),
    ("H100-SXM,1_0,1,0.002,0.004", "line 2: tp", "1_0"),
    ("H100-SXM,2,1,0.002,4_0e-3", "line 2: backward_s", "4_0e-3"),
])
def test_csv_numbers_with_underscores_are_refused_alike(tmp_path, row, field, value):
    path = tmp_path / "bad.csv"
    path.write_text(f"{HEADER}\n{row}\n")
    with pytest.raises(InputError, match="underscores") as error:
        load_profile(path)
    assert (error.value.field, error.value.value) == (field, value)


@pytest.mark.parametrize("cell", ["inf", "nan", "\u0661", "0x1", "1.5.2", "+2"])
def test_csv_numbers_are_decimal_digits_only(tmp_path, cell):
    path = tmp_path / "bad.csv"
    path.write_text(f"{HEADER}\nH100-SXM,{cell},1,0.002,0.004\n", encoding="utf-8")
    with pytest.raises(InputError, match="must be a positive integer") as error:
        load_profile(path)
    assert error.value.value == cell


@pytest.mark.parametrize("field,written,value", [
    ("tp", "'2'", "2"), ("forward_s", '"0.002"', "0.002"), ("tp", "yes", "yes"),
])
def test_yaml_profile_numbers_are_yaml_numbers(tmp_path, field, written, value):
    row = {"gpu": "H100-SXM", "tp": "2", "micro_batch_size": "1", "forward_s": "0.002",
           "backward_s": "0.004", field: written}
    path = tmp_path / "bad.yaml"
    path.write_text("measurements:\n  - {" + ", ".join(f"{k}: {v}" for k, v in row.items())
                    + "}\n")
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert (error.value.field, error.value.value) == (f"measurements[0].{field}", value)


def test_yaml_profile_numbers_in_yaml_1_1_forms_are_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(f"measurements:\n  - {ROW.replace('tp: 2', 'tp: 0_2')}\n")
    with pytest.raises(InputError, match="write it in decimal digits") as error:
        load_profile(path)
    assert error.value.field == "measurements[0].tp"


def test_unreadable_or_unsafe_files_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="No such file"):
        load_profile(tmp_path / "missing.yaml")
    path = tmp_path / "evil.yaml"
    path.write_text("measurements: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(InputError, match="YAML"):
        load_profile(path)


def test_stage_cost_uses_measured_block_times(profile):
    plain = stage_cost(LLAMA2_7B, H100, 2, 3, 1, 32)
    measured = stage_cost(LLAMA2_7B, H100, 2, 3, 1, 32, profile=profile)
    forward_s, backward_s = profile.lookup("H100-SXM", 2, 3)
    assert measured.profiled and not plain.profiled
    assert measured.layer_forward_time_s[1:-1] == (forward_s,) * 30
    assert measured.layer_backward_time_s[1:-1] == (backward_s,) * 30
    # embedding and head stay estimated, on top of the measured block
    embedding_s = plain.layer_forward_time_s[0] - plain.layer_forward_time_s[1]
    head_s = plain.layer_forward_time_s[-1] - plain.layer_forward_time_s[1]
    assert measured.layer_forward_time_s[0] == pytest.approx(forward_s + embedding_s, rel=1e-9)
    assert measured.layer_forward_time_s[-1] == pytest.approx(forward_s + head_s, rel=1e-9)
    assert measured.forward_flops == plain.forward_flops  # FLOPs stay the model's
    again = stage_cost(LLAMA2_7B, H100, 2, 3, 5, 6, stack=Stack(recompute="full"),
                       profile=profile)
    assert again.layer_backward_time_s == pytest.approx((backward_s + forward_s,) * 2, rel=1e-12)
    # selective recompute adds the estimated attention core to the measured backward
    selective = stage_cost(LLAMA2_7B, H100, 2, 3, 5, 6, stack=Stack(recompute="selective"),
                           profile=profile)
    assert selective.layer_backward_time_s[0] > backward_s
    assert selective.layer_backward_time_s == pytest.approx(
        [backward_s + (s - p) for s, p in zip(
            stage_cost(LLAMA2_7B, H100, 2, 3, 5, 6, stack=Stack(recompute="selective"))
            .layer_backward_time_s, stage_cost(LLAMA2_7B, H100, 2, 3, 5, 6)
            .layer_backward_time_s, strict=True)], rel=1e-9)


def test_stage_cost_falls_back_outside_the_profile(profile):
    outside = stage_cost(LLAMA2_7B, H100, 2, 8, 1, 32, profile=profile)
    assert not outside.profiled
    assert outside == stage_cost(LLAMA2_7B, H100, 2, 8, 1, 32)


def test_profile_of_another_model_is_rejected(profile):
    other = ModelSpec("llama2-13b", 40, 5120, 13824, 40, 40, 32000, 4096, "swiglu")
    with pytest.raises(InputError) as error:
        stage_cost(other, H100, 2, 1, 1, 2, profile=profile)
    assert (error.value.field, error.value.value) == ("model", "llama2-7b")
