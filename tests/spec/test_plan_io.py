"""Plan text/JSON round trips, model resolution, enum names and the rank layout."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.errors import InputError
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.plan_io import (
    fabric_name,
    load_plan,
    plan_from_json,
    plan_from_text,
    plan_to_json,
    plan_to_text,
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
