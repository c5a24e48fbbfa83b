"""Bad inputs, one per rule a command refuses: file name, content and the field its one-line
error must name (``xsweep check`` runs each; ``xsweep plan`` and ``simulate`` the plans)."""

from __future__ import annotations

# A small valid plan: llama2-7b, node 0 = 4xH100 (ranks 0-3), node 1 = 4xA100 (ranks 4-7),
# one replica of two stages. Each case below breaks one thing in it.
PLAN = """\
name: "base"
model { preset: "llama2-7b" }
training { global_batch_size: 16 }
cluster {
  nodes { gpu: "H100-SXM" num_gpus: 4 }
  nodes { gpu: "A100-40GB" num_gpus: 4 }
}
device_groups { id: 0 ranks: [0, 1] pp_stage: 0 dp_replica: 0
  first_layer: 1 last_layer: 16 micro_batch_size: 2 num_micro_batches: 8 }
device_groups { id: 1 ranks: [4, 5] pp_stage: 1 dp_replica: 0
  first_layer: 17 last_layer: 32 micro_batch_size: 2 num_micro_batches: 8 }
"""

SWEEP = """\
name: bad
model: llama2-7b
training: {global_batch_size: 16}
cluster: {pools: [{gpu: H100, nodes: 1}]}
parallelism: {tp: {H100: 2}, pipelines: 2}
"""


def plan_with(old: str, new: str) -> str:
    assert old in PLAN, old
    return PLAN.replace(old, new, 1)


CASES = {
    "malformed yaml": ("s.yaml", "name: [unclosed\nmodel: x\n", "line 2: invalid YAML"),
    "malformed pbtxt": ("p.pbtxt", 'name: "x"\nmodel {\n', "line 2: Expected"),
    "unknown plan field": ("p.pbtxt", plan_with("global_batch_size: 16",
                                                "global_batch_size: 16 colour: 3"), "colour"),
    "unknown json field": ("p.json", '{"name": "x", "model": {"flavour": 1}}', "flavour"),
    "unknown gpu": ("p.pbtxt", plan_with('"A100-40GB"', '"V100"'), "cluster.nodes[1].gpu"),
    "unknown nic": ("p.pbtxt", plan_with("num_gpus: 4 }", 'num_gpus: 4 nic: "cx99" }'),
                    "cluster.nodes[0].nic"),
    "unknown model preset": ("p.pbtxt", plan_with("llama2-7b", "llama9-1t"), "model.preset"),
    "tp above heads": ("p.pbtxt", plan_with('preset: "llama2-7b"',
                                            'preset: "llama2-7b" num_attention_heads: 1 '
                                            "num_kv_heads: 1"), "device_groups[0].ranks"),
    "layer gap": ("p.pbtxt", plan_with("first_layer: 17", "first_layer: 18"),
                  "device_groups[1].first_layer: layer gap"),
    "layer overlap": ("p.pbtxt", plan_with("first_layer: 17", "first_layer: 12"),
                      "device_groups[1].first_layer: layer overlap"),
    "overlapping ranks": ("p.pbtxt", plan_with("ranks: [4, 5]", "ranks: [1, 4]"),
                          "device_groups[1].ranks: rank already used by device_groups[0]"),
    "rank outside cluster": ("p.pbtxt", plan_with("ranks: [4, 5]", "ranks: [4, 8]"),
                             "device_groups[1].ranks: rank outside"),
    "tp group spans nodes": ("p.pbtxt", plan_with("ranks: [0, 1]", "ranks: [3, 4]"),
                             "device_groups[0].ranks: a TP group must sit in one node"),
    "micro-batches do not add up": ("p.pbtxt", plan_with("global_batch_size: 16",
                                                         "global_batch_size: 20"),
                                    "training.global_batch_size"),
    "zero size": ("p.pbtxt", plan_with("num_gpus: 4 }\n}", "num_gpus: 0 }\n}"),
                  "cluster.nodes[1].num_gpus: must be positive"),
    "negative size": ("p.pbtxt", plan_with("micro_batch_size: 2", "micro_batch_size: -2"),
                      "device_groups[0].micro_batch_size: must be at least 1"),
    "bad sweep key": ("s.yaml", SWEEP, "parallelism.pipelines"),
    "bad catalog key": ("c.yaml", "gpus:\n  H100: {flops: 1}\n", "gpus.H100.flops"),
    "unknown file kind": ("p.txt", "hello\n", "unknown file kind"),
}
