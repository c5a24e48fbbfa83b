"""Pure JAX solvers over padded program arrays: water-filling, the bound, the exact level.

Every kernel is written for one program; batch with ``jax.vmap`` at the call site.
Arrays in, arrays out: no I/O, no Python objects, no host callbacks, so the same
code runs on CPU and GPU. Floats follow the input arrays' dtype (float32 by
default; float64 when the caller enables ``jax_enable_x64``).
"""

from .bound import (
    blocked_bound,
    blocked_schedule,
    bound,
    contention_free_durations,
    max_plus_schedule,
)
from .exact import exact, max_steps
from .types import BlockedProgram, ProgramArrays, Schedule, Status
from .waterfill import MAX_ROUNDS, packed_waterfill, waterfill

__all__ = [
    "MAX_ROUNDS",
    "BlockedProgram",
    "ProgramArrays",
    "Schedule",
    "Status",
    "blocked_bound",
    "blocked_schedule",
    "bound",
    "contention_free_durations",
    "exact",
    "max_plus_schedule",
    "max_steps",
    "packed_waterfill",
    "waterfill",
]
