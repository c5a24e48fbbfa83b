"""The batched driver: metrics, order, chunking, errors, and sharding over devices."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from tests.support.paths import REPO_ROOT
from xsweep import metrics, timeline
from xsweep.errors import InputError
from xsweep.evaluator import default_evaluator
from xsweep.evaluator.encode import encode
from xsweep.evaluator.executables import Executables, unpack
from xsweep.evaluator.shapes import batch_shape, predicted_size, program_sizes
from xsweep.sim import summary


def test_metrics_equal_the_simulators(random_programs, random_sims, exact_float64):
    widest = max(p.num_streams for p in random_programs)
    for i, (p, s) in enumerate(zip(random_programs, random_sims, strict=True)):
        expected = summary(p, s)
        for name, value in expected.items():
            assert exact_float64[name][i] == pytest.approx(value, rel=1e-9, abs=1e-12), name
        per_stream = timeline.stream_metrics(np, timeline.metric_index(p), s.task_start_s,
                                            s.task_end_s)
        for name in metrics.STREAM_METRICS:
            assert exact_float64[name].shape == (len(random_programs), widest)
            np.testing.assert_allclose(exact_float64[name][i, : p.num_streams], per_stream[name],
                                       rtol=1e-9, atol=1e-12, err_msg=name)
            assert np.all(exact_float64[name][i, p.num_streams:] == 0), name


def test_order_and_chunking_do_not_change_results(random_programs, bound_float32):
    order = np.random.default_rng(0).permutation(len(random_programs))[:20]
    calls = []
    out = default_evaluator().run([random_programs[i] for i in order], "bound", chunk_size=8,
                            with_metrics=False, progress=lambda *a: calls.append(a))
    np.testing.assert_array_equal(out["iteration_time_s"], bound_float32["iteration_time_s"][order])
    done = [d for d, _ in calls]
    assert len(calls) >= 3 and done == sorted(set(done)) and calls[-1] == (20, 20)
    assert np.all(out["padding_overhead"] >= 0)


@pytest.mark.parametrize(("field", "value"), [("level", "fluid"), ("dtype", "float16")])
def test_bad_level_or_dtype(random_programs, field, value):
    with pytest.raises(InputError, match=field):
        default_evaluator().run(random_programs[:1], **{field: value})


_SHARDED = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, sys.argv[1])
    from tests.support.programs import random_program
    from xsweep.evaluator import Evaluator
    programs = [random_program(seed) for seed in range(6)]  # 6 rows: padded to 8 on 4 devices
    worst = {}
    for level in ("bound", "exact"):
        many = Evaluator().run(programs, level, chunk_size=8)
        one = Evaluator(devices=jax.devices()[:1]).run(programs, level, chunk_size=8)
        # everything but the padding overhead, which counts the extra rows
        worst[level] = max(float(np.max(np.abs(many[k] - one[k]))) for k in one
                           if k != "padding_overhead")
    print(json.dumps({"devices": jax.device_count(), "worst": worst}))
""")


def test_sharded_equals_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    run = subprocess.run([sys.executable, "-c", _SHARDED, str(REPO_ROOT)], env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report == {"devices": 4, "worst": {"bound": 0.0, "exact": 0.0}}


def test_no_programs():
    out = default_evaluator().run([], "exact")
    assert out["iteration_time_s"].shape == (0,) and out["status"].shape == (0,)


def test_variants_one_after_another_equal_single_calls(random_programs, exact_float64):
    """A chunk of 64 variants run by ``lax.map`` gives what one variant per call gives."""
    middle = np.argsort(predicted_size(program_sizes(random_programs)))[30:34]
    alone = default_evaluator().run([random_programs[i] for i in middle], "exact", dtype="float64",
                              chunk_size=1, with_metrics=False, task_times=True)
    for name, value in alone.items():
        if name in ("start_s", "end_s"):
            for row, i in enumerate(middle):
                n = random_programs[i].num_tasks
                np.testing.assert_array_equal(value[row, :n], exact_float64[name][i, :n], name)
        elif name != "padding_overhead":
            np.testing.assert_array_equal(value, exact_float64[name][middle], err_msg=name)


def test_rows_one_after_another_skip_padded_rows_wherever_they_lie(random_programs):
    """The exact level's rows run one after another visit only rows that hold a program:
    with padded rows before, between and after them, each program's row gives what it
    gives among programs alone, and a padded row gives zeros."""
    programs = random_programs[:3]
    shape = batch_shape(program_sizes(programs))
    first = encode(programs, shape, num_variants=3)
    # rows 3-5 padded as the encoder pads them, then moved before and between the programs
    mixed = jax.tree.map(lambda x: x[[3, 0, 1, 4, 5, 2]],
                         encode(programs, shape, num_variants=6))
    kernel, sharding = Executables(jax.devices()[:1]).kernel(
        "exact", (shape.tasks + 1, shape.flows), 64, False, False)
    alone, together = (unpack(kernel(*jax.device_put((arrays, None, None), sharding)), False)
                       for arrays in (first, mixed))
    for name, value in together.items():
        np.testing.assert_array_equal(value[[1, 2, 5]], alone[name], err_msg=name)
        assert not np.any(value[[0, 3, 4]]), name
    assert np.all(alone["steps"] > 0)


def test_bound_metrics_are_the_metrics_of_its_times(random_programs):
    programs = random_programs[:12]
    out = default_evaluator().run(programs, "bound", dtype="float64", task_times=True)
    for i, p in enumerate(programs):
        n = p.num_tasks
        per_stream = timeline.stream_metrics(np, timeline.metric_index(p), out["start_s"][i, :n],
                                            out["end_s"][i, :n])
        for name in metrics.STREAM_METRICS:
            np.testing.assert_allclose(out[name][i, : p.num_streams], per_stream[name],
                                       rtol=1e-12, atol=1e-15, err_msg=name)


def test_repeated_and_copied_programs_agree(random_programs):
    """Host work kept per program object: a repeat and a fresh copy give the same rows."""
    program = random_programs[5]
    programs = [program, dataclasses.replace(program), program, random_programs[6]]
    out = default_evaluator().run(programs, "bound", task_times=True)
    for name, value in out.items():
        np.testing.assert_array_equal(value[1], value[0], err_msg=name)
        np.testing.assert_array_equal(value[2], value[0], err_msg=name)
