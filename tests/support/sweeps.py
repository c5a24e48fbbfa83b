"""Small sweeps the tests of several files start from."""

from __future__ import annotations

import copy

#: The smallest sweep document the schema accepts, with one swept axis (TP).
MINIMAL = {
    "name": "tiny",
    "model": "llama2-7b",
    "training": {"global_batch_size": 32},
    "cluster": {"pools": [{"gpu": "H100", "nodes": 1}]},
    "parallelism": {"tp": {"H100": [2, 4]}},
}


def with_change(path: str, value) -> dict:
    """MINIMAL with the dotted ``path`` set to ``value``."""
    document = copy.deepcopy(MINIMAL)
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return document


#: A study's space, as its file holds it: 2 x 2 x 3 x 2 x 2 x 2 = 96 points of Llama-2-7B on one
#: or two H100 nodes; the node count and the stages are ranges.
TINY = """\
name: tiny-search
model: llama2-7b
training: {global_batch_size: 16, schedule: [gpipe, 1f1b], total_tokens: 1.0e+11}
cluster:
  pools: [{gpu: H100-SXM, nodes: {low: 1, high: 2}}]
parallelism:
  tp: {H100-SXM: [2, 4, 8]}
  pp: {low: 1, high: 2}
  micro_batch_size: [1, 2]
  pipeline_mix: [separate, mixed]
objectives: [iteration_time_s, cost_per_run_usd]
"""
