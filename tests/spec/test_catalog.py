"""The built-in catalog and merging user catalogs over it."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.spec.catalog import load_catalog


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
