"""The program IR: one training iteration as a task DAG with network flows.

Both evaluators read this and nothing else: the exact event-driven simulator
(``xsweep.sim``) and the batched JAX kernels (``xsweep.kernels`` through
``xsweep.encode``). The IR is flat numpy arrays (CSR for the ragged parts), so
encoding it into padded device arrays is a gather, not a walk over objects.

Semantics (the contract both evaluators implement):

* Tasks are numbered in a topological order: every predecessor of task ``t``
  has a smaller index. A task becomes *ready* when all its predecessors have
  finished, and starts at that instant (there is no other queueing: the order
  of the tasks on one compute stream is already spelled out as dependencies).
* A COMPUTE task runs for ``duration_s``.
* A COMM task starts all its flows at once and finishes when the last of them
  finishes (a COMM task without flows finishes when it starts). A flow first
  waits ``latency_s`` (propagation and switching along its path, using no
  bandwidth), then transfers ``bytes`` as a fluid whose rate is the max-min
  fair share of the links on its path among all flows transferring at that
  moment, recomputed whenever a flow starts or stops transferring.
* Events at the same instant are all applied before rates are recomputed.
* The iteration time is the largest finish time of any task (time 0 is the
  start of the iteration).

A *stream* is the compute stream of one device group: all ranks of a
tensor-parallel group run in lockstep (Megatron), so the group is represented
once and its ranks share its timeline and per-rank metrics. A task with
``stream >= 0`` occupies that stream (compute, and TP collectives, which block
the stream); ``stream == -1`` marks communication that runs beside compute
(pipeline transfers, resharding, DP synchronisation) and barrier tasks.

A BARRIER task is a zero-duration COMPUTE task with ``stream == -1`` whose
predecessors are the last backward pieces of the replicas that synchronise
one DP group: its finish time is the moment the slowest replica arrives. The
metrics read it to split idle time into straggler wait and DP communication.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

import numpy as np


class TaskKind(IntEnum):
    COMPUTE = 0
    COMM = 1


class Category(IntEnum):
    """What a task is, for metrics and traces."""

    FORWARD = 0
    BACKWARD = 1
    OPTIMIZER = 2
    TP = 3
    PP = 4
    RESHARD = 5
    DP = 6
    BARRIER = 7
    #: TP traffic that runs beside the compute (``tp_comm_overlap``), off the stream; a
    #: zero-length TP task on the stream joins it with its compute
    TP_BESIDE = 8


class TaskRow(NamedTuple):
    """One task's fields, for code that writes tasks one at a time: given by name, the
    labels -1 (n/a) unless said. The fields of :class:`TaskColumns`, in its order."""

    kind: int  # TaskKind
    category: int  # Category
    stream: int = -1  # stream occupied, -1 none
    stage: int = -1  # pipeline stage
    micro_batch: int = -1
    device_group: int = -1  # device-group id (in a block: the block stream)
    replica: int = -1  # DP replica (in a block: the block stream)
    phase: int = -1  # step inside a collective or a resharding
    value: int = 0  # the duration: an index into a table of numbers (the lowering's
    # tables of value keys start with the constant 0, xsweep.plan.values.ZERO)


#: What each field of the record is in :class:`Program` (``task_<field>``); ``value``
#: becomes ``task_duration_s`` once the numbers are known.
_PROGRAM_DTYPES = {"kind": np.int8, "category": np.int8, "stream": np.int32,
                   "stage": np.int32, "micro_batch": np.int32, "device_group": np.int32,
                   "replica": np.int32, "phase": np.int32}


class TaskColumns(NamedTuple):
    """The record of tasks every step of the lowering writes and reads: one int64 array per
    field (those of :class:`TaskRow`), task ``t`` at index ``t`` of each.

    Named columns rather than a numpy structured array, measured here with numpy 2.4:
    placing a block rewrites three columns of a copy (9 us for 400 tasks, against 19 as
    the fields of a structured array), and the program joins its parts (37 us for 30
    parts of 13 tasks, against 220 to concatenate structured arrays).
    """

    kind: np.ndarray
    category: np.ndarray
    stream: np.ndarray
    stage: np.ndarray
    micro_batch: np.ndarray
    device_group: np.ndarray
    replica: np.ndarray
    phase: np.ndarray
    value: np.ndarray

    @classmethod
    def of_rows(cls, rows: Sequence[TaskRow]) -> TaskColumns:
        """The columns of tasks written one at a time."""
        table = np.array(rows, np.int64).reshape(-1, len(cls._fields))
        return cls(*table.T.copy())  # one contiguous row per field

    @classmethod
    def concat(cls, parts: Sequence[TaskColumns]) -> TaskColumns:
        """The tasks of ``parts``, one after another."""
        return cls(*(np.concatenate(column) for column in zip(*parts, strict=True)))

    @property
    def num_tasks(self) -> int:
        return len(self.kind)

    def program_fields(self) -> dict[str, np.ndarray]:
        """The task fields of :class:`Program` but the durations, in its dtypes."""
        return {f"task_{name}": getattr(self, name).astype(dtype)
                for name, dtype in _PROGRAM_DTYPES.items()}


assert TaskRow._fields == TaskColumns._fields and set(_PROGRAM_DTYPES) == {
    *TaskColumns._fields} - {"value"}


class FlowClasses(NamedTuple):
    """Flows that carry the same numbers (bytes, latency, path), and tasks whose flows fall
    into the same classes: what is computed per flow or per task from a program's numbers
    is computed once per class or per set."""

    flow: np.ndarray  # int64[C]: one flow of each class
    paths: np.ndarray  # int64[C, longest path]: the links of each class, L (none) after them
    task_set: np.ndarray  # int64[T]: the set of classes of each task, -1 without flows
    set_ptr: np.ndarray  # int64[S+1]: CSR into set_classes
    set_classes: np.ndarray  # int64[sum of set sizes]: the classes of each set


def padded_paths(path_ptr: np.ndarray, path_links: np.ndarray, num_links: int) -> np.ndarray:
    """int64[F, longest path]: the CSR paths as rows, ``num_links`` (no link) after each
    path; at least one column, so that code on the rows needs no case without flows."""
    lengths = np.diff(path_ptr)
    matrix = np.full((len(lengths), int(lengths.max(initial=1))), num_links, np.int64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    matrix[owner, np.arange(len(owner)) - path_ptr[:-1][owner]] = path_links
    return matrix


@dataclass(frozen=True, eq=False)
class Program:
    """One iteration of one deployment plan. All times in seconds, sizes in bytes.

    Shapes: ``T`` tasks, ``F`` flows, ``L`` links, ``S`` streams, ``R`` ranks.
    """

    # links
    link_capacity: np.ndarray  # float64[L], bytes/s
    link_latency_s: np.ndarray  # float64[L]
    link_names: Sequence[str]  # a tuple, or the topology's names made when first read
    # streams (one per device group) and ranks
    stream_device_group: np.ndarray  # int32[S], device-group id
    stream_rank_ptr: np.ndarray  # int32[S+1], CSR into stream_ranks
    stream_ranks: np.ndarray  # int32[sum tp], global ranks of each stream
    num_ranks: int
    rank_node: np.ndarray  # int32[R], node index of each global rank (traces group by node)
    # tasks
    task_kind: np.ndarray  # int8[T], TaskKind
    task_category: np.ndarray  # int8[T], Category
    task_stream: np.ndarray  # int32[T], stream occupied, -1 none
    task_duration_s: np.ndarray  # float64[T], COMPUTE only (0 for COMM)
    task_stage: np.ndarray  # int32[T], pipeline stage, -1 n/a
    task_micro_batch: np.ndarray  # int32[T], -1 n/a
    task_device_group: np.ndarray  # int32[T], device-group id, -1 n/a
    task_replica: np.ndarray  # int32[T], DP replica, -1 n/a
    task_phase: np.ndarray  # int32[T], step index inside a collective / resharding, -1 n/a
    dep_ptr: np.ndarray  # int32[T+1], CSR into dep_idx: predecessors of each task
    dep_idx: np.ndarray  # int32[E]
    flow_ptr: np.ndarray  # int32[T+1], flows of task t are flow_ptr[t]:flow_ptr[t+1]
    # flows
    flow_bytes: np.ndarray  # float64[F]
    flow_latency_s: np.ndarray  # float64[F]
    flow_src: np.ndarray  # int32[F], global rank
    flow_dst: np.ndarray  # int32[F], global rank
    path_ptr: np.ndarray  # int32[F+1], CSR into path_links
    path_links: np.ndarray  # int32[P], link ids, in path order
    # plan-level scalars used by the metrics
    tokens_per_iteration: float = 0.0
    model_flops_per_iteration: float = 0.0
    peak_flops_per_s: float = 0.0  # sum over the ranks in use
    task_names: tuple[str, ...] = field(default=())  # optional, for traces
    #: Programs with the same (non-None) ``structure`` share every field but the numbers
    #: (durations, bytes, latencies, capacities, the scalars): what is derived from the
    #: structure alone may be kept per structure. A structure has ``flow_classes``
    #: (:class:`FlowClasses`): flows of one class carry equal numbers in all its programs.
    structure: object = field(default=None, repr=False)

    @property
    def num_tasks(self) -> int:
        return int(self.task_kind.shape[0])

    @property
    def num_flows(self) -> int:
        return int(self.flow_bytes.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.link_capacity.shape[0])

    @property
    def num_streams(self) -> int:
        return int(self.stream_device_group.shape[0])

    def flow_classes(self) -> FlowClasses:
        """The structure's classes of flows; without a structure, each flow its own class."""
        if self.structure is not None:
            return self.structure.flow_classes
        has_flows = np.diff(self.flow_ptr) > 0
        task_set = np.full(self.num_tasks, -1, np.int64)
        task_set[has_flows] = np.arange(int(has_flows.sum()))
        return FlowClasses(np.arange(self.num_flows), padded_paths(
            self.path_ptr, self.path_links, self.num_links), task_set,
            np.append(self.flow_ptr[:-1][has_flows], self.num_flows).astype(np.int64),
            np.arange(self.num_flows))

    def deps(self, t: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[t] : self.dep_ptr[t + 1]]

    def flows(self, t: int) -> range:
        return range(int(self.flow_ptr[t]), int(self.flow_ptr[t + 1]))

    def path(self, f: int) -> np.ndarray:
        return self.path_links[self.path_ptr[f] : self.path_ptr[f + 1]]

    def ranks_of_stream(self, s: int) -> np.ndarray:
        return self.stream_ranks[self.stream_rank_ptr[s] : self.stream_rank_ptr[s + 1]]

    def check(self) -> None:
        """Assert the structural invariants of the IR (cheap; used by tests and builders)."""
        T, F, L = self.num_tasks, self.num_flows, self.num_links
        for name in ("task_category", "task_stream", "task_duration_s", "task_stage",
                     "task_micro_batch", "task_device_group", "task_replica", "task_phase"):
            assert getattr(self, name).shape == (T,), name
        assert self.dep_ptr.shape == (T + 1,) and self.flow_ptr.shape == (T + 1,)
        assert self.dep_ptr[0] == 0 and self.dep_ptr[-1] == self.dep_idx.shape[0]
        assert self.flow_ptr[0] == 0 and self.flow_ptr[-1] == F
        assert np.all(np.diff(self.dep_ptr) >= 0) and np.all(np.diff(self.flow_ptr) >= 0)
        owner = np.repeat(np.arange(T), np.diff(self.dep_ptr))
        assert np.all(self.dep_idx < owner), "dependencies must point to earlier tasks"
        assert np.all(self.dep_idx >= 0)
        compute = self.task_kind == TaskKind.COMPUTE
        assert np.all(self.flow_ptr[1:][compute] == self.flow_ptr[:-1][compute])
        assert np.all(self.task_duration_s >= 0) and np.all(self.task_duration_s[~compute] == 0)
        assert self.path_ptr.shape == (F + 1,) and self.path_ptr[-1] == self.path_links.shape[0]
        assert np.all((self.path_links >= 0) & (self.path_links < L))
        assert np.all(np.diff(self.path_ptr) >= 1), "every flow crosses at least one link"
        assert np.all(self.flow_bytes >= 0) and np.all(self.flow_latency_s >= 0)
        assert np.all(self.link_capacity > 0) and len(self.link_names) == L
        assert np.all(self.task_stream < self.num_streams)
        assert self.rank_node.shape == (self.num_ranks,)
        assert np.all((self.stream_ranks >= 0) & (self.stream_ranks < self.num_ranks))


class ProgramBuilder:
    """Appends tasks and flows, then freezes them into a :class:`Program`.

    Tasks must be added after their predecessors (ids are returned by ``add_*``).
    """

    def __init__(self, link_capacity, link_latency_s, link_names, rank_node):
        self._links = (np.asarray(link_capacity, float), np.asarray(link_latency_s, float),
                       tuple(link_names))
        self._rank_node = np.asarray(rank_node, np.int32)
        self.num_ranks = int(self._rank_node.shape[0])
        self._streams: list[tuple[int, tuple[int, ...]]] = []
        self._tasks: list[TaskRow] = []  # task t's value: t, its index in _durations
        self._durations: list[float] = []
        self._deps: list[tuple[int, ...]] = []
        self._names: list[str] = []
        self._flows: list[tuple[int, int, int, float, float, tuple[int, ...]]] = []

    def add_stream(self, device_group: int, ranks) -> int:
        self._streams.append((int(device_group), tuple(int(r) for r in ranks)))
        return len(self._streams) - 1

    def _add(self, kind, category, stream, duration, deps, labels: dict, name) -> int:
        t = len(self._tasks)
        deps = tuple(sorted({int(d) for d in deps}))
        assert all(0 <= d < t for d in deps), "predecessors must exist before their successor"
        self._tasks.append(TaskRow(kind=kind, category=category, stream=stream, value=t,
                                   **labels))
        self._durations.append(float(duration))
        self._deps.append(deps)
        self._names.append(name)
        return t

    def add_compute(self, category, stream, duration_s, deps=(), *, name="", **labels) -> int:
        """``labels``: ``stage``, ``micro_batch``, ``device_group``, ``replica``, ``phase``
        (fields of :class:`TaskRow`; -1 unless given)."""
        return self._add(TaskKind.COMPUTE, category, stream, duration_s, deps, labels, name)

    def add_comm(self, category, flows, deps=(), *, stream=-1, name="", **labels) -> int:
        """``flows``: iterable of (src_rank, dst_rank, bytes, latency_s, path_link_ids);
        ``labels`` as :meth:`add_compute`'s."""
        t = self._add(TaskKind.COMM, category, stream, 0.0, deps, labels, name)
        for src, dst, nbytes, latency, path in flows:
            self._flows.append((t, int(src), int(dst), float(nbytes), float(latency),
                                tuple(int(x) for x in path)))
        return t

    def build(self, *, tokens_per_iteration=0.0, model_flops_per_iteration=0.0,
              peak_flops_per_s=0.0) -> Program:
        T = len(self._tasks)
        tasks = TaskColumns.of_rows(self._tasks)
        dep_counts = [len(d) for d in self._deps]
        flow_counts = np.bincount([f[0] for f in self._flows], minlength=T) if T else np.zeros(0)
        ptr = lambda counts: np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)  # noqa: E731
        paths = [f[5] for f in self._flows]
        stream_ranks = [s[1] for s in self._streams]
        program = Program(
            link_capacity=self._links[0], link_latency_s=self._links[1], link_names=self._links[2],
            stream_device_group=np.array([s[0] for s in self._streams], np.int32),
            stream_rank_ptr=ptr([len(r) for r in stream_ranks]),
            stream_ranks=np.array([r for rs in stream_ranks for r in rs], np.int32),
            num_ranks=self.num_ranks, rank_node=self._rank_node,
            task_duration_s=np.array(self._durations, float)[tasks.value],
            **tasks.program_fields(),
            dep_ptr=ptr(dep_counts),
            dep_idx=np.array([d for ds in self._deps for d in ds], np.int32),
            flow_ptr=ptr(flow_counts),
            flow_bytes=np.array([f[3] for f in self._flows], float),
            flow_latency_s=np.array([f[4] for f in self._flows], float),
            flow_src=np.array([f[1] for f in self._flows], np.int32),
            flow_dst=np.array([f[2] for f in self._flows], np.int32),
            path_ptr=ptr([len(p) for p in paths]),
            path_links=np.array([x for p in paths for x in p], np.int32),
            tokens_per_iteration=float(tokens_per_iteration),
            model_flops_per_iteration=float(model_flops_per_iteration),
            peak_flops_per_s=float(peak_flops_per_s),
            task_names=tuple(self._names),
        )
        return program
