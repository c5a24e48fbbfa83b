"""The batched evaluator: an object that owns its devices, dtype and compiled kernels."""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from xsweep.cost import DEFAULT_COST, CostModel
from xsweep.errors import InputError
from xsweep.evaluator.arguments import (
    check_evaluate_arguments,
    check_evaluator_arguments,
    evaluation_arguments,
    evaluation_plans,
)
from xsweep.evaluator.compiles import compile_count
from xsweep.evaluator.dataset import assemble, joined, table, table_of
from xsweep.evaluator.derived import Derived
from xsweep.evaluator.driver import LEVELS, run_programs, shapes_known
from xsweep.evaluator.executables import Executables
from xsweep.evaluator.tuning import PLATFORMS, platform_of, tuning
from xsweep.evaluator.workers import PreparingPool, WorkerPool
from xsweep.kernels import MAX_ROUNDS
from xsweep.pipeline import Prepared, prepare_valid, resolve_inputs
from xsweep.plan.lower import TEMPLATE_BYTES, TemplateCache
from xsweep.plan.program import Program
from xsweep.runtime import (
    collector_relaxed,
    usable_cores,
    use_compile_cache,
    use_compiled_loops,
    use_cpu_devices,
)
from xsweep.spec.arguments import validated_plans
from xsweep.spec.catalog import Catalog
from xsweep.spec.profile import Profile
from xsweep.spec.program_size import estimate_program_size
from xsweep.workers.prepare import Received

if TYPE_CHECKING:  # xarray loads in half a second: worker processes never need it
    import xarray as xr

#: Plans prepared, evaluated and reduced to their results at a time, so that a call over
#: any number of plans holds only this many programs in memory...
HOST_CHUNK = 4096
#: ... and programs of at most this many tasks and flows in all (by the validation's
#: estimate, an upper bound): a program with its layouts and encodings holds a few hundred
#: bytes per task and flow, so a chunk of 512-GPU plans stays within about a gigabyte.
HOST_CELLS = 4_000_000
#: Bytes of program structures a worker that prepares plans for a device keeps at most:
#: a call's plans are shared among all workers, so each meets a structure's variants
#: less often than one process would, and its memory is what the host has per core.
PREPARER_TEMPLATE_BYTES = 64 * 2**20
#: Seconds between two progress notes of one worker's request at least.
PROGRESS_EVERY = 0.2
#: Plans a call needs at least before worker processes take it (starting them costs
#: seconds once; a small call is quicker here).
PARALLEL_MIN = 256


def _taking_turns(method: Callable) -> Callable:
    """A method that runs under its evaluator's lock: calls from several threads take turns."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class Evaluator:
    """Evaluates many deployment plans at once with the JAX kernels.

    It holds what repeated calls share: the devices it shards over, the compiled
    kernels (one per shape; later calls reuse shapes that cover theirs), the program
    structures it lowered (numeric variants of a plan shape are refilled, not
    lowered again) and what it derived from them for the kernels, and its defaults
    (dtype, chunk size, catalog, profile, cost). Several evaluators may live in one
    process.

    Args:
      devices: JAX devices to shard over (default: all of ``jax.devices()``).
      dtype: ``"float32"`` (default) or ``"float64"``.
      chunk_size: variants per kernel call (bounds memory); default per level and platform.
      max_rounds: water-filling round cap per event of the exact level.
      catalog, profile, cost: defaults of :meth:`evaluate`.
      cpu_devices: CPU devices to split the host into before JAX starts (see
        :func:`xsweep.runtime.use_cpu_devices`: default one per core); without effect
        once JAX has started or when ``devices`` is given.
      compile_cache: keep compiled kernels on disk across processes
        (:func:`xsweep.runtime.use_compile_cache`: a per-user directory by default).
      processes: worker processes that take shares of a call's plans
        (:mod:`xsweep.evaluator.workers`; default one per core). On a CPU host each
        prepares and evaluates its shares; on an accelerator they prepare (validate,
        analyse, lower) on the CPU, never touching the device, and this process, the
        device's one owner, runs the kernels in calls as large as the prepared plans
        allow, while the workers prepare the next. Calls of fewer than ``parallel_min``
        plans run in this process.
      platform: the tuning and host layout to run by, ``"cpu"`` or ``"gpu"`` (any
        accelerator); default: the devices'. ``"gpu"`` on CPU devices runs an
        accelerator host's code path on a CPU (tests).
      template_bytes: memory the program structures kept between calls may take
        (:class:`xsweep.plan.lower.TemplateCache`; about as much again is derived from
        them for the kernels).

    Threads: an evaluator may be called from several threads at once (an Optuna study
    with ``n_jobs > 1``, say). Its calls take turns, each with every core, device and
    worker process to itself, so one call's results never reach another; a thread that
    needs its own turn at the same time needs an evaluator of its own.
    """

    def __init__(self, *, devices: Sequence | None = None, dtype: str = "float32",
                 chunk_size: int | None = None, max_rounds: int = MAX_ROUNDS,
                 catalog: Catalog | None = None, profile: Profile | str | Path | None = None,
                 cost: CostModel = DEFAULT_COST, cpu_devices: int | None = None,
                 compile_cache: bool = True, processes: int | None = None,
                 parallel_min: int = PARALLEL_MIN, template_bytes: int = TEMPLATE_BYTES,
                 platform: str | None = None):
        check_evaluator_arguments(
            devices=devices, dtype=dtype, chunk_size=chunk_size, max_rounds=max_rounds,
            catalog=catalog, profile=profile, cost=cost, cpu_devices=cpu_devices,
            compile_cache=compile_cache, processes=processes, parallel_min=parallel_min,
            template_bytes=template_bytes)
        if platform not in (None, *PLATFORMS):
            raise InputError("xsweep.Evaluator", "platform", platform,
                             f"must be one of {', '.join(PLATFORMS)}, or None")
        self._lock = threading.RLock()
        use_compiled_loops()
        if devices is None:
            use_cpu_devices(cpu_devices)
            import jax

            devices = jax.devices()
        self.cache_dir = use_compile_cache() if compile_cache else None
        self.devices = tuple(devices)
        self.platform = platform or platform_of(self.devices)
        self.dtype = dtype
        self.chunk_size = chunk_size
        self.max_rounds = max_rounds
        self.catalog, self.profile = resolve_inputs(catalog, profile)
        self.cost = cost
        self._executables = Executables(
            self.devices, store=self.cache_dir / "kernels" if self.cache_dir else None)
        self._derived = Derived()
        self._templates = TemplateCache(max_bytes=template_bytes)
        self.parallel_min = parallel_min
        if processes is None:
            processes = usable_cores()
        self._workers: WorkerPool | PreparingPool | None = None
        if processes > 1 and self.platform == "cpu":
            self._workers = WorkerPool(processes, evaluating_worker, dict(
                dtype=dtype, chunk_size=chunk_size, max_rounds=max_rounds,
                catalog=self.catalog, profile=self.profile, cost=cost,
                compile_cache=compile_cache))
        elif processes > 1:
            self._workers = PreparingPool(processes, min(template_bytes, PREPARER_TEMPLATE_BYTES))
        if self._workers is not None:
            weakref.finalize(self, self._workers.close)
        self._received = Received()  # the structures shipped by workers that prepare

    @_taking_turns
    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._workers is not None:
            self._workers.close()

    def inputs(self, catalog: Catalog | None = None,
               profile: Profile | str | Path | None = None) -> tuple[Catalog, Profile | None]:
        """The catalog and profile plans are read against (default: the evaluator's)."""
        if catalog is None and profile is None:
            return self.catalog, self.profile
        return resolve_inputs(catalog or self.catalog, profile)

    @_taking_turns
    def prepare(self, plans: Sequence, catalog: Catalog | None = None,
                profile: Profile | str | Path | None = None) -> list[Prepared]:
        """Validate, analyse and lower every plan (messages or paths), against ``catalog``
        and ``profile`` (default: the evaluator's)."""
        catalog, profile = self.inputs(catalog, profile)
        return self._prepare_valid(evaluation_plans(plans, catalog, profile=profile),
                                   catalog, profile)

    def _prepare_valid(self, plans: Sequence, catalog: Catalog,
                       profile: Profile | None) -> list[Prepared]:
        return [prepare_valid(plan, catalog, profile, templates=self._templates, names=False)
                for plan in plans]

    @_taking_turns
    def shapes_known(self, level: str, dtype: str | None = None) -> bool:
        """Whether the kernel store holds shapes of ``level`` chosen for this evaluator's
        settings (by this process or an earlier one): an evaluation's kernels then mostly
        load, not compile."""
        return shapes_known(self._executables, level, dtype or self.dtype, self.max_rounds,
                            self.platform)

    @_taking_turns
    def run(self, programs: Sequence[Program], level: str = "exact", *,
            dtype: str | None = None, chunk_size: int | None = None,
            progress: Callable[[int, int], None] | None = None, slots: int | None = None,
            with_metrics: bool = True, task_times: bool = False,
            next_level: str | None = None) -> dict[str, np.ndarray]:
        """Kernel results of lowered programs, as arrays over the variants.

        See :func:`xsweep.evaluator.driver.run_programs` for the arguments and results.
        """
        return run_programs(programs, level, executables=self._executables,
                            derived=self._derived, dtype=dtype or self.dtype,
                            chunk_size=chunk_size or self.chunk_size, progress=progress,
                            slots=slots, max_rounds=self.max_rounds,
                            with_metrics=with_metrics, task_times=task_times,
                            platform=self.platform, next_level=next_level)

    @_taking_turns
    def evaluate(self, plans: Sequence, level: str = "exact", *,
                 catalog: Catalog | None = None, profile: Profile | str | Path | None = None,
                 cost: CostModel | None = None, dtype: str | None = None,
                 chunk_size: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 coords: Mapping[str, Sequence] | None = None) -> xr.Dataset:
        """Evaluate every plan; one ``variant`` per plan.

        Args:
          plans: ``DeploymentPlan`` messages (e.g. from :func:`xsweep.load_plan`) or paths.
          level: ``"exact"`` (lockstep event stepping: the simulator's semantics) or
            ``"bound"`` (contention-free: never above the exact iteration time).
          catalog, profile: what plans are read against (default: the evaluator's).
          cost: how hardware turns into money (default: the evaluator's).
          coords: per-variant values that identify each plan (a sweep's axes, say),
            added to the Dataset as coordinates along ``variant``.

        Returns:
          A Dataset over ``variant`` (and ``stream`` for the per-stream metrics) with the
          names of ``xsweep.metrics``, ``status`` (ok, not_converged, overflow,
          infeasible), ``feasible``, ``reason`` (why a plan is infeasible), ``level`` and
          the solver's diagnostics. Its attributes say where the time went: ``prepare_s``
          (validate, analyse, lower), ``kernels_s`` (encode and run, compilations
          included), ``results_s`` (memory, cost, the Dataset), ``compile_s`` and
          ``compiles`` (kernels compiled or loaded from the disk cache, and
          ``compile_cache_hits`` of those loaded).

        Plans are taken ``HOST_CHUNK`` at a time (fewer where their programs are large:
        ``HOST_CELLS``): prepared, evaluated and reduced to their results before the
        next, so memory stays bounded however many there are; with worker processes,
        each takes shares of the plans.
        """
        check_evaluate_arguments(plans, level, catalog=catalog, profile=profile, cost=cost,
                                 dtype=dtype, chunk_size=chunk_size, progress=progress,
                                 coords=coords)
        dtype, cost = dtype or self.dtype, cost or self.cost
        columns, seconds = self._columns(plans, level, catalog, profile, cost, dtype,
                                         chunk_size, progress)
        start = time.perf_counter()
        ds = assemble(columns, level, dtype, cost, coords, seconds)
        ds.attrs["results_s"] += time.perf_counter() - start
        return ds

    @_taking_turns
    def evaluate_columns(self, plans: Sequence, level: str = "exact", *,
                         catalog: Catalog | None = None, cost: CostModel | None = None,
                         dtype: str | None = None,
                         progress: Callable[[int, int], None] | None = None,
                         next_level: str | None = None,
                         ) -> tuple[dict[str, np.ndarray], dict]:
        """What :meth:`evaluate` gives, as columns over the plans before any Dataset is
        made: each variable by name (``status`` as integer codes, the kernels' and
        :class:`xsweep.search.levels.Status`'s; ``name`` the plans' names; no ``level``),
        and where the time went (the Dataset's attributes). For callers that keep results
        in tables of their own (a search's session). ``next_level``: the level the caller
        evaluates some of these plans at next (a funnel), whose kept kernels this call
        starts loading (:func:`xsweep.evaluator.driver.anticipate`; where this process
        runs the kernels)."""
        check_evaluate_arguments(plans, level, catalog=catalog, cost=cost, dtype=dtype,
                                 progress=progress)
        if next_level not in (None, *LEVELS):
            raise InputError("evaluate_columns", "next_level", next_level,
                             f"must be one of {', '.join(LEVELS)}, or None")
        dtype, cost = dtype or self.dtype, cost or self.cost
        columns, seconds = self._columns(plans, level, catalog, None, cost, dtype, None,
                                         progress, next_level)
        return columns, dict(seconds)

    def _columns(self, plans: Sequence, level: str, catalog, profile, cost: CostModel,
                 dtype: str, chunk_size, progress,
                 next_level: str | None = None) -> tuple[dict | None, dict]:
        """Evaluate checked arguments: the joined result tables (None for no plans) and
        where the time went."""
        catalog, profile = self.inputs(catalog, profile)
        items = evaluation_arguments(plans, catalog, profile=profile, cost=cost,
                                     chunk_size=chunk_size, progress=progress)
        n = len(items)
        options = dict(catalog=catalog, profile=profile, cost=cost, dtype=dtype,
                       chunk_size=chunk_size)
        if self._workers is not None and n >= self.parallel_min:
            # each piece is validated here while the workers evaluate the ones before it
            pieces = (list(validated_plans(items, catalog, begin, end))
                      for begin, end in _shares(n, self._workers.processes))
            finished = [0]

            def done(count: int) -> None:
                finished[0] += count
                if progress is not None:
                    progress(finished[0], n)

            if isinstance(self._workers, PreparingPool):
                tables, seconds = self._on_device(pieces, level, options, done, next_level)
            else:
                tables, seconds = [], dict.fromkeys(_SECONDS, 0.0)
                for part, spent in self._workers.map(pieces, level, options, done):
                    tables += part
                    seconds = {k: seconds[k] + spent[k] for k in seconds}
        else:
            tables, seconds = self.tables(list(validated_plans(items, catalog)), level,
                                          progress=progress, next_level=next_level,
                                          **options)
        start = time.perf_counter()
        columns = joined(tables)
        seconds["results_s"] += time.perf_counter() - start
        return columns, seconds

    @_taking_turns
    def tables(self, plans: Sequence, level: str, *, catalog: Catalog | None = None,
               profile: Profile | str | Path | None = None, cost: CostModel | None = None,
               dtype: str | None = None, chunk_size: int | None = None,
               progress: Callable[[int, int], None] | None = None,
               next_level: str | None = None) -> tuple[list[dict], dict]:
        """Evaluate validated ``plans`` (messages) here, a host chunk at a time: their
        result tables (see :func:`xsweep.evaluator.dataset.table`) and where the time went
        (``next_level``: see :meth:`evaluate_columns`)."""
        catalog, profile = self.inputs(catalog, profile)
        dtype, cost, n = dtype or self.dtype, cost or self.cost, len(plans)
        seconds = dict.fromkeys(("prepare_s", "kernels_s", "results_s"), 0.0)
        compiled = compile_count().snapshot()
        tables = []
        with collector_relaxed():
            for begin, end in _host_chunks(plans):
                start = time.perf_counter()
                prepared = self._prepare_valid(plans[begin: end], catalog, profile)
                seconds["prepare_s"] += time.perf_counter() - start

                def step(done: int, total: int, begin=begin) -> None:
                    if progress is not None:
                        progress(begin + done, n)

                start = time.perf_counter()
                out = self.run([p.program for p in prepared], level, dtype=dtype,
                               chunk_size=chunk_size, progress=step, next_level=next_level)
                seconds["kernels_s"] += time.perf_counter() - start
                start = time.perf_counter()
                tables.append(table(prepared, out, cost))
                seconds["results_s"] += time.perf_counter() - start
        compiled = compile_count() - compiled
        return tables, {**seconds, "compile_s": compiled.seconds, "compiles": compiled.compiles,
                        "compile_cache_hits": compiled.cache_hits}


    def _on_device(self, pieces, level: str, options: dict, done: Callable[[int], None],
                   next_level: str | None = None) -> tuple[list[dict], dict]:
        """Evaluate ``pieces`` of validated plans on this evaluator's device: the workers
        prepare them, and each kernel call here takes the programs of as many prepared
        pieces as make up one call of the device's size (its tuning's chunk on every
        device), so calls are large however the plans were cut. While a call runs, the
        workers prepare the next pieces. The result tables, one per piece, in order."""
        compiled = compile_count().snapshot()
        seconds = dict.fromkeys(("prepare_s", "kernels_s", "results_s"), 0.0)
        call_size = tuning(self.platform, level).chunk * len(self.devices)
        tables: dict[int, dict] = {}
        waiting: list[tuple[int, object]] = []

        def run_waiting() -> None:
            programs = [p for _, piece in waiting for p in piece.programs]
            start = time.perf_counter()
            out = self.run(programs, level, dtype=options["dtype"],
                           chunk_size=options["chunk_size"], next_level=next_level)
            seconds["kernels_s"] += time.perf_counter() - start
            start, begin = time.perf_counter(), 0
            for index, piece in waiting:
                end = begin + len(piece.programs)
                tables[index] = table_of(piece.static, {k: v[begin:end] for k, v in out.items()})
                begin = end
            seconds["results_s"] += time.perf_counter() - start
            done(len(programs))
            waiting.clear()

        inputs = (options["catalog"], options["profile"], options["cost"])
        for index, piece in self._workers.prepared(pieces, inputs):
            seconds["prepare_s"] += piece.prepare_s
            piece = piece._replace(programs=self._received.programs(piece.programs))
            waiting.append((index, piece))
            if sum(len(p.programs) for _, p in waiting) >= call_size:
                waiting.sort(key=lambda item: item[0])  # a call's rows in the plans' order
                run_waiting()
        if waiting:
            waiting.sort(key=lambda item: item[0])
            run_waiting()
        compiled = compile_count() - compiled
        return [tables[i] for i in range(len(tables))], {
            **seconds, "compile_s": compiled.seconds, "compiles": compiled.compiles,
            "compile_cache_hits": compiled.cache_hits}


def _shares(n: int, processes: int) -> list[tuple[int, int]]:
    """``[begin, end)`` ranges of the pieces worker processes take: four per worker (at
    most ``HOST_CHUNK`` plans each), handed to whichever is free. Pieces of one size group
    plans alike from piece to piece, so that their kernel shapes repeat: pieces of
    shrinking sizes balanced the workers' ends no better in measured runs, and compiled
    twice the shapes on a first run."""
    share = min(HOST_CHUNK, -(-n // (4 * processes)))
    return [(begin, min(begin + share, n)) for begin in range(0, n, share)]


def _host_chunks(plans: Sequence) -> list[tuple[int, int]]:
    """``[begin, end)`` ranges of at most ``HOST_CHUNK`` plans and ``HOST_CELLS`` estimated
    tasks and flows (at least one plan each)."""
    sizes = np.cumsum([estimate_program_size(plan) for plan in plans])
    chunks, begin = [], 0
    while begin < len(plans):
        before = sizes[begin - 1] if begin else 0
        fits = int(np.searchsorted(sizes, before + HOST_CELLS, side="right"))
        end = min(max(fits, begin + 1), begin + HOST_CHUNK)
        chunks.append((begin, end))
        begin = end
    return chunks


#: Where an evaluation's time went (Dataset attributes).
_SECONDS = ("prepare_s", "kernels_s", "results_s", "compile_s", "compiles",
            "compile_cache_hits")


_default: Evaluator | None = None
_default_lock = threading.Lock()


def default_evaluator() -> Evaluator:
    """The evaluator :func:`evaluate` uses, made on first use (once, whichever threads ask)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Evaluator()
        return _default


def evaluate(plans: Sequence, level: str = "exact", *, catalog: Catalog | None = None,
             profile: Profile | str | Path | None = None, cost: CostModel = DEFAULT_COST,
             dtype: str = "float32", chunk_size: int | None = None,
             progress: Callable[[int, int], None] | None = None,
             coords: Mapping[str, Sequence] | None = None) -> xr.Dataset:
    """Evaluate every plan with the batched kernels of the default :class:`Evaluator`.

    Arguments as :meth:`Evaluator.evaluate`; ``catalog`` and ``profile`` default to the
    built-in catalog and no profile. Safe to call from several threads: calls take turns
    (see :class:`Evaluator`).
    """
    return default_evaluator().evaluate(plans, level, catalog=catalog, profile=profile,
                                        cost=cost, dtype=dtype, chunk_size=chunk_size,
                                        progress=progress, coords=coords)


def evaluating_worker(settings: dict) -> Callable:
    """A worker's handler: evaluate a request's plans with a single-process evaluator of
    ``settings``, noting progress as kernel chunks finish (at most every
    ``PROGRESS_EVERY`` seconds, the first at once)."""
    from xsweep.spec.plan_io import DeploymentPlan

    evaluator = Evaluator(processes=1, **settings)

    def handle(request: tuple, context: object, note: Callable) -> tuple[list[dict], dict]:
        plans, level, options = request
        if evaluator.shapes_known(level, options.get("dtype")):
            note("open")  # a warm kernel store: the others need not wait for this one
        last = [-PROGRESS_EVERY]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_EVERY:
                last[0] = now
                note("progress", done)

        messages = [DeploymentPlan.FromString(data) for data in plans]
        return evaluator.tables(messages, level, progress=progress, **options)

    return handle
