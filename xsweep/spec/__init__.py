"""Inputs: the deployment-plan schema (protobuf), the sweep schema and the catalogs.

Public here: ``load_catalog``, ``Catalog``, ``GpuSpec``, ``NicSpec``, ``LinkSpec``, ``ModelSpec``,
``load_plan``, ``load_valid_plan`` and the conversions of ``plan_io``, the name helpers of
``resolve``, ``validate_plan`` and the ``ValidPlan`` it returns, ``load_sweep``,
``sweep_from_dict``, ``check_sweep_names``, ``Sweep`` and ``OBJECTIVE_DIRECTIONS``.
"""

from xsweep.spec.catalog import Catalog, GpuSpec, LinkSpec, ModelSpec, NicSpec, load_catalog
from xsweep.spec.plan_io import (
    load_plan,
    load_valid_plan,
    plan_from_json,
    plan_from_text,
    plan_to_json,
    plan_to_text,
)
from xsweep.spec.resolve import (
    RankPlace,
    fabric_name,
    precision_name,
    rank_layout,
    recompute_name,
    resharding_name,
    resolve_model,
    schedule_name,
)
from xsweep.spec.sweep import (
    OBJECTIVE_DIRECTIONS,
    Sweep,
    check_sweep_names,
    load_sweep,
    sweep_from_dict,
)
from xsweep.spec.valid_plan import ValidPlan
from xsweep.spec.validate import validate_plan

__all__ = [
    "OBJECTIVE_DIRECTIONS",
    "Catalog",
    "GpuSpec",
    "LinkSpec",
    "ModelSpec",
    "NicSpec",
    "RankPlace",
    "Sweep",
    "ValidPlan",
    "check_sweep_names",
    "fabric_name",
    "load_catalog",
    "load_plan",
    "load_valid_plan",
    "load_sweep",
    "plan_from_json",
    "plan_from_text",
    "plan_to_json",
    "plan_to_text",
    "precision_name",
    "rank_layout",
    "recompute_name",
    "resharding_name",
    "resolve_model",
    "schedule_name",
    "sweep_from_dict",
    "validate_plan",
]
