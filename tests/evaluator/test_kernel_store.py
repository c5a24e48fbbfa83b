"""The store of compiled kernels: what one store writes another loads without compiling,
other argument shapes are other entries, and a damaged file is compiled again."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from xsweep.evaluator.compiles import compile_count
from xsweep.evaluator.kernel_store import KernelStore, traced_modules

#: A constant new to every test run: the programs compiled here are then new to JAX's own
#: persistent cache too (an executable JAX loads from its cache is used but not kept).
NONCE = float(int.from_bytes(os.urandom(3), "little"))


def _double_plus_one(x):
    return 2 * x + NONCE


def _compile(store: KernelStore, x) -> tuple[object, int, int]:
    """The executable for ``x``, and the compilations and store loads it took."""
    before = compile_count().snapshot()
    executable = store.compiled(jax.jit(_double_plus_one), ("test", 1), (x,),
                                (jax.devices()[0],))  # where an unsharded call runs
    spent = compile_count() - before
    return executable, spent.compiles, spent.cache_hits


def test_what_one_store_wrote_another_loads_without_compiling(tmp_path):
    x = jnp.arange(5.0)
    executable, _, _ = _compile(KernelStore(tmp_path), x)
    files = list(tmp_path.glob("*.xla"))
    assert len(files) == 1
    loaded, compiles, loads = _compile(KernelStore(tmp_path), x)
    assert compiles == loads == 1  # counted as a compilation spared
    np.testing.assert_array_equal(loaded(x), executable(x))
    np.testing.assert_array_equal(loaded(x), 2 * np.arange(5.0) + NONCE)


def test_other_argument_shapes_are_other_entries(tmp_path):
    store = KernelStore(tmp_path)
    _compile(store, jnp.arange(5.0))
    _compile(store, jnp.arange(7.0))
    _compile(store, jnp.arange(5, dtype=jnp.int32))
    assert len(list(tmp_path.glob("*.xla"))) == 3


def test_a_damaged_file_is_compiled_again_and_replaced(tmp_path):
    x = jnp.arange(3.0)
    _compile(KernelStore(tmp_path), x)
    (path,) = tmp_path.glob("*.xla")
    path.write_bytes(b"not an executable")
    executable, _, loads = _compile(KernelStore(tmp_path), x)
    assert loads == 0  # not taken from the damaged file
    np.testing.assert_array_equal(executable(x), 2 * np.arange(3.0) + NONCE)
    assert path.read_bytes() != b"not an executable"  # written again, whole


def test_without_a_folder_nothing_is_kept(tmp_path):
    executable, _, _ = _compile(KernelStore(None), jnp.arange(2.0))
    np.testing.assert_array_equal(executable(jnp.arange(2.0)), [NONCE, 2 + NONCE])
    assert not list(tmp_path.iterdir())


def test_the_key_covers_the_source_kernels_are_traced_from_and_no_more():
    modules = traced_modules()
    # what the jitted calls run: the kernels, the metrics, and what those import
    for module in ("xsweep.evaluator.executables", "xsweep.kernels.exact", "xsweep.kernels.bound",
                   "xsweep.kernels.waterfill", "xsweep.timeline", "xsweep.metrics",
                   "xsweep.plan.program"):
        assert module in modules, module
    # planning and validation change no compiled kernel: editing them keeps the store
    for module in ("xsweep.spec.validate", "xsweep.plan.lower", "xsweep.plan.analysis",
                   "xsweep.evaluator.driver", "xsweep"):
        assert module not in modules, module


def _triple():
    """A new function each call (JAX keeps compiled code in memory per function), which
    compiles to the same program."""
    def triple(x):
        return 3 * x + NONCE
    return jax.jit(triple)


def test_a_kernel_already_in_jaxs_own_cache_is_still_kept(tmp_path):
    """After an upgrade that changes the kernels' source but not what they compile to,
    JAX's persistent cache holds the executable and the store does not: the store still
    gets a file that loads, so later processes neither trace nor compile."""
    from jax.experimental.compilation_cache import compilation_cache

    x = jnp.arange(4.0)
    saved = (jax.config.jax_compilation_cache_dir,
             jax.config.jax_persistent_cache_min_compile_time_secs,
             jax.config.jax_enable_compilation_cache)
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jax"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_enable_compilation_cache", True)
        compilation_cache.reset_cache()
        _triple().lower(x).compile()  # into JAX's cache
        before = compile_count().snapshot()
        _triple().lower(x).compile()
        assert (compile_count() - before).cache_hits == 1  # JAX's cache holds it
        store = KernelStore(tmp_path / "kernels")
        store.compiled(_triple(), ("test", 2), (x,), (jax.devices()[0],))
        assert len(list((tmp_path / "kernels").glob("*.xla"))) == 1
        before = compile_count().snapshot()
        loaded = KernelStore(tmp_path / "kernels").compiled(
            _triple(), ("test", 2), (x,), (jax.devices()[0],))
        spent = compile_count() - before
        assert spent.compiles == spent.cache_hits == 1  # loaded from the store
        np.testing.assert_array_equal(loaded(x), 3 * np.arange(4.0) + NONCE)
        assert jax.config.jax_enable_compilation_cache  # the setting came back
    finally:
        for name, value in zip(("jax_compilation_cache_dir",
                                "jax_persistent_cache_min_compile_time_secs",
                                "jax_enable_compilation_cache"), saved, strict=True):
            jax.config.update(name, value)
        compilation_cache.reset_cache()


#: One process of the test below: waits until both are ready, then asks the store in
#: ``argv[1]`` for a kernel new to it (the constant ``argv[2]``); prints what that took.
_RACER = """
import os, sys, time
from pathlib import Path
import jax, jax.numpy as jnp
from xsweep.evaluator.compiles import compile_count
from xsweep.evaluator.kernel_store import KernelStore

folder, nonce, me = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]

def many_steps(x):
    for i in range(300):  # long enough to compile that both processes overlap
        x = jnp.sin(x) * (i + nonce) + x
    return x

x = jnp.arange(4.0)
(folder / f"ready-{me}").touch()
while len(list(folder.glob("ready-*"))) < 2:
    time.sleep(0.002)
before = compile_count().snapshot()
KernelStore(folder / "kernels").compiled(jax.jit(many_steps), ("race", 1), (x,),
                                         (jax.devices()[0],))
spent = compile_count() - before
print(spent.compiles - spent.cache_hits, spent.cache_hits)
"""


def test_two_processes_that_need_one_new_kernel_at_once_compile_it_once(tmp_path):
    """Worker processes start together and often need the same kernels: one compiles
    while the other waits for it and loads what it kept."""
    import subprocess
    import sys

    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false")  # nothing from JAX's cache
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path), str(NONCE), me],
                               stdout=subprocess.PIPE, text=True, env=env)
              for me in "ab"]
    counts = [tuple(int(n) for n in racer.communicate(timeout=300)[0].split())
              for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    assert sorted(counts) == [(0, 1), (1, 0)]  # compiled in one, loaded in the other
    assert len(list((tmp_path / "kernels").glob("*.xla"))) == 1


def test_past_the_limit_the_least_recently_used_executable_goes_and_loads_again(tmp_path):
    from xsweep.evaluator.executables import Executables, _Kernel

    devices = (jax.devices()[0],)
    held = Executables(devices, max_compiled=2)
    kernel = _Kernel(jax.jit(lambda x: 3 * x + NONCE), ("test", 2), devices,
                     KernelStore(tmp_path), held._used)
    a, b, c = jnp.arange(2.0), jnp.arange(3.0), jnp.arange(4.0)

    def call(x) -> tuple[int, int]:
        before = compile_count().snapshot()
        np.testing.assert_array_equal(kernel(x), 3 * np.asarray(x) + NONCE)
        spent = compile_count() - before
        return spent.compiles, spent.cache_hits

    assert [call(x) for x in (a, b, a, c)] == [(1, 0), (1, 0), (0, 0), (1, 0)]
    assert held.loaded() == 2  # a was used after b: b went
    assert call(a) == (0, 0) and call(c) == (0, 0)
    assert call(b) == (1, 1)  # back from the store, not compiled
    assert held.loaded() == 2


#: One process of the test below: waits until both are ready, then keeps 150 shape
#: assignments of its own, one call each, in the store in ``argv[1]``.
_ASSIGNER = """
import sys, time
from pathlib import Path
import jax
from xsweep.evaluator.kernel_store import KernelStore

folder, me = Path(sys.argv[1]), int(sys.argv[2])
devices = (jax.devices()[0],)
store = KernelStore(folder / "kernels")
(folder / f"ready-{me}").touch()
while len(list(folder.glob("ready-*"))) < 2:
    time.sleep(0.002)
for n in range(150):
    store.assign(("bound", "float32", 64, False), devices, {(me, n): (me, n + 1)})
"""


def test_two_processes_that_assign_shapes_at_once_keep_every_assignment(tmp_path):
    """Worker processes keep the shapes they chose at the same time: each read, merge and
    write holds the file's lock, so neither drops what the other has just kept."""
    import subprocess
    import sys

    writers = [subprocess.Popen([sys.executable, "-c", _ASSIGNER, str(tmp_path), str(me)])
               for me in (0, 1)]
    assert all(writer.wait(timeout=300) == 0 for writer in writers)
    kept = KernelStore(tmp_path / "kernels").assignments(
        ("bound", "float32", 64, False), (jax.devices()[0],))
    assert kept == {(me, n): (me, n + 1) for me in (0, 1) for n in range(150)}


def test_the_code_digest_is_taken_from_the_store_while_its_files_are_unchanged(
        tmp_path, monkeypatch):
    """A process finds the traced modules by parsing them once per store and installation;
    a later one takes the recorded digest, unless a listed file's size or time changed or
    the record is another installation's (then it parses again, to the same digest)."""
    from xsweep.evaluator import kernel_store

    found = kernel_store.traced_modules
    parsed = []

    def counting():
        parsed.append(1)
        return found()

    monkeypatch.setattr(kernel_store, "traced_modules", counting)
    monkeypatch.setattr(kernel_store, "_code_digest", None)
    first = kernel_store.code_digest(tmp_path)
    assert len(parsed) == 1 and (tmp_path / "code-digest.json").exists()
    monkeypatch.setattr(kernel_store, "_code_digest", None)
    assert kernel_store.code_digest(tmp_path) == first and len(parsed) == 1  # taken
    record = json.loads((tmp_path / "code-digest.json").read_text())
    for change in ({"files": [[*record["files"][0][:2], 1], *record["files"][1:]]},
                   {"package": "/elsewhere/xsweep"}, {"files": "damaged"}):
        (tmp_path / "code-digest.json").write_text(json.dumps(record | change))
        monkeypatch.setattr(kernel_store, "_code_digest", None)
        before = len(parsed)
        assert kernel_store.code_digest(tmp_path) == first and len(parsed) == before + 1
    monkeypatch.setattr(kernel_store, "_code_digest", None)
    assert kernel_store.code_digest(None) == first  # no store: parsed, nothing kept


def test_a_kept_executable_prefetched_from_shapes_alone_is_what_the_call_runs(tmp_path):
    """A prefetch knows the arguments by shape, dtype and sharding only (no arrays yet):
    it starts the load of the kept executable, and the call takes it instead of reading
    the store again; a shape nothing was kept for starts nothing."""
    from xsweep.evaluator.executables import _Kernel

    devices = (jax.devices()[0],)
    config = ("test-prefetch", NONCE)

    def fn(x):
        return 5 * x + NONCE

    x, y = jnp.arange(6.0), jnp.arange(7.0)
    _Kernel(jax.jit(fn), config, devices, KernelStore(tmp_path), lambda *_: None)(x)
    fresh = _Kernel(jax.jit(fn), config, devices, KernelStore(tmp_path), lambda *_: None)
    like = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    assert fresh.prefetch(like) is True
    assert fresh.prefetch(like) is False  # loading already
    assert fresh.prefetch(jax.ShapeDtypeStruct(y.shape, y.dtype, sharding=y.sharding)) is False
    before = compile_count().snapshot()
    np.testing.assert_array_equal(fresh(x), 5 * np.asarray(x) + NONCE)
    spent = compile_count() - before
    assert (spent.compiles, spent.cache_hits) == (1, 1)  # loaded, counted by the call
    assert fresh.prefetch(like) is False  # held now
