"""What the simulator needs from the predictor's catalogs, cached.

The simulator asks two questions many thousands of times: "what is this GPU or
model called canonically?" and "how much faster is GPU type B than A for this
job?". Both are answered by :mod:`predictor.catalog` (Gavel's measured table
first, public GPU specifications otherwise); this module caches the answers so
that per-event work stays cheap.
"""

from __future__ import annotations

from functools import lru_cache

from cpn.core.errors import CpnError


class UnknownName(CpnError, ValueError):
    """A GPU type or model name the catalogs do not know."""


@lru_cache(maxsize=4096)
def canonical_gpu(name: str) -> str:
    """Canonical GPU type of ``name`` (``v100`` -> ``V100-16GB``); UnknownName if unknown."""
    from predictor import catalog

    try:
        return catalog.canonical_gpu(name)
    except ValueError as exc:
        raise UnknownName(f"unknown GPU type {name!r}") from exc


@lru_cache(maxsize=4096)
def canonical_model(name: str) -> str:
    """Canonical model name of ``name`` (``ResNet-50`` -> ``resnet50``); UnknownName if unknown."""
    from predictor import catalog

    try:
        return catalog.canonical_model(name)
    except ValueError as exc:
        raise UnknownName(f"unknown model {name!r}") from exc


@lru_cache(maxsize=65536)
def throughput_ratio(model: str, batch_size: int | None, src: str, dst: str, gpus: int) -> float:
    """How many times faster ``dst`` runs the job than ``src`` (runtime_dst = runtime_src / ratio).

    Delegates to :func:`predictor.benchmarks.throughput_ratio`; a non-positive or
    failed answer (a model the catalog cannot rate) counts as equal speed.
    """
    if src == dst:
        return 1.0
    from predictor import benchmarks

    try:
        ratio = float(benchmarks.throughput_ratio(model, batch_size, src, dst, gpus=gpus))
    except ValueError:
        return 1.0
    return ratio if ratio > 0 else 1.0


class TrueRuntime:
    """True runtime of each trace job on each GPU type: the simulator's ground truth.

    A job's ``duration_s`` was measured on its ``gpu_type`` (or the reference GPU);
    on another type it is scaled by the catalog's throughput ratio for the job's
    model, batch size and GPU count. Answers are cached per (job, GPU type).
    """

    def __init__(self, reference_gpu: str) -> None:
        self.reference_gpu = reference_gpu
        self._jobs: dict[str, _Truth] = {}
        self._cache: dict[tuple[str, str], float] = {}

    def add(
        self,
        key: str,
        *,
        duration_s: float,
        gpu_type: str | None,
        model: str,
        batch_size: int | None,
        gpus: float,
    ) -> None:
        """Register a job's measured duration and what its speed depends on."""
        self._jobs[key] = _Truth(
            duration_s=duration_s,
            gpu_type=gpu_type or self.reference_gpu,
            model=model,
            batch_size=batch_size,
            gpus=max(1, int(gpus)),
        )

    def runtime_s(self, key: str, gpu_type: str) -> float:
        """True runtime of job ``key`` on ``gpu_type`` (KeyError for an unknown job)."""
        cached = self._cache.get((key, gpu_type))
        if cached is not None:
            return cached
        truth = self._jobs[key]
        ratio = throughput_ratio(
            truth.model, truth.batch_size, truth.gpu_type, gpu_type, truth.gpus
        )
        value = truth.duration_s / ratio
        self._cache[(key, gpu_type)] = value
        return value

    def keys_of_size(self, gpus: float) -> list[str]:
        """The keys of the jobs that asked for ``gpus`` GPUs."""
        size = max(1, int(gpus))
        return [key for key, truth in self._jobs.items() if truth.gpus == size]

    def ratio(self, key: str, src: str, dst: str) -> float:
        """How many times faster job ``key`` runs on ``dst`` than on ``src``."""
        truth = self._jobs[key]
        return throughput_ratio(truth.model, truth.batch_size, src, dst, truth.gpus)


class _Truth:
    __slots__ = ("batch_size", "duration_s", "gpu_type", "gpus", "model")

    def __init__(
        self, *, duration_s: float, gpu_type: str, model: str, batch_size: int | None, gpus: int
    ) -> None:
        self.duration_s = duration_s
        self.gpu_type = gpu_type
        self.model = model
        self.batch_size = batch_size
        self.gpus = gpus
