"""The online predictor: benchmark prior, learned model, online corrections.

``OnlinePredictor.predict(job, gpu_types)`` predicts the runtime of ``job`` (any
:class:`~predictor.jobs.JobLike`) on each GPU type as a :class:`~predictor.jobs.Prediction`;
``observe(job, gpu_type, actual_s)`` records a finished job. cpn uses it as its
``Estimator`` through :mod:`cpn.api.predictions`. Layers, cheapest first, all answered
from memory (the scheduling path never trains and never waits):

1. **Throughput** of (model, GPU type, batch size, GPUs) from :mod:`predictor.model`:
   the measurement when that pair was benchmarked or observed, else the scaling prior
   corrected by the forest. Cached per key until the model is replaced.
2. **Online correction**: every finished job with declared work gives an observed
   throughput ``work / actual_s``; the log-ratio to the model's prediction is averaged
   per (model, GPU type) and per model and applied with shrinkage ``n / (n + 1)``
   (a model seen on one GPU type is corrected on all of them). O(1) per observation.
3. **Retraining** folds the history (median observed throughput per model, GPU type,
   batch size and GPUs) into the model's training set. It runs every ``retrain_every``
   observations when history brought (model, GPU type, batch, GPUs) keys the model has
   no measurement for: synchronously in ``retrain="sync"`` mode (deterministic, for the
   simulator), in a background thread in ``retrain="thread"`` mode (live: the new model
   is swapped in atomically when ready), never with ``retrain="off"``.

Runtime = ``work / throughput`` where work is ``dataset_samples x epochs`` or
``steps x batch_size`` (samples). A job that gives steps but no batch size is assumed to
use its model's median benchmarked batch size (the correction then learns the rest). A
job with no declared work at all is predicted from the runtimes of earlier jobs: a
log-normal law fitted over the keys it shares with them, (model, user, GPUs) down to
(group) and all jobs, by hierarchical shrinkage (:mod:`predictor.runtimes`); runtimes
are normalised to ``reference_gpu`` by the throughput ratio. Before any job finished:
the user's estimate, then ``default_s``.

A model with no benchmark and no observation is **unseen**: its runtime is the high
(90th percentile) estimate, its ``high_s`` higher still, and ``Prediction.unseen`` is set
and, when the job names a model, ``Prediction.new_model``: the policy switch
``placement.first_of_model_alone`` then runs it alone on its node (``cpn.core.alone``).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from predictor import artifacts
from predictor.benchmarks import BenchmarkRow, BenchmarkTable
from predictor.catalog import UnknownName, canonical_gpu, canonical_model
from predictor.features import JobWork, describe_job
from predictor.history import BenchmarkRecord, History, HistoryRecord
from predictor.jobs import JobLike, Prediction
from predictor.measurements import Measurement, Query, measurements_from_table
from predictor.model import ThroughputModel
from predictor.runtimes import RuntimeHistory

log = logging.getLogger("predictor")

#: Runtime assumed when nothing is known (a day: a common batch-system limit).
DEFAULT_ESTIMATE_S = 24 * 3600.0
#: Batch size assumed for a model the table never measured when a job gives only steps.
DEFAULT_BATCH = 32
_Z90 = 1.2816


@lru_cache(maxsize=1024)
def _gpu(name: str) -> str:
    try:
        return canonical_gpu(name)
    except UnknownName:
        return name


@dataclass(slots=True)
class _Stat:
    """Running mean and spread of log-residuals."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self.squares += value * value

    def shrunk(self, prior: float = 0.0, k: float = 1.0) -> float:
        """Mean pulled toward ``prior`` with weight ``k`` pseudo-observations."""
        return (self.total + k * prior) / (self.n + k)

    def std(self) -> float:
        if self.n < 2:
            return 0.0
        mean = self.total / self.n
        return math.sqrt(max(0.0, self.squares / self.n - mean * mean))


@dataclass(frozen=True, slots=True)
class _Obs:
    model: str
    gpu_type: str
    batch_size: int
    gpus: int
    precision: str
    samples_per_s: float


class OnlinePredictor:
    """The learned predictor with online corrections, for any user's jobs."""

    source = "predictor"

    def __init__(
        self,
        *,
        table: BenchmarkTable | str | Path | None = None,
        artifact: str | Path | None = None,
        history: History | str | Path = ":memory:",
        retrain: str = "sync",
        retrain_every: int = 200,
        family: str = "rf",
        reference_gpu: str = "V100-16GB",
        default_s: float = DEFAULT_ESTIMATE_S,
        seed: int = 0,
        unseen_runtime: str = "high",
    ) -> None:
        if retrain not in {"sync", "thread", "off"}:
            raise ValueError(f"retrain must be sync, thread or off, not {retrain!r}")
        if unseen_runtime not in {"high", "median"}:
            raise ValueError(f"unseen_runtime must be high or median, not {unseen_runtime!r}")
        if retrain_every < 1:
            raise ValueError("retrain_every must be >= 1")
        if isinstance(table, str | Path):
            table = BenchmarkTable.load(table)
        self.table = table if table is not None else BenchmarkTable.default()
        self.history = history if isinstance(history, History) else History(history)
        self.retrain_mode = retrain
        self.retrain_every = retrain_every
        self.family = family
        self.seed = seed
        self.reference_gpu = _gpu(reference_gpu)
        self.default_s = default_s
        #: what an unseen model's runtime is: the high quantile (conservative, default)
        #: or the median (``high_s`` is then the high quantile); it is flagged either way
        self.unseen_runtime = unseen_runtime
        self.retrains = 0
        self._base = measurements_from_table(self.table)
        if artifact is not None:
            self.model = artifacts.load(artifact)
        else:
            self.model = ThroughputModel(family, seed=seed).fit(self._base, table=self.table)
        self._bench_models = frozenset(m.model for m in self.model.measurements)
        self._typical_batch: dict[str, int] = {}
        for m in self._base:
            self._typical_batch.setdefault(m.model, 0)
        for name in self._typical_batch:
            batches = sorted(b.batch_size for b in self._base if b.model == name)
            self._typical_batch[name] = batches[len(batches) // 2]
        self._lock = threading.Lock()
        self._cache: dict[tuple[Any, ...], tuple[float, float, float, str]] = {}
        self._obs: list[_Obs] = []
        self._pair: dict[tuple[str, str, int], _Stat] = defaultdict(_Stat)
        self._per_model_gpus: dict[tuple[str, int], _Stat] = defaultdict(_Stat)
        self._per_model: dict[str, _Stat] = defaultdict(_Stat)
        self.runtimes = RuntimeHistory()
        self._seen_models: set[str] = set()
        #: models of every finished job observed, declared work or not (new_model)
        self._finished_models: set[str] = set()
        self._observed = 0
        self._trained_keys = self._keys_of(self.model.measurements)
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        self._thread: threading.Thread | None = None
        if retrain == "thread":
            self._thread = threading.Thread(
                target=self._worker, name="predictor-retrain", daemon=True
            )
            self._thread.start()

    # ------------------------------------------------------------------ throughput

    @staticmethod
    def _keys_of(measurements: Sequence[Measurement]) -> set[tuple[str, str, int, int]]:
        return {(m.model, m.gpu_type, m.batch_size, m.gpus) for m in measurements}

    def _batch(self, work: JobWork) -> int:
        if work.batch_size is not None:
            return work.batch_size
        return self._typical_batch.get(work.model, DEFAULT_BATCH)

    def _throughputs(
        self, work: JobWork, batch: int, gpu_types: Sequence[str]
    ) -> list[tuple[float, float, float, str]]:
        """(point, low, high, kind) samples/s per GPU type, from the cache or the model."""
        model = self.model  # callers hold the lock, so no swap happens meanwhile
        keys = [(work.model, g, batch, work.gpus, work.precision) for g in gpu_types]
        missing = [i for i, k in enumerate(keys) if k not in self._cache]
        if missing:
            queries = [
                Query(
                    model=work.model,
                    gpu_type=gpu_types[i],
                    batch_size=batch,
                    gpus=work.gpus,
                    precision=work.precision,
                )
                for i in missing
            ]
            pred = model.predict(queries)
            for j, i in enumerate(missing):
                self._cache[keys[i]] = (
                    float(pred.samples_per_s[j]),
                    float(pred.low_sps[j]),
                    float(pred.high_sps[j]),
                    pred.kind[j],
                )
        return [self._cache[k] for k in keys]

    def _correction(self, model: str, gpu_type: str, gpus: int) -> tuple[float, float, int]:
        """(log correction, std of residuals, n) for (model, GPU type, GPUs).

        Hierarchical shrinkage: the model's mean residual (toward 0), then the model's
        at this GPU count (toward the former), then this GPU type's (toward that).
        """
        per_model = self._per_model.get(model)
        base = per_model.shrunk() if per_model is not None else 0.0
        per_gpus = self._per_model_gpus.get((model, gpus))
        if per_gpus is not None:
            base = per_gpus.shrunk(prior=base)
        pair = self._pair.get((model, gpu_type, gpus))
        if pair is None:
            return base, 0.0, 0
        return pair.shrunk(prior=base), pair.std(), pair.n

    def _unseen(self, work: JobWork) -> bool:
        return work.model not in self._bench_models and work.model not in self._seen_models

    # ------------------------------------------------------------------ predictions

    def predict(self, job: JobLike, gpu_types: Sequence[str]) -> Prediction:
        """Predicted runtime of ``job`` on each of ``gpu_types``; never raises."""
        try:
            return self._predict(job, gpu_types)
        except Exception as exc:  # noqa: BLE001 - never raise into the scheduler; logged
            log.warning("predictor: estimate of %s failed (%s)", getattr(job, "key", "?"), exc)
            flat = {g: self.default_s for g in gpu_types}
            return _prediction(flat, flat, unseen=True, source="predictor-error")

    def _predict(self, job: JobLike, gpu_types: Sequence[str]) -> Prediction:
        work = describe_job(job)
        unseen = self._unseen(work)
        prediction = self._predict_work(job, work, gpu_types, unseen)
        if unseen and work.model and work.model not in self._finished_models:
            return replace(prediction, new_model=True)  # neither benchmarked nor seen finish
        return prediction

    def _predict_work(
        self, job: JobLike, work: JobWork, gpu_types: Sequence[str], unseen: bool
    ) -> Prediction:
        amount = work.work_samples
        if amount is None and work.steps is not None:
            amount = work.steps * self._batch(work)
        if amount is None:
            return self._from_runtimes(job, work, gpu_types, unseen)
        batch = self._batch(work)
        canon = [_gpu(g) for g in gpu_types]
        runtime: dict[str, float] = {}
        high: dict[str, float] = {}
        with self._lock:
            sps = self._throughputs(work, batch, canon)
            for name, gpu, (point, low, _high, _kind) in zip(gpu_types, canon, sps, strict=True):
                if not math.isfinite(point) or point <= 0:
                    continue
                corr, spread, n = self._correction(work.model, gpu, work.gpus)
                rate = point * math.exp(corr)
                median_s = amount / rate
                high_s = amount / (low * math.exp(corr))
                if n >= 3:
                    high_s = median_s * math.exp(_Z90 * max(spread, 0.05))
                if unseen and self.unseen_runtime == "high":
                    median_s, high_s = high_s, high_s * high_s / median_s
                runtime[name] = median_s
                high[name] = high_s
        for name in gpu_types:  # GPU types nobody describes: the slowest known, or default
            if name not in runtime:
                runtime[name] = max(runtime.values(), default=self.default_s)
                high[name] = max(high.values(), default=self.default_s)
        source = "predictor-unseen" if unseen else "predictor"
        return _prediction(runtime, high, unseen=unseen, source=source)

    def _ratio(self, work: JobWork, src: str, dst: str) -> float:
        """Speed-up of ``dst`` over ``src`` for this job, from the model's throughputs."""
        if src == dst:
            return 1.0
        pair = self._throughputs(work, self._batch(work), [src, dst])
        a, b = pair[0][0], pair[1][0]
        if not (math.isfinite(a) and math.isfinite(b)) or a <= 0 or b <= 0:
            return 1.0
        return b / a

    def _from_runtimes(
        self, job: JobLike, work: JobWork, gpu_types: Sequence[str], unseen: bool
    ) -> Prediction:
        with self._lock:
            law = self.runtimes.law(
                work.model, work.user, work.group, work.gpus, getattr(job, "submit_s", None)
            )
            if law is not None:
                median, high = law.median_s, law.p90_s
                source = f"predictor-history:{law.key}(n={law.n})"
                unseen = False
            else:
                user_s = getattr(job, "user_estimate_s", None)
                if user_s is not None and user_s > 0:
                    median, high, source = float(user_s), float(user_s), "predictor-user"
                else:
                    median, high, source = self.default_s, self.default_s, "predictor-default"
                    unseen = True
            runtime, highs = {}, {}
            for name in gpu_types:
                ratio = self._ratio(work, self.reference_gpu, _gpu(name))
                runtime[name] = median / ratio
                highs[name] = high / ratio
        return _prediction(runtime, highs, unseen=unseen, source=source)

    def observe(self, job: JobLike, gpu_type: str, actual_s: float) -> None:
        """Record that ``job`` ran ``actual_s`` seconds on ``gpu_type``; never raises."""
        self._learn(job, gpu_type, actual_s, keep=True)

    def recall(self, job: JobLike, gpu_type: str, actual_s: float) -> None:
        """Learn from a job that finished before this process started (the operator reads
        finished AIJobs back at start-up) as :meth:`observe` does, without adding it to
        the history file again; never raises."""
        self._learn(job, gpu_type, actual_s, keep=False)

    def _learn(self, job: JobLike, gpu_type: str, actual_s: float, *, keep: bool) -> None:
        try:
            self._observe(job, gpu_type, actual_s, keep=keep)
        except Exception as exc:  # noqa: BLE001 - never raise into the operator; logged
            log.warning("predictor: learning from %s failed (%s)", getattr(job, "key", "?"), exc)

    def _observe(self, job: JobLike, gpu_type: str, actual_s: float, *, keep: bool = True) -> None:
        if not (actual_s > 0 and math.isfinite(actual_s)):
            return
        work = describe_job(job)
        gpu = _gpu(gpu_type)
        batch = self._batch(work)
        amount = work.work_samples
        if amount is None and work.steps is not None:
            amount = work.steps * batch
        features = getattr(job, "features", None) or {}
        if keep:
            self.history.add(
                HistoryRecord(
                    job_key=str(getattr(job, "key", "")),
                    model=work.model,
                    gpu_type=gpu,
                    gpus=work.gpus,
                    actual_s=actual_s,
                    batch_size=work.batch_size,
                    work_samples=amount,
                    steps=work.steps,
                    epochs=work.epochs,
                    dataset_samples=work.dataset_samples,
                    precision=work.precision,
                    user=work.user,
                    group=work.group,
                    features=MappingProxyType(
                        {str(k): float(v) for k, v in features.items() if _finite(v)}
                    ),
                )
            )
        retrain = False
        with self._lock:
            ratio = self._ratio(work, self.reference_gpu, gpu)
            on_reference = actual_s * ratio
            self.runtimes.add(
                work.model,
                work.user,
                work.group,
                work.gpus,
                on_reference,
                getattr(job, "submit_s", None),
            )
            if work.model:
                self._finished_models.add(work.model)
            if amount is not None and work.model:
                obs = _Obs(work.model, gpu, batch, work.gpus, work.precision, amount / actual_s)
                self._obs.append(obs)
                self._add_residual(obs)
                self._seen_models.add(work.model)
            self._observed += 1
            if self._observed % self.retrain_every == 0 and self._has_new_keys():
                retrain = True
        if retrain:
            if self.retrain_mode == "sync":
                self.retrain_now()
            elif self.retrain_mode == "thread":
                self._idle.clear()
                self._wake.set()

    def learn_benchmarks(self, records: Sequence[BenchmarkRecord], *, keep: bool = True) -> int:
        """Measured throughputs of the cluster's own GPUs (a GPUBenchmark's result) join the
        benchmark table, and the model is retrained on it: in the background thread with
        ``retrain="thread"`` (the scheduling path never waits), at once with ``"sync"``,
        at the next retraining with ``"off"``. A row whose model or GPU type the catalog
        does not know is left out. ``keep`` also appends them to the history file (not for
        results read back from the hub at start-up). Returns how many rows were taken;
        never raises."""
        rows: list[BenchmarkRow] = []
        kept: list[BenchmarkRecord] = []
        for r in records:
            try:
                model, gpu = canonical_model(r.model), canonical_gpu(r.gpu_type)
            except UnknownName:
                log.info("predictor: benchmark of %s on %s left out (unknown)", r.model, r.gpu_type)
                continue
            if not (r.samples_per_s > 0 and math.isfinite(r.samples_per_s) and r.batch_size > 0):
                continue
            where = {"origin": f"benchmark {r.source} on {r.node} at {r.measured_at:.0f}"}
            rate: dict[str, Any] = {"batch_size": r.batch_size, "samples_per_s": r.samples_per_s}
            rate.update(gpus=r.gpus, precision=r.precision, **where)
            rows.append(BenchmarkRow(model=model, gpu_type=gpu, **rate))
            kept.append(r)
        if not rows:
            return 0
        try:
            if keep:
                self.history.add_benchmarks(kept)
            with self._lock:
                table = self.table
                self.table = table.with_rows([*table.rows, *rows])
                self._base = measurements_from_table(self.table)
        except Exception as exc:  # noqa: BLE001 - learning must never take the operator down
            log.warning("predictor: learning benchmark rows failed (%s)", exc)
            return 0
        if self.retrain_mode == "sync":
            self.retrain_now()
        elif self.retrain_mode == "thread":
            self._idle.clear()
            self._wake.set()
        return len(rows)

    def _add_residual(self, obs: _Obs, point: float | None = None) -> None:
        """Update the correction stats with ``obs`` (caller holds the lock)."""
        if point is not None:
            self._record_residual(obs, point)
            return
        work = JobWork(
            model=obs.model,
            model_known=True,
            batch_size=obs.batch_size,
            gpus=obs.gpus,
            work_samples=None,
            steps=None,
            epochs=None,
            dataset_samples=None,
            precision=obs.precision,
            user="",
            group="",
        )
        self._record_residual(obs, self._throughputs(work, obs.batch_size, [obs.gpu_type])[0][0])

    def _record_residual(self, obs: _Obs, point: float) -> None:
        if not (math.isfinite(point) and point > 0):
            return
        residual = math.log(obs.samples_per_s / point)
        self._pair[(obs.model, obs.gpu_type, obs.gpus)].add(residual)
        self._per_model_gpus[(obs.model, obs.gpus)].add(residual)
        self._per_model[obs.model].add(residual)

    def _has_new_keys(self) -> bool:
        return any(
            (o.model, o.gpu_type, o.batch_size, o.gpus) not in self._trained_keys for o in self._obs
        )

    # ------------------------------------------------------------------ retraining

    def _history_measurements(self, observations: Sequence[_Obs]) -> list[Measurement]:
        """Median observed throughput per (model, GPU type, batch, GPUs, precision)."""
        groups: dict[tuple[str, str, int, int, str], list[float]] = defaultdict(list)
        for o in observations:
            groups[(o.model, o.gpu_type, o.batch_size, o.gpus, o.precision)].append(o.samples_per_s)
        out = []
        for (model, gpu, batch, gpus, precision), values in sorted(groups.items()):
            try:
                self.model.specs.gpu(gpu)
            except UnknownName:
                continue  # a GPU type nobody describes cannot train the model
            out.append(
                Measurement(
                    model=model,
                    gpu_type=gpu,
                    batch_size=batch,
                    gpus=gpus,
                    samples_per_s=float(np.median(values)),
                    precision=precision,
                    weight=float(min(len(values), 5)),
                )
            )
        return out

    def _train(self, observations: Sequence[_Obs]) -> ThroughputModel:
        measurements = self._base + self._history_measurements(observations)
        return ThroughputModel(self.family, seed=self.seed).fit(
            measurements, table=self.table, calibrate=False, shrink=self.model.shrink
        )

    def retrain_now(self) -> None:
        """Retrain on benchmarks + history now, in the calling thread (never raises).

        Training and re-predicting the observations run outside the lock; only the
        swap (and the few observations that arrived meanwhile) hold it.
        """
        with self._lock:
            observations = list(self._obs)
            shrink = dict(self.model.shrink)
        try:
            new = self._train(observations)
            new.shrink = shrink
            keys = sorted(
                {(o.model, o.gpu_type, o.batch_size, o.gpus, o.precision) for o in observations}
            )
            pred = new.predict(
                [
                    Query(model=m, gpu_type=g, batch_size=b, gpus=n, precision=p)
                    for m, g, b, n, p in keys
                ]
            )
        except Exception as exc:  # noqa: BLE001 - keep the current model; logged
            log.warning("predictor: retraining failed (%s); keeping the current model", exc)
            return
        points = dict(zip(keys, (float(v) for v in pred.samples_per_s), strict=True))
        with self._lock:
            self.model = new
            self._cache.clear()
            self._trained_keys = self._keys_of(new.measurements)
            self._pair.clear()
            self._per_model_gpus.clear()
            self._per_model.clear()
            for index, obs in enumerate(self._obs):
                point = points.get(_obs_key(obs)) if index < len(observations) else None
                self._add_residual(obs, point)
            self.retrains += 1

    def _worker(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            self.retrain_now()
            if not self._wake.is_set():
                self._idle.set()

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Block until no background retraining is pending (tests, shutdown)."""
        return self._idle.wait(timeout_s)

    def close(self) -> None:
        """Stop the retraining thread and close the history."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._idle.set()
        self.history.close()


def _obs_key(o: _Obs) -> tuple[str, str, int, int, str]:
    return (o.model, o.gpu_type, o.batch_size, o.gpus, o.precision)


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _prediction(
    runtime: Mapping[str, float], high: Mapping[str, float], *, unseen: bool, source: str
) -> Prediction:
    return Prediction(
        runtime_s=MappingProxyType(dict(runtime)),
        high_s=MappingProxyType(dict(high)),
        unseen=unseen,
        source=source,
    )
