"""The arguments of the public API, checked before any work starts: what the spec checks.

Python callers (an optimizer among them) hand the library plans built in memory,
paths, and options; each wrong one is an ``InputError`` naming the function (in place
of a file) and the argument, in the one-line form of every input error, such as
``xsweep.load_plan: path: expected a path (str or PathLike) (got int)``; never an
IndexError or AttributeError from deep inside. Every plan goes through the same
validation as ``xsweep check``, so that no invalid plan is ever scored.

Here: the plans of a call loaded and validated one by one, each error naming
``plans[i]`` (:func:`validated_plans`), the checked entry points ``xsweep.load_plan``,
``xsweep.prepare`` and ``xsweep.use_cpu_devices`` (:func:`load_plan`, :func:`prepare`,
:func:`use_cpu_devices`), which check their arguments and call the functions of the
same name, and the checks those share with the evaluator's (:func:`check_inputs`,
:func:`check_count`). The arguments of ``xsweep.evaluate`` and of the ``Evaluator`` are
checked next to the evaluator (``xsweep.evaluator.arguments``); ``xsweep.load_catalog``
checks its own (``xsweep.spec.catalog``).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from xsweep.errors import InputError
from xsweep.spec import plan_io, xsweep_pb2
from xsweep.spec.catalog import Catalog, check_catalog_argument, check_path_argument
from xsweep.spec.limits import active_limits
from xsweep.spec.validate import validate_plan

if TYPE_CHECKING:
    from xsweep.pipeline import Prepared
    from xsweep.plan.lower import TemplateCache
    from xsweep.spec.profile import Profile

#: The name errors about the plans of ``xsweep.evaluate`` give in place of a file.
CALLER = "xsweep.evaluate"
#: Largest CPU device count a host may be split into (``cpu_devices``,
#: ``xsweep.use_cpu_devices``): far above the cores of any host, and JAX makes every one.
MAX_CPU_DEVICES = 4096


def validated_plans(items: list, catalog: Catalog, begin: int = 0,
                    end: int | None = None) -> Iterator[xsweep_pb2.DeploymentPlan]:
    """``items[begin:end]`` (the plans and paths of a call, such as
    ``xsweep.evaluator.arguments.evaluation_arguments`` gives them) loaded and validated,
    one at a time; an invalid one raises ``InputError`` naming ``plans[i]`` (or its
    file)."""
    limits = active_limits()  # read from the environment once for the whole list
    for index in range(begin, len(items) if end is None else end):
        plan = items[index]
        if isinstance(plan, str | os.PathLike):
            check_path_argument(plan, CALLER, f"plans[{index}]")
            yield plan_io.load_plan(plan, catalog)
        elif isinstance(plan, xsweep_pb2.DeploymentPlan):
            name = f" ({plan.name!r})" if plan.name else ""
            validate_plan(plan, catalog, f"plans[{index}]{name}", limits)
            yield plan
        else:
            raise argument_error(f"plans[{index}]", kind_of(plan),
                                 "expected a DeploymentPlan message or the path of a plan file")


def check_inputs(catalog: object, profile: object, caller: str) -> None:
    """``catalog``: None or a Catalog; ``profile``: None, a Profile or the path of one."""
    check_catalog_argument(catalog, caller)
    if isinstance(profile, str | os.PathLike):
        check_path_argument(profile, caller, "profile")
        return
    # Imported here: importing xsweep.spec must not load the layers built on it.
    from xsweep.spec.profile import Profile

    if profile is not None and not isinstance(profile, Profile):
        raise InputError(caller, "profile", kind_of(profile),
                         "expected a Profile (load_profile()), the path of a profile file, "
                         "or None")


def check_count(value: object, caller: str, name: str, low: int, high: int | None,
                expected: str | None = None) -> None:
    """``value`` is an integer (an int, a NumPy integer; not a bool) from ``low`` to ``high``
    (None: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        wanted = expected or ("a positive integer" if low == 1 else
                              f"an integer of at least {low:,}")
        raise InputError(caller, name, kind_of(value), f"expected {wanted}")
    if value < low:
        raise InputError(caller, name, value, f"must be at least {low:,}")
    if high is not None and value > high:
        raise InputError(caller, name, value, f"must be at most {high:,}")


# -- checked entry points of the public API ----------------------------------------------
def load_plan(path: str | Path, catalog: Catalog | None = None) -> xsweep_pb2.DeploymentPlan:
    """``xsweep.load_plan``: :func:`xsweep.spec.plan_io.load_plan` with its arguments
    checked (``path`` a str or PathLike, ``catalog`` None or a Catalog).

    Read a plan from ``.pbtxt`` (text format) or ``.json`` (protobuf JSON) and validate it
    against ``catalog`` (default: the built-in catalog).

    Raises:
        InputError: naming ``xsweep.load_plan`` and the argument, or the file and field.
    """
    caller = "xsweep.load_plan"
    check_path_argument(path, caller, "path")
    check_inputs(catalog, None, caller)
    return plan_io.load_plan(path, catalog)


def prepare(plan: xsweep_pb2.DeploymentPlan | str | Path, catalog: Catalog | None = None,
            profile: Profile | str | Path | None = None, *,
            templates: TemplateCache | None = None, names: bool = True) -> Prepared:
    """``xsweep.prepare``: :func:`xsweep.pipeline.prepare` with its arguments checked.

    Load (if a path), validate, analyse and lower one plan. ``plan``: a DeploymentPlan
    message or the path of a plan file; ``catalog``: None (the built-in catalog) or a
    Catalog; ``profile``: None, a Profile or the path of one; ``templates``: None or a
    ``TemplateCache``; ``names``: a bool.

    Raises:
        InputError: naming ``xsweep.prepare`` and the argument, or the plan and field.
    """
    from xsweep.pipeline import prepare as prepare_plan  # see check_inputs
    from xsweep.plan.lower import TemplateCache

    caller = "xsweep.prepare"
    if isinstance(plan, str | os.PathLike):
        check_path_argument(plan, caller, "plan")
    elif not isinstance(plan, xsweep_pb2.DeploymentPlan):
        raise InputError(caller, "plan", kind_of(plan),
                         "expected a DeploymentPlan message or the path of a plan file")
    check_inputs(catalog, profile, caller)
    if templates is not None and not isinstance(templates, TemplateCache):
        raise InputError(caller, "templates", kind_of(templates),
                         "expected a TemplateCache or None")
    if not isinstance(names, bool):
        raise InputError(caller, "names", kind_of(names), "expected True or False")
    return prepare_plan(plan, catalog, profile, templates=templates, names=names)


def use_cpu_devices(count: int | None = None) -> bool:
    """``xsweep.use_cpu_devices``: :func:`xsweep.runtime.use_cpu_devices` with ``count``
    checked (None, or 1 to ``MAX_CPU_DEVICES``).

    Split the host CPU into XLA devices if JAX has not started yet; return whether the
    choice took effect.

    Raises:
        InputError: naming ``xsweep.use_cpu_devices`` and ``count``.
    """
    if count is not None:
        check_count(count, "xsweep.use_cpu_devices", "count", 1, MAX_CPU_DEVICES,
                    "a positive integer or None")
    from xsweep.runtime import use_cpu_devices as split  # see check_inputs

    return split(count)


def argument_error(name: str, value: object, reason: str) -> InputError:
    """An error about argument ``name`` of ``xsweep.evaluate``."""
    return InputError(CALLER, name, value, reason)


def kind_of(value: object) -> str:
    """A short description of ``value`` for messages: its type, and text if it is a path."""
    if isinstance(value, str | bytes | os.PathLike):
        return f"{type(value).__name__} {os.fspath(value)!r}"
    return type(value).__name__
