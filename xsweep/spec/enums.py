"""The one table between the plan's enum values and the names the rest of xsweep uses.

Protobuf keeps enum fields open: a plan may carry a number no value is declared
for (``schedule: 7``). :func:`enum_name` refuses such a number instead of reading
it as the default, so an unknown schedule is never simulated as GPipe.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from xsweep.errors import InputError
from xsweep.spec import xsweep_pb2 as pb

#: Enum values by name, per table (keyed by its names' dict, kept beside them).
_VALUES: dict[int, tuple[dict[int, str], dict[str, int]]] = {}


class EnumTable(NamedTuple):
    """Lower-case names by enum value; ``default`` is what the UNSPECIFIED value (0) means."""

    field: str  # the plan field, for error messages
    enum: Any  # the generated protobuf enum type
    names: dict[int, str]
    default: str

    def value(self, name: str) -> int:
        """The enum value of ``name`` (KeyError if unknown)."""
        found = _VALUES.get(id(self.names))
        if found is None or found[0] is not self.names:  # made once per table
            found = _VALUES[id(self.names)] = (self.names,
                                                {n: v for v, n in self.names.items()})
        return found[1][name]

    def known(self) -> tuple[str, ...]:
        return tuple(self.names.values())


SCHEDULE = EnumTable("training.schedule", pb.Schedule,
                     {pb.GPIPE: "gpipe", pb.ONE_F_ONE_B: "1f1b"}, "1f1b")  # Megatron-LM's
RESHARDING = EnumTable("training.resharding", pb.Resharding,
                       {pb.LCM: "lcm", pb.HETAUTO: "hetauto", pb.ALPACOMM: "alpacomm"}, "lcm")
FABRIC = EnumTable("cluster.fabric.kind", pb.FabricKind,
                   {pb.RAIL_OPTIMIZED: "rail_optimized", pb.FAT_TREE: "fat_tree"},
                   "rail_optimized")
MLP = EnumTable("model.mlp", pb.Mlp, {pb.GELU: "gelu", pb.SWIGLU: "swiglu"},
                "")  # unspecified: the preset's (see resolve_model)
RECOMPUTE = EnumTable("training.recompute", pb.Recompute,
                      {pb.NO_RECOMPUTE: "none", pb.SELECTIVE: "selective", pb.FULL: "full"},
                      "none")

PRECISION = EnumTable("training.precision", pb.Precision,
                      {pb.BF16: "bf16", pb.FP8: "fp8"}, "bf16")

MOE_DISPATCHER = EnumTable("training.moe_dispatcher", pb.MoeDispatcher,
                           {pb.ALLTOALL: "alltoall", pb.DEEPEP: "deepep"}, "alltoall")

TABLES = (SCHEDULE, RESHARDING, FABRIC, MLP, RECOMPUTE, PRECISION, MOE_DISPATCHER)


def enum_name(table: EnumTable, value: int, file: str | None = None) -> str:
    """The name of ``value`` (the default for 0); InputError for a value with no name."""
    if value == 0:
        return table.default
    name = table.names.get(value)
    if name is None:
        known = ", ".join(table.enum.Name(v) for v in table.names)
        raise InputError(file, table.field, value, f"unknown value; expected one of {known}")
    return name
