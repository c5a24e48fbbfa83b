"""The arguments of ``xsweep.evaluate``, ``Evaluator.evaluate`` and the ``Evaluator``
constructor, checked before any work starts.

Each wrong one is an ``InputError`` naming the function (in place of a file) and the
argument, in the one-line form of every input error, such as
``xsweep.Evaluator: max_rounds: must be at least 1 (got 0)``; never an IndexError or
AttributeError from deep inside. The plans themselves are validated as ``xsweep check``
validates them (:func:`xsweep.spec.arguments.validated_plans`).

Here: the checks of ``xsweep.evaluate`` and ``Evaluator.evaluate``
(:func:`check_evaluate_arguments`, :func:`evaluation_arguments`,
:func:`evaluation_plans`) and of the ``Evaluator`` constructor
(:func:`check_evaluator_arguments`).
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Iterable, Sequence

from xsweep.cost import CostModel
from xsweep.errors import InputError
from xsweep.evaluator.dataset import check_coords
from xsweep.evaluator.driver import DTYPES, LEVELS
from xsweep.spec import ranges, xsweep_pb2
from xsweep.spec.arguments import (
    CALLER,
    MAX_CPU_DEVICES,
    argument_error,
    check_count,
    check_inputs,
    kind_of,
    validated_plans,
)
from xsweep.spec.catalog import Catalog
from xsweep.spec.profile import Profile

#: The name errors about the arguments of an ``Evaluator`` give in place of a file.
EVALUATOR = "xsweep.Evaluator"
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
    plans and paths, for :func:`xsweep.spec.arguments.validated_plans` (which a caller
    may run piece by piece, while earlier pieces are already being evaluated)."""
    if not isinstance(catalog, Catalog):
        raise argument_error("catalog", type(catalog).__name__,
                             "expected a Catalog (load_catalog())")
    _check_options(profile, cost, chunk_size, progress)
    if isinstance(plans, str | bytes | os.PathLike | xsweep_pb2.DeploymentPlan):
        raise argument_error(
            "plans", kind_of(plans),
            "expected a list of plans or paths, not a single one; wrap it in a list")
    if not isinstance(plans, Iterable):
        raise argument_error("plans", kind_of(plans), "expected a list of plans or paths")
    items = list(plans)
    if not items:
        raise argument_error("plans", None, "no plans to evaluate")
    return items


def _check_options(profile: object, cost: object, chunk_size: object, progress: object,
                   caller: str = CALLER) -> None:
    """``profile`` (None or a Profile), ``cost`` (None or a valid CostModel),
    ``chunk_size`` (None or a positive integer) and ``progress`` (None or callable)."""
    if profile is not None and not isinstance(profile, Profile):
        raise InputError(caller, "profile", kind_of(profile),
                         "expected a Profile (load_profile()) or None")
    if cost is not None:
        _check_cost(cost, caller)
    if chunk_size is not None:
        check_count(chunk_size, caller, "chunk_size", 1, None, "a positive integer or None")
    if progress is not None:
        _check_progress(progress, caller)


def _check_progress(progress: object, caller: str) -> None:
    """``progress`` is called as ``progress(done, total)``: a callable that takes two
    positional arguments (one whose signature cannot be read is taken on trust)."""
    if not callable(progress):
        raise InputError(caller, "progress", kind_of(progress),
                         "expected a function (done, total) or None")
    try:
        inspect.signature(progress).bind(0, 0)
    except TypeError:
        raise InputError(caller, "progress", kind_of(progress),
                         "expected a function of two arguments (done, total)") from None
    except ValueError:  # no signature to read (some built-in functions)
        pass


def _check_cost(cost: object, caller: str = CALLER) -> None:
    if not isinstance(cost, CostModel):
        raise InputError(caller, "cost", kind_of(cost), "expected a CostModel")
    if not isinstance(cost.pricing, str) or cost.pricing not in ranges.PRICING:
        raise InputError(caller, "cost.pricing", cost.pricing,
                         f"expected one of {', '.join(ranges.PRICING)}")
    for name, bounds in ranges.COST.items():
        bounds.check(getattr(cost, name), caller, f"cost.{name}")


def check_evaluate_arguments(plans: object, level: object, *, catalog: object = None,
                             profile: object = None, cost: object = None, dtype: object = None,
                             chunk_size: object = None, progress: object = None,
                             coords: object = None) -> None:
    """Check the arguments of ``Evaluator.evaluate`` (and so of ``xsweep.evaluate``) that
    can be checked before the plans are read: the options, the catalog's and profile's
    types, and ``coords`` (one value per plan where ``plans`` has a length; plans from an
    iterator are counted once listed). The plans themselves are checked by
    :func:`evaluation_arguments` and :func:`xsweep.spec.arguments.validated_plans`.

    Raises:
        InputError: naming ``xsweep.evaluate`` and the argument.
    """
    _check_choice(level, LEVELS, CALLER, "level")
    if dtype is not None:
        _check_choice(dtype, DTYPES, CALLER, "dtype")
    check_inputs(catalog, profile, CALLER)
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
    if devices is not None:
        _check_devices(devices)
    _check_choice(dtype, DTYPES, EVALUATOR, "dtype")
    if chunk_size is not None:
        check_count(chunk_size, EVALUATOR, "chunk_size", 1, None, "a positive integer or None")
    check_count(max_rounds, EVALUATOR, "max_rounds", 1, MAX_ROUNDS_CAP)
    check_inputs(catalog, profile, EVALUATOR)
    _check_cost(cost, EVALUATOR)
    if cpu_devices is not None:
        check_count(cpu_devices, EVALUATOR, "cpu_devices", 1, MAX_CPU_DEVICES,
                     "a positive integer or None")
    if not isinstance(compile_cache, bool):
        raise InputError(EVALUATOR, "compile_cache", kind_of(compile_cache),
                         "expected True or False")
    if processes is not None:
        check_count(processes, EVALUATOR, "processes", 1, MAX_PROCESSES,
                     "a positive integer or None")
    check_count(parallel_min, EVALUATOR, "parallel_min", 0, None)
    check_count(template_bytes, EVALUATOR, "template_bytes", 0, None)


def _check_devices(devices: object) -> None:
    if isinstance(devices, str | bytes) or not isinstance(devices, Sequence):
        raise InputError(EVALUATOR, "devices", kind_of(devices),
                         "expected a list of JAX devices (such as jax.devices()) or None")
    if not devices:
        raise InputError(EVALUATOR, "devices", None,
                         "no devices; give at least one, or None for all of jax.devices()")
    jax = sys.modules.get("jax")  # a JAX device exists only once JAX is imported
    device_type = getattr(jax, "Device", None)
    for index, device in enumerate(devices):
        if device_type is None or not isinstance(device, device_type):
            raise InputError(EVALUATOR, f"devices[{index}]", kind_of(device),
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
        raise InputError(caller, name, value if isinstance(value, str) else kind_of(value),
                         f"must be one of {', '.join(choices)}")
