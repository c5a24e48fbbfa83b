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


def _some(draw, st, values: list, most: int = 2):
    """One value or a list of up to ``most`` distinct ``values`` (an axis)."""
    chosen = draw(st.lists(st.sampled_from(values), min_size=1, max_size=most, unique=True))
    return chosen[0] if len(chosen) == 1 else chosen


def random_sweeps():
    """A hypothesis strategy of sweep documents that reach every rule of the grid planner:
    one or two pools (some of 0 nodes), TP degrees that do not fit a node or the heads,
    stages beyond the layers, batches that do not split, interleaving, recompute, sequence
    parallelism, flash attention, ZeRO 0, 1 and 3, BF16 and FP8, TP overlap, context
    parallelism, both pipeline mixes and layer splits.
    Each axis takes one or two values, so a grid has at most a few thousand points."""
    from hypothesis import strategies as st

    @st.composite
    def documents(draw):
        gpus = draw(st.lists(st.sampled_from(["H100-SXM", "A100-40GB", "A100-80GB", "B200"]),
                             min_size=1, max_size=2, unique=True))
        pools = [{"gpu": gpu, "nodes": _some(draw, st, [0, 1, 2, 4]),
                  "gpus_per_node": _some(draw, st, [4, 8], 1)} for gpu in gpus]
        return {
            "name": "random",
            "model": draw(st.sampled_from(["llama2-7b", "llama3-8b", "llama2-70b",
                                           "gpt3-175b"])),
            "training": {
                "global_batch_size": _some(draw, st, [1, 4, 16, 64, 66, 96]),
                "schedule": _some(draw, st, ["gpipe", "1f1b"]),
                "recompute": _some(draw, st, ["none", "selective", "full"]),
                "sequence_parallel": _some(draw, st, [False, True]),
                "flash_attention": _some(draw, st, [False, True]),
                "virtual_pipeline_stages": _some(draw, st, [1, 2, 3, 4, 32]),
                "zero_stage": _some(draw, st, [0, 1, 3]),
                "precision": _some(draw, st, ["bf16", "fp8"]),
                "tp_comm_overlap": _some(draw, st, [False, True]),
                "pp_p2p_overlap": _some(draw, st, [True, False]),
                "fp8_param_gather": _some(draw, st, [False, True]),
                "total_tokens": 1e9,
            },
            "cluster": {"pools": pools},
            "parallelism": {
                "tp": {gpu: _some(draw, st, [1, 2, 3, 4, 8, 16]) for gpu in gpus},
                "pp": _some(draw, st, [1, 2, 3, 4, 8, 33]),
                "cp": _some(draw, st, [1, 2, 4], 1),
                "micro_batch_size": _some(draw, st, [1, 2, 3, 4, 8]),
                "pipeline_mix": _some(draw, st, ["separate", "mixed"]),
                "layer_split": _some(draw, st, ["proportional", "even"]),
            },
        }

    return documents()
