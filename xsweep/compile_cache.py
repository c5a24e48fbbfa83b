"""JAX's persistent compilation cache in a per-user folder, so a second run compiles nothing.

Compiling the kernels is the largest cost of a first evaluation (tens of seconds per
level and size family on a CPU); with the cache a new process loads the executables
instead. The folder is ``$XSWEEP_COMPILE_CACHE`` if set (``off`` disables the cache),
else ``$XDG_CACHE_HOME/xsweep/jax`` (``~/.cache/xsweep/jax``). A folder the user already
gave JAX (``JAX_COMPILATION_CACHE_DIR``) wins.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "XSWEEP_COMPILE_CACHE"


def cache_dir() -> Path | None:
    """The folder the cache uses, or None when it is off."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() in ("off", "0", "false", "no"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "xsweep" / "jax"


def enable_compile_cache() -> Path | None:
    """Point JAX's persistent cache at :func:`cache_dir` (once; before the first compile
    is best). Returns the folder in use, or None."""
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    folder = cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # e.g. a read-only home: run without the cache rather than fail
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # Cache every executable: the small metric kernels compile in under a second each,
    # but a sweep needs many of them.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return folder
