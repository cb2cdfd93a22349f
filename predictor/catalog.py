"""What the predictor knows of GPUs and models before it has seen a single job.

Two data files ship in ``predictor/data/`` with their sources (see its README):

- ``gpus.yaml``: public specification facts per canonical GPU type (upper case:
  ``V100-16GB``, ``A100-80GB``, ``RTX2080TI``...), with the aliases Kubernetes nodes and
  ``nvidia-smi`` use;
- ``models.yaml``: parameters and forward MACs per sample of common training workloads.

The third, ``benchmarks.csv`` (measured throughputs), is :mod:`predictor.benchmarks`'.

Names are matched case-insensitively, ignoring spaces, dashes, underscores (and dots for
models). A GPU name may carry a leading ``NVIDIA``/``Tesla``/``GeForce``/``Quadro`` word
and GFD's ``-SHARED`` suffix; a model name may carry Gavel's ``(batch size N)`` suffix.
A bare family name resolves to one documented default variant (``V100`` -> ``V100-16GB``,
because Gavel's V100 numbers were measured on 16 GB cards; ``A100`` -> ``A100-40GB``);
:func:`expand_gpu_types` gives every variant of a family instead.

:func:`catalog_ratio` answers "how many times faster is GPU type B than A" from the
specifications alone (see its docstring for the formula and why);
:func:`predictor.benchmarks.throughput_ratio` prefers measurements.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from statistics import median
from typing import Any

import yaml

__all__ = [
    "GpuSpec",
    "ModelSpec",
    "UnknownName",
    "canonical_gpu",
    "canonical_model",
    "canonical_precision",
    "catalog_ratio",
    "data_text",
    "effective_tflops",
    "expand_gpu_types",
    "gpu_spec",
    "gpu_types",
    "median_model_facts",
    "model_input",
    "model_names",
    "model_spec",
]


class UnknownName(ValueError):
    """A GPU type or model name that no catalog entry or alias matches."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"unknown {kind} {name!r}")
        self.kind = kind
        self.name = name


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """Public specification facts of one GPU type (per Kubernetes GPU device)."""

    name: str
    family: str
    arch: str
    fp32_tflops: float
    fp16_tflops: float  # dense tensor-core FP16 with FP32 accumulate where available
    memory_gib: float
    bandwidth_gbs: float
    #: dense TF32 tensor-core TFLOPS (Ampere and later); 0 where the GPU has none
    tf32_tflops: float = 0.0
    #: GPU-to-GPU bandwidth inside one server, GB/s each way (NVLink or the PCIe slot);
    #: 0 when unknown (multi-GPU predictions then assume the anchors' scaling)
    link_gbs: float = 0.0
    interconnect: str = ""
    aliases: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Public facts of one training workload."""

    name: str
    domain: str
    params_m: float
    forward_gmacs: float  # forward multiply-accumulates per sample at `input`
    input: str = ""
    estimated: bool = False
    aliases: tuple[str, ...] = ()
    note: str = ""
    #: other inputs this model is commonly trained on: (input, params_m, forward_gmacs)
    variants: tuple[tuple[str, float, float], ...] = ()

    def for_input(self, input_name: str) -> ModelSpec:
        """These facts for ``input_name`` (a key of ``variants``), else unchanged."""
        wanted = input_name.strip().lower()
        for name, params_m, gmacs in self.variants:
            if name == wanted:
                return replace(self, input=name, params_m=params_m, forward_gmacs=gmacs)
        return self

    @property
    def train_gflops_per_sample(self) -> float:
        """Training FLOPs per sample: 2 FLOPs per MAC, backward twice the forward."""
        return 6.0 * self.forward_gmacs


# --------------------------------------------------------------------------- names

_GPU_PREFIXES = ("nvidia", "tesla", "geforce", "quadro")
_BATCH_SUFFIX = re.compile(r"\(\s*batch\s*size\s*\d+\s*\)\s*$", re.IGNORECASE)
_NON_ALNUM = re.compile(r"[^a-z0-9]")


def gpu_key(name: str) -> str:
    """Normalised matching key of a GPU name (lower case, alphanumerics, no vendor words)."""
    key = _NON_ALNUM.sub("", name.lower())
    if key.endswith("shared") and len(key) > len("shared"):
        key = key[: -len("shared")]
    changed = True
    while changed:
        changed = False
        for prefix in _GPU_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                changed = True
    return key


def model_key(name: str) -> str:
    """Normalised matching key of a model name (drops Gavel's "(batch size N)")."""
    return _NON_ALNUM.sub("", _BATCH_SUFFIX.sub("", name).lower())


def batch_size_in_name(name: str) -> int | None:
    """The N of a Gavel job-type name like ``"ResNet-50 (batch size 64)"``, else None."""
    match = re.search(r"\(\s*batch\s*size\s*(\d+)\s*\)\s*$", name, re.IGNORECASE)
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------- catalogs


def data_text(filename: str) -> str:
    """The text of ``filename`` in the predictor's packaged data directory."""
    return resources.files("predictor").joinpath("data", filename).read_text(encoding="utf-8")


def _aliases(entry: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(alias) for alias in entry.get("aliases") or ())


@dataclass(frozen=True, slots=True)
class _Catalogs:
    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]
    gpu_index: Mapping[str, str]  # normalised key -> canonical GPU type
    model_index: Mapping[str, str]  # normalised key -> canonical model
    variant_index: Mapping[str, str]  # normalised key of a variant's alias -> its input
    families: Mapping[str, frozenset[str]]  # normalised family key -> variants


def _index(kind: str, names: Iterable[tuple[str, Iterable[str]]], keyf: Any) -> dict[str, str]:
    index: dict[str, str] = {}
    for canonical, aliases in names:
        for alias in (canonical, *aliases):
            key = keyf(alias)
            if not key:
                raise ValueError(f"{kind} alias {alias!r} of {canonical} is empty once normalised")
            if index.get(key, canonical) != canonical:
                raise ValueError(
                    f"{kind} alias {alias!r} maps to both {index[key]} and {canonical}"
                )
            index[key] = canonical
    return index


@cache
def _catalogs() -> _Catalogs:
    gdoc = yaml.safe_load(data_text("gpus.yaml"))["gpus"]
    gpus = {
        name: GpuSpec(
            name=name,
            family=str(e["family"]),
            arch=str(e["arch"]),
            fp32_tflops=float(e["fp32_tflops"]),
            fp16_tflops=float(e["fp16_tflops"]),
            memory_gib=float(e["memory_gib"]),
            bandwidth_gbs=float(e["bandwidth_gbs"]),
            tf32_tflops=float(e.get("tf32_tflops", 0.0)),
            link_gbs=float(e.get("link_gbs", 0.0)),
            interconnect=str(e.get("interconnect", "")),
            aliases=_aliases(e),
            note=str(e.get("note", "")),
        )
        for name, e in gdoc.items()
    }
    mdoc = yaml.safe_load(data_text("models.yaml"))["models"]
    models = {
        name: ModelSpec(
            name=name,
            domain=str(e["domain"]),
            params_m=float(e["params_m"]),
            forward_gmacs=float(e["forward_gmacs"]),
            input=str(e.get("input", "")),
            estimated=bool(e.get("estimated", False)),
            aliases=_aliases(e),
            note=str(e.get("note", "")),
            variants=tuple(
                (str(k).lower(), float(v["params_m"]), float(v["forward_gmacs"]))
                for k, v in (e.get("variants") or {}).items()
            ),
        )
        for name, e in mdoc.items()
    }
    families: dict[str, set[str]] = defaultdict(set)
    for spec in gpus.values():
        families[gpu_key(spec.family)].add(spec.name)
    # a variant's alias names the model on that input (Lambda's bert_base_squad)
    variant_aliases = {
        model_key(str(alias)): (name, str(k).lower())
        for name, e in mdoc.items()
        for k, v in (e.get("variants") or {}).items()
        for alias in v.get("aliases") or ()
    }
    model_aliases = [
        (m.name, (*m.aliases, *(a for a, (n, _) in variant_aliases.items() if n == m.name)))
        for m in models.values()
    ]
    return _Catalogs(
        gpus=gpus,
        models=models,
        gpu_index=_index("GPU", ((g.name, g.aliases) for g in gpus.values()), gpu_key),
        model_index=_index("model", model_aliases, model_key),
        variant_index={key: input_name for key, (_, input_name) in variant_aliases.items()},
        families={key: frozenset(names) for key, names in families.items()},
    )


def gpu_types() -> tuple[str, ...]:
    """Every canonical GPU type of the catalog, in catalog order."""
    return tuple(_catalogs().gpus)


def model_names() -> tuple[str, ...]:
    """Every canonical model name of the catalog, in catalog order."""
    return tuple(_catalogs().models)


#: Words of a GPU name that say how the board is built or sold, not which GPU it is:
#: the SXM socket, NVIDIA's HGX/DGX boards, memory technologies, PCIe generations,
#: "Founders Edition". A name no alias matches is tried again without them.
_BOARD_WORDS = re.compile(
    r"\b(?:sxm\d?|hgx|dgx|hbm\d?e?|g?ddr\d+x?|gen\s*\d|founders|edition|tensor|core|gpu)\b"
)
_MEMORY = re.compile(r"\b(\d+)\s*gb\b")


def canonical_gpu(name: str) -> str:
    """Canonical GPU type of ``name`` (an alias, a GFD label value, an nvidia-smi name).

    A name no alias matches is read without its board words (``H200 SXM 141GB``,
    ``HGX B200``, ``H100 80GB HBM3``); then, if it names a memory size, as the variant of
    its family with that memory (``A100 40GB SXM4`` -> ``A100-40GB``), or the family's
    only variant when its memory is within 10% of that size (``B200 192GB``; ``RTX 6000
    48GB`` is not the 24 GB Quadro RTX 6000). Raises :class:`UnknownName` naming the input
    when nothing matches.
    """
    found = _catalogs().gpu_index.get(gpu_key(name)) or _gpu_by_words(name)
    if found is None:
        raise UnknownName("GPU type", name)
    return found


@cache
def _gpu_by_words(name: str) -> str | None:
    """:func:`canonical_gpu`'s second reading (board words, memory size); None when it
    finds nothing. Cached: the same name (a node label, a table's column) comes back often."""
    index = _catalogs().gpu_index
    words = _BOARD_WORDS.sub(" ", re.sub(r"[^a-z0-9]+", " ", name.lower()))
    found = index.get(gpu_key(words))
    if found is not None:
        return found
    memory = _MEMORY.search(words)
    rest = gpu_key(_MEMORY.sub(" ", words)) if memory else gpu_key(words)
    family = _catalogs().families.get(rest, frozenset())
    variants = family or ({index[rest]} if rest in index else set())
    if memory is not None:
        sized = [v for v in variants if gpu_spec(v).memory_gib == float(memory.group(1))]
        if len(sized) == 1:
            return sized[0]
    if len(variants) == 1:
        only = next(iter(variants))
        # the same card under a rounded or first-announced size (B200: 180 or 192 GB)
        if memory is None or abs(float(memory.group(1)) / gpu_spec(only).memory_gib - 1) <= 0.1:
            return only
    return None


def canonical_model(name: str) -> str:
    """Canonical model name of ``name``; raises :class:`UnknownName` naming the input."""
    found = _catalogs().model_index.get(model_key(name))
    if found is None:
        raise UnknownName("model", name)
    return found


def model_input(name: str) -> str:
    """The input a model name implies: a variant's alias names one (``bert_base_squad`` ->
    ``"squad"``), any other name none (``""``)."""
    return _catalogs().variant_index.get(model_key(name), "")


def expand_gpu_types(name: str) -> frozenset[str]:
    """Every canonical type ``name`` allows: a family name gives all its variants.

    ``"V100"`` -> ``{"V100-16GB", "V100-32GB", "V100S-32GB"}``; ``"A100-80GB"`` ->
    ``{"A100-80GB"}``. Raises :class:`UnknownName` when ``name`` matches nothing.
    """
    variants = _catalogs().families.get(gpu_key(name))
    if variants is not None:
        return variants
    return frozenset({canonical_gpu(name)})


@cache
def median_model_facts() -> tuple[float, float]:
    """(params_m, forward_gmacs): the catalog models' medians, the facts a model nobody
    describes is given (its measured rows, where it has any, say the rest)."""
    specs = [model_spec(m) for m in model_names()]
    return median(m.params_m for m in specs), median(m.forward_gmacs for m in specs)


def gpu_spec(gpu_type: str) -> GpuSpec:
    """Specification of ``gpu_type`` (any alias)."""
    return _catalogs().gpus[canonical_gpu(gpu_type)]


def model_spec(model: str) -> ModelSpec:
    """Catalog facts of ``model`` (any alias)."""
    return _catalogs().models[canonical_model(model)]


# --------------------------------------------------------------------------- ratios


#: how benchmark tables and frameworks spell each precision the predictor tells apart
_PRECISION_SPELLINGS = {
    "fp32": ("fp32", "float32", "single", "float", "full"),
    "tf32": ("tf32",),
    "fp16": ("fp16", "float16", "half"),
    "bf16": ("bf16", "bfloat16"),
    "amp": ("amp", "ampfp16", "fp16amp", "autocast"),
    "mixed": ("mixed", "mixedprecision"),
}
_PRECISION = {
    alias: name for name, spellings in _PRECISION_SPELLINGS.items() for alias in spellings
}


def canonical_precision(text: str | None) -> str:
    """A row's precision as the predictor names it (``fp32``, ``tf32``, ``fp16``, ``bf16``,
    ``amp``, ``mixed``), read without case, spaces, dashes or underscores (``Float32``,
    ``half``, ``bfloat16``, ``AMP_FP16``); ``""`` (unknown) for anything else, so a file
    whose precision column says nothing useful is read like one without it."""
    return _PRECISION.get("".join(ch for ch in (text or "").lower() if ch.isalnum()), "")


def effective_tflops(spec: GpuSpec, precision: str | None = None) -> float:
    """The compute figure a job can use: FP32 (TF32), or the geometric mean of FP32 and
    tensor FP16.

    ``precision`` "fp32" and "tf32" use the TF32 tensor figure where the GPU has one
    (Ampere and later: PyTorch's cuDNN convolutions run FP32 training on TF32 by default,
    NVIDIA's containers its matmuls too), else FP32. Mixed precision ("fp16", "bf16",
    "amp", "mixed") and unknown (None or "") use the geometric mean of the FP32 (CUDA
    core) and tensor FP16 figures: a mixed-precision step runs its matrix products on
    tensor cores and the rest (normalisation, softmax, the loss, the optimizer on FP32
    master weights) on CUDA cores, and most training today mixes both. The tensor
    figure alone rated an A100 (312) and an H100 (989) far above a GeForce RTX 4090
    (165: half-rate FP32 accumulate, but 82.6 FP32); see docs/predictor.md (issue 17).
    """
    p = canonical_precision(precision)
    if p in {"fp32", "tf32"}:
        return max(spec.fp32_tflops, spec.tf32_tflops)
    return math.sqrt(spec.fp32_tflops * spec.fp16_tflops)


def catalog_ratio(src: GpuSpec, dst: GpuSpec, precision: str | None = None) -> float:
    """Speed-up of ``dst`` over ``src`` from specifications alone.

    A roofline-ish blend: a training step is partly compute-bound (large matmuls and
    convolutions) and partly memory-bound (normalisation, element-wise ops, optimizer
    updates, embeddings), so the speed-up is the geometric mean of the compute ratio and
    the memory-bandwidth ratio: sqrt(C_dst/C_src * B_dst/B_src). On Gavel's table it gives
    V100/K80 = 3.6 (FP32) against measured 2.1-8.8 (median ~4), and on public AMP
    results A100/V100 ~ 2 and H100/A100 ~ 2.3, the vendor-reported range.
    """
    compute = effective_tflops(dst, precision) / effective_tflops(src, precision)
    bandwidth = dst.bandwidth_gbs / src.bandwidth_gbs
    return math.sqrt(compute * bandwidth)
