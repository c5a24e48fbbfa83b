"""How many XLA devices a CPU host is split into: an explicit step, never a side effect.

The batched evaluator shards its variants over all devices and runs each device's
share in the calling thread of that device, so on a CPU host one device keeps one
core busy while the others mostly wait (measured on 2 cores: one device per core
evaluates the exact level at 2.2x the rate, for less CPU time). JAX fixes its CPU
device count when it starts its backends, so :func:`use_cpu_devices` must run before
the first JAX computation of the process; the command line and a new
:class:`~xsweep.evaluator.Evaluator` call it, importing xsweep does not, and nothing
here writes to ``os.environ``.
"""

from __future__ import annotations

import os

#: Environment variable read (never written): CPU devices to split a host into; 0 keeps
#: JAX's default of one.
CPU_DEVICES_ENV = "XSWEEP_CPU_DEVICES"
_XLA_COUNT_FLAG = "--xla_force_host_platform_device_count"


def usable_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def chosen_cpu_devices(count: int | None = None) -> int | None:
    """The CPU device count to ask JAX for, or None to leave JAX's choice alone.

    ``count`` wins, then a count in ``XLA_FLAGS`` (left to JAX), then
    ``XSWEEP_CPU_DEVICES`` (0: JAX's default), then one device per usable core.
    """
    if count is not None:
        return max(int(count), 1)
    if _XLA_COUNT_FLAG in os.environ.get("XLA_FLAGS", ""):
        return None
    chosen = os.environ.get(CPU_DEVICES_ENV, "").strip()
    if chosen.isdigit():
        return int(chosen) or None
    return usable_cores()


def use_cpu_devices(count: int | None = None) -> bool:
    """Split the host CPU into XLA devices (see :func:`chosen_cpu_devices`) if JAX has
    not started yet; return whether the choice took effect.

    Accelerators are not affected: on a GPU host the GPUs stay the default devices.
    """
    wanted = chosen_cpu_devices(count)
    if wanted is None:
        return False
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", wanted)
    except RuntimeError:  # JAX is already running: its device count stays
        return False
    return True
