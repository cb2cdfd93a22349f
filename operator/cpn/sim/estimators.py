"""Runtime estimators of the simulator, selectable by name (``--estimator``).

- ``oracle``: the true runtime on each GPU type (what Gavel's oracle throughputs give).
- ``noisy``: the oracle times a log-normal error exp(N(0, sigma)), drawn once per job
  from ``(seed, job)``, so the draw does not depend on arrival order.
- ``size-oracle``: the mean true runtime of the trace's jobs of the same GPU count, on each
  GPU type: not a predictor but a bound, the most a ranking that knows only each job's
  size can know (on traces with no user, group or model: what else is there).
- ``user``: the trace's ``user_estimate_s`` (on the job's trace GPU, else the reference
  GPU), scaled per GPU type; a conservative default when the trace leaves it blank.
- ``predictor``: :class:`cpn.api.predictions.PredictorEstimator` when importable, else
  :class:`HistoryEstimator`, which learns from the jobs that finished earlier.

All of them implement :class:`cpn.core.estimator.Estimator`. Those that learn nothing say
so (``learns = False``): the world then never re-estimates a waiting job (the others'
waiting jobs are re-estimated when a job of their model finished, see
:meth:`cpn.sim.world.World.refresh_estimates`).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from cpn.core.estimator import Estimator
from cpn.core.model import Estimate, Job
from cpn.sim.speed import TrueRuntime, throughput_ratio

#: Runtime assumed for a job nobody estimated (a day: a common batch-system limit).
DEFAULT_ESTIMATE_S = 24 * 3600.0

#: z-score of the high quantile reported in ``Estimate.high_s`` (90th percentile).
_Z90 = 1.2816

ESTIMATORS = ("oracle", "noisy", "size-oracle", "user", "predictor")


def _frozen(values: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType(values)


class OracleEstimator(Estimator):
    """True runtime per GPU type; learns nothing."""

    source = "oracle"
    learns = False  # the world never re-estimates its jobs

    def __init__(self, truth: TrueRuntime) -> None:
        self.truth = truth

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """The true runtime of ``job`` on each of ``gpu_types``."""
        runtime = {g: self.truth.runtime_s(job.key, g) for g in gpu_types}
        return Estimate(runtime_s=_frozen(runtime), high_s=_frozen(runtime), source=self.source)

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Nothing to learn."""


class NoisyEstimator(Estimator):
    """The oracle times exp(N(0, sigma)), one draw per job, seeded."""

    source = "noisy"
    learns = False  # the world never re-estimates its jobs

    def __init__(self, truth: TrueRuntime, *, sigma: float, seed: int = 0) -> None:
        if sigma < 0:
            raise ValueError("sigma must be >= 0")
        self.truth = truth
        self.sigma = sigma
        self.seed = seed

    def factor(self, key: str) -> float:
        """The multiplicative error of job ``key`` (the same on every call)."""
        return math.exp(random.Random(f"{self.seed}:{key}").gauss(0.0, self.sigma))

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """Oracle runtime times this job's error; the high quantile is exp(1.28 sigma) above."""
        factor = self.factor(job.key)
        high = math.exp(_Z90 * self.sigma)
        runtime = {g: self.truth.runtime_s(job.key, g) * factor for g in gpu_types}
        return Estimate(
            runtime_s=_frozen(runtime),
            high_s=_frozen({g: v * high for g, v in runtime.items()}),
            source=self.source,
        )

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Nothing to learn."""


class SizeOracleEstimator(Estimator):
    """The mean true runtime of the trace's jobs with the job's GPU count; learns nothing.

    Ordering by it is Smith's rule with the size classes' true means: the best a
    non-preemptive order can do knowing nothing of a job but its size, so what it
    recovers bounds what any predictor can on a trace that carries nothing else.
    """

    source = "size-oracle"
    learns = False  # the world never re-estimates its jobs

    def __init__(self, truth: TrueRuntime) -> None:
        self.truth = truth
        self._means: dict[tuple[int, str], float] = {}

    def _mean(self, gpus: int, gpu_type: str) -> float:
        cached = self._means.get((gpus, gpu_type))
        if cached is None:
            keys = self.truth.keys_of_size(gpus)
            runtimes = [self.truth.runtime_s(key, gpu_type) for key in keys]
            cached = sum(runtimes) / len(runtimes) if runtimes else DEFAULT_ESTIMATE_S
            self._means[(gpus, gpu_type)] = cached
        return cached

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """The size class's mean true runtime on each of ``gpu_types``."""
        size = max(1, int(job.gpus))
        runtime = {g: self._mean(size, g) for g in gpu_types}
        return Estimate(runtime_s=_frozen(runtime), high_s=_frozen(runtime), source=self.source)

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Nothing to learn."""


class UserEstimator(Estimator):
    """The user's own estimate (``user_estimate_s``), scaled per GPU type.

    ``base_gpu`` maps a job key to the GPU type its estimate refers to (the trace's
    ``gpu_type``, else the reference GPU).
    """

    source = "user"
    learns = False

    def __init__(
        self,
        truth: TrueRuntime,
        *,
        default_s: float = DEFAULT_ESTIMATE_S,
        base_gpu: Callable[[str], str] | None = None,
    ) -> None:
        self.truth = truth
        self.default_s = default_s
        self.base_gpu = base_gpu or (lambda _key: truth.reference_gpu)

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """``user_estimate_s`` on each GPU type, or ``default_s`` everywhere when blank."""
        if job.user_estimate_s is None:
            flat = {g: self.default_s for g in gpu_types}
            return Estimate(runtime_s=_frozen(flat), source="user-default")
        base = self.base_gpu(job.key)
        runtime = {g: job.user_estimate_s / self.truth.ratio(job.key, base, g) for g in gpu_types}
        return Estimate(runtime_s=_frozen(runtime), source=self.source)

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Nothing to learn."""


def _work(job: Job) -> float | None:
    """How much work the job declares: steps, else epochs x samples, else None."""
    features = job.features
    steps = features.get("steps")
    if steps:
        return steps
    epochs, samples = features.get("epochs"), features.get("dataset_samples")
    if epochs and samples:
        return epochs * samples
    return None


class _Median:
    """A growing sample with its median (sorted insertion; histories are small)."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, value: float) -> None:
        bisect.insort(self.values, value)

    def median(self) -> float:
        values = self.values
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])

    def quantile(self, q: float) -> float:
        values = self.values
        return values[min(len(values) - 1, int(q * len(values)))]


class HistoryEstimator(Estimator):
    """Learns runtimes from the jobs that finished earlier in the trace.

    Observations are normalised to the reference GPU (through the catalog's
    throughput ratio) and kept per key, most specific first: (user, model, batch
    size, GPUs), (model, batch size, GPUs), (model,). For jobs that declare their
    work (``steps``, or ``epochs`` x ``dataset_samples``) it learns seconds per unit
    of work and multiplies by the job's work; otherwise it learns runtimes. With
    no history it falls back to the user's estimate, then to a conservative
    ``default_s`` with ``Estimate.unseen`` set. Estimates are scaled to each GPU
    type by the catalog's throughput ratio. A job of a model none of which finished
    yet has ``Estimate.new_model`` set (the oracle, noisy and user estimators never
    set it: they learn nothing).
    """

    source = "history"

    def __init__(self, reference_gpu: str, *, default_s: float = DEFAULT_ESTIMATE_S) -> None:
        self.reference_gpu = reference_gpu
        self.default_s = default_s
        self._rates: dict[tuple[object, ...], _Median] = {}
        self._runtimes: dict[tuple[object, ...], _Median] = {}

    @staticmethod
    def _keys(job: Job) -> tuple[tuple[object, ...], ...]:
        batch = job.features.get("batch_size")
        gpus = job.gpus
        return (
            ("u", job.user, job.model, batch, gpus),
            ("m", job.model, batch, gpus),
            ("M", job.model),
        )

    def _ratio(self, job: Job, src: str, dst: str) -> float:
        batch = job.features.get("batch_size")
        return throughput_ratio(
            job.model, None if batch is None else int(batch), src, dst, max(1, int(job.gpus))
        )

    def _reference_runtime(self, job: Job) -> tuple[float, float, bool, str]:
        """(median, high quantile, unseen, source) on the reference GPU."""
        work = _work(job)
        for key in self._keys(job):
            if work is not None:
                rates = self._rates.get(key)
                if rates is not None and rates.values:
                    return rates.median() * work, rates.quantile(0.9) * work, False, "history"
            runtimes = self._runtimes.get(key)
            if runtimes is not None and runtimes.values:
                return runtimes.median(), runtimes.quantile(0.9), False, "history"
        if job.user_estimate_s is not None:
            return job.user_estimate_s, job.user_estimate_s, False, "history-user"
        return self.default_s, self.default_s, True, "history-unseen"

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """Predicted runtime on each GPU type (see the class docstring for the order)."""
        median, high, unseen, source = self._reference_runtime(job)
        runtime: dict[str, float] = {}
        highs: dict[str, float] = {}
        for gpu in gpu_types:
            ratio = self._ratio(job, self.reference_gpu, gpu)
            runtime[gpu] = median / ratio
            highs[gpu] = high / ratio
        new_model = bool(job.model) and ("M", job.model) not in self._runtimes
        return Estimate(
            runtime_s=_frozen(runtime),
            high_s=_frozen(highs),
            unseen=unseen,
            source=source,
            new_model=new_model,
        )

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Learn that ``job`` ran ``actual_s`` seconds on ``gpu_type``."""
        if actual_s <= 0:
            return
        on_reference = actual_s * self._ratio(job, self.reference_gpu, gpu_type)
        work = _work(job)
        for key in self._keys(job):
            self._runtimes.setdefault(key, _Median()).add(on_reference)
            if work is not None:
                self._rates.setdefault(key, _Median()).add(on_reference / work)


def make_estimator(
    name: str,
    truth: TrueRuntime,
    *,
    sigma: float = 0.5,
    seed: int = 0,
    base_gpu: Callable[[str], str] | None = None,
) -> tuple[Estimator, str]:
    """The estimator called ``name`` and the name of what it really is.

    ``predictor`` resolves to ``cpn.api.predictions.PredictorEstimator`` when that module
    imports (a fresh, in-memory history per run, seeded), else to :class:`HistoryEstimator`.
    """
    if name == "oracle":
        return OracleEstimator(truth), "oracle"
    if name == "noisy":
        return NoisyEstimator(truth, sigma=sigma, seed=seed), f"noisy(sigma={sigma:g})"
    if name == "size-oracle":
        return SizeOracleEstimator(truth), "size-oracle"
    if name == "user":
        return UserEstimator(truth, base_gpu=base_gpu), "user"
    if name == "predictor":
        try:
            from cpn.api.predictions import PredictorEstimator
        except ImportError:
            return HistoryEstimator(truth.reference_gpu), "history"
        return PredictorEstimator(reference_gpu=truth.reference_gpu, seed=seed), "predictor"
    raise ValueError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")
