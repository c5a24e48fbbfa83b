"""The arguments of the public API, checked before any work starts.

Python callers (an optimizer among them) hand the library plans built in memory,
paths, and options; each wrong one is an ``InputError`` naming the function (in place
of a file) and the argument, in the one-line form of every input error, such as
``xsweep.Evaluator: max_rounds: must be at least 1 (got 0)``; never an IndexError or
AttributeError from deep inside. Every plan goes through the same validation as
``xsweep check``, so that no invalid plan is ever scored.

Here: the checks of ``xsweep.evaluate`` and ``Evaluator.evaluate``
(:func:`evaluation_plans`, :func:`check_evaluate_arguments`), of the ``Evaluator``
constructor (:func:`check_evaluator_arguments`), and the checked entry points
``xsweep.load_plan``, ``xsweep.prepare`` and ``xsweep.use_cpu_devices``
(:func:`load_plan`, :func:`prepare`, :func:`use_cpu_devices`), which check their
arguments and call the functions of the same name. ``xsweep.load_catalog`` checks its
own (``xsweep.spec.catalog``).
"""

from __future__ import annotations

import inspect
import numbers
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from xsweep.errors import InputError
from xsweep.spec import plan_io, ranges, xsweep_pb2
from xsweep.spec.catalog import Catalog, check_catalog_argument, check_path_argument
from xsweep.spec.limits import active_limits
from xsweep.spec.validate import validate_plan

if TYPE_CHECKING:
    from xsweep.pipeline import Prepared
    from xsweep.plan.lower import TemplateCache
    from xsweep.spec.profile import Profile

CALLER = "xsweep.evaluate"
#: The name errors about the arguments of an ``Evaluator`` give in place of a file.
EVALUATOR = "xsweep.Evaluator"
#: Largest CPU device count a host may be split into (``cpu_devices``,
#: ``xsweep.use_cpu_devices``): far above the cores of any host, and JAX makes every one.
MAX_CPU_DEVICES = 4096
#: Most worker processes an ``Evaluator`` may start (each is a Python process with JAX).
MAX_PROCESSES = 1024
#: Most water-filling rounds per event (``max_rounds``): the kernels count them in int32.
MAX_ROUNDS_CAP = 2**31 - 1


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
            check_path_argument(plan, CALLER, f"plans[{index}]")
            yield plan_io.load_plan(plan, catalog)
        elif isinstance(plan, xsweep_pb2.DeploymentPlan):
            name = f" ({plan.name!r})" if plan.name else ""
            validate_plan(plan, catalog, f"plans[{index}]{name}", limits)
            yield plan
        else:
            raise _argument(f"plans[{index}]", _kind(plan),
                            "expected a DeploymentPlan message or the path of a plan file")


def _check_options(profile: object, cost: object, chunk_size: object, progress: object,
                   caller: str = CALLER) -> None:
    """``profile`` (None or a Profile), ``cost`` (None or a valid CostModel),
    ``chunk_size`` (None or a positive integer) and ``progress`` (None or callable)."""
    # Imported here: importing xsweep.spec must not load the layers built on it.
    from xsweep.spec.profile import Profile

    if profile is not None and not isinstance(profile, Profile):
        raise InputError(caller, "profile", _kind(profile),
                         "expected a Profile (load_profile()) or None")
    if cost is not None:
        _check_cost(cost, caller)
    if chunk_size is not None:
        _check_count(chunk_size, caller, "chunk_size", 1, None, "a positive integer or None")
    if progress is not None:
        _check_progress(progress, caller)


def _check_progress(progress: object, caller: str) -> None:
    """``progress`` is called as ``progress(done, total)``: a callable that takes two
    positional arguments (one whose signature cannot be read is taken on trust)."""
    if not callable(progress):
        raise InputError(caller, "progress", _kind(progress),
                         "expected a function (done, total) or None")
    try:
        inspect.signature(progress).bind(0, 0)
    except TypeError:
        raise InputError(caller, "progress", _kind(progress),
                         "expected a function of two arguments (done, total)") from None
    except ValueError:  # no signature to read (some built-in functions)
        pass


def _check_cost(cost: object, caller: str = CALLER) -> None:
    from xsweep.cost import CostModel  # see _check_options

    if not isinstance(cost, CostModel):
        raise InputError(caller, "cost", _kind(cost), "expected a CostModel")
    if not isinstance(cost.pricing, str) or cost.pricing not in ranges.PRICING:
        raise InputError(caller, "cost.pricing", cost.pricing,
                         f"expected one of {', '.join(ranges.PRICING)}")
    for name, bounds in ranges.COST.items():
        bounds.check(getattr(cost, name), caller, f"cost.{name}")


def _check_inputs(catalog: object, profile: object, caller: str) -> None:
    """``catalog``: None or a Catalog; ``profile``: None, a Profile or the path of one."""
    check_catalog_argument(catalog, caller)
    if isinstance(profile, str | os.PathLike):
        check_path_argument(profile, caller, "profile")
        return
    from xsweep.spec.profile import Profile  # see _check_options

    if profile is not None and not isinstance(profile, Profile):
        raise InputError(caller, "profile", _kind(profile),
                         "expected a Profile (load_profile()), the path of a profile file, "
                         "or None")


def check_evaluate_arguments(plans: object, level: object, *, catalog: object = None,
                             profile: object = None, cost: object = None, dtype: object = None,
                             chunk_size: object = None, progress: object = None,
                             coords: object = None) -> None:
    """Check the arguments of ``Evaluator.evaluate`` (and so of ``xsweep.evaluate``) that
    can be checked before the plans are read: the options, the catalog's and profile's
    types, and ``coords`` (one value per plan where ``plans`` has a length; plans from an
    iterator are counted once listed). The plans themselves are checked by
    :func:`evaluation_arguments` and :func:`validated_plans`.

    Raises:
        InputError: naming ``xsweep.evaluate`` and the argument.
    """
    from xsweep.evaluator.dataset import check_coords  # see _check_options
    from xsweep.evaluator.driver import DTYPES, LEVELS

    _check_choice(level, LEVELS, CALLER, "level")
    if dtype is not None:
        _check_choice(dtype, DTYPES, CALLER, "dtype")
    _check_inputs(catalog, profile, CALLER)
    _check_options(None, cost, chunk_size, progress)
    sized = isinstance(plans, Sequence) and not isinstance(plans, str | bytes)
    check_coords(coords, len(plans) if sized else None)


def check_evaluator_arguments(*, devices: object = None, dtype: object = "float32",
                              chunk_size: object = None, max_rounds: object = 1,
                              catalog: object = None, profile: object = None,
                              cost: object = None, cpu_devices: object = None,
                              compile_cache: object = True, processes: object = None,
                              parallel_min: object = 0, template_bytes: object = 0) -> None:
    """Check the arguments of the ``Evaluator`` constructor, as it takes them.

    ``devices``: None or a non-empty list or tuple of distinct JAX devices of one platform.
    Counts are integers (``True`` is not one): ``chunk_size`` (None or at least 1),
    ``max_rounds`` (1 to ``MAX_ROUNDS_CAP``), ``cpu_devices`` (None or 1 to
    ``MAX_CPU_DEVICES``), ``processes`` (None or 1 to ``MAX_PROCESSES``), ``parallel_min``
    and ``template_bytes`` (at least 0). ``catalog``: None or a Catalog; ``profile``: None,
    a Profile or a path; ``cost``: a CostModel of valid numbers; ``compile_cache``: a bool.

    Raises:
        InputError: naming ``xsweep.Evaluator`` and the argument.
    """
    from xsweep.evaluator.driver import DTYPES  # see _check_options

    if devices is not None:
        _check_devices(devices)
    _check_choice(dtype, DTYPES, EVALUATOR, "dtype")
    if chunk_size is not None:
        _check_count(chunk_size, EVALUATOR, "chunk_size", 1, None, "a positive integer or None")
    _check_count(max_rounds, EVALUATOR, "max_rounds", 1, MAX_ROUNDS_CAP)
    _check_inputs(catalog, profile, EVALUATOR)
    _check_cost(cost, EVALUATOR)
    if cpu_devices is not None:
        _check_count(cpu_devices, EVALUATOR, "cpu_devices", 1, MAX_CPU_DEVICES,
                     "a positive integer or None")
    if not isinstance(compile_cache, bool):
        raise InputError(EVALUATOR, "compile_cache", _kind(compile_cache),
                         "expected True or False")
    if processes is not None:
        _check_count(processes, EVALUATOR, "processes", 1, MAX_PROCESSES,
                     "a positive integer or None")
    _check_count(parallel_min, EVALUATOR, "parallel_min", 0, None)
    _check_count(template_bytes, EVALUATOR, "template_bytes", 0, None)


def _check_devices(devices: object) -> None:
    if isinstance(devices, str | bytes) or not isinstance(devices, Sequence):
        raise InputError(EVALUATOR, "devices", _kind(devices),
                         "expected a list of JAX devices (such as jax.devices()) or None")
    if not devices:
        raise InputError(EVALUATOR, "devices", None,
                         "no devices; give at least one, or None for all of jax.devices()")
    jax = sys.modules.get("jax")  # a JAX device exists only once JAX is imported
    device_type = getattr(jax, "Device", None)
    for index, device in enumerate(devices):
        if device_type is None or not isinstance(device, device_type):
            raise InputError(EVALUATOR, f"devices[{index}]", _kind(device),
                             "expected a JAX device (an element of jax.devices())")
    platforms = sorted({device.platform for device in devices})
    if len(platforms) > 1:
        raise InputError(EVALUATOR, "devices", platforms,
                         "expected devices of one platform: one kernel runs on all of them")
    if len(set(devices)) != len(devices):
        raise InputError(EVALUATOR, "devices", None, "a device is given twice")


def _check_choice(value: object, choices: Iterable[str], caller: str, name: str) -> None:
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise InputError(caller, name, value if isinstance(value, str) else _kind(value),
                         f"must be one of {', '.join(choices)}")


def _check_count(value: object, caller: str, name: str, low: int, high: int | None,
                 expected: str | None = None) -> None:
    """``value`` is an integer (an int, a NumPy integer; not a bool) from ``low`` to ``high``
    (None: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        wanted = expected or ("a positive integer" if low == 1 else
                              f"an integer of at least {low:,}")
        raise InputError(caller, name, _kind(value), f"expected {wanted}")
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
    _check_inputs(catalog, None, caller)
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
    from xsweep.pipeline import prepare as prepare_plan  # see _check_options
    from xsweep.plan.lower import TemplateCache

    caller = "xsweep.prepare"
    if isinstance(plan, str | os.PathLike):
        check_path_argument(plan, caller, "plan")
    elif not isinstance(plan, xsweep_pb2.DeploymentPlan):
        raise InputError(caller, "plan", _kind(plan),
                         "expected a DeploymentPlan message or the path of a plan file")
    _check_inputs(catalog, profile, caller)
    if templates is not None and not isinstance(templates, TemplateCache):
        raise InputError(caller, "templates", _kind(templates),
                         "expected a TemplateCache or None")
    if not isinstance(names, bool):
        raise InputError(caller, "names", _kind(names), "expected True or False")
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
        _check_count(count, "xsweep.use_cpu_devices", "count", 1, MAX_CPU_DEVICES,
                     "a positive integer or None")
    from xsweep.runtime import use_cpu_devices as split  # see _check_options

    return split(count)


def _argument(name: str, value: object, reason: str) -> InputError:
    return InputError(CALLER, name, value, reason)


def _kind(value: object) -> str:
    """A short description of ``value`` for messages: its type, and text if it is a path."""
    if isinstance(value, str | bytes | os.PathLike):
        return f"{type(value).__name__} {os.fspath(value)!r}"
    return type(value).__name__
