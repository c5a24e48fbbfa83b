"""A Mixtral-8x7B plan with expert parallelism through ``xsweep simulate``."""

from __future__ import annotations

import json


def test_mixtral_plan_simulates_with_its_assumptions_stated(run_xsweep, spaces_dir):
    plan = spaces_dir / "mixtral-8x7b-ep8.pbtxt"
    result = run_xsweep("simulate", plan, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["moe"] == {"experts": 8, "top_k": 2, "expert_parallel": 8,
                          "experts_per_gpu": 1, "assumed_imbalance": 1.2,
                          "capacity_factor": 0.0}
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
