"""Compare the three resharding schemes on the paper's asymmetric stage pairs.

One pipeline of two stages: an H100 stage (TP = s) feeding an A100 stage (TP = d),
Llama-2-7B, layers split 20/12. Prints iteration time and pipeline bubble per
scheme, from the exact simulator.

    python benchmarks/reshard_compare.py
"""

from __future__ import annotations

from xsweep.plan.analysis import analyze
from xsweep.plan.builder import NodeReq, ReplicaReq, StageReq, build_plan
from xsweep.plan.lower import lower
from xsweep.plan.stack import Stack
from xsweep.sim import simulate, summary
from xsweep.spec import load_catalog

PAIRS = ((6, 4), (8, 1), (4, 4))
SCHEMES = ("lcm", "hetauto", "alpacomm")


def pair_plan(src_tp: int, dst_tp: int, scheme: str, micro_batches: int = 8):
    nodes = [NodeReq("H100-SXM", 8), NodeReq("A100-40GB", 8)]
    stages = (StageReq("H100-SXM", src_tp, 20), StageReq("A100-40GB", dst_tp, 12))
    return build_plan(f"h100x{src_tp}-a100x{dst_tp}-{scheme}", "llama2-7b", nodes,
                      [ReplicaReq(stages, 1, micro_batches)], schedule="1f1b",
                      resharding=scheme, seq_length=2048, stack=Stack(recompute="full"))


def main() -> None:
    catalog = load_catalog()
    print(f"{'pair':<18}{'scheme':<10}{'iteration s':>12}{'bubble s (mean)':>17}"
          f"{'exposed reshard s':>19}{'transfers':>10}")
    for s, d in PAIRS:
        for scheme in SCHEMES:
            a = analyze(pair_plan(s, d, scheme), catalog)
            program = lower(a)
            m = summary(program, simulate(program))
            print(f"{f'H100x{s}->A100x{d}':<18}{scheme:<10}{m['iteration_time_s']:>12.5f}"
                  f"{m['bubble_s_mean']:>17.5f}{m['exposed_reshard_s_mean']:>19.6f}"
                  f"{len(a.reshards[0].transfers):>10}")


if __name__ == "__main__":
    main()
