"""Hypothesis strategies: valid plans, sweeps, catalogs and profiles, mutated.

Mutations change types and values (huge, negative, NaN, infinite, unknown enum
numbers), delete and duplicate entries, nest values deeply, rename keys, and spoil
the bytes of the file (other encodings, truncation, inserted bytes, repeated keys,
YAML aliases and tags). Each strategy draws a :class:`Sample`: a file's name and
bytes and what kind of input it is.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from dataclasses import dataclass

import yaml
from google.protobuf import text_format
from hypothesis import strategies as st

from tests.support.hostile_inputs import PLAN, SWEEP
from tests.support.paths import SPACES
from xsweep.spec.plan_io import plan_from_text, plan_to_json


@dataclass(frozen=True)
class Sample:
    kind: str  # "plan", "sweep", "catalog" or "profile"
    name: str  # file name, suffix included
    data: bytes


BASE_PLANS = (PLAN, (SPACES / "appendix-b.pbtxt").read_text())
BASE_SWEEPS = (yaml.safe_load(SWEEP), yaml.safe_load((SPACES / "quickstart.yaml").read_text()))
BASE_CATALOG = {
    "gpus": {"H100": {"hbm_gib": 96, "capex_usd": 30000},
             "X1": {"peak_bf16_tflops": 500, "hbm_gib": 64, "hbm_tb_per_s": 2.0,
                    "scale_up_gbps": 1600, "scale_up_latency_ns": 30, "scale_up_link": "nvlink3",
                    "pcie_gbps": 256, "pcie_latency_ns": 300, "pcie_link": "pcie4",
                    "default_nic": "cx6", "capex_usd": 9000, "power_w": 500,
                    "cloud_usd_per_hour": 2.5, "num_sms": 100, "gemm_efficiency": 0.7,
                    "flash_attention_efficiency": 0.5, "hbm_efficiency": 0.9,
                    "aliases": ["x-one"]}},
    "nics": {"cx7": {"bandwidth_gbps": 400, "latency_ns": 350}},
    "models": {"tiny": {"num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024,
                        "num_attention_heads": 8, "num_kv_heads": 8, "vocab_size": 1000,
                        "seq_length": 128, "mlp": "gelu"}},
}
BASE_PROFILE = {"model": "llama2-7b", "measurements": [
    {"gpu": "H100", "tp": 2, "micro_batch_size": 1, "forward_s": 0.002, "backward_s": 0.004},
    {"gpu": "H100", "tp": 2, "micro_batch_size": 4, "forward_s": 0.007, "backward_s": 0.015}]}

EDGE_INTEGERS = [0, -1, 1, 2, 3, 7, 64, 4096, 65_537, 2**31 - 1, -(2**31), 2**53 + 1,
                 2**63 - 1, 10**40]
EDGE_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e-9, 0.5, 1e308, 1e18, 1e30]
numbers = st.one_of(st.sampled_from(EDGE_INTEGERS), st.sampled_from(EDGE_FLOATS),
                    st.integers(-1000, 100_000), st.floats())
values = st.one_of(
    numbers, st.booleans(), st.none(),
    st.sampled_from(["", "NaN", "Infinity", "-Infinity", "1e999", "GPIPE", "ONE_F_ONE_B",
                     "H100", "cx7", "llama2-7b", "é", "x" * 300]),
    st.text(max_size=12), st.lists(st.integers(-3, 10), max_size=4),
    st.dictionaries(st.sampled_from(["a", "tp", "nodes", "name"]), st.integers(0, 4),
                    max_size=2))


# -- document trees ----------------------------------------------------------------------
@st.composite
def _spot(draw, tree):
    """A (container, key) inside ``tree``, reached by a random walk from its root."""
    parent, key = None, None
    node = tree
    while isinstance(node, dict | list) and node:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        parent, key = node, draw(st.sampled_from(keys))
        node = parent[key]
        if draw(st.integers(0, 3)) == 0:
            break
    return parent, key


@st.composite
def mutated_tree(draw, base):
    """``base`` (a JSON-like document) after up to three mutations; now and then a
    plain value instead of a document."""
    if draw(st.integers(0, 40)) == 0:  # not a mapping at all
        return draw(values)
    tree = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 3))):
        parent, key = draw(_spot(tree))
        if parent is None:
            continue
        op = draw(st.sampled_from(["replace", "scale", "delete", "duplicate", "nest", "rename"]))
        old = parent[key]
        if op == "replace":
            parent[key] = draw(values)
        elif op == "scale" and isinstance(old, int | float) and not isinstance(old, bool):
            parent[key] = old * draw(st.sampled_from([-1, 0, 2, 1000, 2**20, 1e300]))
        elif op == "delete":
            del parent[key]
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(old))
        elif op == "nest":
            for _ in range(draw(st.integers(1, 40))):
                old = [old] if draw(st.booleans()) else {"x": old}
            parent[key] = old
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(st.sampled_from([f"{key}_", str(key).upper(), "colour"]))] = \
                parent.pop(key)
    return tree


# -- protobuf messages -------------------------------------------------------------------
def _messages(message):
    """``message`` and every message inside it, unset singular ones included (setting a
    field of one makes it present)."""
    yield message
    for field in message.DESCRIPTOR.fields:
        if field.message_type is None:
            continue
        value = getattr(message, field.name)
        for item in (value if field.is_repeated else [value]):
            yield from _messages(item)


def _scalar_for(draw, field):
    kind = field.type
    if kind == field.TYPE_DOUBLE:
        return draw(st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(), st.integers(-5, 100)))
    if kind == field.TYPE_BOOL:
        return draw(st.booleans())
    if kind == field.TYPE_STRING:
        return draw(st.sampled_from(["", "H100", "A100-40GB", "cx7", "cx99", "llama2-7b",
                                     "gpt3-175b", "é\n\t"]))
    if kind == field.TYPE_ENUM:
        return draw(st.integers(-3, 6))
    low, high = (-(2**31), 2**31 - 1) if kind == field.TYPE_INT32 else (-(2**63), 2**63 - 1)
    edges = [v for v in EDGE_INTEGERS if low <= v <= high]
    return draw(st.one_of(st.sampled_from(edges), st.integers(-3, 70), st.integers(low, high)))


@st.composite
def mutated_plan(draw, base_text):
    """A DeploymentPlan message from ``base_text`` with typed fields set to hostile values,
    repeated fields emptied, shortened or lengthened."""
    plan = plan_from_text(base_text)
    for _ in range(draw(st.integers(0, 3))):
        message = draw(st.sampled_from(list(_messages(plan))))
        field = draw(st.sampled_from(list(message.DESCRIPTOR.fields)))
        if field.is_repeated:
            items = getattr(message, field.name)
            op = draw(st.sampled_from(["clear", "drop", "copy", "append"]))
            if op == "clear":
                del items[:]
            elif op == "drop" and len(items):
                del items[draw(st.integers(0, len(items) - 1))]
            elif op == "copy" and len(items) and field.message_type is not None:
                items.add().CopyFrom(items[draw(st.integers(0, len(items) - 1))])
            elif op == "append" and field.message_type is None:
                items.append(_scalar_for(draw, field))
        elif field.message_type is not None:
            message.ClearField(field.name)
        else:
            setattr(message, field.name, _scalar_for(draw, field))
    return plan


# -- bytes -------------------------------------------------------------------------------
@st.composite
def spoiled(draw, data: bytes) -> bytes:
    """``data``, mostly unchanged; otherwise re-encoded, cut, or with bytes inserted."""
    op = draw(st.sampled_from(["keep"] * 6 + ["utf-16", "utf-32", "latin-1", "bom", "cut",
                                               "insert", "nul"]))
    if op == "utf-16":
        return data.decode().encode("utf-16")
    if op == "utf-32":
        return data.decode().encode("utf-32-le")
    if op == "latin-1":
        return data.decode().replace("e", "é").encode("latin-1")
    if op == "bom":
        return b"\xef\xbb\xbf" + data
    at = draw(st.integers(0, len(data)))
    if op == "cut":
        return data[:at]
    if op == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if op == "nul":
        return data[:at] + b"\0" + data[at:]
    return data


YAML_EXTRAS = [
    "", "name: again\n", "extra: !!python/object/apply:os.system [true]\n",
    "anchor: &a [1, 2, 3]\nalias: [*a, *a, *a]\n", "<<: {name: merged}\n",
    "x: &b [*b]\n", "big: " + "9" * 40 + "\n", "deep: " + "[" * 40 + "]" * 40 + "\n",
]


def _yaml_text(document, draw) -> bytes:
    text = yaml.safe_dump(document, sort_keys=False)
    return (text + draw(st.sampled_from(YAML_EXTRAS))).encode()


# -- samples ----------------------------------------------------------------------------
@st.composite
def plan_samples(draw):
    base = draw(st.sampled_from(BASE_PLANS))
    if draw(st.booleans()):
        text = text_format.MessageToString(draw(mutated_plan(base)))
        return Sample("plan", "plan.pbtxt", draw(spoiled(text.encode())))
    document = draw(mutated_tree(json.loads(plan_to_json(plan_from_text(base)))))
    text = json.dumps(document)
    if draw(st.integers(0, 5)) == 0:  # a key given twice
        text = text.replace('{"name"', '{"name": "first", "name"', 1)
    return Sample("plan", "plan.json", draw(spoiled(text.encode())))


@st.composite
def sweep_samples(draw):
    document = draw(mutated_tree(draw(st.sampled_from(BASE_SWEEPS))))
    return Sample("sweep", "sweep.yaml", draw(spoiled(_yaml_text(document, draw))))


@st.composite
def catalog_samples(draw):
    document = draw(mutated_tree(BASE_CATALOG))
    return Sample("catalog", "catalog.yaml", draw(spoiled(_yaml_text(document, draw))))


@st.composite
def profile_samples(draw):
    document = draw(mutated_tree(BASE_PROFILE))
    if draw(st.booleans()):
        return Sample("profile", "profile.yaml", draw(spoiled(_yaml_text(document, draw))))
    rows = document.get("measurements") if isinstance(document, dict) else None
    rows = rows if isinstance(rows, list) else []
    header = "gpu,tp,micro_batch_size,forward_s,backward_s\n"
    lines = [",".join(str(row.get(k, "")) if isinstance(row, dict) else str(row)
                      for k in header.strip().split(",")) for row in rows]
    return Sample("profile", "profile.csv", draw(spoiled((header + "\n".join(lines)).encode())))


any_sample = st.one_of(plan_samples(), sweep_samples(), catalog_samples())


def write(sample: Sample, folder, index: int = 0):
    """Write ``sample`` into ``folder`` under a unique name; return the path."""
    stem, suffix = sample.name.rsplit(".", 1)
    path = folder / f"{index}-{stem}.{suffix}"
    path.write_bytes(sample.data)
    return path


# -- valid inputs at the ends of their ranges ---------------------------------------------
def _ends(bounds, typical):
    """An end of ``bounds`` or ``typical``, an integer where the field is one (a catalog
    takes ``512`` for an integer field, not ``512.0``)."""
    ends = [bounds.low, bounds.high, typical]
    return st.sampled_from([int(v) for v in ends] if bounds.integer else ends)


@st.composite
def extreme_plans(draw):
    """The base plan with its numbers drawn from the ends of their documented ranges:
    valid, so every evaluator must give finite numbers for it."""
    from xsweep.spec import ranges

    plan = plan_from_text(PLAN)
    model = plan.model
    for name, typical in (("hidden_size", 4096), ("ffn_hidden_size", 11008),
                          ("vocab_size", 32000), ("seq_length", 1024)):
        setattr(model, name, int(draw(_ends(ranges.MODEL[name], typical))))
    model.num_attention_heads = heads = draw(st.sampled_from([2, 32, ranges.MAX_HEADS]))
    model.hidden_size = max(heads, model.hidden_size - model.hidden_size % heads)  # whole heads
    model.num_kv_heads = draw(st.integers(1, model.num_attention_heads))
    size = draw(_ends(ranges.PLAN["micro_batch_size"], 4))
    for group in plan.device_groups:
        group.micro_batch_size = size
    plan.training.global_batch_size = size * 2 * 4
    plan.training.total_tokens = draw(_ends(ranges.PLAN["training.total_tokens"], 1e12))
    node, fabric = plan.cluster.nodes[0], plan.cluster.fabric
    node.scale_up.bandwidth_gbps = draw(_ends(ranges.BANDWIDTH_GBPS, 0.0))
    node.scale_up.latency_ns = draw(_ends(ranges.LATENCY_NS, 0.0))
    fabric.oversubscription = draw(_ends(ranges.PLAN["fabric.oversubscription"], 0.0))
    fabric.switch_latency_ns = draw(_ends(ranges.LATENCY_NS, 0.0))
    return plan


@st.composite
def extreme_catalogs(draw):
    """A catalog file setting every number of the base plan's GPU and NIC to an end of
    its range (or a typical value)."""
    from xsweep.spec import ranges

    gpu = {name: draw(_ends(bounds, bounds.high / 2))
           for name, bounds in ranges.CATALOG["gpus"].items()}
    nic = {name: draw(_ends(bounds, bounds.high / 2))
           for name, bounds in ranges.CATALOG["nics"].items()}
    text = yaml.safe_dump({"gpus": {"H100-SXM": gpu}, "nics": {"cx7": nic}})
    return Sample("catalog", "catalog.yaml", text.encode())


# -- arguments of the library's functions ----------------------------------------------------
@functools.cache
def _argument_makers() -> tuple:
    """Makers of wrong (and a few right) arguments for the public API: wrong types, numbers
    at and past every end, empty and nested containers, strings where lists belong, paths
    that are folders or missing or hold a NUL. Each is made afresh when drawn (an iterator
    is used up by one call)."""
    import numpy as np

    from xsweep.cost import CostModel

    values = [None, True, False, 0, -1, 1, 2, 3, 64, 2**31, 2**63, -(2**63), 10**40, 0.0, -0.0,
              2.5, 1e308, math.nan, math.inf, -math.inf, "", " ", "x", "cpu", "bound",
              "float16", "float32", "capex", "a\0b", "é", "x" * 300, "/", ".",
              "spaces/appendix-b.pbtxt", "spaces/quickstart.yaml", "does/not/exist.yaml",
              b"", b"spaces/appendix-b.pbtxt"]
    makers = [lambda value=value: value for value in values]
    makers += [
        list, lambda: [None], lambda: [0], lambda: ["cpu"], lambda: ["does/not/exist.yaml"],
        lambda: [[]], tuple, lambda: (1,), dict, lambda: {"x": [1]}, lambda: {"x": "ab"},
        lambda: {"x": [1, 2]}, lambda: {3: [1]}, lambda: {"name": [1]}, lambda: {"x": [[1]]},
        set, lambda: frozenset({1}), object, lambda: SPACES / "appendix-b.pbtxt",
        lambda: SPACES, lambda: SPACES / "missing.yaml", lambda: iter([]), lambda: iter([1]),
        lambda: range(3), lambda: (lambda *args: None), lambda: np.int64(2),
        lambda: np.float64(2.0), lambda: np.bool_(True), lambda: np.array([1]),
        lambda: np.array([[1]]), CostModel, lambda: CostModel(pricing="spot"),
        lambda: CostModel(pue=math.nan), lambda: CostModel(pricing=["capex"]),
        lambda: CostModel(amortization_years="4"),
    ]
    return tuple(makers)


@st.composite
def library_arguments(draw):
    """One argument for a function of the public API, from :func:`_argument_makers`."""
    return draw(st.sampled_from(_argument_makers()))()


# -- hostile sweeps: names, ranges, pools ---------------------------------------------------
#: Stands for the absolute path of a folder of the test's own in a drawn name: the test
#: writes the sample with it replaced, so that an absolute name points where it watches.
SANDBOX = "@SANDBOX@"
HOSTILE_NAMES = [
    f"{SANDBOX}/abs", SANDBOX, "/", ".", "..", "./x", "../x", "../../x", "a/../../x", "x/",
    "a\\b", "C:\\x", "~", "$HOME", "*", "a\0b", "\0", "x" * 100, "x" * 101, "x" * 300,
    "café", "cafe\u0301", "名前", "a\u202eb", "\ufeffx", "a\u200bb", "a\nb", "a\tb", " x",
    "x ", "", "-x", ".x", "x.", "CON", "nul.txt", "com1", "ok-name_1.0",
]
#: Names: the hostile ones (two draws in five), names of the right shape and length or
#: longer, any text, and values that are no string.
sweep_names = st.one_of(
    st.sampled_from(HOSTILE_NAMES), st.sampled_from(HOSTILE_NAMES),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,110}", fullmatch=True), st.text(max_size=120),
    st.one_of(st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2)))

ODD_INTEGERS = [0, -1, 1, 2, 3, 7, 8, 64, 4096, 65_536, 65_537, 2**31, 2**63, 10**40, -(2**63)]
odd_integers = st.one_of(st.sampled_from(ODD_INTEGERS), st.integers(-10, 100_000))
ODD_VALUES = [1.5, 2.0, math.nan, math.inf, True, False, None, "8", "", [], {}, [1, 2]]


@st.composite
def odd_ranges(draw):
    """A ``{low, high, step}`` mapping: mostly well formed, of any length (empty, one value,
    a million, a trillion), with odd ends and steps, now and then a value of another type,
    a key missing or one too many."""
    low = draw(odd_integers)
    step = draw(st.one_of(st.sampled_from([1, 2, 3, 8, 4096, 0, -1]), odd_integers))
    count = draw(st.sampled_from([0, 1, 2, 7, 1000, 1_000_000, 1_000_001, 10**12]))
    high = low + (count - 1) * step if draw(st.integers(0, 3)) else draw(odd_integers)
    mapping = {"low": low, "high": high, "step": step}
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["value", "delete", "extra"]))
        key = draw(st.sampled_from(["low", "high", "step"]))
        if op == "value":
            mapping[key] = draw(st.sampled_from(ODD_VALUES))
        elif op == "delete":
            mapping.pop(key, None)
        else:
            mapping[draw(st.sampled_from(["stride", "count", "LOW"]))] = 1
    return mapping


@st.composite
def clean_ranges(draw, highs):
    """A well-formed range up to one of ``highs``: one value or a few, steps of any size."""
    high = draw(st.sampled_from(highs))
    step = draw(st.sampled_from([1, 2, 8, 64, 4096]))
    low = high - step * draw(st.integers(0, 8))
    return {"low": low if low >= 1 else high, "high": high, "step": step}


def int_axes(values, valid=None):
    """An integer axis: mostly of ``valid`` values (a scalar, a list of distinct ones, a
    well-formed range), else of ``values`` (a scalar, a short list, repeats and empty ones
    included) or an odd range."""
    valid = valid or [1, 2, 8, 64]
    return st.one_of(
        st.sampled_from(valid), st.lists(st.sampled_from(valid), min_size=1, max_size=3,
                                         unique=True), clean_ranges(valid),
        values, st.lists(values, max_size=4), odd_ranges())


POOL_GPUS = ["H100-SXM", "A100-40GB", "H100", "h100-sxm", "B200", "no-such-gpu"]
HUGE_COUNTS = [0, 1, 2, 8, 512, 4096, 8192, 65_535, 65_536, 65_537, 2**31]
POOL_SIZES = [1, 2, 8, 512, 4096, 8192, 65_536]


@st.composite
def odd_pools(draw):
    """One to three pools of any size up to 65,536 x 65,536 GPUs and past it, a GPU now and
    then twice (by one name, an alias or another case)."""
    pools = []
    for _ in range(draw(st.integers(1, 3))):
        pool = {"gpu": draw(st.sampled_from(POOL_GPUS)),
                "nodes": draw(int_axes(st.sampled_from(HUGE_COUNTS), POOL_SIZES))}
        if draw(st.booleans()):
            pool["gpus_per_node"] = draw(int_axes(st.sampled_from(HUGE_COUNTS[1:]), POOL_SIZES))
        pools.append(pool)
    if draw(st.integers(0, 3)) == 0:
        pools.append(copy.deepcopy(pools[0]))
    return pools


SWEEP_INT_AXES = [("training", "global_batch_size"), ("training", "virtual_pipeline_stages"),
                  ("training", "dp_bucket_params"), ("parallelism", "pp"),
                  ("parallelism", "micro_batch_size")]


@st.composite
def hostile_sweeps(draw):
    """A base sweep with a drawn name, pools and integer axes (see above), as a file."""
    document = copy.deepcopy(draw(st.sampled_from(BASE_SWEEPS)))
    if draw(st.booleans()):  # else the base's name, and the other sections' checks run
        document["name"] = draw(sweep_names)
    if draw(st.booleans()):
        pools = draw(odd_pools())
        document["cluster"]["pools"] = pools
        document["parallelism"]["tp"] = {
            pool["gpu"]: draw(int_axes(st.sampled_from([0, 1, 2, 8, 16, 4096, 16_385]),
                                       [1, 2, 8, 16, 4096])) for pool in pools}
    for section, key in draw(st.lists(st.sampled_from(SWEEP_INT_AXES), max_size=3, unique=True)):
        document[section][key] = draw(int_axes(odd_integers))
    return Sample("sweep", "sweep.yaml", yaml.safe_dump(document, sort_keys=False).encode())
