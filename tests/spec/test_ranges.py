"""Every number is finite and inside its documented range, in catalogs, profiles and sweeps.

(Plan fields: ``tests/support/invalid_plans.py`` holds a case per rule.)
"""

from __future__ import annotations

import math

import pytest

from tests.support.sweeps import with_change
from xsweep.errors import InputError
from xsweep.spec import ranges
from xsweep.spec.catalog import load_catalog
from xsweep.spec.profile import load_profile
from xsweep.spec.sweep import sweep_from_dict

NAN, INF = math.nan, math.inf


def out_of_range(bounds: ranges.Range) -> list[float]:
    """Values every range refuses: not finite, below it, above it."""
    below = bounds.low - 1 if bounds.low >= 1 else -1.0
    return [NAN, INF, -INF, below, bounds.high * 2 + 1]


CATALOG_FIELDS = [(section, name) for section, fields in ranges.CATALOG.items()
                  for name in fields]
ENTRY = {"gpus": "H100-SXM", "nics": "cx7", "links": "nvlink4", "models": "llama2-7b",
         "software": "nemo-24.07"}


@pytest.mark.parametrize(("section", "name"), CATALOG_FIELDS,
                         ids=[f"{s}.{n}" for s, n in CATALOG_FIELDS])
def test_catalog_numbers_outside_their_range_are_refused(tmp_path, section, name):
    bounds = ranges.CATALOG[section][name]
    for value in out_of_range(bounds):
        path = tmp_path / "c.yaml"
        number = ".nan" if value != value else {INF: ".inf", -INF: "-.inf"}.get(value, value)
        path.write_text(f"{section}:\n  {ENTRY[section]}: {{{name}: {number}}}\n")
        with pytest.raises(InputError) as error:
            load_catalog([path])
        assert error.value.field == f"{section}.{ENTRY[section]}.{name}", value
    # the bound itself is accepted, with what a model's own rules then ask of the others
    others = {"num_attention_heads": ", hidden_size: 1048576",
              "num_kv_heads": ", num_attention_heads: 16384, hidden_size: 1048576",
              # a model with experts names its top-k and expert width too
              "num_experts": ", moe_top_k: 1, expert_ffn_hidden_size: 1",
              "moe_top_k": ", num_experts: 65536, expert_ffn_hidden_size: 1",
              "expert_ffn_hidden_size": ", num_experts: 1, moe_top_k: 1",
              "num_shared_experts": ", num_experts: 1, moe_top_k: 1, expert_ffn_hidden_size: 1",
              "moe_max_nodes": ", num_experts: 1, moe_top_k: 1, expert_ffn_hidden_size: 1"}
    extra = others.get(name, "") if section == "models" else ""
    path.write_text(f"{section}:\n  {ENTRY[section]}: {{{name}: {bounds.high}{extra}}}\n")
    load_catalog([path])


def test_the_shipped_catalog_is_inside_the_ranges(catalog):
    for section, fields in ranges.CATALOG.items():
        for entry in getattr(catalog, section).values():
            for name, bounds in fields.items():
                bounds.check(getattr(entry, name), "catalog", f"{section}.{entry.name}.{name}")


@pytest.mark.parametrize(("name", "value"), [
    ("tp", 10**6), ("micro_batch_size", 10**6), ("forward_s", "1e300"), ("backward_s", "inf"),
    ("forward_s", "nan"), ("tp", "99999999999999999999999999999999999"), ("tp", "²"),
])
def test_profile_numbers_outside_their_range_are_refused(tmp_path, name, value):
    row = {"gpu": "H100", "tp": 2, "micro_batch_size": 1, "forward_s": 0.01, "backward_s": 0.02}
    row[name] = value
    path = tmp_path / "p.csv"
    path.write_text(",".join(row) + "\n" + ",".join(map(str, row.values())) + "\n")
    with pytest.raises(InputError) as error:
        load_profile(path)
    assert error.value.field == f"line 2: {name}"


def test_profile_csv_errors_are_input_errors(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('gpu,tp,micro_batch_size,forward_s,backward_s\n"H100' + "x" * 200_000 + "\n")
    with pytest.raises(InputError, match="invalid CSV"):
        load_profile(path)


@pytest.mark.parametrize(("path", "value"), [
    ("training.total_tokens", INF), ("training.total_tokens", NAN),
    ("training.total_tokens", 1e30), ("training.global_batch_size", 10**16),
    ("cluster.oversubscription", INF), ("cluster.oversubscription", NAN),
    ("cluster.oversubscription", 1e9), ("cluster.nodes_per_rack", 2**40),
    ("parallelism.pp", 10**5), ("parallelism.micro_batch_size", 10**7),
    ("cost.pue", INF), ("cost.pue", 50), ("cost.amortization_years", NAN),
    ("cost.electricity_usd_per_kwh", -1), ("search.seed", 2**40), ("search.batch", 2**30),
    ("validate.tolerance", INF),
])
def test_sweep_numbers_outside_their_range_are_refused(path, value):
    with pytest.raises(InputError) as error:
        sweep_from_dict(with_change(path, value), "s.yaml")
    assert error.value.field.removesuffix("[0]") == path  # an axis names its element
    assert "\n" not in str(error.value)


def test_range_messages():
    bounds = ranges.Range(1, 10, zero_is_default=True)
    bounds.check(0, "f", "x")
    for value, reason in ((0.5, "must be at least 1 (or 0 for the default)"),
                          (11, "must be at most 10"), (NAN, "must be a finite number"),
                          (True, "expected a number"), ("3", "expected a number")):
        with pytest.raises(InputError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            bounds.check(value, "f", "x")
    with pytest.raises(InputError, match="expected an integer"):
        ranges.count(5).check(2.5, "f", "x")
    assert bounds.describe() == "0 (the default) or between 1 and 10"
