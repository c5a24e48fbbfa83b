"""Hardware, model and software catalogs: GPUs, NICs, link kinds, model presets and
software profiles.

Defaults ship as package data (``xsweep/spec/data/*.yaml``, every number with its
source in a comment); users merge their own YAML over them with ``--catalog``.
Units live in the field names: ``gbps`` is gigabits per second, ``gib`` gibibytes
(2^30 bytes, the unit vendors give HBM in), ``us`` microseconds.

A catalog YAML file has up to five top-level keys, ``gpus``, ``nics``, ``links``,
``models`` and ``software``, each a mapping from an entry name to its fields. An entry may also
list ``aliases``. Names are matched case-insensitively. A file merged over the
defaults may give only some fields of an existing entry; a new entry needs all. One file
gives each entry once: two keys of one section that name one entry (an alias and the
name, or two cases of one name) are refused rather than the later silently winning.
A model's dimensions must agree with each other (:func:`check_model_dimensions`, the
rules a plan's model obeys too), checked as the file that set them is read.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Generic, TypeVar

from xsweep.errors import InputError, close_names, did_you_mean, suggestion
from xsweep.frozen import hash_once
from xsweep.spec import ranges
from xsweep.spec.enums import MLP
from xsweep.spec.reader import parse_yaml, read_yaml_file

GIB = 2**30  # bytes in a GiB


@hash_once
@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_bf16_tflops: float  # dense BF16 tensor-core peak, TFLOP/s
    hbm_gib: float  # HBM capacity, GiB (2^30 bytes)
    hbm_tb_per_s: float  # HBM bandwidth, TB/s (1e12 bytes/s)
    scale_up_gbps: float  # scale-up (NVLink) bandwidth per GPU, Gb/s
    scale_up_latency_ns: float
    scale_up_link: str  # link kind (links section) of the scale-up fabric
    pcie_gbps: float  # GPU <-> NIC PCIe bandwidth, Gb/s
    pcie_latency_ns: float  # one traversal of the PCIe path (switch in and out)
    pcie_link: str  # link kind (links section) of the GPU's PCIe path
    default_nic: str
    capex_usd: float  # purchase price per GPU, server share included
    power_w: float  # per GPU, server share included
    cloud_usd_per_hour: float  # on-demand price per GPU-hour
    num_sms: int  # streaming multiprocessors: the width of one wave of GEMM tiles
    gemm_efficiency: float  # fraction of peak the largest, best-shaped GEMMs reach
    flash_attention_efficiency: float  # fraction of peak a fused attention kernel reaches
    hbm_efficiency: float  # fraction of the HBM bandwidth a streaming kernel reaches
    peak_fp8_tflops: float = 0.0  # dense FP8 tensor-core peak, TFLOP/s; 0: no FP8 tensor cores
    fp8_gemm_efficiency: float = 0.0  # fraction of the FP8 peak large FP8 GEMMs reach

    @property
    def peak_flops(self) -> float:
        return self.peak_bf16_tflops * 1e12

    @property
    def has_fp8(self) -> bool:
        """Whether the GPU has FP8 tensor cores (a plan in FP8 needs them)."""
        return self.peak_fp8_tflops > 0

    @property
    def peak_fp8_flops(self) -> float:
        return self.peak_fp8_tflops * 1e12

    @property
    def fp8_gemm_fraction(self) -> float:
        """The fraction of the FP8 peak large FP8 GEMMs sustain: ``fp8_gemm_efficiency``,
        or where the catalog leaves it 0, ``gemm_efficiency`` (the BF16 fraction)."""
        return self.fp8_gemm_efficiency or self.gemm_efficiency

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_per_s * 1e12

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * GIB


@dataclass(frozen=True)
class NicSpec:
    name: str
    bandwidth_gbps: float
    latency_ns: float
    bus_efficiency: float  # fraction of the line rate NCCL's bus bandwidth reaches
    launch_latency_us: float  # fixed time of one NCCL operation over this NIC
    capex_usd: float = 0.0  # per port: adapter plus a share of switch port and optics


@dataclass(frozen=True)
class LinkSpec:
    """A kind of intra-node link (NVLink generation, PCIe generation) as NCCL drives it."""

    name: str
    bus_efficiency: float  # fraction of the line rate NCCL's bus bandwidth reaches
    launch_latency_us: float  # fixed time of one NCCL operation over this link


@hash_once
@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int
    seq_length: int
    mlp: str  # "gelu" (two FFN matrices) or "swiglu" (three)
    dropout: bool = False  # trained with dropout (masks are kept and applied)
    # mixture of experts (dense when num_experts is 0): see xsweep.plan.workload
    num_experts: int = 0  # routed experts per MoE layer
    moe_top_k: int = 0  # routed experts per token
    expert_ffn_hidden_size: int = 0  # FFN width of one routed expert
    num_shared_experts: int = 0  # experts every token goes to
    shared_expert_ffn_hidden_size: int = 0  # 0: expert_ffn_hidden_size
    moe_first_dense_layers: int = 0  # the first layers keep a dense FFN of ffn_hidden_size
    moe_capacity_factor: float = 0.0  # 0: dropless
    moe_max_nodes: int = 0  # node-limited routing: a token's experts on at most this many nodes

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def moe_layer(self, layer: int) -> bool:
        """Whether 1-based ``layer`` has routed experts in place of a dense FFN."""
        return self.num_experts > 0 and layer > self.moe_first_dense_layers


@hash_once
@dataclass(frozen=True)
class SoftwareSpec:
    """A software profile: what one training stack (framework and version) achieves of the
    GPU's sustained rates where the model does not spell out the mechanism.

    Each factor multiplies a rate of every GPU's catalog entry for the compute of a plan
    that names the profile: ``gemm_factor`` the GEMM fractions (``gemm_efficiency`` and,
    where set, ``fp8_gemm_efficiency``), ``attention_factor`` the fused attention fraction
    (``flash_attention_efficiency``). ``calibrated_on`` names the real runs that set the
    factors, ``held_out`` those of the same stack that did not and check them.
    """

    name: str
    gemm_factor: float = 1.0
    attention_factor: float = 1.0
    stack: str = ""  # the framework and version, in words
    calibrated_on: tuple[str, ...] = ()
    held_out: tuple[str, ...] = ()

    def applied_to(self, gpu: GpuSpec) -> GpuSpec:
        """``gpu`` with the profile's factors on its compute fractions (``gpu`` itself when
        every factor is 1, so the reference profile changes no number)."""
        if self.gemm_factor == 1.0 and self.attention_factor == 1.0:
            return gpu
        return dataclasses.replace(
            gpu, gemm_efficiency=gpu.gemm_efficiency * self.gemm_factor,
            fp8_gemm_efficiency=gpu.fp8_gemm_efficiency * self.gemm_factor,
            flash_attention_efficiency=gpu.flash_attention_efficiency * self.attention_factor)

    def record(self) -> dict:
        """The profile as outputs name it (a simulate record, a sweep's summary): its name
        and factors."""
        return {"name": self.name, "gemm_factor": self.gemm_factor,
                "attention_factor": self.attention_factor}


def describe_software(record: dict) -> str:
    """One line of a :meth:`SoftwareSpec.record`: the name, and its factors."""
    factors = {"GEMM": record["gemm_factor"], "attention": record["attention_factor"]}
    if all(value == 1.0 for value in factors.values()):
        return f"{record['name']} (factors 1)"
    return f"{record['name']} (" + ", ".join(f"{kind} x{value:g}"
                                             for kind, value in factors.items()) + ")"


#: The profile a plan that names none runs under: every factor 1, the catalog's rates as
#: they stand (``xsweep/spec/data/software.yaml`` says which runs set which of them).
REFERENCE_SOFTWARE = SoftwareSpec(name="reference")

_SECTIONS = {"gpus": GpuSpec, "nics": NicSpec, "links": LinkSpec, "models": ModelSpec,
             "software": SoftwareSpec}
_DEFAULT_FILES = ("gpus.yaml", "nics.yaml", "links.yaml", "models.yaml", "software.yaml")

_KINDS = {"software": "software profile"}  # what an entry is called, where not the section's
# name in the singular

Spec = TypeVar("Spec", GpuSpec, NicSpec, LinkSpec, ModelSpec, SoftwareSpec)


@dataclass
class _Table(Generic[Spec]):
    """Entries of one kind by canonical name, with case-insensitive aliases."""

    kind: str
    entries: dict[str, Spec] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # lower-case name or alias -> name

    def find(self, name: str) -> str | None:
        """The canonical name for ``name`` (any case, or an alias), or None."""
        found = self.keys.get(str(name).strip().lower())
        return found if found is not None or name not in self.entries else name

    def get(self, name: str, file: str | None, field_path: str | None) -> Spec:
        canonical = self.find(name)
        if canonical is None:
            known = ", ".join(sorted(self.entries))
            raise InputError(file, field_path, name,
                             f"unknown {self.kind}{self.did_you_mean(name)} (known: {known})")
        return self.entries[canonical]

    def did_you_mean(self, name: object) -> str:
        """The tail of a message about the unknown ``name``: the entries it is close to, by
        their names or aliases (any case), each by its name."""
        return suggestion(dict.fromkeys(self.keys[key] for key in close_names(name, self.keys)))


@dataclass
class Catalog:
    """GPUs, NICs, link kinds and model presets, looked up by name or alias (any case)."""

    gpus: dict[str, GpuSpec]
    nics: dict[str, NicSpec]
    links: dict[str, LinkSpec]
    models: dict[str, ModelSpec]
    _tables: dict[str, _Table] = field(repr=False, compare=False)
    software: dict[str, SoftwareSpec] = field(default_factory=dict)

    def canonical(self, section: str, name: str) -> str | None:
        """The name of the entry of ``section`` called ``name`` (any case, or an alias), or
        None when there is none: two names of one entry have the same canonical name."""
        return self._tables[section].find(name)

    def lookup(self, section: str, name: str) -> Any:
        """The entry of ``section`` (``"gpus"``, ``"nics"``, ``"links"``, ``"models"``) called
        ``name`` (any case, or an alias), or None."""
        table = self._tables[section]
        canonical = table.find(name)
        return None if canonical is None else table.entries.get(canonical)

    def gpu(self, name: str, *, file: str | None = None, field: str | None = None) -> GpuSpec:
        """The GPU called ``name``; InputError (naming ``file``/``field``) if unknown."""
        return self._tables["gpus"].get(name, file, field)

    def nic(self, name: str, *, file: str | None = None, field: str | None = None) -> NicSpec:
        """The NIC called ``name``; InputError (naming ``file``/``field``) if unknown."""
        return self._tables["nics"].get(name, file, field)

    def link(self, name: str, *, file: str | None = None, field: str | None = None) -> LinkSpec:
        """The link kind called ``name``; InputError (naming ``file``/``field``) if unknown."""
        return self._tables["links"].get(name, file, field)

    def model(self, name: str, *, file: str | None = None, field: str | None = None) -> ModelSpec:
        """The model preset called ``name``; InputError (naming ``file``/``field``) if unknown."""
        return self._tables["models"].get(name, file, field)

    def software_profile(self, name: str, *, file: str | None = None,
                         field: str | None = None) -> SoftwareSpec:
        """The software profile called ``name`` (empty: ``reference``); InputError (naming
        ``file``/``field``) if unknown."""
        return self._tables["software"].get(name or REFERENCE_SOFTWARE.name, file, field)


def load_catalog(extra_files: str | os.PathLike | Iterable[str | os.PathLike] | None = (),
                 ) -> Catalog:
    """The default catalog with each of ``extra_files`` merged over it, in order.

    Args:
        extra_files: catalog YAML files (paths as ``str`` or ``PathLike``): a list of them,
            one path on its own, or None (no file: the defaults alone).

    Raises:
        InputError: a bad argument (naming ``xsweep.load_catalog`` and the argument), or a
            file that is not a valid catalog (naming the file and the field).
    """
    files = _catalog_paths(extra_files)
    tables = {section: _Table(_KINDS.get(section, section[:-1])) for section in _SECTIONS}
    for file, document in _default_documents():
        _merge(tables, document, file)
    _check_gpu_references(tables, "xsweep/spec/data/gpus.yaml")
    for path in files:
        file = os.fspath(path)
        _merge(tables, read_yaml_file(file), file)
        _check_gpu_references(tables, file)
        _check_reference_software(tables, file)
    # The dicts are shared with the lookup tables, so an entry added to them is found too.
    return Catalog(
        gpus=tables["gpus"].entries,
        nics=tables["nics"].entries,
        links=tables["links"].entries,
        models=tables["models"].entries,
        _tables=tables,
        software=tables["software"].entries,
    )


_LOADER = "xsweep.load_catalog"


def _catalog_paths(extra_files: object) -> list[str | os.PathLike]:
    """``extra_files`` as a list of paths; one path alone is a list of one."""
    if extra_files is None:
        return []
    if isinstance(extra_files, str | os.PathLike):
        extra_files = [extra_files]
    elif isinstance(extra_files, bytes) or not isinstance(extra_files, Iterable):
        raise InputError(_LOADER, "extra_files", type(extra_files).__name__,
                         "expected the path of a catalog file or a list of paths")
    paths = list(extra_files)
    for index, path in enumerate(paths):
        check_path_argument(path, _LOADER, f"extra_files[{index}]")
    return paths


def check_catalog_argument(catalog: object, caller: str, name: str = "catalog") -> None:
    """Raise InputError (naming ``caller`` and the argument) unless ``catalog`` is None or a
    :class:`Catalog`: the check of a library function's ``catalog`` argument."""
    if catalog is not None and not isinstance(catalog, Catalog):
        raise InputError(caller, name, type(catalog).__name__,
                         "expected a Catalog (load_catalog()) or None")


def check_path_argument(path: object, caller: str, name: str) -> None:
    """Raise InputError (naming ``caller`` and the argument ``name``) unless ``path`` is a
    file name: a non-empty ``str`` or ``PathLike`` of text without NUL characters."""
    if not isinstance(path, str | os.PathLike):
        raise InputError(caller, name, type(path).__name__,
                         "expected a path (str or pathlib.Path)")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise InputError(caller, name, type(text).__name__,
                         "expected a path (str or pathlib.Path), not bytes")
    if not text:
        raise InputError(caller, name, text, "an empty file name")
    if "\0" in text:
        raise InputError(caller, name, text, "a file name cannot hold a NUL character")


def entry_key(section: str, name: str, catalog: Catalog | None = None) -> tuple[str, str]:
    """A key that two names share exactly when they name one entry of ``section``: the
    entry's canonical name in ``catalog``, or, for a name the catalog does not know, the
    name in lower case.

    The default catalog is the built-in one: every merged catalog keeps its names and
    aliases (a user file adds names, never takes one away), so names equal by it are equal
    in any catalog; a user file's own aliases need that catalog.
    """
    catalog = catalog if catalog is not None else _builtin_catalog()
    canonical = catalog.canonical(section, str(name))
    return ("entry", canonical) if canonical is not None else ("name", str(name).strip().lower())


def repeated_entry(section: str, names: Iterable[str],
                   catalog: Catalog | None = None) -> tuple[int, int] | None:
    """The indices ``(earlier, later)`` of the first two of ``names`` that name one entry
    of ``section`` (by :func:`entry_key`: an alias and the name, two cases of a name, or
    a name twice), or None when each names its own."""
    seen: dict[tuple[str, str], int] = {}
    for index, name in enumerate(names):
        key = entry_key(section, name, catalog)
        if key in seen:
            return seen[key], index
        seen[key] = index
    return None


@functools.cache
def _builtin_catalog() -> Catalog:
    """The built-in catalog, kept for name lookups only (never handed out: it is mutable)."""
    return load_catalog()


@functools.cache
def _default_documents() -> tuple[tuple[str, Any], ...]:
    """The parsed package-data files (parsed once; merging never mutates them)."""
    data_dir = resources.files("xsweep.spec") / "data"
    return tuple(
        (f"xsweep/spec/data/{name}",
         parse_yaml((data_dir / name).read_text(encoding="utf-8"), f"xsweep/spec/data/{name}"))
        for name in _DEFAULT_FILES
    )


def is_catalog_document(document: object) -> bool:
    """True when a parsed YAML document looks like a catalog (only catalog sections)."""
    return isinstance(document, Mapping) and bool(document) and set(document) <= set(_SECTIONS)


def _merge(tables: dict[str, _Table], document: object, file: str) -> None:
    if document is None:
        return
    if not isinstance(document, Mapping):
        raise InputError(file, None, type(document).__name__,
                         "a catalog is a mapping with keys gpus, nics, links, models, software")
    for section, entries in document.items():
        if section not in _SECTIONS:
            raise InputError(file, str(section), None,
                             f"unknown catalog section{did_you_mean(str(section), _SECTIONS)} "
                             "(expected gpus, nics, links, models or software)")
        if entries is None:
            continue
        if not isinstance(entries, Mapping):
            raise InputError(file, section, type(entries).__name__,
                             "expected a mapping from names to entries")
        table = tables[section]
        written: dict[str, tuple[str, set[str]]] = {}  # canonical -> (key in file, fields)
        for name, values in entries.items():
            if not isinstance(name, str):  # 1e5, true or null read as a name would change it
                raise InputError(file, f"{section}.{name}", name,
                                 "an entry's name is text: quote it")
            path = f"{section}.{name}"
            canonical = table.find(name)
            if canonical in written:
                earlier = written[canonical][0]
                raise InputError(file, path, name,
                                 f"names the same {table.kind} as {section}.{earlier} above "
                                 f"(both stand for {canonical!r}); give each {table.kind} once")
            canonical = _merge_entry(table, section, name, values, file, path)
            written[canonical] = (name, set(values) - {"aliases"})
        if section == "models":
            for canonical, (name, given) in written.items():
                check_model_dimensions(table.entries[canonical], file, f"models.{name}", given)


def _merge_entry(table: _Table, section: str, name: str, values: object, file: str,
                 path: str) -> str:
    """Merge one entry into ``table``; return its canonical name."""
    spec_type = _SECTIONS[section]
    if not isinstance(values, Mapping):
        raise InputError(file, path, values, "expected a mapping of fields")
    values = dict(values)
    aliases = values.pop("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise InputError(file, f"{path}.aliases", aliases, "expected a list of names")
    fields = {f.name: f for f in dataclasses.fields(spec_type)}
    for key in values:
        if key not in fields or key == "name":
            known = [f for f in fields if f != "name"]
            raise InputError(file, f"{path}.{key}", None,
                             f"unknown field{did_you_mean(str(key), known)} "
                             f"(known: {', '.join(known)})")
    checked = {key: _check_value(section, key, value, file, f"{path}.{key}")
               for key, value in values.items()}
    canonical = table.find(name)
    if canonical is not None:
        table.entries[canonical] = dataclasses.replace(table.entries[canonical], **checked)
    else:
        missing = [f.name for f in fields.values()
                   if f.name != "name" and f.name not in checked
                   and f.default is dataclasses.MISSING]
        if missing:
            raise InputError(file, path, None,
                             f"new {table.kind} entry lacks fields: {', '.join(missing)}")
        canonical = name
        table.entries[name] = spec_type(name=name, **checked)
    for key in (name, *aliases):
        owner = table.keys.setdefault(key.strip().lower(), canonical)
        if owner != canonical:
            raise InputError(file, f"{path}.aliases", key, f"name already used by {owner!r}")
    return canonical


#: The numeric dimensions of a model, each bounded by ``ranges.MODEL``.
MODEL_DIMENSIONS = tuple(ranges.MODEL)


def check_model_dimensions(model: ModelSpec, file: str | None, path: str,
                           given: Collection[str] | None = None) -> None:
    """The rules a model's dimensions obey wherever they are written (a catalog entry, a
    plan's ``model``): every dimension in its range (``ranges.MODEL``), ``num_kv_heads``
    at most ``num_attention_heads``, and ``num_attention_heads`` dividing ``hidden_size``
    (every head has ``hidden_size / num_attention_heads`` channels).

    Args:
        model: the model, its fields all resolved (a preset's with overrides laid over).
        path: where it is written (``model``, ``models.llama2-7b``); an error names the
            field below it, such as ``models.llama2-7b.num_kv_heads``.
        given: the fields the input itself wrote (default: all). A rule between two
            fields blames the one the input wrote when it wrote only one of them, so an
            override is blamed rather than the value it was laid over.

    Raises:
        InputError: naming ``file`` and the field.
    """
    for name, bounds in ranges.MODEL.items():
        bounds.check(getattr(model, name), file, f"{path}.{name}")
    given = MODEL_DIMENSIONS if given is None else given
    heads, kv, hidden = model.num_attention_heads, model.num_kv_heads, model.hidden_size
    if kv > heads:
        if "num_kv_heads" in given or "num_attention_heads" not in given:
            raise InputError(file, f"{path}.num_kv_heads", kv,
                             f"exceeds num_attention_heads ({heads})")
        raise InputError(file, f"{path}.num_attention_heads", heads,
                         f"is below num_kv_heads ({kv}): a key/value head serves at least one "
                         "attention head")
    if hidden % heads:
        channels = "every head has hidden_size / num_attention_heads channels"
        if "num_attention_heads" in given or "hidden_size" not in given:
            raise InputError(file, f"{path}.num_attention_heads", heads,
                             f"must divide hidden_size ({hidden}): {channels}")
        raise InputError(file, f"{path}.hidden_size", hidden,
                         f"is not a multiple of num_attention_heads ({heads}): {channels}")
    check_moe_fields(model, file, path)


def check_moe_fields(model: ModelSpec, file: str | None, path: str) -> None:
    """The mixture-of-experts fields: in range, and consistent when the model has experts
    (a top-k between 1 and the experts, an expert FFN width, dense layers below the
    model's layers); a dense model must leave the per-expert fields at 0."""
    for name, bounds in ranges.MOE_MODEL.items():
        bounds.check(getattr(model, name), file, f"{path}.{name}")
    if not model.is_moe:
        for name in ("moe_top_k", "expert_ffn_hidden_size", "num_shared_experts",
                     "moe_max_nodes"):
            if getattr(model, name):
                raise InputError(file, f"{path}.{name}", getattr(model, name),
                                 "needs num_experts (routed experts) above 0")
        return
    if not 1 <= model.moe_top_k <= model.num_experts:
        raise InputError(file, f"{path}.moe_top_k", model.moe_top_k,
                         f"must be between 1 and num_experts ({model.num_experts})")
    if model.expert_ffn_hidden_size < 1:
        raise InputError(file, f"{path}.expert_ffn_hidden_size", model.expert_ffn_hidden_size,
                         "must be positive for a model with experts")
    if model.moe_first_dense_layers >= model.num_layers:
        raise InputError(file, f"{path}.moe_first_dense_layers", model.moe_first_dense_layers,
                         f"must be below num_layers ({model.num_layers}): no layer has experts")
    if 0 < model.moe_capacity_factor < 1:
        raise InputError(file, f"{path}.moe_capacity_factor", model.moe_capacity_factor,
                         "must be 0 (dropless) or at least 1")


def _check_value(section: str, key: str, value: object, file: str, path: str) -> object:
    kind = {f.name: f.type for f in dataclasses.fields(_SECTIONS[section])}[key]
    if kind == "tuple[str, ...]":
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip()
                                                  for v in value):
            raise InputError(file, path, value, "expected a list of names")
        return tuple(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise InputError(file, path, value, "expected true or false")
        return value
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise InputError(file, path, value, "expected a non-empty string")
        if key == "mlp" and value.lower() not in MLP.known():
            raise InputError(file, path, value, f"expected one of {', '.join(MLP.known())}")
        return value.lower() if key == "mlp" else value
    bounds = ranges.CATALOG[section][key]
    bounds.check(value, file, path)
    if kind == "int" and not isinstance(value, int):  # 32.0 is a float, as written
        raise InputError(file, path, value, "expected an integer, written without a point")
    return int(value) if kind == "int" else float(value)


def _check_gpu_references(tables: dict[str, _Table], file: str | None) -> None:
    """Every GPU's default NIC and link kinds must exist in the merged catalog."""
    for gpu in tables["gpus"].entries.values():
        for key, section, what in (("default_nic", "nics", "NIC"),
                                   ("scale_up_link", "links", "link kind"),
                                   ("pcie_link", "links", "link kind")):
            if tables[section].find(getattr(gpu, key)) is None:
                raise InputError(file, f"gpus.{gpu.name}.{key}", getattr(gpu, key),
                                 f"names no {what} in the catalog")


def _check_reference_software(tables: dict[str, _Table], file: str) -> None:
    """The reference profile stays what it is (factors 1): a plan that names no profile
    runs on the catalog's rates as they stand."""
    reference = tables["software"].entries.get(REFERENCE_SOFTWARE.name)
    if reference != REFERENCE_SOFTWARE:
        raise InputError(file, f"software.{REFERENCE_SOFTWARE.name}", None,
                         "the reference profile is the catalog's rates as they stand and "
                         "cannot change; give a new profile a name of its own")
