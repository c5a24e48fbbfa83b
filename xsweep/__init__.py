"""xsweep: plan LLM training on heterogeneous GPU clusters.

``load_plan``, ``load_catalog`` and ``evaluate`` are exported here lazily, so importing a
subpackage such as ``xsweep.kernels`` does not pull in protobuf, YAML or pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["__version__", "evaluate", "load_catalog", "load_plan"]

if TYPE_CHECKING:
    from xsweep.evaluator import evaluate
    from xsweep.spec.catalog import load_catalog
    from xsweep.spec.plan_io import load_plan


def __getattr__(name: str):
    if name == "load_plan":
        from xsweep.spec.plan_io import load_plan

        return load_plan
    if name == "load_catalog":
        from xsweep.spec.catalog import load_catalog

        return load_catalog
    if name == "evaluate":
        from xsweep.evaluator import evaluate

        return evaluate
    raise AttributeError(f"module 'xsweep' has no attribute {name!r}")
