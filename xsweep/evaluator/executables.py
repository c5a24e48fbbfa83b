"""The jitted kernel calls of one set of devices, and the shapes they were compiled for.

An :class:`Executables` belongs to one :class:`~xsweep.evaluator.evaluator.Evaluator`:
it holds the jitted, sharded functions (each keeps its compiled executables, one per
input shape) and remembers which shapes were compiled, so that later calls (an
optimizer's successive batches, a sweep's rounds) can run at a compiled shape that
covers theirs at little extra cost instead of compiling their own.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xsweep import timeline
from xsweep.evaluator.compiles import compile_count
from xsweep.evaluator.kernel_store import KernelStore, signature
from xsweep.kernels import blocked_bound, exact
from xsweep.metrics import STREAM_METRICS, SUMMARIES, summary_name

#: Diagnostics of the kernels, int32 per variant.
DIAGNOSTICS = ("status", "steps", "max_active_flows", "waterfill_rounds")
#: Compiled executables kept at most; past that the least recently used one is dropped,
#: and loaded again if it is needed again (each holds code and memory mappings, tens of
#: megabytes for an exact kernel; one comes back from the kernel store in a tenth to a
#: fifth of a second). Dropping them all at once instead made a call over many shapes
#: (an exact call runs the bound first, at shapes of its own) load every one it still
#: needed a second time.
MAX_COMPILED = 64

_AXIS = "variant"


def _sharded(fn: Callable, devices: tuple, vectorized: bool = True,
             present: Callable | None = None) -> tuple[Callable, NamedSharding]:
    """``fn`` (of one variant) over a variant axis split across ``devices``, jitted.

    Each device runs its share of the variants vmapped or, not ``vectorized``, one
    after another (:func:`_one_by_one`), visiting only the rows ``present`` marks (a
    bool per row, from the arguments; default: every row).
    """
    mesh = Mesh(np.array(devices), (_AXIS,))
    spec = PartitionSpec(_AXIS)
    local = jax.vmap(fn) if vectorized else functools.partial(_one_by_one, fn, present)
    sharded = jax.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec,
                            check_vma=False)  # the kernels know nothing of the mesh
    return jax.jit(sharded), NamedSharding(mesh, spec)


def _one_by_one(fn: Callable, present: Callable | None, *args):
    """``fn`` of each row of ``args`` present, one after another; zeros in the other rows.

    A loop over every row (``lax.map``) copies each row's inputs out of the stacked
    arrays before ``fn`` sees it, padded rows too: at the exact level's largest shapes
    (a megabyte a row) that cost more than running a small program. Here the loop runs
    over the present rows' indices alone, so a chunk that holds a few variants pays
    for those.
    """
    rows = jax.tree.leaves(args)[0].shape[0]
    out = jax.eval_shape(fn, *jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                                           args))
    out = jax.tree.map(lambda leaf: jnp.zeros((rows, *leaf.shape), leaf.dtype), out)
    marks = jnp.ones((rows,), bool) if present is None else present(*args)
    which = jnp.nonzero(marks, size=rows, fill_value=0)[0]

    def one(j, out):
        row = which[j]
        result = fn(*jax.tree.map(lambda x: lax.dynamic_index_in_dim(x, row, keepdims=False),
                                  args))
        return jax.tree.map(lambda o, r: lax.dynamic_update_index_in_dim(o, r, row, 0),
                            out, result)

    return lax.fori_loop(0, jnp.sum(marks, dtype=jnp.int32), one, out)


def _evaluate_one(level: str, slots: tuple[int, int], max_rounds: int, batched: bool,
                  unroll: int, arrays, index: timeline.MetricIndex | None,
                  scalars: tuple | None) -> dict:
    """One variant's schedule at ``level``, its diagnostics and, given the metrics' index
    and scalars, its metrics: one compiled call, the task times never leave the device."""
    schedule = (blocked_bound(arrays, unroll) if level == "bound"
                else exact(arrays, slots, max_rounds, batched, unroll))
    out = dict(zip(DIAGNOSTICS, (schedule.status, schedule.steps, schedule.max_active_flows,
                                 schedule.max_rounds), strict=True))
    out |= {"iteration_time_s": schedule.iteration_time_s, "start_s": schedule.start_s,
            "end_s": schedule.end_s}
    if index is None:
        return out
    start_s, end_s = schedule.start_s, schedule.end_s
    per_stream = timeline.stream_metrics(jnp, index, start_s, end_s)
    per_stream = {name: jnp.where(index.stream_weight > 0, value, 0)  # 0 past the streams
                  for name, value in per_stream.items()}
    summary = timeline.summarize(jnp, index, per_stream, start_s, end_s, *scalars)
    del summary["iteration_time_s"]  # the kernel's own, which also covers the bound
    return out | per_stream | summary


def _holds_tasks(arrays, index, scalars) -> jax.Array:
    """Which rows of an exact chunk hold a program (a padded row has no valid task)."""
    return jnp.any(arrays.task_valid, axis=1)


def output_names(with_metrics: bool) -> tuple[tuple[str, ...], tuple[str, ...],
                                              tuple[str, ...]]:
    """The kernel's per-variant results as :func:`_packed` stacks them: int32 scalars,
    float scalars, float per-stream rows (the task times travel apart)."""
    floats = ("iteration_time_s",)
    if with_metrics:
        floats += ("tokens_per_s", "mfu", *(summary_name(name, how) for name in STREAM_METRICS
                                             for how in SUMMARIES))
    return DIAGNOSTICS, floats, STREAM_METRICS if with_metrics else ()


def _packed(out: dict, with_metrics: bool) -> dict:
    """``out`` in five arrays (each result converted to a host array costs a fixed
    overhead, more than dozens of values): see :func:`output_names` and :func:`unpack`."""
    ints, floats, streams = output_names(with_metrics)
    assert len(out) == len(ints) + len(floats) + len(streams) + 2, sorted(out)
    dtype = out["iteration_time_s"].dtype
    packed = {"ints": jnp.stack([out[name] for name in ints]),
              "floats": jnp.stack([out[name].astype(dtype) for name in floats]),
              "start_s": out["start_s"], "end_s": out["end_s"]}
    if streams:
        packed["streams"] = jnp.stack([out[name].astype(dtype) for name in streams])
    return packed


def unpack(packed: dict, with_metrics: bool) -> dict[str, np.ndarray]:
    """The host arrays of a call's packed results (:func:`_packed`), by result name,
    the variant axis first."""
    ints, floats, streams = output_names(with_metrics)
    out: dict[str, np.ndarray] = {}
    for key, names in (("ints", ints), ("floats", floats), ("streams", streams)):
        if names:
            values = np.asarray(packed[key])
            out |= {name: values[:, i] for i, name in enumerate(names)}
    return out | {name: np.asarray(packed[name]) for name in ("start_s", "end_s")
                  if name in packed}


class _Loader:
    """One thread that loads kept executables in the order asked, while the thread that
    asked goes on (encoding a chunk, say): loading one lets go of the GIL for most of
    its tenth of a second. A daemon: a process may end with loads never taken."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, path: Path, devices: tuple) -> Future:
        """A future of :meth:`KernelStore.read` of ``path``."""
        future: Future = Future()
        self._queue.put((future, path, devices))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="xsweep-kernel-loader",
                                            daemon=True)
            self._thread.start()
        return future

    def _run(self) -> None:
        while True:
            future, path, devices = self._queue.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(KernelStore.read(path, devices))
                except BaseException as error:  # noqa: BLE001 - raised where it is taken
                    future.set_exception(error)


class _Kernel:
    """A jitted kernel call whose executables (one per argument signature) come from a
    :class:`KernelStore` (disk) or are compiled and kept there."""

    def __init__(self, jitted: Callable, config: tuple, devices: tuple, store: KernelStore,
                 used: Callable[[_Kernel, str], None], loader: _Loader | None = None):
        self._jitted, self._config, self._devices, self._store = jitted, config, devices, store
        self._executables: dict[str, Callable] = {}
        self._loading: dict[str, Future] = {}  # loads under way (prefetch)
        self._used = used  # told of every call: which executables are kept is its to say
        self._loader = loader if loader is not None else _Loader()

    def __call__(self, *args):
        key = signature(args)
        executable = self._executables.get(key)
        if executable is None:
            loading = self._loading.pop(key, None)
            if loading is not None:  # prefetched: taken (and counted) here
                executable, seconds = loading.result()
                if executable is not None:
                    compile_count().add_load(seconds)
            if executable is None:
                executable = self._store.compiled(self._jitted, self._config, args,
                                                  self._devices)
            self._executables[key] = executable
        self._used(self, key)
        return executable(*args)

    def prefetch(self, *args) -> bool:
        """Start loading the executable for a call with arguments like ``args`` (arrays, or
        ``jax.ShapeDtypeStruct`` leaves with their shardings) in the loader's thread, if it
        is kept on disk and neither held nor loading already; a later call with such
        arguments takes it. Returns whether a load was started. Nothing is compiled here:
        a kernel not kept is compiled by the call that needs it."""
        key = signature(args)
        if key in self._executables or key in self._loading:
            return False
        path = self._store.kept(self._config, args, self._devices)
        if path is None:
            return False
        self._loading[key] = self._loader.submit(path, self._devices)
        return True

    def drop(self, key: str) -> None:
        """Forget the executable of the argument signature ``key`` (loaded again if needed)."""
        self._executables.pop(key, None)


class Executables:
    """Jitted kernel calls sharded over ``devices``, and the shapes compiled so far;
    ``store`` is the directory compiled kernels are kept in across processes (None: not
    kept)."""

    def __init__(self, devices: tuple, max_compiled: int = MAX_COMPILED,
                 store: Path | None = None):
        self.devices = tuple(devices)
        self.max_compiled = max_compiled
        self._store = KernelStore(store)
        self._loader = _Loader()
        self._kernels: dict[tuple, tuple[_Kernel, NamedSharding]] = {}
        self._recent: OrderedDict[tuple[int, str], _Kernel] = OrderedDict()  # oldest first
        self._shapes: dict[tuple, list[tuple[int, ...]]] = {}
        self._assigned: dict[tuple, dict[tuple, tuple]] = {}

    def kernel(self, level: str, slots: tuple[int, int], max_rounds: int, vectorized: bool,
               with_metrics: bool, unroll: int = 1) -> tuple[_Kernel, NamedSharding]:
        """The kernel of ``level`` (and the metrics) over a variant axis, and the sharding
        of its inputs: ``(arrays, index, scalars)``, the last two None without metrics;
        ``unroll`` steps per iteration of its loop."""
        key = (level, slots, max_rounds, vectorized, with_metrics) + \
            ((unroll,) if unroll != 1 else ())  # keys of kernels kept before stay theirs
        if key not in self._kernels:
            def one(arrays, index, scalars):
                return _packed(_evaluate_one(level, slots, max_rounds, vectorized, unroll,
                                             arrays, index, scalars), with_metrics)
            jitted, sharding = _sharded(one, self.devices, vectorized,
                                         _holds_tasks if level == "exact" else None)
            self._kernels[key] = (_Kernel(jitted, key, self.devices, self._store, self._used,
                                          self._loader), sharding)
        return self._kernels[key]

    def _used(self, kernel: _Kernel, key: str) -> None:
        """Note a call of ``kernel``'s executable for ``key``; past ``max_compiled``
        executables, drop the least recently used."""
        entry = (id(kernel), key)
        self._recent[entry] = kernel
        self._recent.move_to_end(entry)
        while len(self._recent) > self.max_compiled:
            (_, old), owner = self._recent.popitem(last=False)
            owner.drop(old)

    def loaded(self) -> int:
        """Executables held now."""
        return len(self._recent)

    def compiled(self, config: tuple) -> list[tuple[int, ...]]:
        """The shape keys (sizes, task slots, flow slots) compiled so far for ``config``."""
        return list(self._shapes.get(config, []))

    def assignments(self, config: tuple) -> dict[tuple, tuple]:
        """The shape key each variant key of ``config`` ran at before, in this process or
        (through the store) in any other: the same variants run at the same shapes, so a
        rerun compiles nothing, whatever else its calls hold."""
        known = self._store.assignments(config, self.devices) | self._assigned.get(config, {})
        self._assigned[config] = known  # this process's own choices first: compiled here
        return dict(known)

    def assign(self, config: tuple, new: dict[tuple, tuple]) -> None:
        """Record that the variant keys of ``new`` run at its shape keys."""
        new = {own: shape for own, shape in new.items()
               if own not in self._assigned.setdefault(config, {})}
        self._assigned[config].update(new)
        self._store.assign(config, self.devices, new)

    def remember(self, config: tuple, key: tuple[int, ...]) -> None:
        """Note that ``key`` is (about to be) compiled for ``config`` (its executables may
        be dropped later, :data:`MAX_COMPILED`; the shape stays one to reuse: loading it
        again costs less than compiling another)."""
        known = self._shapes.setdefault(config, [])
        if key not in known:
            known.append(key)

    def clear(self) -> None:
        """Drop every jitted function, its executables and the record of compiled shapes."""
        self._kernels.clear()
        self._recent.clear()
        self._shapes.clear()
