"""Programs prepared by worker processes travel with a stand-in for their structure
(:mod:`xsweep.workers.prepare`): the receiving side keeps one stand-in per structure, so
pieces prepared one after another share what is derived from a structure there."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

import xsweep
from tests.support.paths import REPO_ROOT
from xsweep.pipeline import prepare_valid
from xsweep.plan.builder import random_plan
from xsweep.plan.lower import TemplateCache
from xsweep.spec import load_catalog
from xsweep.workers.prepare import Received, ShippedStructure, shippable


def _programs(seeds, templates):
    catalog = load_catalog()
    return [prepare_valid(random_plan(seed), catalog, templates=templates).program
            for seed in seeds]


def test_pieces_of_one_structure_share_one_stand_in_where_they_arrive():
    templates = TemplateCache()
    first, second = _programs([1, 2], templates), _programs([1, 2, 1], templates)
    received = Received()
    pieces = [received.programs(pickle.loads(pickle.dumps(shippable(piece))))
              for piece in (first, second)]
    structures = [[p.structure for p in piece] for piece in pieces]
    assert all(isinstance(s, ShippedStructure) for piece in structures for s in piece)
    # seed 1's structure: one object in both pieces, and seed 2's another
    assert structures[0][0] is structures[1][0] is structures[1][2]
    assert structures[0][1] is structures[1][1]
    assert structures[0][0] is not structures[0][1]
    assert structures[0][0].flow_classes is not None
    # numbers stay each program's own
    for got, sent in zip(pieces[1], second, strict=True):
        assert (got.task_duration_s == sent.task_duration_s).all()


def test_structures_another_template_built_are_not_confused():
    """A template built again (its cache dropped it) is a new structure to the receiver;
    the stand-ins kept are the last ones met, up to the bytes of their programs (the last
    one met kept whatever its size)."""
    program = _programs([3], TemplateCache())[0]
    again = _programs([3], TemplateCache())[0]
    received = Received(kept_bytes=1)
    a, b = (received.programs(pickle.loads(pickle.dumps(shippable([p]))))[0]
            for p in (program, again))
    assert a.structure.key != b.structure.key and a.structure is not b.structure
    assert list(received._known) == [b.structure.key]
    roomy = Received()
    for p in (program, again):
        roomy.programs(pickle.loads(pickle.dumps(shippable([p]))))
    assert len(roomy._known) == 2


_FORKED = """
import os, pickle, sys
from xsweep.pipeline import prepare_valid
from xsweep.plan.builder import random_plan
from xsweep.plan.lower import TemplateCache
from xsweep.spec import load_catalog
from xsweep.workers.prepare import shippable

catalog, templates = load_catalog(), TemplateCache()
program = lambda seed: prepare_valid(random_plan(seed), catalog, templates=templates).program
first = program(4)
mine = shippable([first])[0].structure.key
assert shippable([first])[0].structure.key == mine  # one template, one key
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child ships a structure of its own
    os.write(write, pickle.dumps(shippable([program(5)])[0].structure.key))
    os._exit(0)
os.close(write)
with os.fdopen(read, "rb") as stream:
    theirs = pickle.loads(stream.read())
os.waitpid(pid, 0)
assert "jax" not in sys.modules
print(theirs[:2] != mine[:2] and theirs[0] != os.getpid() and mine[0] == os.getpid())
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_names_its_structures_apart_from_its_parent():
    """A worker forked from a process that shipped structures (its counter copied) names
    its own apart (run in a process of its own, without JAX's threads)."""
    run = subprocess.run([sys.executable, "-c", _FORKED], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes")
def test_an_accelerator_host_derives_a_structure_once_whatever_piece_brings_it():
    """Plans prepared by workers in many pieces (an accelerator host's path, on CPU
    devices): what the host derives from a structure is kept once per structure and
    worker (each worker lowers the structures it meets), not once per piece (six pieces
    each bring both structures)."""
    plans = [random_plan(seed) for seed in (6, 7)] * 6
    host = xsweep.Evaluator(platform="gpu", processes=2, parallel_min=1)
    try:
        host.evaluate(plans, level="bound")  # 6 pieces of 2 plans
        kept = [owner for owner in list(host._derived._memo.keys())
                if isinstance(owner, ShippedStructure)]
    finally:
        host.close()
    assert 2 <= len(kept) <= 2 * 2
