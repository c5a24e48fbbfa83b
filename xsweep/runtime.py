"""How xsweep sets up JAX: CPU devices and the compilation cache, explicit steps, never
side effects of an import.

**CPU devices.**
The batched evaluator shards its variants over all devices and runs each device's
share in the calling thread of that device, so on a CPU host one device keeps one
core busy while the others mostly wait (measured on 2 cores: one device per core
evaluates the exact level at 2.2x the rate, for less CPU time). JAX fixes its CPU
device count when it starts its backends, so :func:`use_cpu_devices` must run before
the first JAX computation of the process; a new :class:`~xsweep.evaluator.Evaluator`
calls it (so every command that evaluates), and importing xsweep does not.

**Compiled loops.** XLA's CPU runtime runs a loop's body an operation at a time, with a
fixed cost per operation; the exact level's event loop is tens of small operations per
event. XLA can compile a loop whose body holds no scatter into one function instead,
but by default only loops that touch under a kilobyte. :func:`use_compiled_loops` lifts
that limit before JAX starts (measured on CPU, Llama-2-7B plans of 8-64 GPUs: the
exact kernel ran its events in 1.6-2.2x less time); it is the one setting written to
``os.environ`` (``XLA_FLAGS``, where XLA reads it; worker processes inherit it), and a
``--xla_backend_extra_options`` of the user's own is left as it is.

**Compilation cache.** Compiling the kernels for a new shape takes seconds (tens of
seconds for the exact level), far longer than running them. :func:`use_compile_cache`
turns on JAX's persistent compilation cache in a per-user directory, so a second
process (a rerun of a sweep, another optimizer worker) loads compiled kernels
instead of compiling them: ``$XSWEEP_CACHE_DIR``, else ``$XDG_CACHE_HOME/xsweep/jax``,
else ``~/.cache/xsweep/jax``; ``XSWEEP_CACHE_DIR=0`` (or ``off``) turns it off, and a
cache directory already given to JAX (``JAX_COMPILATION_CACHE_DIR``) is left alone.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from pathlib import Path

#: Environment variable read (never written): CPU devices to split a host into; 0 keeps
#: JAX's default of one.
CPU_DEVICES_ENV = "XSWEEP_CPU_DEVICES"
#: Environment variable read (never written): the compilation cache directory, or 0/off.
CACHE_DIR_ENV = "XSWEEP_CACHE_DIR"
_XLA_COUNT_FLAG = "--xla_force_host_platform_device_count"
_XLA_EXTRA_FLAG = "--xla_backend_extra_options"
#: XLA's CPU option: loops touching fewer bytes than this compile into one function.
_LOOP_OPTION = "xla_cpu_small_while_loop_byte_threshold"
LOOP_BYTES = 10**9


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


def accelerator_possible() -> bool:
    """Whether JAX could find an accelerator here, known without starting JAX: JAX is not
    told to use the CPU only (``JAX_PLATFORMS``) and a plugin of an accelerator (CUDA,
    ROCm, TPU) is installed. False means a CPU host for certain; True, that only JAX's
    devices can tell (a CUDA plugin on a machine without a GPU, say)."""
    import importlib.metadata
    import importlib.util

    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms and {p.strip() for p in platforms.split(",") if p.strip()} <= {"cpu"}:
        return False
    if any(True for _ in importlib.metadata.entry_points(group="jax_plugins")):
        return True
    if importlib.util.find_spec("libtpu") is not None:
        return True
    try:
        import jax_plugins  # a namespace package of the installed plugins, if any
    except ImportError:
        return False
    import pkgutil

    return any(True for _ in pkgutil.iter_modules(jax_plugins.__path__))


def use_compiled_loops() -> bool:
    """Have XLA's CPU compiler emit every loop whose body holds no scatter as one function
    (see the module's description), if JAX has not started its backends and no
    ``--xla_backend_extra_options`` is set already; return whether loops compile so."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _LOOP_OPTION in flags:
        return True
    if _XLA_EXTRA_FLAG in flags:
        return False  # the user's own options, not merged into
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {_XLA_EXTRA_FLAG}={_LOOP_OPTION}={LOOP_BYTES}".strip()
    return True


def default_cache_dir() -> Path | None:
    """Where compiled kernels are kept between processes (None: not kept)."""
    chosen = os.environ.get(CACHE_DIR_ENV, "").strip()
    if chosen.lower() in ("0", "off", "false", "no"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "xsweep" / "jax"


def use_compile_cache(path: str | Path | None = None) -> Path | None:
    """Keep compiled kernels in ``path`` (default :func:`default_cache_dir`) across
    processes; return the directory in use, or None when there is none.

    A directory JAX already has is kept. Every compilation is cached, however short:
    a new process would otherwise compile each kernel shape again.
    """
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    directory = Path(path).expanduser() if path is not None else default_cache_dir()
    if directory is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:  # an unwritable home: run without the cache rather than fail
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return directory


#: Allocations between two collections of the youngest objects while xsweep evaluates
#: (Python's default is 700).
RELAXED_GC_THRESHOLD = 100_000


@contextlib.contextmanager
def collector_relaxed() -> Iterator[None]:
    """Collect the youngest objects less often for a stretch of code (an evaluation) that
    allocates many short-lived containers, most freed by reference counting. At Python's
    default of 700 allocations, every tenth young collection also scans the middle
    generation, and every hundredth all that the process holds (the evaluator's memos of
    program structures included): measured over 580 all-distinct Llama-2-7B plans at the
    bound level in one process, 0.26 s of 3.0 s went to 260 collections, against 0.07 s
    to 3 at 100,000. The thresholds before are put back after."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], RELAXED_GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (if it runs) for a stretch of code that
    allocates many small containers and makes no reference cycles (building a program's
    structure: tens of thousands of tuples and lists). Each collection of the youngest
    objects would otherwise scan them, and every few a full one scans all that a
    process with JAX loaded holds (measured: a third of the time of building 512-GPU
    structures)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
