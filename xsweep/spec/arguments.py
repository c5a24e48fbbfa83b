"""The arguments of ``xsweep.evaluate``, checked before any plan is analysed.

Python callers (an optimizer among them) hand the library plans built in memory,
paths, and options; each wrong one is an ``InputError`` naming the argument, never
an IndexError or AttributeError from deep inside, and every plan goes through the
same validation as ``xsweep check`` so that no invalid plan is ever scored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from xsweep.errors import InputError
from xsweep.spec import ranges, xsweep_pb2
from xsweep.spec.catalog import Catalog
from xsweep.spec.limits import active_limits
from xsweep.spec.plan_io import load_plan
from xsweep.spec.validate import validate_plan

CALLER = "xsweep.evaluate"


def evaluation_plans(plans: object, catalog: object, *, profile: object = None,
                     cost: object = None, chunk_size: object = None,
                     progress: object = None) -> list[xsweep_pb2.DeploymentPlan]:
    """Check the arguments of ``xsweep.evaluate``; return its plans loaded and validated.

    Args:
        plans: an iterable of ``DeploymentPlan`` messages and paths (str or PathLike) of
            plan files; not one plan or one path on its own.
        catalog: the catalog the plans are checked against (a ``Catalog``).
        profile, cost, chunk_size, progress: as ``xsweep.evaluate`` takes them.

    Raises:
        InputError: naming the argument, or the plan (``plans[i]``, or its file) and field.
    """
    items = evaluation_arguments(plans, catalog, profile=profile, cost=cost,
                                 chunk_size=chunk_size, progress=progress)
    return list(validated_plans(items, catalog))


def evaluation_arguments(plans: object, catalog: object, *, profile: object = None,
                         cost: object = None, chunk_size: object = None,
                         progress: object = None) -> list:
    """The arguments of :func:`evaluation_plans` checked, its plans not yet: the list of
    plans and paths, for :func:`validated_plans` (which a caller may run piece by piece,
    while earlier pieces are already being evaluated)."""
    if not isinstance(catalog, Catalog):
        raise _argument("catalog", type(catalog).__name__, "expected a Catalog (load_catalog())")
    _check_options(profile, cost, chunk_size, progress)
    if isinstance(plans, str | bytes | os.PathLike | xsweep_pb2.DeploymentPlan):
        raise _argument("plans", _kind(plans),
                        "expected a list of plans or paths, not a single one; wrap it in a list")
    if not isinstance(plans, Iterable):
        raise _argument("plans", _kind(plans), "expected a list of plans or paths")
    items = list(plans)
    if not items:
        raise _argument("plans", None, "no plans to evaluate")
    return items


def validated_plans(items: list, catalog: Catalog, begin: int = 0,
                    end: int | None = None) -> Iterator[xsweep_pb2.DeploymentPlan]:
    """``items[begin:end]`` (from :func:`evaluation_arguments`) loaded and validated, one at
    a time; an invalid one raises ``InputError`` naming ``plans[i]`` (or its file)."""
    limits = active_limits()  # read from the environment once for the whole list
    for index in range(begin, len(items) if end is None else end):
        plan = items[index]
        if isinstance(plan, str | os.PathLike):
            yield load_plan(plan, catalog)
        elif isinstance(plan, xsweep_pb2.DeploymentPlan):
            name = f" ({plan.name!r})" if plan.name else ""
            validate_plan(plan, catalog, f"plans[{index}]{name}", limits)
            yield plan
        else:
            raise _argument(f"plans[{index}]", _kind(plan),
                            "expected a DeploymentPlan message or the path of a plan file")


def _check_options(profile: object, cost: object, chunk_size: object, progress: object) -> None:
    # Imported here: importing xsweep.spec must not load the layers built on it.
    from xsweep.spec.profile import Profile

    if profile is not None and not isinstance(profile, Profile):
        raise _argument("profile", _kind(profile), "expected a Profile (load_profile()) or None")
    if cost is not None:
        _check_cost(cost)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                   or chunk_size < 1):
        raise _argument("chunk_size", chunk_size, "expected a positive integer or None")
    if progress is not None and not callable(progress):
        raise _argument("progress", _kind(progress), "expected a function (done, total) or None")


def _check_cost(cost: object) -> None:
    from xsweep.cost import CostModel  # see _check_options

    if not isinstance(cost, CostModel):
        raise _argument("cost", _kind(cost), "expected a CostModel")
    if cost.pricing not in ranges.PRICING:
        raise _argument("cost.pricing", cost.pricing,
                        f"expected one of {', '.join(ranges.PRICING)}")
    for name, bounds in ranges.COST.items():
        bounds.check(getattr(cost, name), CALLER, f"cost.{name}")


def _argument(name: str, value: object, reason: str) -> InputError:
    return InputError(CALLER, name, value, reason)


def _kind(value: object) -> str:
    """A short description of ``value`` for messages: its type, and text if it is a path."""
    if isinstance(value, str | bytes | os.PathLike):
        return f"{type(value).__name__} {os.fspath(value)!r}"
    return type(value).__name__
