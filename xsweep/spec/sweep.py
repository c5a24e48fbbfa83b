"""Sweep definitions (YAML, pydantic): the design space of one study.

Every knob typed ``Axis`` accepts a scalar or a list; a scalar is a single-value
axis. Integer knobs (:func:`int_axis`) also accept a range ``{low, high, step}``: every
``low + k x step`` up to ``high`` inclusive, which a grid expands and a search samples
as an ordered integer. ``Sweep.axes()`` lists the axes' values under dotted paths such
as ``cluster.pools[0].nodes`` or ``parallelism.tp.H100``; ``Sweep.domains()`` keeps the
ranges as ranges.

Each axis field declares its class (:class:`AxisClass`: ``LAYOUT``, ``NUMERIC`` or
``PER_POINT``) in its annotation, which is how the planner tells the axes that shape a
plan's layout from those it writes into a layout's plan point by point
(:func:`axis_class`, :meth:`Sweep.axis_classes`).
"""

from __future__ import annotations

import enum
import functools
import math
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
)

from xsweep.errors import InputError, did_you_mean
from xsweep.metrics import directions, objective_name, unknown_objective
from xsweep.spec import ranges
from xsweep.spec.catalog import Catalog, entry_key, load_catalog, repeated_entry
from xsweep.spec.enums import (
    FABRIC,
    MOE_DISPATCHER,
    PRECISION,
    RECOMPUTE,
    RESHARDING,
    SCHEDULE,
)
from xsweep.spec.reader import parse_yaml, read_yaml_file

T = TypeVar("T")


class _AxisMarker:
    """Metadata tag: the annotated field is a swept axis."""


_AXIS = _AxisMarker()


class AxisClass(enum.Enum):
    """What an axis changes in a point's plan, declared on its field (``Annotated`` metadata):
    the planner builds a layout once per value of the axes that are not ``PER_POINT``
    (its cache key) and writes the ``PER_POINT`` ones into the layout's plan per point,
    and the bound phase walks the ``PER_POINT`` and ``NUMERIC`` axes fastest."""

    #: shapes the plan: the model, batch, parallelism, pools, schedule, ZeRO, interleaving
    LAYOUT = "layout"
    #: a layout axis that changes only the numbers of a program (durations and memory, not
    #: its tasks) in the sweeps measured: plans that differ in these alone mostly share a
    #: program structure, so the bound phase visits them side by side
    NUMERIC = "numeric"
    #: changes neither the layout nor any stage's speed or memory (gradient buckets and
    #: their overlap only change when gradients move): NICs, resharding scheme, fabric,
    #: pricing, DP overlap and buckets
    PER_POINT = "per_point"


LAYOUT, NUMERIC, PER_POINT = AxisClass.LAYOUT, AxisClass.NUMERIC, AxisClass.PER_POINT


class _WorkMarker:
    """Metadata tag: the annotated axis changes the work of one iteration (the model's
    FLOPs and sequence length per token, the tokens per iteration), so the points of two
    of its values answer two questions: a sweep compares plans within one value of its
    work axes (:attr:`Sweep.fronts`)."""

    def __repr__(self) -> str:
        return "WORK"


#: Tags the axes that change the work per iteration (:meth:`Sweep.work_axes`).
WORK = _WorkMarker()


def _as_list(value: object) -> object:
    return value if isinstance(value, list) else [value]


def _unique(values: list) -> list:
    if len(set(map(repr, values))) != len(values):
        raise ValueError("values of an axis must be distinct")
    return values


Axis = Annotated[list[T], BeforeValidator(_as_list), Field(min_length=1), AfterValidator(_unique),
                 _AXIS]

#: Most values a range may hold: a grid expands it into a list of this many values.
MAX_RANGE_VALUES = 1_000_000


class IntRange(BaseModel, Generic[T]):
    """The integers ``low, low + step, ...`` up to ``high`` inclusive (``high - low`` a
    multiple of ``step``); ``low`` and ``high`` obey the axis's own bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: T
    high: T
    step: Annotated[int, Field(gt=0, strict=True)] = 1

    def model_post_init(self, context: Any) -> None:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        if (self.high - self.low) % self.step:
            raise ValueError(f"high - low ({self.high - self.low}) is not a multiple of "
                             f"step ({self.step})")
        if len(self) > MAX_RANGE_VALUES:
            raise ValueError(f"holds {len(self):,} values; at most {MAX_RANGE_VALUES:,}")

    def __len__(self) -> int:
        return (self.high - self.low) // self.step + 1

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))

    def __reduce__(self):
        # A parametrized class (``IntRange[...]``) is made at run time and cannot be
        # found by name, as pickle looks classes up: it travels as its place among the
        # classes this module makes at import, the same in every process of one version.
        return _rebuild_range, (_RANGE_CLASSES.index(type(self)), self.low, self.high,
                                self.step)


#: The parametrized range classes, in the order :func:`int_axis` made them.
_RANGE_CLASSES: list[type] = []


def _rebuild_range(index: int, low: int, high: int, step: int) -> IntRange:
    return _RANGE_CLASSES[index](low=low, high=high, step=step)


def _range_or_list(value: object) -> str:
    return "[range]" if isinstance(value, dict | IntRange) else "[list]"


def int_axis(element: Any) -> Any:
    """An integer axis of ``element`` values: a scalar, a list, or a range mapping. (A
    function rather than a generic alias: the element's bounds must reach the range.)
    The branch tags are bracketed so that error locations skip them (see _loc_path)."""
    kind = IntRange[element]
    if kind not in _RANGE_CLASSES:
        _RANGE_CLASSES.append(kind)
    return Annotated[
        Annotated[kind, Tag("[range]")] | Annotated[Axis[element], Tag("[list]")],
        Discriminator(_range_or_list), _AXIS]


# Counts bounded like the plan fields they become (xsweep.spec.ranges, xsweep.spec.limits).
GlobalBatch = Annotated[int, Field(gt=0, le=ranges.PLAN["training.global_batch_size"].high,
                                   strict=True)]
NodeCount = Annotated[int, Field(ge=0, le=ranges.MAX_NODES, strict=True)]
GpusPerNode = Annotated[int, Field(gt=0, le=ranges.MAX_NODES, strict=True)]
TpDegree = Annotated[int, Field(gt=0, le=ranges.MAX_HEADS, strict=True)]
StageCount = Annotated[int, Field(gt=0, le=ranges.MAX_LAYERS, strict=True)]
CpDegree = Annotated[int, Field(gt=0, le=1024, strict=True)]
MicroBatchSize = Annotated[int, Field(gt=0, le=ranges.MAX_MICRO_BATCH_SIZE, strict=True)]
ExpertParallel = Annotated[int, Field(gt=0, le=ranges.PLAN["training.expert_parallel"].high,
                                      strict=True)]

# Objective names accepted in a sweep: every plan-level figure of the metrics table that
# has a direction, or a short form of one (xsweep.metrics.OBJECTIVE_SHORT_FORMS), in any case.
OBJECTIVE_DIRECTIONS = directions()


def _objective(value: object) -> str:
    """The metric an objective names; an unknown name is refused with the close names and
    the list of objectives (or where it is documented)."""
    from pydantic_core import PydanticCustomError

    name = objective_name(value)
    if name is None:
        raise PydanticCustomError("objective", "{reason}", {"reason": unknown_objective(value)})
    return name


Objective = Annotated[Literal[tuple(OBJECTIVE_DIRECTIONS)], BeforeValidator(_objective)]


def _lower(value: object) -> object:
    """A name of a fixed set, matched in any case as the catalog's names are (``GPipe`` is
    ``gpipe``); anything else is left for the type to refuse."""
    return value.lower() if isinstance(value, str) else value


def Choice(*names: str) -> Any:  # noqa: N802 (a type, spelled as one)
    """One of ``names`` (lower case), matched in any case."""
    return Annotated[Literal[names], BeforeValidator(_lower)]


def _integer_stage(value: object) -> object:
    """Only an int names a ZeRO stage: ``true`` and ``1.0`` equal 1 in Python, and a
    literal type takes them, even in strict mode."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("a ZeRO stage is an integer: 0, 1 or 3")
    return value


ZeroStage = Annotated[Literal[0, 1, 3], BeforeValidator(_integer_stage)]


class _Strict(BaseModel):
    # NaN and infinities are refused everywhere: no bound would catch them all.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False, strict=True)  # no "2" for 2, no 1 for true


class Training(_Strict):
    """Training settings; the stack options default to Megatron-LM's common recipe."""

    global_batch_size: Annotated[int_axis(GlobalBatch), LAYOUT, WORK]
    schedule: Annotated[Axis[Choice(*SCHEDULE.known())], LAYOUT] = [SCHEDULE.default]
    resharding: Annotated[Axis[Choice(*RESHARDING.known())], PER_POINT] = [RESHARDING.default]
    recompute: Annotated[Axis[Choice(*RECOMPUTE.known())], NUMERIC] = [RECOMPUTE.default]
    sequence_parallel: Annotated[Axis[bool], NUMERIC] = [True]
    flash_attention: Annotated[Axis[bool], NUMERIC] = [True]
    virtual_pipeline_stages: Annotated[int_axis(StageCount), LAYOUT] = [1]
    dp_overlap: Annotated[Axis[bool], PER_POINT] = [False]
    dp_bucket_params: Annotated[int_axis(Annotated[int, Field(ge=0, le=1e15, strict=True)]),
                                PER_POINT] = [0]
    # 0 above: max(40M, 1M x DP) parameters per bucket, as Megatron-LM
    zero_stage: Annotated[Axis[ZeroStage], LAYOUT] = [0]  # 1: distributed optimizer; 3: FSDP
    # fp8: the blocks' GEMMs in FP8 (Transformer Engine); a pool without FP8 tensor cores
    # makes the point infeasible
    precision: Annotated[Axis[Choice(*PRECISION.known())], NUMERIC] = [PRECISION.default]
    # TP communication beside the GEMMs (Transformer Engine's userbuffers); needs
    # sequence_parallel (a point without it is infeasible), no effect at TP 1
    tp_comm_overlap: Annotated[Axis[bool], LAYOUT] = [False]
    # pipeline sends beside the compute (true) or waited for by the sending stage (false):
    # only the waits change, so per point
    pp_p2p_overlap: Annotated[Axis[bool], PER_POINT] = [True]
    # how MoE tokens cross nodes: alltoall (every rank straight to every rank of its EP
    # group) or deepep (once per node, passed on over NVLink); only the all-to-alls' flows
    # change, so per point; deepep over an EP group spread unevenly over its nodes is
    # infeasible
    moe_dispatcher: Annotated[Axis[Choice(*MOE_DISPATCHER.known())], PER_POINT] = [
        MOE_DISPATCHER.default]
    # MoE tokens dispatched in FP8 (the combines stay BF16): only the all-to-alls' bytes
    # change, so per point; needs fp8 (a point without it is infeasible), unused at ep 1
    moe_fp8_dispatch: Annotated[Axis[bool], PER_POINT] = [False]
    # FP8 parameter all-gathers and FP8 weights (memory); needs fp8 and zero_stage 1 or 3
    # (a point without them is infeasible)
    fp8_param_gather: Annotated[Axis[bool], LAYOUT] = [False]
    # software profiles (catalog section software): factors on the GPUs' compute rates
    # for what a framework and its version achieve
    software: Annotated[Axis[Annotated[str, Field(min_length=1)]], NUMERIC] = ["reference"]
    total_tokens: Annotated[float, Field(gt=0, le=ranges.PLAN["training.total_tokens"].high)] \
        | None = None  # whole run, for cost per run
    # mixture of experts: the assumed load of the busiest expert over the mean (not an axis;
    # absent: 1.0, tokens spread evenly)
    moe_imbalance: Annotated[float, Field(ge=1, le=ranges.PLAN["training.moe_imbalance"].high)] \
        | None = None


class Pool(_Strict):
    gpu: Annotated[str, Field(min_length=1)]
    nodes: Annotated[int_axis(NodeCount), LAYOUT]
    gpus_per_node: Annotated[int_axis(GpusPerNode), LAYOUT] = [8]
    # Absent (None): the GPU's default NIC; not an axis then.
    nic: Annotated[Axis[Annotated[str, Field(min_length=1)]],  # type: ignore[assignment]
                   PER_POINT] = None


class Cluster(_Strict):
    fabric: Annotated[Axis[Choice(*FABRIC.known())], PER_POINT] = [FABRIC.default]
    oversubscription: Annotated[Axis[Annotated[float, Field(
        ge=1, le=ranges.PLAN["fabric.oversubscription"].high)]], PER_POINT] = [1.0]
    nodes_per_rack: Annotated[int, Field(gt=0, le=ranges.PLAN["fabric.nodes_per_rack"].high,
                                         strict=True)] = 4
    pools: Annotated[list[Pool], Field(min_length=1)]


class Parallelism(_Strict):
    tp: Annotated[dict[str, int_axis(TpDegree)], LAYOUT]  # per pool, keyed by the pool's gpu
    pp: Annotated[int_axis(StageCount), LAYOUT] = [1]
    # context parallelism (Megatron-LM --context-parallel-size), one for every pool: each
    # device group is tp x cp GPUs of one node, TP fastest
    cp: Annotated[int_axis(CpDegree), LAYOUT] = [1]
    micro_batch_size: Annotated[int_axis(MicroBatchSize), LAYOUT] = [1]
    pipeline_mix: Annotated[Axis[Choice("separate", "mixed")], LAYOUT] = ["separate"]
    layer_split: Annotated[Axis[Choice("proportional", "even")], LAYOUT] = ["proportional"]
    # expert parallelism (models with experts): the routed experts split over this many
    # ranks of each TP group, so experts per GPU = experts / ep; it must divide every
    # pool's TP degree and the experts (else the point is infeasible). Absent: not an
    # axis, EP 1.
    ep: Annotated[int_axis(ExpertParallel) | None, LAYOUT, _AXIS] = None


def _cost_field(name: str) -> Any:
    bounds = ranges.COST[name]
    return Annotated[float, Field(ge=bounds.low, le=bounds.high)]


AmortizationYears = _cost_field("amortization_years")
ElectricityPrice = _cost_field("electricity_usd_per_kwh")
Pue = _cost_field("pue")


class Cost(_Strict):
    pricing: Annotated[Axis[Choice(*ranges.PRICING)], PER_POINT] = ["capex"]
    amortization_years: AmortizationYears = 4.0
    electricity_usd_per_kwh: ElectricityPrice = 0.10
    pue: Pue = 1.3


class Search(_Strict):
    sampler: Choice("grid", "random", "tpe", "nsga2") = "grid"
    trials: Annotated[int, Field(gt=0, le=10**9, strict=True)] = 1000
    batch: Annotated[int, Field(gt=0, le=2**20, strict=True)] = 256
    seed: Annotated[int, Field(ge=0, le=2**32 - 1, strict=True)] = 0  # numpy seeds are 32-bit


class Constraints(_Strict):
    """Limits a searched plan must meet (``xsweep optimize`` tells the sampler how far a
    trial is from meeting them)."""

    # A deadline: the whole run (training.total_tokens) must finish within this many days.
    training_days_max: Annotated[float, Field(gt=0, le=1e6)] | None = None


class Validation(_Strict):
    top: Annotated[int, Field(ge=0, le=10**6, strict=True)] = 5
    tolerance: Annotated[float, Field(gt=0, le=1e6)] = 0.05


#: The values of a sweep's ``fronts``: a front per value of the work axes, or one front.
FRONTS = ("per_work", "across")


class Sweep(_Strict):
    """One design space: model, training, cluster pools, parallelism, cost, search."""

    # A folder name (results/<name>): see name_problem (defined below, hence the lambda).
    name: Annotated[str, AfterValidator(lambda name: _valid_name(name))]
    model: Annotated[Axis[Annotated[str, Field(min_length=1)]], LAYOUT, WORK]
    training: Training
    cluster: Cluster
    parallelism: Parallelism
    cost: Cost = Cost()
    objectives: Annotated[list[Objective], Field(min_length=1)] = ["iteration_time_s"]
    # per_work: one Pareto front (and exact funnel, and top points) per value of the swept
    # work axes; across: one front over every point, whatever work it does
    fronts: Choice(*FRONTS) = "per_work"
    constraints: Constraints = Constraints()
    search: Search = Search()
    validation: Validation = Field(default=Validation(), alias="validate")

    def domains(self) -> dict[str, list | IntRange]:
        """Every axis (single-value ones included) by dotted path, in schema order: its
        list of values, or its range."""
        found: dict[str, list | IntRange] = {}
        _collect_axes(self, "", found)
        return found

    def axes(self) -> dict[str, list]:
        """Every axis by dotted path, in schema order, with its values (ranges expanded)."""
        return {path: _values(domain) for path, domain in self.domains().items()}

    def grid_size(self) -> int:
        """Number of points in the full grid over all axes."""
        return math.prod(len(domain) for domain in self.domains().values())

    def work_axes(self) -> tuple[str, ...]:
        """The swept axes (more than one value) that change the work of an iteration,
        in schema order: those a front is drawn per value of (none when ``fronts`` is
        ``across``). Which axes do is declared on their fields (:data:`WORK`): the model
        and the global batch size (the sequence length is the model's)."""
        if self.fronts == "across":
            return ()
        return tuple(path for path, domain in self.domains().items()
                     if len(domain) > 1 and changes_work(path))

    def axis_classes(self) -> dict[str, AxisClass]:
        """Every axis by dotted path, in schema order, with its declared class."""
        return {path: axis_class(path) for path in self.domains()}


def _values(domain: list | IntRange) -> list:
    return domain.values() if isinstance(domain, IntRange) else list(domain)


def _collect_axes(model: BaseModel, prefix: str, found: dict[str, list | IntRange]) -> None:
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        path = f"{prefix}{info.alias or name}"
        if value is None:
            continue
        if _AXIS in info.metadata:
            found[path] = value
        elif isinstance(value, BaseModel):
            _collect_axes(value, f"{path}.", found)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            for index, item in enumerate(value):
                _collect_axes(item, f"{path}[{index}].", found)
        elif isinstance(value, dict):
            found.update({f"{path}.{key}": domain for key, domain in value.items()})


_SEGMENT = re.compile(r"([^.\[]+)(?:\[(\d+)\])?")


@functools.lru_cache(maxsize=4096)
def axis_class(path: str) -> AxisClass:
    """The class an axis declares on its schema field, by the axis's dotted path
    (``training.recompute``, ``cluster.pools[1].nic``, ``parallelism.tp.H100``): the
    schema is walked field by field, so the answer follows the field, whatever its name.

    Raises:
      ValueError: ``path`` names no axis of the schema.
    """
    model: type[BaseModel] = Sweep
    rest = path
    while (match := _SEGMENT.match(rest)) is not None:
        fields = {info.alias or name: info for name, info in model.model_fields.items()}
        info = fields.get(match.group(1))
        if info is None:
            break
        rest, indexed = rest[match.end():], match.group(2) is not None
        declared = [item for item in info.metadata if isinstance(item, AxisClass)]
        if declared and not indexed:
            if _AXIS in info.metadata and not rest:
                return declared[0]  # an axis
            if _AXIS not in info.metadata and len(rest) > 1 and rest[0] == ".":
                return declared[0]  # a mapping of axes, keyed by the rest of the path
            break
        inner = _model_of(info.annotation)
        is_list = typing.get_origin(info.annotation) is list
        if inner is None or indexed != is_list or rest[:1] != ".":
            break
        model, rest = inner, rest[1:]
    raise ValueError(f"{path!r} names no axis of the sweep schema")


@functools.lru_cache(maxsize=4096)
def changes_work(path: str) -> bool:
    """Whether the axis at ``path`` is tagged :data:`WORK` on its schema field."""
    model: type[BaseModel] = Sweep
    for part in re.sub(r"\[\d+\]", "", path).split("."):
        fields = {info.alias or name: info for name, info in model.model_fields.items()}
        info = fields.get(part)
        if info is None:
            return False
        if _AXIS in info.metadata or info.annotation is None:
            return WORK in info.metadata
        inner = _model_of(info.annotation)
        if inner is None:
            return WORK in info.metadata  # a mapping of axes (the TP degrees)
        model = inner
    return False


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class of a field that holds one (or a list of them), else None."""
    if typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
        else None


def load_sweep(path: str | Path, catalog: Catalog | None = None) -> Sweep:
    """Read and validate a sweep YAML; model, GPU and NIC names are checked against the catalog."""
    file = str(path)
    sweep = sweep_from_dict(read_yaml_file(file), file)
    check_sweep_names(sweep, catalog if catalog is not None else load_catalog(), file)
    return sweep


def sweep_from_text(text: str, file: str | None, catalog: Catalog) -> Sweep:
    """:func:`load_sweep` of a sweep's text kept elsewhere (a dataset's or a study's
    attribute); ``file`` names where, for messages."""
    sweep = sweep_from_dict(parse_yaml(text, file), file)
    check_sweep_names(sweep, catalog, file)
    return sweep


def sweep_from_dict(document: Any, file: str | None = None) -> Sweep:
    """Validate a parsed sweep document; the first problem becomes a one-line InputError."""
    if not isinstance(document, dict):
        raise InputError(file, None, type(document).__name__, "a sweep is a YAML mapping")
    try:
        sweep = Sweep.model_validate(document)
    except ValidationError as error:
        first = _first_error(error.errors())
        field = _loc_path(first["loc"])
        value = None if first["type"] in ("missing", "extra_forbidden") or not first["loc"] \
            else first.get("input")
        raise InputError(file, field or None, value, _reason(first)) from None
    _cross_check(sweep, file)
    check_sweep_limits(sweep, file)  # before anything of a point's size is built
    return sweep


def _cross_check(sweep: Sweep, file: str | None) -> None:
    """Rules that relate several sections of a sweep.

    One GPU, one pool: two pools may not name one GPU, also when they spell it apart (an
    alias and the name, two cases of a name: ``H100`` and ``H100-SXM``, ``h100-sxm``).
    The keys of ``parallelism.tp`` spell each pool's ``gpu`` exactly as the pool does (the
    key is the axis's name, ``parallelism.tp.H100``): a key naming a pool's GPU in another
    spelling is refused with the spelling to use. Axes of catalog names (``model``, a
    pool's ``nic``) may not hold one entry twice under two spellings either. Names are
    compared through the built-in catalog's names and aliases here; a user catalog's own
    aliases are compared where the sweep meets that catalog.
    """
    pools = [pool.gpu for pool in sweep.cluster.pools]
    _one_name_each(sweep, file)
    keys = [entry_key("gpus", name) for name in pools]
    for key in sweep.parallelism.tp:
        if key in pools:
            continue
        if entry_key("gpus", key) in keys:
            pool = keys.index(entry_key("gpus", key))
            raise InputError(file, f"parallelism.tp.{key}", key,
                             f"names the gpu of cluster.pools[{pool}] in another spelling; "
                             f"key it exactly as the pool spells it: {pools[pool]!r}")
        raise InputError(file, f"parallelism.tp.{key}", None,
                         f"names no pool's gpu{did_you_mean(key, pools)} "
                         f"(pools: {', '.join(pools)})")
    for name in pools:
        if name not in sweep.parallelism.tp:
            raise InputError(file, "parallelism.tp", None, f"no TP degrees for pool {name!r}")
    if all(_largest(pool.nodes) == 0 for pool in sweep.cluster.pools):
        raise InputError(file, "cluster.pools", None,
                         "every pool has at most 0 nodes; the cluster would be empty")
    if len(set(sweep.objectives)) != len(sweep.objectives):
        raise InputError(file, "objectives", sweep.objectives, "a metric is repeated")
    training = sweep.training
    if training.schedule == ["gpipe"] and max(_values(training.virtual_pipeline_stages)) > 1:
        raise InputError(file, "training.virtual_pipeline_stages",
                         training.virtual_pipeline_stages,
                         "interleaving needs the 1f1b schedule")
    if "cost_per_run_usd" in sweep.objectives and sweep.training.total_tokens is None:
        raise InputError(file, "training.total_tokens", None,
                         "required by the objective cost_per_run_usd")
    if sweep.constraints.training_days_max is not None and sweep.training.total_tokens is None:
        raise InputError(file, "training.total_tokens", None,
                         "required by the constraint training_days_max")


def _first_error(errors: list[dict]) -> dict:
    """The error to report: the first, but for a missing key whose mapping also has an
    unknown key, that key (most likely the missing one misspelt)."""
    first = errors[0]
    if first["type"] == "missing":
        parent = first["loc"][:-1]
        return next((e for e in errors if e["type"] == "extra_forbidden"
                     and e["loc"][:-1] == parent), first)
    return first


def _reason(error: dict) -> str:
    """The reason of pydantic's ``error``, with the close names for a name it does not know:
    an unknown key (and the keys known there), a value of a fixed set."""
    if error["type"] == "extra_forbidden":
        known = _keys_at(error["loc"][:-1])
        if known is None:
            return error["msg"]
        return (f"unknown key{did_you_mean(str(error['loc'][-1]), known)} "
                f"(known: {', '.join(known)})")
    if error["type"] == "literal_error":
        choices = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        return error["msg"] + did_you_mean(error.get("input"), choices)
    return error["msg"]


def _keys_at(loc: tuple) -> list[str] | None:
    """The keys a mapping of the sweep schema takes at ``loc`` (pydantic's location of the
    mapping), or None where the schema has no fixed keys (the pools' keys of
    ``parallelism.tp``)."""
    model: type[BaseModel] | None = Sweep
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list of models
        if part == "[range]":
            model = IntRange
            continue
        if "[" in str(part):
            continue  # another branch tag
        if model is None:
            return None
        fields = {info.alias or name: info for name, info in model.model_fields.items()}
        info = fields.get(part)
        model = None if info is None else _model_of(info.annotation)
    if model is None:
        return None
    return [info.alias or name for name, info in model.model_fields.items()]


def _loc_path(loc: tuple) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif "[" in str(part):  # pydantic names of union or validator branches
            continue
        else:
            text += f".{part}" if text else str(part)
    return text


_ENTRY_KINDS = {"software": "software profile"}


def _one_name_each(sweep: Sweep, file: str | None, catalog: Catalog | None = None) -> None:
    """Refuse two pools of one GPU, and one model or NIC twice in an axis, also when spelled
    apart (by the names and aliases of ``catalog``; default: the built-in one)."""
    pools = [pool.gpu for pool in sweep.cluster.pools]
    repeat = repeated_entry("gpus", pools, catalog)
    if repeat is not None:
        first, index = repeat
        same = ("names the same gpu" if pools[first] == pools[index] else
                f"names the same gpu in another spelling ({pools[first]!r})")
        raise InputError(file, f"cluster.pools[{index}].gpu", pools[index],
                         f"another pool, cluster.pools[{first}], {same}; one pool per GPU")
    for field, section, axis in (("model", "models", sweep.model),
                                 ("training.software", "software", sweep.training.software),
                                 *((f"cluster.pools[{index}].nic", "nics", pool.nic)
                                   for index, pool in enumerate(sweep.cluster.pools))):
        repeat = repeated_entry(section, axis or (), catalog)
        if repeat is not None:
            first, index = repeat
            raise InputError(file, f"{field}[{index}]", axis[index],
                             f"names the same {_ENTRY_KINDS.get(section, section[:-1])} "
                             f"as {field}[{first}] "
                             f"({axis[first]!r}) in another spelling; give each value once")


def check_sweep_names(sweep: Sweep, catalog: Catalog, file: str | None = None) -> None:
    """Raise InputError if a model, GPU, NIC or software profile the sweep names is not in
    the catalog, or
    if two of its values name one entry (a user catalog's own aliases included)."""
    _one_name_each(sweep, file, catalog)
    for index, name in enumerate(sweep.model):
        catalog.model(name, file=file, field=f"model[{index}]")
    for index, name in enumerate(sweep.training.software):
        catalog.software_profile(name, file=file, field=f"training.software[{index}]")
    for index, pool in enumerate(sweep.cluster.pools):
        catalog.gpu(pool.gpu, file=file, field=f"cluster.pools[{index}].gpu")
        for k, nic in enumerate(pool.nic or ()):
            catalog.nic(nic, file=file, field=f"cluster.pools[{index}].nic[{k}]")


# -- names and sizes --------------------------------------------------------------------
#: Most characters of a sweep's or study's name.
MAX_NAME_LENGTH = 100
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
#: Names Windows keeps for devices, with or without an extension, in any case.
_DEVICE_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                           *(f"lpt{i}" for i in range(1, 10))})
#: The rule, as messages and documentation state it.
NAME_RULE = (f"1 to {MAX_NAME_LENGTH} ASCII letters, digits, '-', '_' and '.', starting with "
             "a letter or digit")


def name_problem(name: object) -> str:
    """Why ``name`` cannot name a sweep or a study ("" when it can).

    A name becomes a folder (``results/<name>``) on any system, so it is a plain,
    portable folder name: :data:`NAME_RULE`, not ending with ``.`` (Windows drops it)
    and not a Windows device name (``con``, ``nul.x``, ...). ASCII only: file systems
    disagree on the normal form and the case of other letters, so one name could be
    two folders. Never ``.`` or ``..``, a path, an empty name or a NUL.
    """
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"has {len(name):,} characters; a name has at most {MAX_NAME_LENGTH}"
    odd = next((c for c in name if c not in _NAME_CHARACTERS), None)
    if odd is not None:
        return f"holds {odd!r}; a name holds only ASCII letters, digits, '-', '_' and '.'"
    if name[0] in "-_.":
        return f"starts with {name[0]!r}; a name starts with a letter or digit"
    if name.endswith("."):
        return "ends with '.', which Windows drops from folder names"
    if name.split(".", 1)[0].lower() in _DEVICE_NAMES:
        return "is a device name on Windows (con, prn, aux, nul, com1-com9, lpt1-lpt9)"
    return ""


def check_name(name: object, file: str | None, field: str | None = None) -> str:
    """``name`` if it may name a sweep or a study (:func:`name_problem`).

    Raises:
      InputError: naming ``file`` (an option such as ``--study``, say) and ``field``.
    """
    problem = name_problem(name)
    if problem:
        raise InputError(file, field, name, problem)
    return name  # type: ignore[return-value]


def _valid_name(name: str) -> str:
    from pydantic_core import PydanticCustomError

    problem = name_problem(name)
    if problem:
        raise PydanticCustomError("name", "{problem}", {"problem": problem})
    return name


def _largest(domain: list | IntRange) -> int:
    return domain.high if isinstance(domain, IntRange) else max(domain)


def largest_cluster_gpus(sweep: Sweep) -> int:
    """GPUs of the sweep's largest cluster: every pool at its most nodes and GPUs per node
    (the axes are independent, so one point of the grid has them all). Arithmetic on the
    lists and ranges: nothing is expanded."""
    return sum(_largest(pool.nodes) * _largest(pool.gpus_per_node)
               for pool in sweep.cluster.pools)


def check_sweep_limits(sweep: Sweep, file: str | None, limits: Any = None) -> None:
    """Refuse a sweep some point of which would exceed the GPU limit of a plan
    (``XSWEEP_MAX_GPUS``): a pool's GPUs, then the cluster's, at their largest. Every
    command runs this before it plans a point; the per-point limits (device groups,
    micro-batches, program size) are the planner's, which finds a point over one
    infeasible before it builds anything of that size.

    Args:
      limits: a :class:`xsweep.spec.limits.Limits` (default: the active limits).

    Raises:
      InputError: naming ``file`` and the pool (or ``cluster.pools``) and the GPU count.
    """
    from xsweep.spec.limits import active_limits, check_limit

    limits = limits if limits is not None else active_limits()
    for index, pool in enumerate(sweep.cluster.pools):
        nodes, per_node = _largest(pool.nodes), _largest(pool.gpus_per_node)
        check_limit(nodes * per_node, limits, "gpus",
                    f"the pool's GPU count at its largest ({nodes:,} nodes of {per_node:,} "
                    "GPUs)",
                    file, f"cluster.pools[{index}]")
    check_limit(largest_cluster_gpus(sweep), limits, "gpus",
                "the GPU count of the largest cluster (every pool at its most nodes)", file,
                "cluster.pools")
