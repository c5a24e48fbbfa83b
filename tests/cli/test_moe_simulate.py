"""A Mixtral-8x7B plan with expert parallelism through ``xsweep simulate``."""

from __future__ import annotations

import json

import pytest

import xsweep
from xsweep.spec.plan_io import plan_from_text


def test_mixtral_plan_simulates_with_its_assumptions_stated(run_xsweep, spaces_dir):
    plan = spaces_dir / "mixtral-8x7b-ep8.pbtxt"
    result = run_xsweep("simulate", plan, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["moe"] == {"experts": 8, "top_k": 2, "expert_parallel": 8,
                          "experts_per_gpu": 1, "ep_groups_over": "tp", "ep_groups_span": 1,
                          "assumed_imbalance": 1.2,
                          "capacity_factor": 0.0, "dispatcher": "alltoall", "fp8_dispatch": False,
                          "max_nodes": 0}
    assert doc["memory_fits"] and 0 < doc["mfu"] < 1
    # the all-to-alls ride in the TP tasks: their time shows as exposed TP communication
    assert doc["exposed_tp_s_max"] > 0
    text = run_xsweep("simulate", plan).stdout
    assert "EP 8 (1 experts per GPU), dropless" in text
    assert "busiest expert takes 1.2x the mean tokens" in text


def test_expert_parallelism_that_splits_no_experts_is_one_line(run_xsweep, spaces_dir,
                                                                tmp_path):
    path = tmp_path / "ep3.pbtxt"
    path.write_text((spaces_dir / "mixtral-8x7b-ep8.pbtxt").read_text()
                    .replace("expert_parallel: 8", "expert_parallel: 3"))
    result = run_xsweep("simulate", path)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines == [f"{path}: training.expert_parallel: must divide the model's num_experts "
                     "(8) (got 3)"]


def _simulated_as_evaluated(run_xsweep, plan) -> dict:
    """``xsweep simulate --json`` of a shipped EP-8 plan (one expert per GPU, fits, its
    all-to-alls in the exposed TP time), checked against ``xsweep.evaluate`` at the exact
    level: the same iteration time. Returns the simulation's document."""
    result = run_xsweep("simulate", plan, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["moe"]["expert_parallel"] == 8 and doc["moe"]["experts_per_gpu"] == 1
    assert doc["memory_fits"] and doc["exposed_tp_s_max"] > 0
    exact = xsweep.evaluate([str(plan)], level="exact", dtype="float64")
    assert float(exact["iteration_time_s"].values.ravel()[0]) == pytest.approx(
        doc["iteration_time_s"], rel=1e-9)
    return doc


def test_ep_across_replicas_plan_simulates_and_evaluates_alike(run_xsweep, spaces_dir):
    """The shipped plan with EP 8 = TP 2 x 4 replicas (its EP groups span two nodes):
    ``xsweep simulate`` runs it, and ``xsweep.evaluate`` at the exact level gives the
    simulator's iteration time; keeping each EP group inside one node is faster (its
    all-to-alls stay on NVLink, though its expert rings then cross the NICs)."""
    plan = spaces_dir / "mixtral-8x7b-ep-dp.pbtxt"
    doc = _simulated_as_evaluated(run_xsweep, plan)
    assert (doc["moe"]["ep_groups_over"], doc["moe"]["ep_groups_span"]) == ("replicas", 4)
    assert "1 experts per GPU; EP groups over 4 replicas)" in run_xsweep("simulate", plan).stdout
    within = plan.read_text()
    for r in range(8):  # replicas 0-3 of a stage on one node, 4-7 on the next
        for stage in range(2):
            old = 2 * stage * 8 + (r % 2) * 8 + 2 * (r // 2)
            new = (2 * stage + r // 4) * 8 + 2 * (r % 4)
            within = within.replace(f"ranks: [{old}, {old + 1}] pp_stage: {stage} "
                                    f"dp_replica: {r}\n",
                                    f"ranks: [{new}, {new + 1}] pp_stage: {stage} "
                                    f"dp_replica: {r}\n")
    assert within != plan.read_text()
    near = xsweep.evaluate([plan_from_text(within)], level="exact", dtype="float64")
    assert float(near["iteration_time_s"].values.ravel()[0]) < doc["iteration_time_s"]


def test_tp_one_fp8_plan_simulates_and_evaluates_alike(run_xsweep, spaces_dir, tmp_path):
    """The shipped plan at TP 1 in FP8 (EP 8 over 8 replicas of each stage): ``xsweep
    simulate`` names the all-to-alls with the exposed TP time they ride, ``xsweep.evaluate``
    at the exact level gives the simulator's iteration time, and the same plan in BF16 is
    slower."""
    plan = spaces_dir / "mixtral-8x7b-ep-tp1-fp8.pbtxt"
    doc = _simulated_as_evaluated(run_xsweep, plan)
    assert "exposed tp + a2a comm" in run_xsweep("simulate", plan).stdout
    bf16 = tmp_path / "bf16.pbtxt"
    bf16.write_text(plan.read_text().replace("precision: FP8", "precision: BF16"))
    assert "precision: BF16" in bf16.read_text()
    slower = json.loads(run_xsweep("simulate", bf16, "--json").stdout)
    assert slower["iteration_time_s"] > doc["iteration_time_s"]


def test_deepep_dispatch_simulates_faster_and_says_so(run_xsweep, spaces_dir, tmp_path):
    """The shipped TP-1 plan (EP groups of 8 replicas over two nodes) with DeepEP's
    dispatch: ``xsweep simulate`` states it, ``xsweep.evaluate`` at the exact level agrees,
    and it is faster than the flat all-to-all, whose NIC bytes per token it cuts."""
    flat = spaces_dir / "mixtral-8x7b-ep-tp1-fp8.pbtxt"
    plan = tmp_path / "deepep.pbtxt"
    plan.write_text(flat.read_text().replace("training {", "training {\n  moe_dispatcher: DEEPEP"))
    doc = _simulated_as_evaluated(run_xsweep, plan)
    assert doc["moe"]["dispatcher"] == "deepep"
    assert "dropless, DeepEP dispatch across nodes" in run_xsweep("simulate", plan).stdout
    before = json.loads(run_xsweep("simulate", flat, "--json").stdout)
    assert before["moe"]["dispatcher"] == "alltoall"
    assert doc["iteration_time_s"] < before["iteration_time_s"]


def test_fp8_dispatch_simulates_faster_and_says_so(run_xsweep, spaces_dir, tmp_path):
    """The shipped TP-1 plan (FP8) dispatching its tokens in FP8: ``xsweep simulate`` states
    it, ``xsweep.evaluate`` at the exact level agrees, and it is faster than dispatching in
    BF16; the same plan in BF16 is refused in one line naming the field."""
    base = spaces_dir / "mixtral-8x7b-ep-tp1-fp8.pbtxt"
    plan = tmp_path / "fp8-dispatch.pbtxt"
    plan.write_text(base.read_text().replace("training {", "training {\n  moe_fp8_dispatch: true"))
    doc = _simulated_as_evaluated(run_xsweep, plan)
    assert doc["moe"]["fp8_dispatch"] is True
    assert "dropless, tokens dispatched in FP8" in run_xsweep("simulate", plan).stdout
    before = json.loads(run_xsweep("simulate", base, "--json").stdout)
    assert doc["iteration_time_s"] < before["iteration_time_s"]
    bf16 = tmp_path / "bf16.pbtxt"
    bf16.write_text(plan.read_text().replace("precision: FP8", "precision: BF16"))
    refused = run_xsweep("simulate", bf16)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "training.moe_fp8_dispatch" in refused.stderr and "needs precision FP8" in refused.stderr


def _exact(plan) -> float:
    out = xsweep.evaluate([str(plan)], level="exact", dtype="float64")
    return float(out["iteration_time_s"].values.ravel()[0])


def test_fsdp_with_ep_across_replicas_simulates_and_evaluates_alike(run_xsweep, spaces_dir,
                                                                    tmp_path):
    """The shipped EP-across-replicas plan under FSDP (ZeRO-3): ``xsweep simulate`` runs it
    (each layer's experts gathered and reduced over the two replicas that hold them),
    ``xsweep.evaluate`` at the exact level agrees, and it holds less per GPU than under
    ZeRO-1."""
    base = spaces_dir / "mixtral-8x7b-ep-dp.pbtxt"
    plan = tmp_path / "fsdp.pbtxt"
    plan.write_text(base.read_text().replace("zero_stage: 1", "zero_stage: 3"))
    assert "zero_stage: 3" in plan.read_text()
    result = run_xsweep("simulate", plan, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert _exact(plan) == pytest.approx(doc["iteration_time_s"], rel=1e-9)
    zero1 = json.loads(run_xsweep("simulate", base, "--json").stdout)
    assert doc["memory_per_gpu_gib"] < zero1["memory_per_gpu_gib"]


def test_ep_folding_cp_ranks_simulates_and_says_so(run_xsweep, catalog, tmp_path):
    """Mixtral at TP 2 x CP 2 on two replicas, EP 4 over each group's two CP ranks:
    ``xsweep simulate`` states where the EP groups lie, and ``xsweep.evaluate`` at the
    exact level agrees; so with EP 8, over both replicas' whole groups."""
    from tests.plan.test_cp_moe import cp_plan
    from xsweep.spec.plan_io import plan_to_text

    def simulated(name: str, plan) -> tuple:
        path = tmp_path / name
        path.write_text(plan_to_text(plan))
        result = run_xsweep("simulate", path, "--json")
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert _exact(path) == pytest.approx(doc["iteration_time_s"], rel=1e-9)
        return doc, path

    doc, path = simulated("cp-fold.pbtxt", cp_plan(2, 4, replicas=2))
    assert (doc["moe"]["ep_groups_over"], doc["moe"]["ep_groups_span"]) == ("cp_ranks", 2)
    assert "EP 4 (2 experts per GPU; EP groups over 2 CP ranks)" in run_xsweep(
        "simulate", path).stdout
    doc, _ = simulated("cp-wide.pbtxt", cp_plan(2, 8, replicas=2))
    assert (doc["moe"]["ep_groups_over"], doc["moe"]["ep_groups_span"]) == ("replicas", 2)
