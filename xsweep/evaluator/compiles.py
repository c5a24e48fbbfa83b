"""Counting compilations: how many kernels a call compiled or loaded, and how long it took.

JAX reports compilations through ``jax.monitoring``; one listener per process
(installed on first use) adds them to a :class:`CompileCount`, and callers take the
difference of two snapshots around a call.
"""

from __future__ import annotations

from dataclasses import dataclass

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_CACHE_HITS = "/jax/compilation_cache/cache_hits"


@dataclass
class CompileCount:
    """Compilations so far in this process (cache hits are loads from the disk cache)."""

    compiles: int = 0  # backend compilations, loads from either disk cache included
    seconds: float = 0.0  # time in them
    cache_hits: int = 0  # loads from JAX's persistent cache or xsweep's kernel store

    def __sub__(self, other: CompileCount) -> CompileCount:
        return CompileCount(self.compiles - other.compiles, self.seconds - other.seconds,
                            self.cache_hits - other.cache_hits)

    def add_load(self, seconds: float) -> None:
        """Count a kernel loaded whole from xsweep's own store
        (:mod:`xsweep.evaluator.kernel_store`): a compilation spared, like a cache hit."""
        self.compiles += 1
        self.cache_hits += 1
        self.seconds += seconds

    def snapshot(self) -> CompileCount:
        return CompileCount(self.compiles, self.seconds, self.cache_hits)


_count: CompileCount | None = None


def compile_count() -> CompileCount:
    """The process's running count (the listener is installed on the first call)."""
    global _count
    if _count is None:
        from jax import monitoring

        count = CompileCount()

        def on_duration(event: str, duration: float, **_) -> None:
            if event == _BACKEND_COMPILE:
                count.compiles += 1
                count.seconds += duration

        def on_event(event: str, **_) -> None:
            if event == _CACHE_HITS:
                count.cache_hits += 1

        monitoring.register_event_duration_secs_listener(on_duration)
        monitoring.register_event_listener(on_event)
        _count = count
    return _count
