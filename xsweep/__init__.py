"""xsweep: plan LLM training on heterogeneous GPU clusters.

Public: ``load_plan``, ``load_catalog``, ``prepare`` (load, validate, analyse and
lower one plan), ``evaluate`` and ``Evaluator`` (the batched evaluator) and
``use_cpu_devices`` (split a CPU host into XLA devices before JAX starts). They are
exported lazily, so importing a subpackage such as ``xsweep.kernels`` does not pull
in protobuf, YAML or pydantic. Importing xsweep changes nothing in the environment.

Each checks its arguments before any work: a wrong one (a type, a number out of
range, an empty list) raises ``xsweep.errors.InputError`` naming the function and the
argument, as ``xsweep.Evaluator: processes: must be at least 1 (got 0)``, never an
exception from deep inside. ``load_plan``, ``prepare`` and ``use_cpu_devices`` are the
checked entry points of ``xsweep.spec.arguments``, which call the functions of the same
name in ``xsweep.spec.plan_io``, ``xsweep.pipeline`` and ``xsweep.runtime``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    "load_plan": "xsweep.spec.arguments",
    "load_catalog": "xsweep.spec.catalog",
    "prepare": "xsweep.spec.arguments",
    "evaluate": "xsweep.evaluator",
    "Evaluator": "xsweep.evaluator",
    "use_cpu_devices": "xsweep.spec.arguments",
}

__all__ = ["Evaluator", "__version__", "evaluate", "load_catalog", "load_plan", "prepare",
           "use_cpu_devices"]

if TYPE_CHECKING:
    from xsweep.evaluator import Evaluator, evaluate
    from xsweep.spec.arguments import load_plan, prepare, use_cpu_devices
    from xsweep.spec.catalog import load_catalog


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'xsweep' has no attribute {name!r}")
