"""Inputs: the deployment-plan schema (protobuf), the sweep schema and the catalogs.

Public here: ``load_catalog``, ``Catalog``, ``GpuSpec``, ``NicSpec``, ``ModelSpec``,
``load_plan`` and the plan helpers of ``plan_io``, ``validate_plan``, ``load_sweep``
and ``Sweep``.
"""

from xsweep.spec.catalog import Catalog, GpuSpec, ModelSpec, NicSpec, load_catalog
from xsweep.spec.plan_io import (
    RankPlace,
    fabric_name,
    load_plan,
    plan_from_json,
    plan_from_text,
    plan_to_json,
    plan_to_text,
    rank_layout,
    resharding_name,
    resolve_model,
    schedule_name,
)
from xsweep.spec.sweep import Sweep, load_sweep
from xsweep.spec.validate import validate_plan

__all__ = [
    "Catalog",
    "GpuSpec",
    "ModelSpec",
    "NicSpec",
    "RankPlace",
    "Sweep",
    "fabric_name",
    "load_catalog",
    "load_plan",
    "load_sweep",
    "plan_from_json",
    "plan_from_text",
    "plan_to_json",
    "plan_to_text",
    "rank_layout",
    "resharding_name",
    "resolve_model",
    "schedule_name",
    "validate_plan",
]
