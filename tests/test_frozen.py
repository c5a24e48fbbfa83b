"""``hash_once``: frozen dataclasses that key memos hash as their fields do, keep the
value in their process only, and interned stacks are one object per value."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT
from xsweep.frozen import hash_once
from xsweep.spec import load_catalog
from xsweep.spec.catalog import GpuSpec, ModelSpec, SoftwareSpec
from xsweep.spec.stack import Stack, interned


@hash_once
@dataclasses.dataclass(frozen=True)
class Pair:
    name: str
    size: int = 0


def _field_hash(value) -> int:
    return hash(tuple(getattr(value, f.name) for f in dataclasses.fields(value)))


@pytest.mark.parametrize("value", [
    Pair("a", 3), Stack(), Stack(recompute="full", zero_stage=1),
    load_catalog().model("gpt3-175b"), load_catalog().gpu("H100-SXM"),
    load_catalog().software_profile("reference"),
], ids=lambda v: type(v).__name__)
def test_the_kept_hash_is_the_fields_hash(value):
    assert hash(value) == _field_hash(value) == hash(value)  # asked twice: kept
    twin = dataclasses.replace(value)
    assert twin == value and twin is not value and hash(twin) == hash(value)
    assert {value: 1}[twin] == 1


def test_every_memo_key_class_keeps_its_hash():
    assert all(cls.__hash__.__qualname__.startswith("hash_once")
               for cls in (GpuSpec, ModelSpec, SoftwareSpec, Stack))


def test_copies_and_pickles_do_not_carry_the_kept_hash():
    value = Pair("a", 3)
    hash(value)
    for other in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert other == value and "_hash_once" not in vars(other)
        assert hash(other) == hash(value)


def test_a_pickle_hashes_as_the_process_that_reads_it():
    # string hashes differ between interpreters: a hash carried over would break the
    # lookups of equal objects made there
    value = Stack(recompute="selective")
    hash(value)
    code = ("import pickle, sys; from xsweep.spec.stack import Stack; "
            "v = pickle.loads(sys.stdin.buffer.read()); "
            "print(hash(v) == hash(Stack(recompute='selective')), {v: 1}[Stack(recompute='selective')])")
    env = {**os.environ, "PYTHONHASHSEED": "random", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(value),
                         capture_output=True, env=env, check=True)
    assert out.stdout.split() == [b"True", b"1"]


def test_a_class_without_a_hash_is_refused():
    with pytest.raises(TypeError, match="no hash"):
        hash_once(dataclasses.dataclass(eq=True)(type("Open", (), {"__annotations__": {}})))


def test_interned_stacks_are_one_object_per_value():
    a, b = Stack(recompute="full"), Stack(recompute="full")
    assert a is not b and interned(a) is interned(b)
    assert interned(Stack()) is not interned(a)
