"""A catalogue of hostile inputs, one per class of attack or accident, at any size.

The regression tests (``tests/cli/test_hostile_inputs.py``) run every command on each
at a small size; ``benchmarks/bench_hostile.py`` runs them at about 1 MB and
reports the worst time and memory. Each entry says which file suffix it takes and
whether a command must accept it (``valid``) or refuse it with exit code 2.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

# Llama-2-7B on one node of 8 GPUs: TP 2 x PP 2 x DP 2, GPipe (as spaces/h100x8-baseline).
PLAN = """\
name: "hostile-base"
model { preset: "llama2-7b" seq_length: 1024 }
training { global_batch_size: 8 total_tokens: 1e9 }
cluster {
  nodes { gpu: "H100-SXM" num_gpus: 8 }
}
device_groups { id: 0 ranks: [0, 1] pp_stage: 0 dp_replica: 0
  first_layer: 1 last_layer: 16 micro_batch_size: 1 num_micro_batches: 4 }
device_groups { id: 1 ranks: [2, 3] pp_stage: 1 dp_replica: 0
  first_layer: 17 last_layer: 32 micro_batch_size: 1 num_micro_batches: 4 }
device_groups { id: 2 ranks: [4, 5] pp_stage: 0 dp_replica: 1
  first_layer: 1 last_layer: 16 micro_batch_size: 1 num_micro_batches: 4 }
device_groups { id: 3 ranks: [6, 7] pp_stage: 1 dp_replica: 1
  first_layer: 17 last_layer: 32 micro_batch_size: 1 num_micro_batches: 4 }
"""

SWEEP = """\
name: hostile
model: llama2-7b
training: {global_batch_size: 64}
cluster: {pools: [{gpu: H100-SXM, nodes: [1, 2]}]}
parallelism: {tp: {H100-SXM: [2, 4]}, pp: [1, 2]}
"""

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Hostile:
    """One hostile input: ``make(size_bytes)`` returns the file's bytes (about that size
    where the class scales; a fixed size where it does not)."""

    name: str
    suffix: str
    make: Callable[[int], bytes]
    valid: bool = False  # True: the commands must accept it

    @property
    def is_plan(self) -> bool:
        return self.suffix in (".pbtxt", ".json")


def plan_with(old: str, new: str, count: int = 1) -> str:
    assert old in PLAN, old
    return PLAN.replace(old, new, count)


def _text(text: str) -> Callable[[int], bytes]:
    return lambda _size: text.encode()


def _billion_laughs(_size: int) -> bytes:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def _deep(open_: str, close: str, head: str = "", tail: str = "") -> Callable[[int], bytes]:
    def make(size: int) -> bytes:
        n = max(1, (size - len(head) - len(tail)) // (len(open_) + len(close)))
        return (head + open_ * n + close * n + tail).encode()
    return make


def _repeat(head: str, item: str, tail: str, size: int) -> str:
    return head + item * max(1, (size - len(head) - len(tail)) // len(item)) + tail


def _many_nodes(_size: int) -> bytes:
    """8,193 nodes of 8 GPUs: one node past the default limit of 65,536 GPUs."""
    nodes = '  nodes { gpu: "H100-SXM" num_gpus: 8 }\n' * 8193
    return plan_with('  nodes { gpu: "H100-SXM" num_gpus: 8 }\n', nodes).encode()


def _most_gpus(_size: int) -> bytes:
    """Valid and large: 8,192 nodes, 65,536 GPUs (the default limit), eight of them used."""
    return _many_nodes(0).replace(b"nodes { gpu: \"H100-SXM\" num_gpus: 8 }\n", b"", 1)


def _many_groups(_size: int) -> bytes:
    """4,097 device groups: one past the default limit."""
    group = ("device_groups {{ id: {} ranks: [0] pp_stage: 0 dp_replica: 0 first_layer: 1 "
             "last_layer: 32 micro_batch_size: 1 num_micro_batches: 1 }}\n")
    return (PLAN + "".join(group.format(100 + i) for i in range(4097 - 4))).encode()


def _long_ranks(size: int) -> bytes:
    ranks = ", ".join(["0"] * max(1, (size - len(PLAN)) // 3))
    return plan_with("ranks: [0, 1]", f"ranks: [{ranks}]").encode()


def _many_replicas(_size: int) -> bytes:
    """2,048 TP-1 replicas of one stage: one DP collective of 2,048 flows (a pipelined ring;
    lowered step by step, it would have been 2(R-1) steps of R flows, 8 M flows). Eight
    of Llama-2-7B's layers, so that one GPU holds a replica (a plan that does not fit
    fails the commands' memory check)."""
    replicas = 2048
    nodes = "".join('  nodes { gpu: "H100-SXM" num_gpus: 8 }\n' for _ in range(-(-replicas // 8)))
    groups = "".join(
        f"device_groups {{ id: {r} ranks: [{r}] dp_replica: {r} first_layer: 1 last_layer: 8 "
        "micro_batch_size: 1 num_micro_batches: 1 }\n" for r in range(replicas))
    return (f'name: "replicas"\nmodel {{ preset: "llama2-7b" num_layers: 8 }}\n'
            f"training {{ global_batch_size: {replicas} }}\ncluster {{\n{nodes}}}\n"
            + groups).encode()


def _lcm_resharding(_size: int) -> bytes:
    """Stages of TP 63 and 64 (llama2-70b has 64 heads): 4,032 LCM chunks per transfer,
    8,000 transfers: tens of millions of flows."""
    return ('name: "lcm"\nmodel { preset: "llama2-70b" }\n'
            "training { global_batch_size: 4000 resharding: LCM }\n"
            'cluster { nodes { gpu: "H100-SXM" num_gpus: 127 } }\n'
            f"device_groups {{ id: 0 ranks: [{', '.join(map(str, range(63)))}] pp_stage: 0 "
            "first_layer: 1 last_layer: 40 micro_batch_size: 1 num_micro_batches: 4000 }\n"
            f"device_groups {{ id: 1 ranks: [{', '.join(map(str, range(63, 127)))}] pp_stage: 1 "
            "first_layer: 41 last_layer: 80 micro_batch_size: 1 num_micro_batches: 4000 }\n"
            ).encode()


def _micro_batches(count: int) -> str:
    return (PLAN.replace("num_micro_batches: 4", f"num_micro_batches: {count}")
            .replace("global_batch_size: 8", f"global_batch_size: {2 * count}"))


def _huge_program(_size: int) -> bytes:
    """Over the program-size limit (tens of millions of tasks and flows, about 8 GB to
    evaluate) in a small file: 8 replicas of 4 TP-2 stages, 60,000 micro-batches each."""
    replicas, stages, count = 8, 4, 60_000
    nodes = '  nodes { gpu: "H100-SXM" num_gpus: 8 }\n' * (replicas * stages * 2 // 8)
    groups = "".join(
        f"device_groups {{ id: {r * stages + s} ranks: [{2 * (r * stages + s)}, "
        f"{2 * (r * stages + s) + 1}] pp_stage: {s} dp_replica: {r} first_layer: {8 * s + 1} "
        f"last_layer: {8 * s + 8} micro_batch_size: 1 num_micro_batches: {count} }}\n"
        for r in range(replicas) for s in range(stages))
    return (f'name: "huge-program"\nmodel {{ preset: "llama2-7b" seq_length: 1024 }}\n'
            f"training {{ global_batch_size: {replicas * count} total_tokens: 1e9 }}\n"
            f"cluster {{\n{nodes}}}\n{groups}").encode()


def _many_stages(_size: int) -> bytes:
    """Valid and large: one pipeline of 1,024 one-layer stages on 1,024 GPUs."""
    stages = 1024
    nodes = "".join('  nodes { gpu: "H100-SXM" num_gpus: 8 }\n' for _ in range(stages // 8))
    groups = "".join(
        f"device_groups {{ id: {s} ranks: [{s}] pp_stage: {s} first_layer: {s + 1} "
        f"last_layer: {s + 1} micro_batch_size: 1 num_micro_batches: 4 }}\n"
        for s in range(stages))
    return (f'name: "stages"\nmodel {{ preset: "llama2-7b" num_layers: {stages} }}\n'
            f"training {{ global_batch_size: 4 }}\ncluster {{\n{nodes}}}\n" + groups).encode()


def _large_sweep(size: int) -> bytes:
    values = ", ".join(str(2 * i + 2) for i in range(max(1, size // 9)))
    return SWEEP.replace("global_batch_size: 64", f"global_batch_size: [{values}]").encode()


def _large_catalog(size: int) -> bytes:
    entry = ("  gpu{i}: {{peak_bf16_tflops: 989, hbm_gib: 80, hbm_tb_per_s: 3.35, "
             "scale_up_gbps: 3600, scale_up_latency_ns: 20, scale_up_link: nvlink4, "
             "pcie_gbps: 512, pcie_latency_ns: 287, pcie_link: pcie5, default_nic: cx7, "
             "capex_usd: 26250, power_w: 700, cloud_usd_per_hour: 0, num_sms: 132, "
             "gemm_efficiency: 0.7, flash_attention_efficiency: 0.6, hbm_efficiency: 0.9}}\n")
    count = max(1, size // len(entry))
    return ("gpus:\n" + "".join(entry.format(i=i) for i in range(count))).encode()


def _many_scalars(size: int) -> bytes:
    return _repeat("", "- 1\n", "", size).encode()


def _random_bytes(size: int) -> bytes:
    return random.Random(17).randbytes(size)


def _json_plan(size: int, patch: Callable[[dict], None]) -> bytes:
    from xsweep.spec.plan_io import plan_from_text, plan_to_json

    document = json.loads(plan_to_json(plan_from_text(PLAN)))
    patch(document)
    return json.dumps(document).encode()


def _set(path: tuple, value: object) -> Callable[[dict], None]:
    def patch(document: dict) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return patch


def _raw_json_number(size: int) -> bytes:
    text = _json_plan(size, _set(("cluster", "nodes", 0, "numGpus"), 7)).decode()
    digits = "9" * max(1, size - len(text))
    return text.replace('"numGpus": 7', f'"numGpus": {digits}').encode()


HOSTILE: tuple[Hostile, ...] = (
    # -- structure of the file ------------------------------------------------------------
    Hostile("yaml billion laughs", ".yaml", _billion_laughs),
    Hostile("yaml deep nesting", ".yaml", _deep("[", "]")),
    Hostile("yaml many scalars", ".yaml", _many_scalars),
    Hostile("json deep nesting", ".json", _deep("[", "]")),
    Hostile("pbtxt deep nesting", ".pbtxt", _deep("model { ", "} ")),
    Hostile("json bare number", ".json", _text("5\n")),
    Hostile("yaml duplicate key", ".yaml", _text(SWEEP + "name: again\n")),
    Hostile("json duplicate key", ".json",
            lambda size: _json_plan(size, lambda d: None).replace(b'{"name"', b'{"name": "x", "name"')),
    Hostile("json field in both spellings", ".json",
            lambda size: _json_plan(size, _set(("training", "global_batch_size"), 8))),
    Hostile("yaml python tag", ".yaml", _text("gpus: !!python/object/apply:os.system [true]\n")),
    # -- encodings ----------------------------------------------------------------------
    Hostile("binary yaml", ".yaml", _random_bytes),
    Hostile("binary pbtxt", ".pbtxt", _random_bytes),
    Hostile("binary json", ".json", _random_bytes),
    Hostile("utf-16 plan", ".pbtxt", lambda _size: PLAN.encode("utf-16")),
    Hostile("latin-1 plan", ".pbtxt", lambda _size: plan_with('"hostile-base"', '"caf\xe9"')
            .encode("latin-1")),
    # -- numbers ------------------------------------------------------------------------
    Hostile("pbtxt long integer", ".pbtxt",
            lambda size: plan_with("num_gpus: 8", "num_gpus: " + "9" * max(1, size - len(PLAN)))
            .encode()),
    Hostile("json long integer", ".json", _raw_json_number),
    Hostile("yaml long integer", ".yaml",
            lambda size: f"gpus:\n  H100: {{hbm_gib: {'9' * max(1, size - 30)}}}\n".encode()),
    Hostile("nan latency", ".pbtxt", _text(plan_with("num_gpus: 8 }",
                                                     "num_gpus: 8 scale_up { latency_ns: nan } }"))),
    Hostile("infinite oversubscription", ".pbtxt",
            _text(plan_with("}\ndevice_groups", "fabric { oversubscription: inf } }\ndevice_groups")
                  )),
    Hostile("json NaN tokens", ".json",
            lambda size: _json_plan(size, _set(("training", "totalTokens"), "NaN"))),
    Hostile("catalog NaN", ".yaml", _text("gpus:\n  H100: {hbm_gib: .nan}\n")),
    Hostile("catalog infinity", ".yaml", _text("nics:\n  cx7: {bandwidth_gbps: .inf}\n")),
    Hostile("unknown schedule value", ".pbtxt",
            _text(plan_with("total_tokens: 1e9", "total_tokens: 1e9 schedule: 7"))),
    Hostile("sweep infinite tokens", ".yaml",
            _text(SWEEP.replace("global_batch_size: 64", "global_batch_size: 64, "
                                "total_tokens: .inf"))),
    # -- sizes --------------------------------------------------------------------------
    Hostile("huge num_gpus", ".pbtxt", _text(plan_with("num_gpus: 8", f"num_gpus: {INT32_MAX}"))),
    Hostile("many nodes", ".pbtxt", _many_nodes),
    Hostile("many device groups", ".pbtxt", _many_groups),
    Hostile("long ranks list", ".pbtxt", _long_ranks),
    Hostile("huge micro-batch count", ".pbtxt", _text(_micro_batches(INT32_MAX // 2))),
    Hostile("program over the limit", ".pbtxt", _huge_program),
    Hostile("many replicas", ".pbtxt", _many_replicas, valid=True),
    Hostile("lcm resharding blow-up", ".pbtxt", _lcm_resharding),
    Hostile("huge layer count", ".pbtxt",
            _text(plan_with('preset: "llama2-7b"', f'preset: "llama2-7b" num_layers: {INT32_MAX}'))),
    # -- large but valid ----------------------------------------------------------------
    Hostile("many stages", ".pbtxt", _many_stages, valid=True),
    Hostile("most GPUs", ".pbtxt", _most_gpus, valid=True),
    Hostile("large sweep axis", ".yaml", _large_sweep, valid=True),
    Hostile("large catalog", ".yaml", _large_catalog, valid=True),
)
