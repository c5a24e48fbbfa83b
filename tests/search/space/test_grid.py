"""The grid's names of the axes (the dataset's dimensions) and its work groups."""

from __future__ import annotations

import numpy as np

from tests.support.sweeps import MINIMAL
from xsweep.search.space.grid import Grid, axis_names
from xsweep.spec import load_sweep, sweep_from_dict


def test_axis_names_are_identifiers_a_person_can_type(spaces_dir):
    names = axis_names(load_sweep(spaces_dir / "llama3-70b-512gpu.yaml"))
    assert names["cluster.pools[0].nodes"] == "h100_sxm_nodes"
    assert names["parallelism.tp.H200"] == "h200_tp"
    assert names["parallelism.pp"] == "pp" and names["training.schedule"] == "schedule"
    assert names["cost.pricing"] == "pricing"
    assert all(name.isidentifier() for name in names.values())
    assert len(set(names.values())) == len(names)


def test_names_that_would_clash_spell_their_path():
    # two GPUs (of a user catalog, say) whose names differ only in punctuation
    document = MINIMAL | {"cluster": {"pools": [{"gpu": "X-1", "nodes": [0, 1]},
                                                {"gpu": "X_1", "nodes": [0, 1]}]},
                          "parallelism": {"tp": {"X-1": 2, "X_1": 2}}}
    names = axis_names(sweep_from_dict(document))
    assert names["cluster.pools[0].nodes"] == "cluster_pools_0_nodes"
    assert names["cluster.pools[1].nodes"] == "cluster_pools_1_nodes"
    assert names["parallelism.tp.X-1"] == "parallelism_tp_x_1"
    assert names["parallelism.pp"] == "pp"


def test_points_fall_into_work_groups_by_their_work_values():
    document = MINIMAL | {"model": ["llama2-7b", "llama2-13b"],
                          "training": {"global_batch_size": [32, 64]}}
    grid = Grid(sweep_from_dict(document))
    assert grid.work == ("model", "training.global_batch_size") and grid.groups == 4
    groups = grid.group_of(np.arange(grid.size))
    for index, group in enumerate(groups.tolist()):
        point = grid.point(index)
        assert grid.group_values(group) == {
            "model": point["model"], "training.global_batch_size": point["training.global_batch_size"]}
    assert np.bincount(groups).tolist() == [grid.size // 4] * 4
    across = Grid(sweep_from_dict(document | {"fronts": "across"}))
    assert across.groups == 1 and not across.group_of(np.arange(across.size)).any()
