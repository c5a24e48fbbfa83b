"""Worker processes of this machine: the one layer that every parallel part of xsweep
uses (the evaluator's per-core workers, the sweep's unit workers).

A :class:`Pool` starts ``python -m xsweep.workers.serve`` processes and hands them
requests; each worker builds its handler once from an importable factory and answers
request after request, keeping what the handler keeps (program structures, compiled
kernels) between them. One protocol (:mod:`xsweep.workers.pipes`), one home for
Ctrl-C and for failures:

- **Nothing waits in silence.** Whatever goes wrong on the way to or from a worker (a
  request that cannot be pickled, a worker that dies or answers with a traceback, a
  thread of the pool that ends) reaches the caller as a :class:`WorkerError` within a
  second, and the pool stops its workers.
- **Ctrl-C is the caller's.** Workers ignore SIGINT; the caller's KeyboardInterrupt stops
  them.
- **Accelerators stay with the caller.** Workers run JAX on the CPU only
  (``JAX_PLATFORMS=cpu``), one device each: on a GPU host they never open the GPU or take
  its memory.
- **One call at a time.** A pool serves one :meth:`Pool.run` at a time; a second one
  started while the first runs, from another thread, raises :class:`PoolBusy` instead
  of mixing the two calls' answers. Callers that may be called from several threads
  (:class:`xsweep.evaluator.Evaluator`) take turns under a lock of their own.
"""

from xsweep.workers.pipes import WorkerError
from xsweep.workers.pool import Pool, PoolBusy

__all__ = ["Pool", "PoolBusy", "WorkerError"]
