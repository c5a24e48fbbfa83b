"""The one table between plan enum values and names; unknown values are refused."""

from __future__ import annotations

import pytest

from xsweep.errors import InputError
from xsweep.spec import xsweep_pb2 as pb
from xsweep.spec.enums import (
    FABRIC,
    MLP,
    PRECISION,
    RECOMPUTE,
    RESHARDING,
    SCHEDULE,
    TABLES,
    enum_name,
)
from xsweep.spec.resolve import (
    fabric_name,
    precision_name,
    recompute_name,
    resharding_name,
    schedule_name,
)


@pytest.mark.parametrize("table", TABLES, ids=[t.field for t in TABLES])
def test_each_table_names_every_declared_value(table):
    declared = {v.number for v in table.enum.DESCRIPTOR.values if v.number != 0}
    assert set(table.names) == declared
    for value, name in table.names.items():
        assert table.value(name) == value
        assert enum_name(table, value) == name


def test_unspecified_means_the_default():
    # 1F1B, no recompute, BF16 and NCCL's all-to-all, as Megatron-LM's recipe; an
    # unspecified MLP is the preset's
    assert [enum_name(t, 0) for t in TABLES] == ["1f1b", "lcm", "rail_optimized", "", "none",
                                                 "bf16", "alltoall"]


@pytest.mark.parametrize(("getter", "table", "path"), [
    (schedule_name, SCHEDULE, ("training", "schedule")),
    (resharding_name, RESHARDING, ("training", "resharding")),
    (fabric_name, FABRIC, ("cluster", "fabric", "kind")),
    (recompute_name, RECOMPUTE, ("training", "recompute")),
    (precision_name, PRECISION, ("training", "precision")),
])
def test_an_unknown_value_is_never_read_as_the_default(getter, table, path):
    plan = pb.DeploymentPlan()
    target = plan
    for part in path[:-1]:
        target = getattr(target, part)
    setattr(target, path[-1], 7)  # protobuf keeps enums open: 7 is stored as is
    with pytest.raises(InputError, match="unknown value; expected one of") as error:
        getter(plan, "p.pbtxt")
    assert (error.value.file, error.value.field, error.value.value) == ("p.pbtxt", table.field, 7)


def test_mlp_names_match_the_catalog_spelling():
    assert MLP.known() == ("gelu", "swiglu")


@pytest.mark.parametrize("table", TABLES, ids=[t.field for t in TABLES])
def test_value_is_the_names_inverse_and_refuses_an_unknown_name(table):
    assert {table.value(name): name for name in table.known()} == table.names
    with pytest.raises(KeyError):
        table.value("no-such-name")
