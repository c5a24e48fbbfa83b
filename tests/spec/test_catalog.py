"""The built-in catalog and merging user catalogs over it."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.spec.catalog import load_catalog
from xsweep.spec.plan_io import load_plan


def test_every_gpu_default_nic_exists(catalog):
    for gpu in catalog.gpus.values():
        assert catalog.nic(gpu.default_nic).name in catalog.nics


def test_paper_table5_links(catalog):
    # (scale-up Gb/s, scale-up ns, PCIe Gb/s, PCIe ns for both hops) per Table 5.
    expected = {
        "A100-40GB": (2400, 30.66, 256, 2 * 287.5),
        "H100-SXM": (3600, 20.44, 512, 2 * 143.75),
        "H200": (3600, 20.44, 512, 2 * 143.75),
        "B200": (7200, 10.22, 512, 2 * 143.75),
    }
    for name, links in expected.items():
        gpu = catalog.gpu(name)
        assert (gpu.scale_up_gbps, gpu.scale_up_latency_ns, gpu.pcie_gbps,
                gpu.pcie_latency_ns) == links


def test_figure19_server_prices(catalog):
    assert 8 * catalog.gpu("H100").capex_usd == 210_000
    assert 8 * catalog.gpu("A100").capex_usd == 83_000


def test_names_are_case_insensitive_and_aliased(catalog):
    assert catalog.gpu("h100").name == "H100-SXM"
    assert catalog.gpu("A100-40").name == "A100-40GB"
    assert catalog.nic("ConnectX-7") == catalog.nic("CX7") == catalog.nics["cx7"]
    assert catalog.model("LLAMA2-7B").num_layers == 32


def test_gqa_models_divide_heads(catalog):
    for model in catalog.models.values():
        assert model.num_attention_heads % model.num_kv_heads == 0
        assert model.hidden_size % model.num_attention_heads == 0


def test_unknown_name_lists_known_ones(catalog):
    with pytest.raises(InputError) as info:
        catalog.gpu("V100", file="plan.pbtxt", field="cluster.nodes[0].gpu")
    text = str(info.value)
    assert "plan.pbtxt: cluster.nodes[0].gpu" in text
    assert "'V100'" in text and "H100-SXM" in text


def test_partial_entry_overrides_only_given_fields(tmp_path, catalog):
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "gpus:\n"
        "  H100:\n"
        "    capex_usd: 30000\n"
        "  MI300X:\n"
        "    peak_bf16_tflops: 1307\n    hbm_gib: 192\n    hbm_tb_per_s: 5.3\n"
        "    scale_up_gbps: 3584\n    scale_up_latency_ns: 25\n    scale_up_link: infinity\n"
        "    pcie_gbps: 512\n    pcie_latency_ns: 287.5\n    pcie_link: pcie5\n"
        "    default_nic: cx7\n    capex_usd: 20000\n    power_w: 1200\n"
        "    cloud_usd_per_hour: 3.0\n    num_sms: 304\n    gemm_efficiency: 0.6\n"
        "    flash_attention_efficiency: 0.5\n    hbm_efficiency: 0.9\n"
        "links:\n  infinity: {bus_efficiency: 0.7, launch_latency_us: 12}\n"
        "nics:\n  cx7: {latency_ns: 500}\n"
    )
    merged = load_catalog([extra])
    h100 = merged.gpu("H100-SXM")
    assert h100.capex_usd == 30000
    assert h100.peak_bf16_tflops == catalog.gpu("H100-SXM").peak_bf16_tflops
    assert merged.gpu("mi300x").hbm_gib == 192
    assert merged.link(merged.gpu("mi300x").scale_up_link).bus_efficiency == 0.7
    assert merged.nic("cx7").latency_ns == 500
    assert merged.nic("cx7").bandwidth_gbps == 400
    assert load_catalog().nic("cx7").latency_ns == 368  # the defaults are untouched


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("switches: {}\n", "switches"),
        ("gpus:\n  H100: {tflops: 1}\n", "gpus.H100.tflops"),
        ("gpus:\n  X1: {hbm_gib: 10}\n", "gpus.X1"),
        ("gpus:\n  H100: {hbm_gib: -1}\n", "gpus.H100.hbm_gib"),
        ("gpus:\n  H100: {hbm_gb: 80}\n", "gpus.H100.hbm_gb"),
        ("gpus:\n  H100: {gemm_efficiency: 1.2}\n", "gpus.H100.gemm_efficiency"),
        ("gpus:\n  H100: {scale_up_link: nvlink9}\n", "gpus.H100-SXM.scale_up_link"),
        ("links:\n  nvlink3: {bus_efficiency: 0}\n", "links.nvlink3.bus_efficiency"),
        ("nics:\n  cx7: {bus_efficiency: 1.5}\n", "nics.cx7.bus_efficiency"),
        ("models:\n  llama2-7b: {dropout: 0.1}\n", "models.llama2-7b.dropout"),
        ("gpus:\n  H100: {default_nic: cx99}\n", "gpus.H100-SXM.default_nic"),
        ("models:\n  llama2-7b: {mlp: relu}\n", "models.llama2-7b.mlp"),
        ("models:\n  llama2-7b: {num_layers: 3.5}\n", "models.llama2-7b.num_layers"),
    ],
)
def test_bad_catalog_names_file_and_field(tmp_path, text, field):
    extra = tmp_path / "bad.yaml"
    extra.write_text(text)
    with pytest.raises(InputError) as info:
        load_catalog([extra])
    assert info.value.file == str(extra)
    assert info.value.field == field


def test_python_tags_are_refused(tmp_path):
    extra = tmp_path / "evil.yaml"
    extra.write_text("gpus: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_catalog([extra])


# -- one entry, one key per file ----------------------------------------------------------
@pytest.mark.parametrize(("text", "field", "first"), [
    ("gpus:\n  H100: {capex_usd: 1}\n  H100-SXM: {capex_usd: 2}\n", "gpus.H100-SXM", "gpus.H100"),
    ("gpus:\n  H100-SXM: {capex_usd: 1}\n  H100: {capex_usd: 2}\n", "gpus.H100", "gpus.H100-SXM"),
    ("gpus:\n  H100-SXM: {capex_usd: 1}\n  h100-sxm: {capex_usd: 2}\n", "gpus.h100-sxm",
     "gpus.H100-SXM"),
    ("nics:\n  cx7: {latency_ns: 1}\n  ConnectX-7: {latency_ns: 2}\n", "nics.ConnectX-7",
     "nics.cx7"),
    ("links:\n  nvlink4: {launch_latency_us: 1}\n  NVLINK4: {launch_latency_us: 2}\n",
     "links.NVLINK4", "links.nvlink4"),
    ("models:\n  llama2-7b: {seq_length: 1024}\n  llama-2-7b: {seq_length: 2048}\n",
     "models.llama-2-7b", "models.llama2-7b"),
    # an alias the file itself adds, then used as a second key
    ("nics:\n  cx7: {aliases: [mine]}\n  mine: {latency_ns: 2}\n", "nics.mine", "nics.cx7"),
])
def test_one_entry_under_two_keys_of_one_file_is_refused(tmp_path, text, field, first):
    extra = tmp_path / "twice.yaml"
    extra.write_text(text)
    with pytest.raises(InputError) as info:
        load_catalog([extra])
    assert (info.value.file, info.value.field) == (str(extra), field)
    assert first in info.value.reason and "once" in info.value.reason
    assert "\n" not in str(info.value)


def test_two_new_entries_differing_in_case_are_refused(tmp_path):
    entry = ("{bandwidth_gbps: 100, latency_ns: 1000, bus_efficiency: 0.9, "
             "launch_latency_us: 20}")
    extra = tmp_path / "new.yaml"
    extra.write_text(f"nics:\n  MyNic: {entry}\n  mynic: {entry}\n")
    with pytest.raises(InputError, match="nics.mynic: names the same nic as nics.MyNic"):
        load_catalog([extra])


@pytest.mark.parametrize("key", ["H100-SXM", "H100", "h100"])
def test_an_entry_is_overridden_once_by_its_name_or_an_alias(tmp_path, key):
    extra = tmp_path / "mine.yaml"
    extra.write_text(f"gpus:\n  {key}: {{capex_usd: 31000}}\n")
    merged = load_catalog([extra])
    assert merged.gpu("H100-SXM").capex_usd == merged.gpu("H100").capex_usd == 31000
    assert sorted(merged.gpus) == sorted(load_catalog().gpus)  # no second H100 entry


def test_a_later_file_overrides_an_earlier_one_under_another_spelling(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("gpus:\n  H100: {capex_usd: 1000}\n")
    second.write_text("gpus:\n  h100-sxm: {capex_usd: 2000}\n")
    assert load_catalog([first, second]).gpu("H100").capex_usd == 2000
    assert load_catalog([second, first]).gpu("H100").capex_usd == 1000


# -- a model entry agrees with itself -----------------------------------------------------
@pytest.mark.parametrize(("text", "field", "reason"), [
    ("models:\n  llama2-7b: {num_kv_heads: 64}\n", "models.llama2-7b.num_kv_heads",
     "exceeds num_attention_heads (32)"),
    ("models:\n  llama-2-7b: {num_kv_heads: 33}\n", "models.llama-2-7b.num_kv_heads",
     "exceeds num_attention_heads (32)"),
    # only the heads given: they are blamed, not the preset's num_kv_heads under them
    ("models:\n  llama2-7b: {num_attention_heads: 16}\n",
     "models.llama2-7b.num_attention_heads", "is below num_kv_heads (32)"),
    ("models:\n  llama2-7b: {num_attention_heads: 48, num_kv_heads: 48}\n",
     "models.llama2-7b.num_attention_heads", "must divide hidden_size (4096)"),
    ("models:\n  llama2-7b: {hidden_size: 4100}\n", "models.llama2-7b.hidden_size",
     "is not a multiple of num_attention_heads (32)"),
    ("models:\n  tiny: {num_layers: 2, hidden_size: 100, ffn_hidden_size: 400, "
     "num_attention_heads: 8, num_kv_heads: 8, vocab_size: 1000, seq_length: 128, "
     "mlp: gelu}\n", "models.tiny.num_attention_heads", "must divide hidden_size (100)"),
    ("models:\n  tiny: {num_layers: 2, hidden_size: 128, ffn_hidden_size: 512, "
     "num_attention_heads: 4, num_kv_heads: 8, vocab_size: 1000, seq_length: 128, "
     "mlp: gelu}\n", "models.tiny.num_kv_heads", "exceeds num_attention_heads (4)"),
])
def test_a_model_that_contradicts_itself_names_the_catalog_file_and_field(tmp_path, text, field,
                                                                        reason):
    extra = tmp_path / "my.yaml"
    extra.write_text(text)
    with pytest.raises(InputError) as info:
        load_catalog([extra])
    assert (info.value.file, info.value.field) == (str(extra), field)
    assert reason in info.value.reason
    assert str(info.value).startswith(f"{extra}: {field}: ")


def test_a_model_made_consistent_again_by_a_later_field_passes(tmp_path):
    extra = tmp_path / "gqa.yaml"
    extra.write_text("models:\n  llama2-7b: {num_attention_heads: 16, num_kv_heads: 8}\n")
    model = load_catalog([extra]).model("llama2-7b")
    assert (model.num_attention_heads, model.num_kv_heads) == (16, 8)


def test_check_refuses_a_contradicting_catalog_naming_it(run_xsweep, tmp_path):
    extra = tmp_path / "my.yaml"
    extra.write_text("models:\n  llama2-7b: {num_kv_heads: 64}\n")
    result = run_xsweep("check", extra)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"{extra}: models.llama2-7b.num_kv_heads: exceeds "
                                     "num_attention_heads (32) (got 64)")


def test_fewer_layers_in_the_catalog_are_the_plans_mismatch(tmp_path, spaces_dir):
    # A catalog with a shorter preset is consistent; a plan whose stages hold more layers
    # than the preset now has is the plan's error, naming its stage.
    extra = tmp_path / "short.yaml"
    extra.write_text("models:\n  llama2-7b: {num_layers: 4}\n")
    merged = load_catalog([extra])
    with pytest.raises(InputError, match="last_layer: the model has 4 layers"):
        load_plan(spaces_dir / "appendix-b.pbtxt", merged)


# -- the argument of load_catalog ---------------------------------------------------------
def test_one_path_on_its_own_is_a_list_of_one(tmp_path):
    extra = tmp_path / "one.yaml"
    extra.write_text("gpus:\n  H100: {capex_usd: 12345}\n")
    for argument in (str(extra), extra, [extra], (str(extra),), iter([extra])):
        assert load_catalog(argument).gpu("H100").capex_usd == 12345
    assert load_catalog(None).gpus == load_catalog().gpus


@pytest.mark.parametrize(("argument", "field", "reason"), [
    (3, "extra_files", "expected the path of a catalog file or a list of paths"),
    (b"one.yaml", "extra_files", "expected the path"),
    ([3], "extra_files[0]", "expected a path"),
    (["ok.yaml", None], "extra_files[1]", "expected a path"),
    ([b"one.yaml"], "extra_files[0]", "expected a path"),
    ([""], "extra_files[0]", "an empty file name"),
    (["a\0b.yaml"], "extra_files[0]", "NUL"),
])
def test_bad_arguments_of_load_catalog(argument, field, reason):
    with pytest.raises(InputError, match=reason) as info:
        load_catalog(argument)
    assert (info.value.file, info.value.field) == ("xsweep.load_catalog", field)


def test_a_missing_file_is_named_as_given(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(InputError) as info:
        load_catalog(str(missing))
    assert info.value.file == str(missing)  # not its first character


@pytest.mark.parametrize(("text", "field"), [
    ("gpus:\n  1e5: {capex_usd: 1}\n", "gpus.100000.0"),  # a number, read as a name
    ("models:\n  true: {num_layers: 2}\n", "models.True"),
    ("models:\n  llama2-7b: {num_layers: 32.0}\n", "models.llama2-7b.num_layers"),
])
def test_catalog_names_are_text_and_integers_are_written_as_integers(tmp_path, text, field):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_catalog([path])
    assert info.value.field == field
