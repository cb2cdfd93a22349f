"""Feature rows of the throughput model: the same pure functions for training and serving.

Two steps, both pure (no I/O, no clock, no global state):

1. :func:`describe_job` reads what a job (a :class:`~predictor.jobs.JobLike`) says about its work:
   the model, batch size, GPU count, and how many samples it will process
   (``dataset_samples x epochs``, else ``steps x batch_size``: a step is one batch of
   one worker, Gavel's convention, where a multi-GPU job's steps add up its workers').
2. :func:`feature_row` turns one (model facts, GPU facts, batch size, GPU count, prior
   throughput) into the numeric row the learned model sees. The prior is the scaling
   baseline's throughput (see :mod:`predictor.model`); the model learns the log-ratio
   of the true throughput to it.

User and group are carried by :class:`JobWork` for the history-based runtime path
(jobs without declared work); they are not features of throughput, which depends on
the model and the hardware, not on who submits. Other numeric job features are
recorded in the history for later use but not fed to the throughput model, because
the benchmark rows it trains on do not carry them.

The schema (names, order, encodings) is hashed into :data:`SCHEMA_HASH`; an artifact
trained under another hash is retrained or replaced (never used as is).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from predictor.catalog import (
    GpuSpec,
    ModelSpec,
    UnknownName,
    batch_size_in_name,
    canonical_model,
    effective_tflops,
)

#: Feature names in column order. Bump SCHEMA_VERSION when their meaning changes.
FEATURES: tuple[str, ...] = (
    "log_prior_sps",  # log of the prior throughput (samples/s)
    "prior_is_anchor",  # 1: measured on another GPU type and scaled; 0: roofline from FLOPs
    "anchor_log_ratio",  # log catalog ratio from the nearest anchor GPU to the target GPU
    "log_fp32_tflops",
    "log_fp16_tflops",
    "log_bandwidth_gbs",
    "log_memory_gib",
    "log_params_m",
    "log_forward_gmacs",
    "log_batch_size",
    "log_gpus",
    "log_step_compute_s",  # ideal compute time of one step: batch x train FLOPs / peak
    "log_weight_bytes_per_bw_s",  # time to read the FP32 weights once at peak bandwidth
    "domain_code",
    "precision_is_fp32",
)
#: 2: the prior is the fitted-alpha anchor / latency-aware roofline; 3: multi-GPU anchors
#: add the gradient exchange over the GPUs' link, alpha is fitted on one-GPU rows; 4: a
#: target between the model's measured types gets the per-model time fit (Priors._physics);
#: 5: mixed precision's compute figure is the geometric mean of FP32 and tensor FP16, the
#: anchors are the same benchmark's types, the exchange per sample scales with 1 / batch
SCHEMA_VERSION = 5

#: Domains with a fixed code (unknown ones map to 0).
DOMAINS: tuple[str, ...] = (
    "unknown",
    "vision",
    "detection",
    "nlp",
    "speech",
    "recsys",
    "rl",
    "generative",
)

SCHEMA_HASH: str = hashlib.sha256(
    json.dumps({"version": SCHEMA_VERSION, "features": FEATURES, "domains": DOMAINS}).encode()
).hexdigest()[:16]

#: Keys of ``Job.features`` read, with accepted spellings (first one is canonical).
FEATURE_KEYS: Mapping[str, tuple[str, ...]] = {
    "batch_size": ("batch_size", "batch", "batchsize"),
    "epochs": ("epochs", "epoch", "num_epochs"),
    "dataset_samples": ("dataset_samples", "data_size", "samples", "dataset_size"),
    "steps": ("steps", "num_steps", "iterations", "total_steps"),
    "precision_bits": ("precision_bits",),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobWork:
    """What a job declares about its work, as the predictor needs it.

    ``model`` is canonical when ``model_known`` (the catalog knows it), else the job's
    own name lower-cased (possibly ""). ``work_samples`` is None when the job declares
    neither samples and epochs nor steps. ``batch_size`` is None when not given.
    """

    model: str
    model_known: bool
    batch_size: int | None
    gpus: int
    work_samples: float | None
    steps: float | None
    epochs: float | None
    dataset_samples: float | None
    precision: str
    user: str
    group: str


def _get(features: Mapping[str, float], name: str) -> float | None:
    for key in FEATURE_KEYS[name]:
        value = features.get(key)
        if value is not None and math.isfinite(value) and value > 0:
            return float(value)
    return None


def describe_job(job: Any) -> JobWork:
    """The work of ``job`` (a :class:`~predictor.jobs.JobLike` or anything with its fields)."""
    raw_model = str(getattr(job, "model", "") or "")
    try:
        model, known = canonical_model(raw_model), True
    except UnknownName:
        model, known = raw_model.strip().lower(), False
    features: Mapping[str, float] = getattr(job, "features", None) or {}
    batch_f = _get(features, "batch_size")
    batch = round(batch_f) if batch_f else batch_size_in_name(raw_model)
    gpus = total_gpus(job)
    epochs = _get(features, "epochs")
    samples = _get(features, "dataset_samples")
    steps = _get(features, "steps")
    work: float | None = None
    if samples is not None:
        work = samples * (epochs or 1.0)
    elif steps is not None and batch is not None:
        work = steps * batch
    bits = _get(features, "precision_bits")
    precision = "" if bits is None else ("fp32" if bits >= 32 else "mixed")
    return JobWork(
        model=model,
        model_known=known,
        batch_size=batch,
        gpus=gpus,
        work_samples=work,
        steps=steps,
        epochs=epochs,
        dataset_samples=samples,
        precision=precision,
        user=str(getattr(job, "user", "") or ""),
        group=str(getattr(job, "group", "") or ""),
    )


def total_gpus(job: Any) -> int:
    """Whole GPUs the job uses in total (a shared fraction counts as one)."""
    per = int(getattr(job, "gpus_per_worker", 1) or 0)
    workers = int(getattr(job, "workers", 1) or 1)
    return max(1, per * workers)


def _log(value: float) -> float:
    return math.log(value) if value > 0 else math.log(1e-9)


def feature_row(
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    batch_size: int,
    gpus: int,
    precision: str,
    prior_sps: float,
    prior_is_anchor: bool,
    anchor_log_ratio: float,
) -> tuple[float, ...]:
    """The numeric row of :data:`FEATURES` for one (model, GPU type, batch, GPUs)."""
    tflops = effective_tflops(gpu, precision or None)
    step_flops = batch_size * model.train_gflops_per_sample * 1e9
    return (
        _log(prior_sps),
        1.0 if prior_is_anchor else 0.0,
        anchor_log_ratio,
        _log(gpu.fp32_tflops),
        _log(gpu.fp16_tflops),
        _log(gpu.bandwidth_gbs),
        _log(gpu.memory_gib),
        _log(model.params_m),
        _log(model.forward_gmacs),
        _log(float(batch_size)),
        _log(float(gpus)),
        _log(step_flops / (tflops * 1e12)),
        _log(model.params_m * 4e6 / (gpu.bandwidth_gbs * 1e9)),
        float(DOMAINS.index(model.domain)) if model.domain in DOMAINS else 0.0,
        1.0 if precision.lower() == "fp32" else 0.0,
    )
