"""The sweep YAML schema: axes, defaults, strictness and one-line errors."""

from __future__ import annotations

import copy
import math

import pytest
import yaml

from tests.support.sweeps import MINIMAL, with_change
from xsweep.errors import InputError
from xsweep.spec.sweep import load_sweep, sweep_from_dict


def test_quickstart_grid(spaces_dir):
    sweep = load_sweep(spaces_dir / "quickstart.yaml")
    axes = sweep.axes()
    assert axes["training.schedule"] == ["gpipe", "1f1b"]
    assert axes["cluster.pools[0].nic"] == ["cx7"]
    assert "cluster.pools[1].nic" not in axes  # absent: the GPU's default NIC
    assert sweep.grid_size() == math.prod(len(v) for v in axes.values()) == 384
    assert sweep.validation.top == 3


def test_scalars_become_single_value_axes():
    sweep = sweep_from_dict(MINIMAL)
    axes = sweep.axes()
    assert axes["model"] == ["llama2-7b"]
    assert axes["cluster.pools[0].nodes"] == [1]
    assert axes["parallelism.tp.H100"] == [2, 4]
    assert axes["parallelism.pp"] == [1]
    assert sweep.objectives == ["iteration_time_s"]


def test_training_stack_defaults_follow_megatrons_recipe():
    axes = sweep_from_dict(MINIMAL).axes()
    assert {key: axes[f"training.{key}"] for key in (
        "schedule", "recompute", "sequence_parallel", "flash_attention",
        "virtual_pipeline_stages", "dp_overlap", "dp_bucket_params", "zero_stage")} == {
        "schedule": ["1f1b"], "recompute": ["none"], "sequence_parallel": [True],
        "flash_attention": [True], "virtual_pipeline_stages": [1], "dp_overlap": [False],
        "dp_bucket_params": [0], "zero_stage": [0]}


def test_training_stack_options_are_axes():
    document = copy.deepcopy(MINIMAL)
    document["training"].update(recompute=["none", "selective", "full"],
                                sequence_parallel=[False, True], zero_stage=[0, 1, 3],
                                virtual_pipeline_stages=[1, 2, 4], dp_overlap=[False, True])
    sweep = sweep_from_dict(document)
    assert sweep.grid_size() == 3 * 2 * 3 * 3 * 2 * 2  # the TP axis has 2 values


def test_memory_objective_is_in_gib():
    sweep = sweep_from_dict(with_change("objectives", ["memory_per_gpu"]))
    assert sweep.objectives == ["memory_per_gpu_gib"]


def test_short_objective_names_map_to_metrics():
    document = with_change("objectives", ["iteration_time", "cost_per_run"])
    document["training"]["total_tokens"] = 1e9
    assert sweep_from_dict(document).objectives == ["iteration_time_s", "cost_per_run_usd"]


@pytest.mark.parametrize(
    ("path", "value", "field", "reason"),
    [
        ("training.schedule", ["gpipe", "zb"], "training.schedule[1]", "Input should be"),
        ("training.global_batch_size", 0, "training.global_batch_size[0]", "greater than 0"),
        ("training.global_batch_size", "8", "training.global_batch_size[0]", "integer"),
        ("training.batch", 8, "training.batch", "unknown key (known: global_batch_size, "),
        ("parallelism.pp", [1, 1], "parallelism.pp", "distinct"),
        ("parallelism.pp", [], "parallelism.pp", "at least 1"),
        ("parallelism.tp", {"H100": 2, "A100": 2}, "parallelism.tp.A100", "no pool"),
        ("parallelism.tp", {}, "parallelism.tp", "no TP degrees for pool 'H100'"),
        ("cluster.pools", [{"gpu": "H100", "nodes": 0}], "cluster.pools", "empty"),
        ("cluster.oversubscription", 0.5, "cluster.oversubscription[0]", "greater than or equal"),
        ("objectives", ["latency"], "objectives[0]", "unknown objective"),
        ("objectives", ["cost_per_run_usd"], "training.total_tokens", "cost_per_run_usd"),
        ("objectives", ["mfu", "mfu"], "objectives", "repeated"),
        ("search.sampler", "anneal", "search.sampler", "Input should be"),
        ("training.recompute", "partial", "training.recompute[0]", "Input should be"),
        ("training.zero_stage", 2, "training.zero_stage[0]", "Input should be"),
        ("training.virtual_pipeline_stages", 0, "training.virtual_pipeline_stages[0]",
         "greater than 0"),
        ("training.dp_bucket_params", -5, "training.dp_bucket_params[0]", "greater than or equal"),
        ("training.sequence_parallel", "yes please", "training.sequence_parallel[0]", "boolean"),
        ("training.activation_recompute", True, "training.activation_recompute",
         "unknown key; did you mean 'recompute'?"),
    ],
)
def test_errors_name_field(path, value, field, reason):
    with pytest.raises(InputError) as info:
        sweep_from_dict(with_change(path, value), "s.yaml")
    assert info.value.file == "s.yaml"
    assert info.value.field == field
    assert reason in info.value.reason
    assert "\n" not in str(info.value)


def test_unknown_names_checked_against_catalog(tmp_path):
    document = copy.deepcopy(MINIMAL)
    document["cluster"]["pools"][0]["nic"] = ["cx7", "cx42"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(InputError) as info:
        load_sweep(path)
    assert info.value.field == "cluster.pools[0].nic[1]"
    assert info.value.value == "cx42"


def test_interleaving_needs_the_1f1b_schedule():
    document = copy.deepcopy(MINIMAL)
    document["training"].update(schedule="gpipe", virtual_pipeline_stages=[1, 2])
    with pytest.raises(InputError) as info:
        sweep_from_dict(document, "s.yaml")
    assert info.value.field == "training.virtual_pipeline_stages"
    document["training"]["schedule"] = ["gpipe", "1f1b"]  # the planner drops gpipe x 2
    assert sweep_from_dict(document).grid_size() == 2 * 2 * 2


def test_integer_axes_take_ranges():
    document = copy.deepcopy(MINIMAL)
    document["cluster"]["pools"][0]["nodes"] = {"low": 0, "high": 64, "step": 8}
    document["parallelism"]["pp"] = {"low": 1, "high": 4}
    sweep = sweep_from_dict(document)
    domains = sweep.domains()
    assert (domains["cluster.pools[0].nodes"].low, domains["cluster.pools[0].nodes"].high,
            domains["cluster.pools[0].nodes"].step) == (0, 64, 8)
    assert sweep.axes()["cluster.pools[0].nodes"] == [0, 8, 16, 24, 32, 40, 48, 56, 64]
    assert sweep.axes()["parallelism.pp"] == [1, 2, 3, 4]
    assert sweep.grid_size() == 9 * 4 * 2


@pytest.mark.parametrize(("value", "message"), [
    ({"low": 4, "high": 2}, "high (2) is below low (4)"),
    ({"low": 0, "high": 7, "step": 2}, "high - low (7) is not a multiple of step (2)"),
    ({"low": -1, "high": 2}, "greater than or equal to 0"),
    ({"low": 0, "high": 2, "step": 0}, "greater than 0"),
    ({"low": 0}, "Field required"),
    ({"low": 0, "high": 2, "stride": 1}, "unknown key; did you mean 'step'? (known: low, high, "
                                         "step)"),
    ({"low": 0, "high": 60_000}, None),  # within the node bound: accepted
])
def test_bad_ranges_are_one_line_errors_naming_the_field(value, message, monkeypatch):
    document = with_change("cluster", {"pools": [{"gpu": "H100", "nodes": value}]})
    if message is None:
        monkeypatch.setenv("XSWEEP_MAX_GPUS", str(8 * 60_000))  # the GPU limit, raised
        assert len(sweep_from_dict(document).axes()["cluster.pools[0].nodes"]) == 60_001
        return
    with pytest.raises(InputError) as caught:
        sweep_from_dict(document, "space.yaml")
    text = str(caught.value)
    assert text.startswith("space.yaml: cluster.pools[0].nodes") and message in text
    assert "\n" not in text


def test_ranges_only_on_integer_axes():
    with pytest.raises(InputError, match="training.schedule"):
        sweep_from_dict(with_change("training.schedule", {"low": 0, "high": 1}), "s.yaml")


def test_deadline_needs_total_tokens():
    with pytest.raises(InputError, match="training.total_tokens: required by the constraint"):
        sweep_from_dict(with_change("constraints", {"training_days_max": 30}), "s.yaml")
    document = with_change("constraints", {"training_days_max": 30})
    document["training"]["total_tokens"] = 1e12
    assert sweep_from_dict(document).constraints.training_days_max == 30


# -- one GPU, one pool; one value, one spelling --------------------------------------------
def with_pools(*gpus: str, tp: dict | None = None) -> dict:
    document = copy.deepcopy(MINIMAL)
    document["cluster"]["pools"] = [{"gpu": gpu, "nodes": 1} for gpu in gpus]
    document["parallelism"]["tp"] = tp if tp is not None else dict.fromkeys(gpus, 2)
    return document


@pytest.mark.parametrize(("gpus", "named"), [
    (("H100", "H100-SXM"), "'H100'"),  # an alias and the name
    (("H100-SXM", "h100-sxm"), "'H100-SXM'"),  # two cases
    (("A100", "H100", "h100"), "'H100'"),
    (("H100", "H100"), "names the same gpu;"),  # the same spelling, as before
    (("NewGpu", "newgpu"), "'NewGpu'"),  # not in the catalog: still one name in two cases
])
def test_two_pools_of_one_gpu_are_refused_whatever_the_spelling(gpus, named):
    with pytest.raises(InputError) as info:
        sweep_from_dict(with_pools(*gpus), "s.yaml")
    last = len(gpus) - 1
    assert info.value.field == f"cluster.pools[{last}].gpu"
    assert info.value.value == gpus[-1]
    assert named in info.value.reason and "another pool" in info.value.reason
    assert "\n" not in str(info.value)


def test_pools_of_different_gpus_pass():
    sweep = sweep_from_dict(with_pools("A100-40GB", "A100-80GB", "H100"))
    assert len(sweep.cluster.pools) == 3


@pytest.mark.parametrize("key", ["h100", "H100-SXM", "h100-sxm"])
def test_a_tp_key_spells_its_pools_gpu_exactly(key):
    with pytest.raises(InputError) as info:
        sweep_from_dict(with_pools("H100", tp={key: 2}), "s.yaml")
    assert info.value.field == f"parallelism.tp.{key}"
    assert "another spelling" in info.value.reason and "'H100'" in info.value.reason


def test_a_second_tp_key_for_one_pool_is_refused():
    with pytest.raises(InputError) as info:
        sweep_from_dict(with_pools("H100", tp={"H100": 2, "H100-SXM": 4}), "s.yaml")
    assert info.value.field == "parallelism.tp.H100-SXM"


@pytest.mark.parametrize(("path", "value", "field"), [
    ("model", ["llama2-7b", "LLAMA2-7B"], "model[1]"),
    ("model", ["llama2-7b", "llama2-13b", "llama-2-7b"], "model[2]"),
    ("cluster.pools", [{"gpu": "H100", "nodes": 1, "nic": ["cx7", "ConnectX-7"]}],
     "cluster.pools[0].nic[1]"),
])
def test_an_axis_of_catalog_names_holds_each_entry_once(path, value, field):
    with pytest.raises(InputError) as info:
        sweep_from_dict(with_change(path, value), "s.yaml")
    assert info.value.field == field
    assert "another spelling" in info.value.reason


def test_aliases_of_a_user_catalog_are_known_to_repeated_entry(tmp_path):
    from xsweep.spec.catalog import load_catalog, repeated_entry

    extra = tmp_path / "mine.yaml"
    extra.write_text("gpus:\n  H100: {aliases: [hopper]}\n")
    assert repeated_entry("gpus", ["H100-SXM", "hopper"]) is None  # not a built-in alias
    assert repeated_entry("gpus", ["A100", "H100-SXM", "hopper"], load_catalog([extra])) \
        == (1, 2)


def test_pools_spelled_by_a_user_catalogs_alias_are_refused_where_the_sweep_meets_it(tmp_path):
    from xsweep.spec.catalog import load_catalog
    from xsweep.spec.sweep import check_sweep_names

    extra = tmp_path / "mine.yaml"
    extra.write_text("gpus:\n  H100: {aliases: [hopper]}\n")
    sweep = sweep_from_dict(with_pools("H100-SXM", "hopper"), "s.yaml")  # no built-in alias
    with pytest.raises(InputError) as info:
        check_sweep_names(sweep, load_catalog([extra]), "s.yaml")
    assert info.value.field == "cluster.pools[1].gpu"
    assert "'H100-SXM'" in info.value.reason


def test_the_work_axes_get_a_front_each_unless_the_sweep_says_across():
    sweep = sweep_from_dict(MINIMAL)
    assert sweep.fronts == "per_work" and sweep.work_axes() == ()  # nothing swept changes work
    two = with_change("model", ["llama2-7b", "llama2-13b"])
    two["training"]["global_batch_size"] = {"low": 32, "high": 64, "step": 32}
    assert sweep_from_dict(two).work_axes() == ("model", "training.global_batch_size")
    assert sweep_from_dict(two | {"fronts": "Across"}).work_axes() == ()
    with pytest.raises(InputError, match="fronts: Input should be 'per_work' or 'across'"):
        sweep_from_dict(two | {"fronts": "per_model"})
    # what changes the work: the model and the tokens per iteration, nothing else
    from xsweep.spec.sweep import changes_work

    axes = sweep_from_dict(two).domains()
    assert [path for path in axes if changes_work(path)] == ["model", "training.global_batch_size"]
