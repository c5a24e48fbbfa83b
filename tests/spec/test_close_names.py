"""Unknown names come with the closest known ones ("did you mean ...", one line), and the
names of fixed sets match in any case, in sweeps and plans alike."""

from __future__ import annotations

import copy
import json

import pytest

from xsweep.errors import InputError, close_names, did_you_mean
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.catalog import load_catalog
from xsweep.spec.plan_io import plan_from_json, plan_from_text, plan_to_json
from xsweep.spec.sweep import sweep_from_dict

SWEEP = {
    "name": "tiny",
    "model": "llama2-7b",
    "training": {"global_batch_size": 32},
    "cluster": {"pools": [{"gpu": "H100", "nodes": 1}]},
    "parallelism": {"tp": {"H100": [2, 4]}},
}


def sweep_error(change) -> InputError:
    document = copy.deepcopy(SWEEP)
    change(document)
    with pytest.raises(InputError) as caught:
        sweep_from_dict(document, "s.yaml")
    assert "\n" not in str(caught.value)
    return caught.value


def test_close_names_ignore_case_and_keep_the_spelling():
    assert close_names("h100-sxn", ["H100-SXM", "A100-40GB"]) == ["H100-SXM"]
    assert close_names("zzz", ["H100-SXM"]) == []
    assert did_you_mean("schedul", ["schedule", "recompute"]) == "; did you mean 'schedule'?"
    assert did_you_mean("", ["schedule"]) == "" and did_you_mean(7, ["schedule"]) == ""


@pytest.mark.parametrize(("change", "field", "reason"), [
    (lambda d: d["training"].update(schedul="gpipe"), "training.schedul",
     "unknown key; did you mean 'schedule'? (known: global_batch_size, schedule,"),
    (lambda d: d.update(objective=["mfu"]), "objective",
     "unknown key; did you mean 'objectives'? (known: name, model, training,"),
    (lambda d: d["cluster"]["pools"][0].update(nodz=1), "cluster.pools[0].nodz",
     "unknown key; did you mean 'nodes'? (known: gpu, nodes, gpus_per_node, nic)"),
    (lambda d: d.update(validate={"tops": 3}), "validate.tops",
     "unknown key; did you mean 'top'? (known: top, tolerance)"),
    (lambda d: d["training"].update(schedule=["gpipe", "1f1"]), "training.schedule[1]",
     "Input should be 'gpipe' or '1f1b'; did you mean '1f1b'?"),
    (lambda d: d.update(search={"sampler": "nsga"}), "search.sampler",
     "; did you mean 'nsga2'?"),
    (lambda d: d.update(objectives=["bubble_s"]), "objectives[0]",
     "unknown objective; did you mean 'bubble_s_max'? (objectives: iteration_time_s,"),
    (lambda d: d["parallelism"].update(tp={"H10": 2}), "parallelism.tp.H10",
     "names no pool's gpu; did you mean 'H100'?"),
])
def test_sweep_errors_name_the_close_names(change, field, reason):
    error = sweep_error(change)
    assert error.field == field
    assert reason in error.reason, error.reason


def test_an_unknown_objective_lists_the_objectives():
    error = sweep_error(lambda d: d.update(objectives=["latency"]))
    assert error.reason.startswith("unknown objective (objectives: iteration_time_s, ")
    assert "cost_per_million_tokens_usd" in error.reason and "bubble_s" in error.reason


def test_sweep_names_of_fixed_sets_match_in_any_case():
    document = copy.deepcopy(SWEEP)
    document["training"].update(schedule=["GPipe", "1F1B"], recompute="Selective",
                                resharding="HetAuto")
    document["cluster"]["fabric"] = "Fat_Tree"
    document["parallelism"].update(pipeline_mix="Mixed", layer_split="EVEN")
    document["cost"] = {"pricing": "Cloud"}
    document["search"] = {"sampler": "TPE"}
    document["objectives"] = ["Iteration_Time_S", "COST_PER_MILLION_TOKENS_USD"]
    axes = sweep_from_dict(document).axes()
    assert axes["training.schedule"] == ["gpipe", "1f1b"]
    assert axes["training.recompute"] == ["selective"]
    assert axes["training.resharding"] == ["hetauto"]
    assert axes["cluster.fabric"] == ["fat_tree"]
    assert axes["parallelism.pipeline_mix"] == ["mixed"]
    assert axes["parallelism.layer_split"] == ["even"]
    assert axes["cost.pricing"] == ["cloud"]
    sweep = sweep_from_dict(document)
    assert sweep.search.sampler == "tpe"
    assert sweep.objectives == ["iteration_time_s", "cost_per_million_tokens_usd"]
    # two spellings of one value are one value twice
    document["training"]["schedule"] = ["gpipe", "GPIPE"]
    with pytest.raises(InputError, match="distinct"):
        sweep_from_dict(document)


def test_the_cost_per_million_tokens_is_an_objective_without_total_tokens():
    document = copy.deepcopy(SWEEP)
    document["objectives"] = ["cost_per_million_tokens"]
    assert sweep_from_dict(document).objectives == ["cost_per_million_tokens_usd"]


@pytest.mark.parametrize(("section", "name", "hint"), [
    ("gpu", "H10", "did you mean 'H100-SXM'?"),
    ("gpu", "A100-40G", "did you mean 'A100-40GB'?"),
    ("nic", "connectx7", "did you mean 'cx7'?"),  # close to an alias: named by the entry
    ("model", "llama2-7", "did you mean 'llama2-7b'?"),
])
def test_unknown_catalog_names_name_the_close_entries(section, name, hint):
    catalog = load_catalog()
    with pytest.raises(InputError) as caught:
        getattr(catalog, section)(name, file="p.pbtxt", field="f")
    assert caught.value.reason.startswith(f"unknown {section}; {hint} (known: ")


def test_unknown_catalog_fields_and_sections(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("gpus:\n  H100:\n    capex: 30000\n")
    with pytest.raises(InputError) as caught:
        load_catalog([path])
    assert caught.value.field == "gpus.H100.capex"
    assert caught.value.reason.startswith("unknown field; did you mean 'capex_usd'? (known: ")
    path.write_text("gpu:\n  H100:\n    capex_usd: 30000\n")
    with pytest.raises(InputError) as caught:
        load_catalog([path])
    assert caught.value.reason.startswith("unknown catalog section; did you mean 'gpus'?")


PLAN = """\
name: "p"
model { preset: "llama2-7b" }
training { global_batch_size: 8 schedule: GPIPE recompute: SELECTIVE }
cluster { nodes { gpu: "H100-SXM" num_gpus: 2 } fabric { kind: FAT_TREE } }
device_groups { id: 0 ranks: [0, 1] pp_stage: 0 dp_replica: 0 first_layer: 1 last_layer: 32
  micro_batch_size: 1 num_micro_batches: 8 }
"""


def test_plan_enum_names_match_in_any_case_in_text_format():
    expected = plan_from_text(PLAN)
    text = (PLAN.replace("GPIPE", "gpipe").replace("SELECTIVE", "Selective")
            .replace("FAT_TREE", "fat_tree")
            .replace('preset: "llama2-7b"', 'preset: "llama2-7b" mlp: SwiGLU')
            + "# schedule: gpipe in a comment stays as written\n")
    plan = plan_from_text(text)
    assert plan.training.schedule == pb.GPIPE and plan.training.recompute == pb.SELECTIVE
    assert plan.cluster.fabric.kind == pb.FAT_TREE and plan.model.mlp == pb.SWIGLU
    plan.model.ClearField("mlp")
    assert plan == expected


def test_plan_enum_names_match_in_any_case_in_json():
    document = json.loads(plan_to_json(plan_from_text(PLAN)))
    document["training"]["schedule"] = "gpipe"
    document["cluster"]["fabric"]["kind"] = "Fat_Tree"
    plan = plan_from_json(json.dumps(document))
    assert plan.training.schedule == pb.GPIPE and plan.cluster.fabric.kind == pb.FAT_TREE
    document["training"]["schedule"] = "GP\u0131PE"  # a dotless i is no I
    with pytest.raises(InputError):
        plan_from_json(json.dumps(document))


@pytest.mark.parametrize(("text", "reason"), [
    ("training { schedul: GPIPE }", "has no field named \"schedul\"; did you mean 'schedule'?"),
    ("training { schedule: one_f_one }", "did you mean 'ONE_F_ONE_B'? (expected one of GPIPE, "
                                        "ONE_F_ONE_B)"),
    ("training { schedule: 1f1b }", "did you mean 'ONE_F_ONE_B'?"),  # a sweep's spelling
    ("training { recompute: none }", "did you mean 'NO_RECOMPUTE'?"),
    ('training { schedule: "GPIPE" }', "write GPIPE without quotes"),
])
def test_text_plan_errors_name_the_close_names(text, reason):
    with pytest.raises(InputError) as caught:
        plan_from_text(text, "p.pbtxt")
    assert caught.value.field == "line 1"
    assert reason in caught.value.reason, caught.value.reason


@pytest.mark.parametrize(("document", "field", "reason"), [
    ({"training": {"schedul": "GPIPE"}}, "training.schedul",
     "unknown field; did you mean 'schedule'? (expected one of global_batch_size,"),
    ({"deviceGroup": []}, "deviceGroup", "unknown field; did you mean 'deviceGroups'?"),
    ({"device_group": []}, "device_group", "unknown field; did you mean 'device_groups'?"),
    ({"training": {"schedule": "1F1B"}}, "training.schedule",
     "unknown value; did you mean 'ONE_F_ONE_B'? (expected one of GPIPE, ONE_F_ONE_B)"),
])
def test_json_plan_errors_name_the_close_names(document, field, reason):
    with pytest.raises(InputError) as caught:
        plan_from_json(json.dumps(document), "p.json")
    assert caught.value.field == field
    assert caught.value.reason.startswith(reason), caught.value.reason
