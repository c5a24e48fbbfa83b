"""A sweep's or study's name is a portable folder name, and a sweep is held to the GPU
limit by arithmetic on the file, before anything is planned."""

from __future__ import annotations

import copy

import pytest

from tests.support.budget import in_process_budget
from xsweep.errors import InputError
from xsweep.search.folders import results_folder
from xsweep.spec import sweep_from_dict
from xsweep.spec.limits import Limits
from xsweep.spec.sweep import (
    MAX_NAME_LENGTH,
    Sweep,
    check_name,
    check_sweep_limits,
    largest_cluster_gpus,
    name_problem,
)

MINIMAL = {
    "name": "names",
    "model": "llama2-7b",
    "training": {"global_batch_size": 32},
    "cluster": {"pools": [{"gpu": "H100-SXM", "nodes": 1}]},
    "parallelism": {"tp": {"H100-SXM": 1}},
}

HOSTILE_NAMES = {
    "absolute": ("/tmp/x", "holds '/'"),
    "root": ("/", "holds '/'"),
    "parent": ("../../x", "holds '/'"),
    "dot-dot": ("..", "starts with '.'"),
    "dot": (".", "starts with '.'"),
    "hidden": (".x", "starts with '.'"),
    "nul": ("a\0b", "holds '\\x00'"),
    "newline": ("a\nb", "holds '\\n'"),
    "backslash": ("a\\b", "holds '\\\\'"),
    "space": ("a b", "holds ' '"),
    "long": ("x" * 300, "has 300 characters; a name has at most 100"),
    "one too long": ("x" * (MAX_NAME_LENGTH + 1), "at most 100"),
    "accent": ("café", "holds 'é'"),
    "combining accent": ("cafe\u0301", "holds '\u0301'"),
    "cjk": ("名前", "holds '名'"),
    "right-to-left override": ("a\u202eb", "holds"),
    "empty": ("", "must not be empty"),
    "dash first": ("-x", "starts with '-'"),
    "trailing dot": ("x.", "ends with '.'"),
    "windows device": ("CON", "device name on Windows"),
    "windows device with extension": ("nul.txt", "device name on Windows"),
    "windows port": ("com1", "device name on Windows"),
}


def with_name(name: object) -> dict:
    document = copy.deepcopy(MINIMAL)
    document["name"] = name
    return document


@pytest.mark.parametrize(("name", "reason"), HOSTILE_NAMES.values(), ids=HOSTILE_NAMES.keys())
def test_a_name_that_is_no_portable_folder_name_is_refused(name, reason):
    with pytest.raises(InputError) as caught:
        sweep_from_dict(with_name(name), "s.yaml")
    error = caught.value
    assert (error.file, error.field, error.value) == ("s.yaml", "name", name)
    assert reason in error.reason
    text = str(error)
    assert text.startswith("s.yaml: name: ") and "\n" not in text and "\0" not in text
    assert name_problem(name)  # the same rule, for --study
    with pytest.raises(InputError, match=r"^--study: "):
        check_name(name, "--study")
    with pytest.raises(InputError):
        results_folder(name)


@pytest.mark.parametrize("name", [
    "a", "7", "quickstart-llama2-7b", "A.b_c-1", "run.2024-01-01", "x" * MAX_NAME_LENGTH,
    "console", "nul1", "com10", "a..b",
])
def test_portable_names_are_accepted(name):
    assert sweep_from_dict(with_name(name)).name == name
    assert check_name(name, "--study") == name
    assert results_folder(name).parts == ("results", name)


@pytest.mark.parametrize("name", [7, None, ["x"], {"a": 1}, True])
def test_a_name_must_be_a_string(name):
    with pytest.raises(InputError) as caught:
        sweep_from_dict(with_name(name), "s.yaml")
    assert caught.value.field == "name"
    assert "\n" not in str(caught.value)


def with_pools(*pools: dict) -> dict:
    document = copy.deepcopy(MINIMAL)
    document["cluster"]["pools"] = list(pools)
    document["parallelism"]["tp"] = {pool["gpu"]: 1 for pool in pools}
    return document


def test_a_pool_of_65536_nodes_of_65536_gpus_is_refused_at_once():
    """Reading the sweep refuses it (the library as the commands): nothing is planned."""
    with in_process_budget(seconds=1.0, extra_bytes=64 << 20), \
            pytest.raises(InputError) as caught:
        sweep_from_dict(with_pools(
            {"gpu": "H100-SXM", "nodes": 65_536, "gpus_per_node": 65_536}), "huge.yaml")
    error = caught.value
    assert (error.file, error.field, error.value) == ("huge.yaml", "cluster.pools[0]", 2**32)
    assert "(65,536 nodes of 65,536 GPUs) exceeds the limit of 65,536" in error.reason
    assert "set XSWEEP_MAX_GPUS to raise it" in error.reason


def schema_only(document: dict) -> Sweep:
    """A sweep through its schema alone, the GPU limit not yet checked."""
    return Sweep.model_validate(document)


def test_the_largest_cluster_counts_every_pool_at_its_largest():
    sweep = schema_only(with_pools(
        {"gpu": "H100-SXM", "nodes": [1, 4096], "gpus_per_node": 8},
        {"gpu": "A100-40GB", "nodes": {"low": 0, "high": 8192, "step": 64}, "gpus_per_node": [4, 8]},
    ))
    assert largest_cluster_gpus(sweep) == 4096 * 8 + 8192 * 8
    with pytest.raises(InputError) as caught:  # each pool fits, both together do not
        check_sweep_limits(sweep, "two.yaml")
    assert caught.value.field == "cluster.pools"
    assert caught.value.value == 98_304
    check_sweep_limits(sweep, "two.yaml", Limits(gpus=98_304))


def test_a_range_counts_its_highest_value():
    sweep = schema_only(with_pools(
        {"gpu": "H100-SXM", "nodes": {"low": 0, "high": 65_536, "step": 4096}}))
    with pytest.raises(InputError, match=r"cluster\.pools\[0\]: .*\(65,536 nodes of 8 GPUs\)"):
        check_sweep_limits(sweep, "range.yaml")


def test_a_cluster_at_the_limit_is_accepted_and_the_limit_can_be_raised(monkeypatch):
    check_sweep_limits(sweep_from_dict(with_pools(
        {"gpu": "H100-SXM", "nodes": [1, 8192], "gpus_per_node": 8})), "at.yaml")
    huge = schema_only(with_pools(
        {"gpu": "H100-SXM", "nodes": 4096, "gpus_per_node": 4096}))
    with pytest.raises(InputError):
        check_sweep_limits(huge, "big.yaml")
    monkeypatch.setenv("XSWEEP_MAX_GPUS", str(4096 * 4096))
    check_sweep_limits(huge, "big.yaml")
