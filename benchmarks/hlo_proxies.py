"""Proxies of a kernel's launch-bound time that a CPU can measure: loops, trip counts and
operations per step of its compiled program.

On a GPU a loop of small operations costs about (steps) x (launches per step) x (a few
microseconds per launch), whatever the batch, until a call holds enough variants to fill
the device. The counts here come from the program XLA compiles for a kernel call:

* ``lowered_ops``: operations of the main loop's body as JAX lowers it (StableHLO, before
  any fusion): what the kernel asks for per step;
* ``compiled_ops``: top-level instructions of the main loop's body once XLA has compiled
  it for the device at hand (fusions count one each; free ones, such as tuples and
  parameters, none): the launches a step costs on that device;
* ``nested_loops``: loops inside the main loop's body (each a launch sequence of its own,
  per step);
* ``trip_count``: the main loop's steps where XLA knows them (the bound's scan); the
  exact level's steps are its ``steps`` diagnostic, per variant.

Use :func:`recorded_calls` around an evaluation to capture the kernel calls, then
:func:`profile` one of them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

#: Instructions that cost no launch: bookkeeping of tuples, parameters and constants.
FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "copy-start",
        "copy-done", "after-all", "opt-barrier"}

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{\s*$")
_OPCODE = re.compile(r"\b([a-z][a-z0-9\-]*)\(")
_BODY = re.compile(r"body=%?([\w.\-]+)")
_TRIPS = re.compile(r'known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')


@contextlib.contextmanager
def recorded_calls() -> Iterator[list]:
    """Record ``(jitted function, arguments)`` of every kernel call made inside."""
    from xsweep.evaluator import executables

    calls: list = []
    original = executables._Kernel.__call__

    def recording(self, *args):
        calls.append((self._jitted, args))
        return original(self, *args)

    executables._Kernel.__call__ = recording
    try:
        yield calls
    finally:
        executables._Kernel.__call__ = original


def computations(hlo: str) -> dict[str, list[str]]:
    """Each computation of an HLO module's text: its instructions' opcodes, in order,
    with the loop bodies they call as ``while:<body>``."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in hlo.splitlines():
        start = _COMPUTATION.match(line)
        if start:
            current = found.setdefault(start.group(1), [])
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is None or " = " not in line:
            continue
        rest = line.split(" = ", 1)[1]
        opcode = _OPCODE.search(rest)
        if opcode is None:
            continue
        name = opcode.group(1)
        if name == "while":
            body = _BODY.search(rest)
            trips = _TRIPS.search(rest)
            name = f"while:{body.group(1) if body else '?'}:{trips.group(1) if trips else ''}"
        current.append(name)
    return found


def main_loop(found: dict[str, list[str]]) -> tuple[str, int | None] | None:
    """The body and trip count of the loop whose body holds the most work (the event loop
    of the exact level, the scan of the bound)."""
    loops = [op.split(":") for ops in found.values() for op in ops if op.startswith("while:")]
    if not loops:
        return None
    body, trips = max(((b, t) for _, b, t in loops), key=lambda bt: _work(found, bt[0]))
    return body, int(trips) if trips else None


def _work(found: dict[str, list[str]], body: str) -> int:
    return sum(op not in FREE for op in found.get(body, ()))


def _stablehlo_loop_ops(text: str) -> int:
    """Operations inside the largest ``stablehlo.while`` region of lowered StableHLO."""
    best, depth, count, inside = 0, 0, 0, False
    for line in text.splitlines():
        stripped = line.strip()
        if "stablehlo.while" in stripped and not inside:
            inside, depth, count = True, 0, 0
        if inside:
            depth += stripped.count("{") - stripped.count("}")
            if " = " in stripped and ("stablehlo." in stripped or "func.call" in stripped):
                count += 1
            if depth <= 0 and "}" in stripped:
                best, inside = max(best, count), False
    return best


def profile(jitted, args) -> dict:
    """The proxies of one kernel call (see the module's description)."""
    lowered = jitted.lower(*args)
    compiled = lowered.compile().as_text()
    found = computations(compiled)
    loop = main_loop(found)
    body, trips = loop if loop else ("", None)
    nested = sum(op.startswith("while:") for op in found.get(body, ()))
    return {"lowered_ops": _stablehlo_loop_ops(lowered.as_text()),
            "compiled_ops": _work(found, body), "nested_loops": nested, "trip_count": trips,
            "instructions": sum(len(ops) for ops in found.values())}
