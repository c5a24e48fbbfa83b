"""``benchmarks/real_runs.py --p2p-sensitivity`` without its simulations (minutes, run by
hand): the plans it simulates with overlapped and with blocking pipeline sends are the
shipped plan with ``training.pp_p2p_overlap`` cleared or false and nothing else changed,
made in memory (the file's bytes stay as they were); the runs it covers are every shipped
real run with more than one pipeline stage, each under a profile whose stack's behaviour
it states, and each plan ships what its stack did."""

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


def test_overlapped_copy_clears_the_field_and_leaves_the_file(catalog):
    real_runs = _real_runs()
    path = SPACES / "megatron" / "gpt-39.1b.pbtxt"  # shipped: waited for, as its stack did
    before = path.read_bytes()
    shipped = load_plan(path, catalog)
    assert shipped.training.HasField("pp_p2p_overlap") and not shipped.training.pp_p2p_overlap
    overlapped = real_runs.run_plan(path, catalog, "overlapped")
    assert not overlapped.message.training.HasField("pp_p2p_overlap")
    assert overlapped.training.stack.pp_p2p_overlap  # unset resolves to overlapped
    rest = type(shipped)()
    rest.CopyFrom(overlapped.message)
    rest.training.pp_p2p_overlap = False
    assert rest == shipped  # nothing else differs
    waited = real_runs.run_plan(path, catalog, "waited")
    assert waited.message == shipped  # already as shipped
    assert path.read_bytes() == before


def test_every_pipelined_plan_ships_what_its_stack_did(catalog):
    """Megatron-LM 2021 and Megatron-DeepSpeed waited for their pipeline sends, NeMo 24.07
    overlapped them (docs/validation.md, "Pipeline sends: waited for or not"); the plans
    with one stage leave the field unset."""
    real_runs = _real_runs()
    covered = list(real_runs.pipelined_runs(catalog))
    assert {run.split("/")[0] for _, run in covered} == {"megatron", "deepspeed", "published"}
    for profile, run in covered:
        assert real_runs.shipped_sends(catalog, run) == real_runs.STACK_SENDS[profile], run
    pipelined = {run for _, run in covered}
    for path in (SPACES / "megatron").glob("*.pbtxt"):
        if f"megatron/{path.stem}" not in pipelined:
            assert not load_plan(path, catalog).training.HasField("pp_p2p_overlap")
