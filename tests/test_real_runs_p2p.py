"""``benchmarks/real_runs.py --p2p-sensitivity`` without its simulations (minutes, run by
hand): the plan it simulates with blocking pipeline sends is the shipped plan with
``training.pp_p2p_overlap`` false and nothing else changed, made in memory (the file's
bytes stay as they were), and the runs it covers are every shipped real run with more
than one pipeline stage, each under a profile whose stack's behaviour it states."""

from __future__ import annotations

import importlib.util

from tests.support.paths import REPO_ROOT, SPACES
from xsweep.spec import load_plan


def _real_runs():
    spec = importlib.util.spec_from_file_location("real_runs",
                                                  REPO_ROOT / "benchmarks" / "real_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_blocking_copy_sets_the_field_and_leaves_the_file(catalog):
    real_runs = _real_runs()
    path = SPACES / "published" / "nemo-llama2-13b-h100x16.pbtxt"
    before = path.read_bytes()
    shipped = load_plan(path, catalog)
    assert not shipped.training.HasField("pp_p2p_overlap")  # shipped: overlapped (unset)
    blocking = real_runs.blocking_sends_plan(path, catalog)
    assert blocking.message.training.HasField("pp_p2p_overlap")
    assert not blocking.message.training.pp_p2p_overlap
    assert not blocking.training.stack.pp_p2p_overlap  # resolved into the stack
    rest = type(shipped)()
    rest.CopyFrom(blocking.message)
    rest.training.ClearField("pp_p2p_overlap")
    assert rest == shipped  # nothing else differs
    assert path.read_bytes() == before
    assert real_runs.run_plan(path, catalog) == shipped  # the shipped run: the file as is


def test_sensitivity_covers_every_pipelined_real_run(catalog):
    real_runs = _real_runs()
    files = [*(SPACES / "megatron").glob("*.pbtxt"), *(SPACES / "deepspeed").glob("*.pbtxt"),
             *(SPACES / "published").glob("*.pbtxt")]
    pipelined = {f"{path.parent.name}/{path.stem}" for path in files
                 if len({g.pp_stage for g in load_plan(path, catalog).device_groups}) > 1}
    covered = list(real_runs.pipelined_runs(catalog))
    assert {run for _, run in covered} == pipelined and len(covered) == len(pipelined) == 13
    assert {profile for profile, _ in covered} <= set(real_runs.STACK_SENDS)
