"""A pool of worker processes (see the package's description for the rules it keeps)."""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator

from xsweep.errors import XsweepError
from xsweep.workers.forked import Forked, fork_safe
from xsweep.workers.pipes import WorkerError, encode, receive, send, stop, widen, write

#: Seconds the caller waits for news from the workers before it checks that the pool's
#: threads still live (a thread always reports how it ended; this is the safety net).
POLL_S = 0.5
#: Bytes a request sent ahead of a worker's answer may take (``Pool.run``'s ``ahead``): a
#: worker reads it only after writing its answer, so it must fit in the request pipe
#: (64 KB on Linux by default) while the worker writes; a larger one waits its turn.
AHEAD_BYTES = 16 * 2**10
#: Characters of a failure's own text kept in the one-line message.
_MAX_REASON = 300
_NO_CONTEXT = object()
#: What a worker's environment sets: workers prepare plans on the CPU (an accelerator is
#: its one owner's, the caller's).
_WORKER_ENV = {"XSWEEP_CPU_DEVICES": "1", "JAX_PLATFORMS": "cpu"}


class PoolBusy(XsweepError, RuntimeError):
    """A pool was asked to serve a call while it served another (from another thread)."""


class Pool:
    """``processes`` worker processes, started on first use, each with the handler
    ``factory(settings)`` (``factory`` must be importable: it travels by name).

    Args:
      pin: give each worker a core of its own once all of them run (a worker that moves
        between cores, or whose compiled code spreads threads over its neighbour's core,
        runs 5-10% slower: measured on the evaluator's workers).
      fork: start the workers by forking this process where that is safe
        (:mod:`xsweep.workers.forked`): they have its modules at once (the glibc heap
        setting below then does not apply); elsewhere they start anew.
    """

    def __init__(self, processes: int, factory: Callable, settings: object = None, *,
                 pin: bool = False, fork: bool = False):
        if processes < 1:
            raise ValueError(f"a pool needs at least one process (got {processes})")
        self.processes = processes
        self._setup = ("setup", factory, settings)
        self._pin_cores = pin
        self._fork = fork
        self._workers: list[subprocess.Popen] = []
        self._contexts: list[object] = []  # per worker: the context it holds
        self._pinned = False
        self._busy = threading.Lock()
        self._pin_lock = threading.Lock()

    @property
    def started(self) -> bool:
        return bool(self._workers)

    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        return [worker.pid for worker in self._workers]

    def _start(self) -> None:
        env = dict(os.environ, **_WORKER_ENV)
        # glibc makes a heap per thread that allocates (XLA's threads do), each holding
        # freed memory of its own: two keep a worker's memory lower (about 5%, measured on
        # the sweep of the large space) at no measured cost in time
        env.setdefault("MALLOC_ARENA_MAX", "2")
        self._pinned = False
        fork = self._fork and fork_safe()
        for _ in range(self.processes):
            self._workers.append(
                Forked(_WORKER_ENV) if fork else
                subprocess.Popen([sys.executable, "-m", "xsweep.workers.serve"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env))
            self._contexts.append(_NO_CONTEXT)
            widen(self._workers[-1].stdout)
        try:
            for worker in self._workers:
                send(worker.stdin, self._setup)
        except Exception as error:  # a setup that cannot travel, or a worker already dead
            self.close(kill=True)
            raise WorkerError(f"could not start the worker processes: {_describe(error)}") \
                from None

    def _pin(self) -> None:
        """One core each, once all workers run (see ``pin``); not before: a worker alone,
        compiling a first request, may use every core."""
        with self._pin_lock:
            if self._pinned or not self._pin_cores or not hasattr(os, "sched_setaffinity"):
                return
            self._pinned = True
            cores = sorted(os.sched_getaffinity(0))
            if len(cores) >= len(self._workers):
                for core, worker in zip(cores, self._workers, strict=False):
                    with contextlib.suppress(OSError):  # it ended meanwhile: nothing to pin
                        os.sched_setaffinity(worker.pid, {core})

    def run(self, requests: Iterable, *, context: object = _NO_CONTEXT,
            on_note: Callable[[int, str, object], None] | None = None,
            first_alone: bool = False,
            local: Callable[[object], object] | None = None,
            ahead: int = 1) -> Iterator[tuple[int, object]]:
        """Hand each request to whichever worker is free; yield ``(index, answer)`` (the
        request's place in ``requests``) in the order answers come back.

        Args:
          requests: read here one at a time while the workers already work on the ones
            before (a generator that validates plans, say); an error it raises stops the
            workers and is raised.
          context: sent to each worker once, before its first request of this call, and
            passed to the handler with every request (kept by a worker from call to
            call while it is the same object).
          on_note: called here, in the caller's thread, with ``(index, kind, payload)``
            for each note a handler sends while it works on request ``index``.
          first_alone: on the pool's first call, the other workers start only once the
            first has answered, or has sent the note ``"open"`` (what it compiles, the
            others then load instead of compiling it too).
          local: the caller's thread works too: while requests wait for a free worker
            (the workers starting, say), it takes the next one and answers it with
            ``local(request)`` itself, between passing on the workers' answers.
          ahead: requests a worker holds at once, the one it works on included: with 2,
            its next request waits in its input while it works, so it never waits for
            this process (whose thread that passes requests on needs the interpreter's
            lock, which a busy caller holds) between requests; the others may then wait
            for it at the end. A request over :data:`AHEAD_BYTES` is not sent ahead.

        Raises:
          WorkerError: a request or context could not be sent, a worker answered with a
            traceback, died, or a thread of the pool ended: at once, with every worker
            stopped (the next call starts new ones).
          PoolBusy: another thread's call is being served.
        """
        if not self._busy.acquire(blocking=False):
            raise PoolBusy("this worker pool is serving a call from another thread; calls "
                           "take turns (or use a pool per thread)")
        try:
            yield from self._run(requests, context, on_note, first_alone, local, ahead)
        finally:
            self._busy.release()

    def _run(self, requests: Iterable, context: object, on_note, first_alone: bool,
             local: Callable[[object], object] | None, ahead: int):
        first_call = not self._workers
        if first_call:
            self._start()
        todo: queue.Queue = queue.Queue()
        events: queue.Queue = queue.Queue()
        gate = threading.Event()
        if not (first_call and first_alone):
            self._pin()
            gate.set()

        def open_gate() -> None:
            if not gate.is_set():
                self._pin()
                gate.set()

        threads = [threading.Thread(target=self._serve, daemon=True,
                                    args=(slot, todo, events, gate, open_gate, context,
                                          max(1, ahead)))
                   for slot in range(len(self._workers))]
        for thread in threads:
            thread.start()
        sent, answered = 0, 0

        def take(block: bool) -> Iterator[tuple[int, object]]:
            nonlocal answered
            while True:
                try:
                    kind, index, *rest = events.get(block=block, timeout=POLL_S)
                except queue.Empty:
                    if not block:
                        return
                    if not any(thread.is_alive() for thread in threads):
                        raise WorkerError("the worker pool's threads ended with "
                                          f"{sent - answered} requests unanswered") from None
                    continue
                if kind == "note":
                    if on_note is not None:
                        on_note(index, *rest)
                    continue
                status, value = rest[0]
                if status != "ok":
                    raise WorkerError.from_traceback(value) if status == "error" \
                        else WorkerError(value)
                answered += 1
                yield index, value
                return

        try:
            for request in requests:
                todo.put((sent, request))
                sent += 1
                yield from take(block=False)
            for _ in threads:
                todo.put(None)
            while answered < sent:
                if local is None:
                    yield from take(block=True)
                    continue
                yield from take(block=False)
                try:
                    item = todo.get_nowait()  # the requests left, then a stop per thread
                except queue.Empty:  # the threads took all: the workers answer the rest
                    local = None
                    continue
                if item is None:  # every request taken: put back the thread's stop
                    todo.put(None)
                    local = None
                    continue
                index, request = item
                value = local(request)
                answered += 1
                yield index, value
        except BaseException:  # an error, Ctrl-C, or the caller stopped early
            with contextlib.suppress(queue.Empty):
                while True:  # no request left for the threads: they take their stop next
                    todo.get_nowait()
            for _ in threads:
                todo.put(None)
            gate.set()
            self.close(kill=True)
            for thread in threads:
                thread.join()
            raise
        for thread in threads:
            thread.join()

    def close(self, kill: bool = False) -> None:
        """Stop the workers: at once with ``kill``, else once they finish their request
        (their input closes, so they end). The next call starts new ones."""
        stop(self._workers, kill)
        self._workers, self._contexts = [], []

    def _serve(self, slot: int, todo: queue.Queue, events: queue.Queue, gate: threading.Event,
               open_gate: Callable[[], None], context: object, ahead: int = 1) -> None:
        """One worker's side of a call, on a thread of its own: every way it can end is
        put on ``events``, so the caller never waits for an answer that cannot come. Up
        to ``ahead`` requests are sent before the first of them is answered; a request
        sent ahead must fit in the pipe (:data:`AHEAD_BYTES`), since the worker reads it
        only once it has written its answer: a larger one waits here until then."""
        worker = self._workers[slot]
        index = -1
        sent: collections.deque[int] = collections.deque()  # sent, not yet answered
        held: tuple[int, bytes] | None = None  # taken ahead, too large to send ahead
        try:
            if slot:
                gate.wait()
            taking = True
            while True:
                if held is not None and not sent:
                    index, data = held
                    held = None
                    sent.append(index)
                    _send(worker, data, f"request {index}")
                while taking and held is None and len(sent) < ahead:
                    try:  # wait for a request only when the worker has none
                        item = todo.get(block=not sent)
                    except queue.Empty:
                        break
                    if item is None:  # this thread's stop: the requests sent come first
                        taking = False
                        break
                    index, request = item
                    if context is not _NO_CONTEXT and self._contexts[slot] is not context:
                        _send(worker, _encoded(("context", context), "the call's context"),
                              "the call's context")
                        self._contexts[slot] = context
                    data = _encoded(("call", request), f"request {index}")
                    if sent and len(data) > AHEAD_BYTES:
                        held = (index, data)
                        break
                    sent.append(index)
                    _send(worker, data, f"request {index}")
                if not sent:
                    return
                index = sent.popleft()
                try:
                    while (answer := _receive(worker))[0] == "note":
                        if answer[1] == "open":
                            open_gate()
                        else:
                            events.put(("note", index, answer[1], answer[2]))
                finally:
                    open_gate()  # an answer, or a failure: the others need not wait
                events.put(("answer", index, answer))
                if answer[0] != "ok":
                    return
        except BaseException as error:  # noqa: BLE001 - whatever it is, the caller hears of it
            events.put(("answer", index, ("failed", _describe(error))))


def _encoded(message: object, what: str) -> bytes:
    try:
        return encode(message)
    except Exception as error:  # pickling: nothing was written, the worker is intact
        raise WorkerError(f"{what} could not be sent to a worker process: "
                          f"{_describe(error)}") from error


def _send(worker: subprocess.Popen, data: bytes, what: str) -> None:
    try:
        write(worker.stdin, data)
    except OSError as error:
        raise WorkerError(f"a worker process ended ({_exit_status(worker)}) before it took "
                          f"{what}") from error


def _receive(worker: subprocess.Popen) -> tuple:
    try:
        return receive(worker.stdout)
    except (EOFError, OSError, ValueError) as error:  # ValueError: a stream closed by us
        raise WorkerError(f"a worker process ended unexpectedly ({_exit_status(worker)})") \
            from error


def _exit_status(worker: subprocess.Popen) -> str:
    try:
        code = worker.wait(timeout=2)
    except subprocess.TimeoutExpired:
        return "still running, its output closed"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _describe(error: BaseException) -> str:
    if isinstance(error, WorkerError):
        return str(error)
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."
