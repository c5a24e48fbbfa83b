"""Compiled kernels kept on disk whole, so that a new process neither traces nor compiles.

JAX's persistent compilation cache spares a new process the XLA compilation of a kernel
shape, but not the tracing and lowering that come before it (its key is the lowered
program): about a second per bound shape and several per exact shape, paid by every
new process and every worker before its first result. A :class:`KernelStore` keeps
the compiled executable itself (``jax.experimental.serialize_executable``) under a key
made without tracing: the kernel's configuration, the shapes and dtypes of its
arguments, the devices, the JAX version, the host (CPU extensions, XLA flags) and a
digest of the source the kernels are traced from (the kernels, the metrics, the
modules they import: a change there is a new key; a change to planning or validation
is not, and costs no process its kernels). Loading one takes about a tenth of a second.

What the store keeps is compiled with JAX's own persistent cache turned off: an
executable JAX loads from that cache does not survive serialization whole on CPU (it
runs, once loaded back, without some of its functions), and a store that could not
keep it would leave every later process tracing the kernel again (after an upgrade
that changes the kernels' source but not what they compile to, say). A file that
cannot be read back is ignored and compiled again. Files are written under a temporary
name and renamed, so concurrent processes (the worker processes of a call, say) never
read half a file; a process about to compile a kernel holds a lock on its name, so that
another one that needs the same kernel at the same time waits and loads it rather than
compiling it too. Like any store of compiled code (or pickles), the folder must be the
user's own: loading an executable runs what it holds.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import pickle
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax

from xsweep.evaluator.compiles import compile_count

try:
    import fcntl
except ImportError:  # not on this platform: processes may compile one kernel twice
    fcntl = None

#: The module the kernels' jitted calls are defined in: a compiled kernel depends on the
#: source of it and of the xsweep modules it imports, directly or not.
_TRACED_ROOT = "xsweep.evaluator.executables"
_code_digest: str | None = None


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, AttributeError, ValueError):
        return False  # a name inside a module, not a module


def _imports(module: str) -> set[str]:
    """The xsweep modules ``module``'s source takes names from (read, not run): for
    ``from package import module`` the module, not the package's ``__init__``."""
    spec = importlib.util.find_spec(module)
    tree = ast.parse(Path(spec.origin).read_text())
    package = module if spec.origin.endswith("__init__.py") else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level else node.module)
            for alias in node.names:
                inner = f"{base}.{alias.name}"
                names.add(inner if base.startswith("xsweep") and _is_module(inner) else base)
    return {name for name in names if name.split(".")[0] == "xsweep" and _is_module(name)}


def traced_modules() -> list[str]:
    """The modules a compiled kernel is traced from: the kernels' calls and every xsweep
    module they import, directly or not."""
    seen, todo = set(), [_TRACED_ROOT]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_imports(module) - seen)
    return sorted(seen)


def code_digest(directory: Path | None = None) -> str:
    """A digest of the source a kernel is traced from (:func:`traced_modules`): a change
    there is a new key; a change elsewhere in xsweep (planning, validation) is not, so it
    costs no process a compilation.

    Finding the modules parses their source (about 50 ms a process); with ``directory``
    (a kernel store's), the digest found is kept there with each module's file, size and
    modification time, and a later process of the same installation takes it while every
    one of those files is unchanged, as Python's own bytecode cache judges a source
    unchanged (another installation sharing the store finds its own)."""
    global _code_digest
    if _code_digest is None:
        record = directory / _DIGEST_RECORD if directory is not None else None
        _code_digest = _recorded_digest(record) if record is not None else None
        if _code_digest is None:
            files = {module: importlib.util.find_spec(module).origin
                     for module in traced_modules()}
            digest = hashlib.sha256()
            for module, origin in files.items():
                digest.update(module.encode())
                digest.update(Path(origin).read_bytes())
            _code_digest = digest.hexdigest()
            if record is not None:
                with contextlib.suppress(OSError, ValueError):
                    KernelStore._write_bytes(record, json.dumps(
                        {"digest": _code_digest, "package": _package(),
                         "files": [[origin, *_stamp(origin)] for origin in files.values()]}
                    ).encode())
    return _code_digest


#: Where a kernel store keeps :func:`code_digest`'s last finding.
_DIGEST_RECORD = "code-digest.json"


def _stamp(path: str) -> tuple[int, int]:
    found = os.stat(path)
    return found.st_size, found.st_mtime_ns


def _package() -> str:
    """The folder of this process's xsweep package."""
    return str(Path(importlib.import_module("xsweep").__file__).parent)


def _recorded_digest(record: Path) -> str | None:
    """The digest ``record`` keeps if it is of this installation and every file it lists
    is as it was then, else None."""
    try:
        kept = json.loads(record.read_text())
        if kept["package"] == _package() and all(
                _stamp(origin) == (size, mtime) for origin, size, mtime in kept["files"]):
            return str(kept["digest"])
    except (OSError, ValueError, TypeError, KeyError):
        pass  # none yet, damaged, or a file gone: found again
    return None


_host: str | None = None


def host_digest() -> str:
    """What compiled code depends on besides the program: the XLA flags, the machine's
    architecture and its CPU's instruction-set extensions (a cache folder shared between
    machines must not hand one machine code built for another's CPU)."""
    global _host
    if _host is None:
        flags = ""
        try:
            with open("/proc/cpuinfo") as info:
                flags = next((line for line in info if line.startswith(("flags", "Features"))),
                             "")
        except OSError:
            pass
        text = "|".join((platform.machine(), platform.processor(), flags,
                         os.environ.get("XLA_FLAGS", "")))
        _host = hashlib.sha256(text.encode()).hexdigest()
    return _host


def signature(args) -> str:
    """The structure, shapes, dtypes and shardings of a call's arguments."""
    leaves, tree = jax.tree.flatten(args)
    parts = [str(tree)]
    for leaf in leaves:
        sharding = getattr(leaf, "sharding", None)
        parts.append(f"{getattr(leaf, 'shape', ())}:{getattr(leaf, 'dtype', type(leaf))}:"
                     f"{sharding}")
    return "|".join(parts)


@contextlib.contextmanager
def _without_jax_cache():
    """JAX's persistent compilation cache off for what runs inside (see the module's
    description); its setting is restored after."""
    from jax.experimental.compilation_cache import compilation_cache

    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # JAX decides whether to use its cache once, until reset
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
        compilation_cache.reset_cache()


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive lock on ``path``'s name (a ``.lock`` file beside it) for what runs
    inside: processes that would compile the same kernel take turns. Without file locks
    on the platform, or where the lock file cannot be made, nothing is held."""
    handle = None
    if fcntl is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(path.with_suffix(".lock"), "a")  # noqa: SIM115 - closed below
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            if handle is not None:
                handle.close()
            handle = None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()  # closing releases the lock


class KernelStore:
    """Serialized executables in ``directory`` (None: nothing kept on disk)."""

    def __init__(self, directory: Path | None):
        self.directory = directory
        self._read: dict[Path, tuple[tuple, dict]] = {}  # shape files as last read

    def _path(self, config: tuple, args, devices: tuple, suffix: str = ".xla") -> Path | None:
        if self.directory is None:
            return None
        key = repr((config, signature(args), [(d.platform, d.device_kind, d.id) for d in devices],
                    jax.__version__, jax.config.jax_enable_x64, code_digest(self.directory),
                    host_digest()))
        return self.directory / (hashlib.sha256(key.encode()).hexdigest()[:40] + suffix)

    def assignments(self, config: tuple, devices: tuple) -> dict[tuple, tuple]:
        """The shape each variant key of ``config`` was assigned to so far, by any process
        (see :meth:`assign`); empty without a directory or a readable file."""
        path = self._path(config, (), devices, ".shapes.json")
        try:
            stat = path.stat() if path is not None else None
        except OSError:
            return {}
        if stat is None:
            return {}
        version = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        known = self._read.get(path)
        if known is not None and known[0] == version:  # unchanged since read: not parsed again
            return dict(known[1])
        try:
            pairs = json.loads(path.read_text())
            found = {tuple(own): tuple(shape) for own, shape in pairs}
        except (OSError, ValueError, TypeError):
            return {}  # damaged: shapes are chosen again, nothing worse
        self._read[path] = (version, found)
        return dict(found)

    def assign(self, config: tuple, devices: tuple, new: dict[tuple, tuple]) -> None:
        """Keep ``new`` assignments of variant keys to compiled shapes beside the kernels,
        merged with what is there (a key keeps its first assignment), so that later
        processes run the same variants at the same shapes and load them instead of
        compiling others."""
        path = self._path(config, (), devices, ".shapes.json")
        if path is None or not new:
            return
        # read, merge and write under the file's lock: worker processes assign at once,
        # and without it one's write could drop what another had just kept (a later
        # process then chose, and compiled, shapes of its own for those keys)
        with _locked(path):
            merged = new | self.assignments(config, devices)
            text = json.dumps([[list(own), list(shape)] for own, shape in merged.items()])
            self._write_bytes(path, text.encode())

    def compiled(self, jitted: Callable, config: tuple, args, devices: tuple) -> Callable:
        """``jitted``'s executable for ``args``: from disk when kept there, else compiled
        (and kept, when this process compiled it)."""
        path = self._path(config, args, devices)
        if path is None:
            return jitted.lower(*args).compile()
        loaded = self._load(path, devices)
        if loaded is not None:
            return loaded
        with _locked(path):
            loaded = self._load(path, devices)  # another process may have kept it meanwhile
            if loaded is not None:
                return loaded
            before = compile_count().snapshot()
            with _without_jax_cache():
                executable = jitted.lower(*args).compile()
            if compile_count().cache_hits == before.cache_hits:  # compiled here: it serializes
                self._write(path, executable)
        return executable

    def kept(self, config: tuple, args, devices: tuple) -> Path | None:
        """Where the executable for ``args`` is kept, if it is (``args`` may be
        ``jax.ShapeDtypeStruct`` leaves with the shardings the call's arrays will have:
        the key is made of shapes, dtypes and shardings alone)."""
        path = self._path(config, args, devices)
        return path if path is not None and path.exists() else None

    @classmethod
    def _load(cls, path: Path, devices: tuple) -> Callable | None:
        """The executable kept at ``path``, or None (none there, or not readable)."""
        loaded, seconds = cls.read(path, devices)
        if loaded is not None:
            compile_count().add_load(seconds)
        return loaded

    @staticmethod
    def read(path: Path, devices: tuple) -> tuple[Callable | None, float]:
        """The executable kept at ``path`` (None: none there, or not readable, and then
        removed) and the seconds it took, counted nowhere: a load that runs in another
        thread (:meth:`xsweep.evaluator.executables._Kernel.prefetch`) is counted by
        the call that takes it. Loading lets go of the GIL for most of its time."""
        if not path.exists():
            return None, 0.0
        start = time.perf_counter()
        try:
            from jax.experimental.serialize_executable import deserialize_and_load

            loaded = deserialize_and_load(*pickle.loads(path.read_bytes()),
                                          execution_devices=list(devices))
        except Exception:  # noqa: BLE001 - a stale or damaged file: compile again
            path.unlink(missing_ok=True)
            return None, 0.0
        return loaded, time.perf_counter() - start

    @classmethod
    def _write(cls, path: Path, executable) -> None:
        from jax.experimental.serialize_executable import serialize

        try:
            data = pickle.dumps(serialize(executable), protocol=pickle.HIGHEST_PROTOCOL)
        except (ValueError, TypeError, pickle.PicklingError):
            return  # not kept: the next process compiles it again, nothing worse
        cls._write_bytes(path, data)

    @staticmethod
    def _write_bytes(path: Path, data: bytes) -> None:
        """``data`` to ``path`` under a temporary name, then renamed (never half a file)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".partial")
        except OSError:
            return  # not kept: the next process chooses or compiles again, nothing worse
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except OSError:
            Path(temporary).unlink(missing_ok=True)
