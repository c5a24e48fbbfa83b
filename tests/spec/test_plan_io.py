"""Plan text/JSON round trips, model resolution, enum names and the rank layout."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.errors import InputError
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.plan_io import (
    _json_error,
    load_plan,
    plan_from_json,
    plan_from_text,
    plan_to_json,
    plan_to_text,
)
from xsweep.spec.resolve import (
    fabric_name,
    rank_layout,
    recompute_name,
    resharding_name,
    resolve_model,
    schedule_name,
)

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
doubles = st.floats(allow_nan=False, allow_infinity=False)
names = st.text(max_size=12)


def enum_values(enum) -> st.SearchStrategy[int]:
    return st.sampled_from(list(enum.values()))


@st.composite
def models(draw) -> pb.Model:
    model = pb.Model(preset=draw(names), mlp=draw(enum_values(pb.Mlp)))
    for field, values in (("num_layers", int32), ("hidden_size", int64),
                          ("ffn_hidden_size", int64), ("num_attention_heads", int32),
                          ("num_kv_heads", int32), ("vocab_size", int64),
                          ("seq_length", int64)):
        value = draw(st.none() | values)
        if value is not None:
            setattr(model, field, value)  # presence matters: 0 set differs from unset
    dropout = draw(st.none() | st.booleans())
    if dropout is not None:
        model.dropout = dropout
    return model


@st.composite
def trainings(draw) -> pb.Training:
    training = pb.Training(
        global_batch_size=draw(int64), schedule=draw(enum_values(pb.Schedule)),
        resharding=draw(enum_values(pb.Resharding)), recompute=draw(enum_values(pb.Recompute)),
        zero_stage=draw(int32), total_tokens=draw(doubles),
        virtual_pipeline_stages=draw(int32), dp_overlap=draw(st.booleans()),
        dp_bucket_params=draw(int64),
    )
    for field in ("sequence_parallel", "flash_attention"):
        value = draw(st.none() | st.booleans())
        if value is not None:
            setattr(training, field, value)  # presence matters: false set differs from unset
    return training


nodes = st.builds(
    pb.Node, gpu=names, num_gpus=int32, nic=names, cluster=int32,
    scale_up=st.builds(pb.ScaleUp, bandwidth_gbps=doubles, latency_ns=doubles, link=names),
)
fabrics = st.builds(
    pb.Fabric, kind=enum_values(pb.FabricKind), oversubscription=doubles,
    nodes_per_rack=int32, switch_latency_ns=doubles,
    inter_cluster=st.builds(pb.InterClusterLink, bandwidth_gbps=doubles, latency_ns=doubles),
)
groups = st.builds(
    pb.DeviceGroup, id=int32, ranks=st.lists(int32, max_size=6), pp_stage=int32,
    dp_replica=int32, first_layer=int32, last_layer=int32, micro_batch_size=int32,
    num_micro_batches=int32,
)
plans = st.builds(
    pb.DeploymentPlan, name=names, model=models(), training=trainings(),
    cluster=st.builds(pb.Cluster, nodes=st.lists(nodes, max_size=3), fabric=fabrics),
    device_groups=st.lists(groups, max_size=4),
)


@settings(max_examples=150, deadline=None)
@given(plans)
def test_text_round_trip(plan):
    again = plan_from_text(plan_to_text(plan))
    assert again == plan
    assert again.SerializeToString(deterministic=True) == plan.SerializeToString(deterministic=True)


@settings(max_examples=150, deadline=None)
@given(plans)
def test_json_round_trip(plan):
    again = plan_from_json(plan_to_json(plan))
    assert again == plan
    assert again.SerializeToString(deterministic=True) == plan.SerializeToString(deterministic=True)


def test_json_file_loads_like_text(tmp_path, spaces_dir):
    text_plan = load_plan(spaces_dir / "appendix-b.pbtxt")
    json_file = tmp_path / "appendix-b.json"
    json_file.write_text(plan_to_json(text_plan))
    assert load_plan(json_file) == text_plan


def test_parse_error_names_line():
    with pytest.raises(InputError) as info:
        plan_from_text('name: "x"\nmodel { preset: "llama2-7b" }\ntraining { batch: 3 }\n', "p.pbtxt")
    assert info.value.field == "line 3"
    assert "batch" in info.value.reason


def test_preset_with_override(catalog):
    plan = pb.DeploymentPlan(model=pb.Model(preset="llama2-7b", num_layers=4, mlp=pb.GELU))
    model = resolve_model(plan, catalog)
    assert (model.name, model.num_layers, model.hidden_size, model.mlp) == (
        "llama2-7b", 4, 4096, "gelu")
    assert resolve_model(pb.DeploymentPlan(model=pb.Model(preset="llama2-7b")), catalog).mlp == "swiglu"


def test_explicit_model_defaults_to_gelu(catalog):
    dims = dict(num_layers=2, hidden_size=64, ffn_hidden_size=256, num_attention_heads=4,
                num_kv_heads=4, vocab_size=100, seq_length=32)
    plan = pb.DeploymentPlan(name="tiny", model=pb.Model(**dims))
    model = resolve_model(plan, catalog)
    assert (model.name, model.mlp, model.vocab_size) == ("tiny", "gelu", 100)
    del dims["vocab_size"]
    with pytest.raises(InputError, match="model.vocab_size"):
        resolve_model(pb.DeploymentPlan(model=pb.Model(**dims)), catalog)


def test_enum_names_with_unspecified_defaults():
    plan = pb.DeploymentPlan()
    assert (schedule_name(plan), resharding_name(plan), fabric_name(plan),
            recompute_name(plan)) == ("1f1b", "lcm", "rail_optimized", "none")
    plan.training.schedule = pb.GPIPE
    plan.training.recompute = pb.SELECTIVE
    assert (schedule_name(plan), recompute_name(plan)) == ("gpipe", "selective")
    plan.training.schedule = pb.ONE_F_ONE_B
    plan.training.resharding = pb.ALPACOMM
    plan.cluster.fabric.kind = pb.FAT_TREE
    assert (schedule_name(plan), resharding_name(plan), fabric_name(plan)) == (
        "1f1b", "alpacomm", "fat_tree")
    plan.training.resharding = pb.HETAUTO
    assert resharding_name(plan) == "hetauto"


def test_rank_layout_numbers_ranks_node_by_node(catalog, spaces_dir):
    plan = load_plan(spaces_dir / "appendix-b.pbtxt")
    layout = rank_layout(plan, catalog)
    assert [(p.node, p.local) for p in layout] == [(n, i) for n in (0, 1) for i in range(5)]
    assert {p.gpu.name for p in layout[:5]} == {"H100-SXM"}
    assert {(p.gpu.name, p.nic.name) for p in layout[5:]} == {("A100-40GB", "cx6")}


def test_rank_layout_applies_node_overrides(catalog):
    plan = pb.DeploymentPlan()
    plan.cluster.nodes.add(gpu="H100", num_gpus=2, nic="eth10g",
                           scale_up=pb.ScaleUp(bandwidth_gbps=512))
    place = rank_layout(plan, catalog)[1]
    assert (place.gpu.scale_up_gbps, place.gpu.scale_up_latency_ns) == (512, 20.44)
    assert place.nic.bandwidth_gbps == 10


# -- numbers as written, and messages naming the plan field ------------------------------------
PLAN_TEXT = """\
name: "numbers"  # 010 and 0x8 in a comment are no numbers
model { preset: "llama2-7b" }
training { global_batch_size: 8 total_tokens: 1e9 }
cluster { nodes { gpu: "H100-SXM" num_gpus: 8 } }
device_groups { id: 0 ranks: [0, 1] pp_stage: 0 dp_replica: 0
  first_layer: 1 last_layer: 32 micro_batch_size: 1 num_micro_batches: 8 }
device_groups { id: 1 ranks: [2, 3] pp_stage: 0 dp_replica: 1
  first_layer: 1 last_layer: 32 micro_batch_size: 1 num_micro_batches: 8 }
"""


@pytest.mark.parametrize(("old", "new", "field", "line", "form"), [
    ("size: 8", "size: 010", "training.global_batch_size", 3, "leading zero"),
    ("size: 8", "size: 0x8", "training.global_batch_size", 3, "base prefix"),
    ("num_gpus: 8", "num_gpus: 0o10", "cluster.nodes[0].num_gpus", 4, "base prefix"),
    ("[2, 3]", "[2, 03]", "device_groups[1].ranks[1]", 7, "leading zero"),
    ("id: 1 ", "id: -01 ", "device_groups[1].id", 7, "leading zero"),
    ("1e9", "1_000_000", "training.total_tokens", 3, "underscores"),
    ("micro_batch_size: 1 num_micro_batches: 8 }\ndevice_groups { id: 1",
     "micro_batch_size: 0b1 num_micro_batches: 8 }\ndevice_groups { id: 1",
     "device_groups[0].micro_batch_size", 6, "base prefix"),
])
def test_text_plan_numbers_in_other_bases_are_refused(old, new, field, line, form):
    """protobuf's text parser reads ``040`` as octal 32 and ``0x20`` as 32."""
    text = PLAN_TEXT.replace(old, new, 1)
    written = next(word.strip("[],") for word in new.split() if word not in old.split())
    with pytest.raises(InputError, match=form) as info:
        plan_from_text(text, "p.pbtxt")
    assert (info.value.field, info.value.value) == (field, written)
    assert f"(line {line})" in info.value.reason and "decimal digits" in info.value.reason


def test_text_plan_numbers_are_checked_in_angle_brackets_too():
    text = PLAN_TEXT.replace("training { global_batch_size: 8 total_tokens: 1e9 }",
                             "training < global_batch_size: 8 zero_stage: 01 >")
    with pytest.raises(InputError, match="leading zero") as info:
        plan_from_text(text, "p.pbtxt")
    assert (info.value.field, info.value.value) == ("training.zero_stage", "01")


def test_text_plan_digits_in_strings_and_comments_are_not_numbers():
    text = PLAN_TEXT.replace('"numbers"', '"run 010 of 0x8_1" "#2"') + "# 1_000\n"
    assert plan_from_text(text, "p.pbtxt").name == "run 010 of 0x8_1#2"
    assert plan_from_text(PLAN_TEXT.replace("1e9", "0.5")).training.total_tokens == 0.5


def test_text_plan_syntax_errors_still_name_the_line():
    with pytest.raises(InputError) as info:
        plan_from_text(PLAN_TEXT.replace("num_gpus: 8", "bogus: 1 num_gpus: 010"), "p.pbtxt")
    assert info.value.field == "line 4" and "bogus" in info.value.reason


def test_a_second_byte_order_mark_is_shown_escaped(tmp_path):
    path = tmp_path / "p.pbtxt"
    path.write_bytes(b"\xef\xbb\xbf" * 2 + PLAN_TEXT.encode())
    with pytest.raises(InputError) as info:
        load_plan(path)
    message = str(info.value)
    assert "\ufeff" not in message and "\\ufeff" in message
    assert message.startswith(f"{path}: line 1: ") and "name:" not in message


def json_plan(**changes) -> dict:
    """The plan of PLAN_TEXT as a JSON document, with ``changes`` by dotted camelCase path."""
    document = json.loads(plan_to_json(plan_from_text(PLAN_TEXT)))
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = document
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if isinstance(target, list):
            target[int(key)] = value
        else:
            target[key] = value
    return document


@pytest.mark.parametrize(("changes", "field", "value", "reason"), [
    ({"training__totalTokens": float("inf")}, "training.total_tokens", float("inf"),
     "a number too large for a double"),
    ({"training__schedule": "GPIPE "}, "training.schedule", "GPIPE ",
     "unknown value; did you mean 'GPIPE'? (expected one of GPIPE, ONE_F_ONE_B)"),
    ({"training__schedule": True}, "training.schedule", True,
     "expected one of GPIPE, ONE_F_ONE_B"),
    ({"training__schedule": "1"}, "training.schedule", "1", "unknown value"),
    ({"deviceGroups__1__ranks": "2,3"}, "device_groups[1].ranks", "2,3", "expected a list"),
    ({"deviceGroups__1__ranks": [2, None]}, "device_groups[1].ranks[1]", None,
     "null is not allowed in a list"),
    ({"deviceGroups__1__ranks": [2, 3.5]}, "device_groups[1].ranks[1]", 3.5,
     "expected an integer"),
    ({"deviceGroups__1__ranks": [2, True]}, "device_groups[1].ranks[1]", True,
     "expected an integer"),
    ({"deviceGroups__0__id": 2**31}, "device_groups[0].id", 2**31,
     "outside the range of a int32 field"),
    ({"training__globalBatchSize": "1_000"}, "training.global_batch_size", "1_000",
     "expected an integer in decimal digits"),
    ({"training__globalBatchSize": " 8"}, "training.global_batch_size", " 8",
     "expected an integer in decimal digits"),
    ({"training__totalTokens": "1_0.5"}, "training.total_tokens", "1_0.5",
     "expected a number in decimal digits"),
    ({"training__totalTokens": "1e999"}, "training.total_tokens", "1e999",
     "a number too large for a double"),
    ({"cluster": [1, 2]}, "cluster", None, "expected an object {...} of fields, not a list"),
    ({"cluster__nodes__0__gpu": 7}, "cluster.nodes[0].gpu", 7, "expected a string"),
    ({"model__dropout": "true"}, "model.dropout", "true", "expected true or false"),
    ({"model__name": "x"}, "model.name", None, "unknown field (expected one of preset,"),
    ({"name": "\ud800"}, "name", "\ud800", "a string with an unpaired surrogate"),
])
def test_json_plan_errors_name_the_field_and_value(changes, field, value, reason):
    text = json.dumps(json_plan(**changes)).replace("Infinity", "1e999")
    with pytest.raises(InputError) as info:
        plan_from_json(text, "p.json")
    error = info.value
    assert (error.field, error.value, error.reason.startswith(reason)) == (field, value, True)
    assert "DeploymentPlan" not in str(error) and len(str(error)) < 200


def test_json_plan_reports_the_trailing_space_of_an_enum_name():
    text = json.dumps(json_plan(training__schedule="GPIPE "))
    with pytest.raises(InputError) as info:
        plan_from_json(text, "p.json")
    assert str(info.value) == ("p.json: training.schedule: unknown value; did you mean "
                               "'GPIPE'? (expected one of GPIPE, ONE_F_ONE_B) (got 'GPIPE ')")


def test_json_plan_accepts_the_forms_of_the_protobuf_mapping():
    plan = plan_from_json(json.dumps(json_plan(
        training__globalBatchSize="8", training__totalTokens="1e9", training__schedule=1,
        deviceGroups__0__microBatchSize=1.0, deviceGroups__1__numMicroBatches=8e0,
        cluster__fabric={"kind": "FAT_TREE", "oversubscription": 2}, model__mlp=None)))
    assert (plan.training.global_batch_size, plan.training.total_tokens) == (8, 1e9)
    assert (plan.training.schedule, plan.cluster.fabric.kind) == (pb.GPIPE, pb.FAT_TREE)
    assert plan.device_groups[1].num_micro_batches == 8


def test_what_protobuf_still_refuses_is_one_short_line():
    error = _json_error(json_format.ParseError(
        'Failed to parse deviceGroups field: Failed to parse tpRanks field: repeated field '
        'tpRanks must be in [] which is {"a": [1, 2, 3]} at DeploymentPlan.deviceGroups[2].'),
        "p.json")
    assert str(error) == ("p.json: device_groups[2]: invalid plan JSON: repeated field "
                          "tpRanks must be in []")
