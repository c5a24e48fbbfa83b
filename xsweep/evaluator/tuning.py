"""How each level of the kernels runs on each kind of device: one frozen record per
(platform, level), every knob the driver reads in one place.

Where each figure comes from (the runs that set it, and what was tried instead) is told
in ``docs/performance.md``, "Tuning records"; the CPU figures are measured, the
accelerator's are first guesses until measured on one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xsweep.evaluator.shapes import ladder, power_of_two

PLATFORMS = ("cpu", "gpu")
LEVELS = ("bound", "exact")


@dataclass(frozen=True)
class Tuning:
    """The driver's settings for one level on one platform."""

    platform: str
    level: str
    #: Variants per chunk and device.
    chunk: int
    #: Whether a chunk's variants run vmapped, in lockstep, or one after another (over the
    #: rows that hold one), each in the unbatched kernel whose branches really branch.
    vectorized: bool
    #: Whether the metrics of ``xsweep.timeline`` are computed in the kernels' compiled
    #: call (task times never leave the device) or on the host from the task times.
    metrics_on_device: bool
    #: Cost of one step of the bound's scan in gathered predecessors per variant: it sets
    #: how wide the bound's blocks are (``xsweep.evaluator.blocks``).
    step_cost: int
    #: New compiled shapes one call uses at most (reruns after an overflow aside).
    max_shapes: int
    #: Two groups of variants share a shape only while that costs each at most this many
    #: times its own work (unless a call would need more than ``max_shapes``) ...
    merge_factor: float
    #: ... and a variant runs at an already compiled shape of up to this many times its work.
    reuse: float
    #: Beyond those factors, a group still runs at a larger shape while the work this adds
    #: to it in all stays below this (and the shape costs at most ``MAX_STRETCH`` times its
    #: own): one more executable costs the time to load it.
    spare_work: float
    #: Rows of a chunk at least (a multiple of the devices, up to the chunk size) ...
    min_rows: int
    #: ... growing by this factor up to the chunk size.
    rows_step: int
    #: How a variant's sizes round up into its shape key.
    key_rounding: Callable
    #: Work per row from which a vmapped group is cut into several row counts so that it
    #: pads little: below it a row costs less than the extra calls and executables. An
    #: accelerator never cuts: a call costs its steps' launches, whatever its rows.
    split_work: float = 2**16
    #: Steps of a kernel's loop per iteration of the compiled loop. An accelerator pays a
    #: fixed cost per iteration (a round trip to the host to test the condition); a CPU's
    #: loop compiles whole and pays none.
    unroll: int = 1


#: A group of variants runs at a larger shape (see ``Tuning.spare_work``) only while that
#: costs at most this many times its own work.
MAX_STRETCH = 3.0
#: Array cells of one chunk at most where variants run one after another, whose chunks
#: have one row count per shape: 2**23 cells are 32 MB of 4-byte values, of which only
#: the real rows' pages are ever written.
ROW_CELLS = 2**23

_LEVEL_SHAPES = {  # what the levels share across platforms
    "bound": dict(max_shapes=8, merge_factor=2.0, reuse=2.0, min_rows=1, rows_step=2,
                  key_rounding=ladder),
    "exact": dict(max_shapes=6, merge_factor=1.5, reuse=1.5, min_rows=1, rows_step=4,
                  key_rounding=power_of_two),
}

TUNINGS: dict[tuple[str, str], Tuning] = {
    ("cpu", "bound"): Tuning("cpu", "bound", chunk=64, vectorized=True,
                             metrics_on_device=False, step_cost=32, spare_work=0.0,
                             **_LEVEL_SHAPES["bound"]),
    ("cpu", "exact"): Tuning("cpu", "exact", chunk=32, vectorized=False,
                             metrics_on_device=False, step_cost=32, spare_work=2e7,
                             **_LEVEL_SHAPES["exact"]),
    # An accelerator runs a call in about (steps) x (launches per step), whatever its
    # rows, until the call fills it: few shape classes, so that each call carries
    # thousands of variants, matter more than padding (first guesses, to be measured
    # with benchmarks/bench_gpu.py).
    ("gpu", "bound"): Tuning("gpu", "bound", chunk=16384, vectorized=True,
                             metrics_on_device=True, step_cost=1024, spare_work=0.0,
                             **_LEVEL_SHAPES["bound"] | dict(max_shapes=2, merge_factor=8.0,
                                                              reuse=8.0, split_work=math.inf, unroll=4)),
    ("gpu", "exact"): Tuning("gpu", "exact", chunk=2048, vectorized=True,
                             metrics_on_device=True, step_cost=1024, spare_work=0.0,
                             **_LEVEL_SHAPES["exact"] | dict(max_shapes=3, merge_factor=4.0,
                                                              reuse=4.0, split_work=math.inf, unroll=4)),
}


def platform_of(devices: Sequence) -> str:
    """``"cpu"`` for CPU devices, ``"gpu"`` for any accelerator (the kernels treat GPUs and
    other accelerators alike)."""
    return "cpu" if devices[0].platform == "cpu" else "gpu"


def tuning(platform: str, level: str) -> Tuning:
    """The record of ``level`` on ``platform``."""
    return TUNINGS[platform, level]
