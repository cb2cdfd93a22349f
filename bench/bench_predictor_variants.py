"""Experiment: cross-GPU scaling variants, leave one GPU type out, on Gavel's table.

Issue 3 aims at a median absolute percentage error under 15% when a GPU type's rows
are held out. This script scores every variant tried for the anchor prior (a job's
throughput on a held-out type predicted from the same job's throughput on the other
types), on the same held-out rows, and two **floors** that cheat on purpose (they fit
a correction on the held-out rows themselves) to show what no per-model method can
beat on this table. Each variant sees only the training types' rows; the catalogs
give the GPUs' FP32 TFLOPS and bandwidth (all Gavel rows are FP32).

Variants (``a`` is the compute share of the speed-up
``compute ratio^a x bandwidth ratio^(1-a)``; anchors are combined as in
:meth:`predictor.model.Priors.anchor`, weighted toward the closest type):

- ``fixed_a0.5``: a = 0.5, the previous prior;
- ``fitted_a``: a fitted on the training rows (``fit_alpha``), the current prior;
- ``a_per_model`` / ``a_per_model_batch`` / ``a_per_model_gpus`` / ``a_per_job``: a
  fitted per group on the training rows, shrunk toward the global a with ``K_SHRINK``
  pseudo-jobs (``a_per_job`` is the log-ratio to the same job's throughput on the
  other training type);
- ``exponent_per_model``: speed-up = (a=0.5 ratio)^g with g fitted per model;
- ``roofline_ratio``: the speed-up of the latency-aware roofline fitted on the
  training rows (batch-size dependent: small batches gain less from a faster GPU);
- ``one_gpu_x_scaling``: the job's one-GPU throughput scaled by ``fitted_a``, times
  the anchors' own multi-GPU speed-up;
- ``exchange_over_link``: the current prior (:meth:`predictor.model.Priors.anchor`):
  one GPU's time per sample (``fitted_a`` on one-GPU rows) plus each anchor's measured
  gradient-exchange time per sample (``m / s_m - 1 / s_1``), scaled by the ratio of
  the GPUs' link bandwidths (catalog ``link_gbs``: K80 8, P100 16, V100 SXM2 150 GB/s);
- ``exchange_same_time``: the same, the anchors' exchange time taken as is (no link
  ratio); ``exchange_none``: one-GPU prior x GPUs (ideal scaling);
- ``time_fit_between``: the current prior (schema 4): where the held-out type lies
  between the model's measured types (compute, bandwidth and link each within their
  range), a per-model fit of seconds per sample and worker ``t0/b + c/F + a/B + w/(B b)
  + x r/(L b)`` (NNLS on the training types' rows, :meth:`predictor.model.Priors._physics`);
  elsewhere ``exchange_over_link``. On Gavel's table only P100 lies between;
- ``time_fit_everywhere``: the same fit also where it extrapolates (K80, V100);
  ``time_fit_no_weights_term`` without ``w``, ``time_fit_no_latency`` without ``t0``
  and ``w``, ``time_fit_blended_speed`` with one GPU term ``G = F^-a B^-(1-a)`` (the
  fitted ``a``) instead of ``c/F + a/B``; ``time_fit_one_gpu_plus_exchange``: the
  fit's one-GPU time plus the ``exchange_over_link`` prior's exchange time;
- ``exponent_per_job_shrunk``: the ``exchange_over_link`` prior times the nearest
  anchor's speed-up to the power ``g - 1``, ``g`` the job's one-GPU speed-up between
  the two training types over the blended one, shrunk to ``1 + 0.25 (g - 1)``;
- ``floor_per_model`` / ``floor_per_model_gpus`` / ``floor_per_model_batch``: the prior
  ``fitted_a`` times the best constant correction per model (per model and GPU count,
  per model and batch size) **fitted on the held-out rows** (not a method: a bound);
- ``floor_true_one_gpu_exchange``: ``exchange_over_link`` given the held-out type's
  **measured** one-GPU throughput (not a method: it shows how much of the error is the
  one-GPU speed-up and how much the multi-GPU scaling).

    python bench/bench_predictor_variants.py        # one JSON object
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.benchmarks import BenchmarkTable  # noqa: E402
from predictor.catalog import ModelSpec  # noqa: E402
from predictor.measurements import Measurement, measurements_from_table  # noqa: E402
from predictor.priors import Priors  # noqa: E402
from predictor.roofline import Specs, blend_ratio, fit_alpha, fit_roofline, time_terms  # noqa: E402

K_SHRINK = 4.0
Key = tuple[str, str, int, int]  # model, input, batch, GPUs


def _key(m: Measurement) -> Key:
    return (m.model, m.input, m.batch_size, m.gpus)


def _shrunk_alphas(
    train: Sequence[Measurement], specs: Specs, group: Callable[[Key], object], global_a: float
) -> dict[object, float]:
    by_group: dict[object, list[Measurement]] = defaultdict(list)
    for m in train:
        by_group[group(_key(m))].append(m)
    out = {}
    for g, rows in by_group.items():
        n = len({_key(m) for m in rows})
        a = fit_alpha(rows, specs, default=global_a)
        out[g] = (n * a + K_SHRINK * global_a) / (n + K_SHRINK)
    return out


def _combine(logs: list[float], weights: list[float]) -> float:
    return float(np.average(logs, weights=weights))


def _weight(specs: Specs, src: str, dst: str, alpha: float) -> float:
    """As in Priors.anchor: closer types (by the speed-up's size) weigh more."""
    ratio = blend_ratio(specs.gpu(src), specs.gpu(dst), "fp32", alpha)
    return 1.0 / (0.1 + abs(math.log(ratio)))


def run(holdout: str, rows: Sequence[Measurement], specs: Specs) -> dict[str, float]:
    """Median APE (percent) of every variant with ``holdout``'s rows held out."""
    train = [m for m in rows if m.gpu_type != holdout]
    test = [m for m in rows if m.gpu_type == holdout]
    types = sorted({m.gpu_type for m in train})
    measured: dict[Key, dict[str, float]] = defaultdict(dict)
    for m in train:
        measured[_key(m)][m.gpu_type] = m.samples_per_s
    global_a = fit_alpha(train, specs)
    groups: dict[str, Callable[[Key], object]] = {
        "a_per_model": lambda k: k[0],
        "a_per_model_batch": lambda k: k[:3],
        "a_per_model_gpus": lambda k: (k[0], k[3]),
        "a_per_job": lambda k: k,
    }
    alphas = {name: _shrunk_alphas(train, specs, g, global_a) for name, g in groups.items()}
    # exponent g per model: log(s_B/s_A) = g log(ratio_0.5(A->B)), median over the model's jobs
    exps: dict[str, list[float]] = defaultdict(list)
    for key, by_type in measured.items():
        for i, a in enumerate(types):
            for b in types[i + 1 :]:
                if a in by_type and b in by_type:
                    spec = math.log(blend_ratio(specs.gpu(a), specs.gpu(b), "fp32", 0.5))
                    exps[key[0]].append(math.log(by_type[b] / by_type[a]) / spec)
    exponent = {m: float(np.median(v)) for m, v in exps.items()}
    roof = fit_roofline(train, specs)

    def anchored(key: Key, ratio: Callable[[str], float], wa: float = global_a) -> float | None:
        logs, weights = [], []
        for anchor, sps in measured.get(key, {}).items():
            logs.append(math.log(sps * ratio(anchor)))
            weights.append(_weight(specs, anchor, holdout, wa) ** 2)
        return _combine(logs, weights) if logs else None

    dst = specs.gpu(holdout)
    preds: dict[str, list[float | None]] = defaultdict(list)
    for m in test:
        key = _key(m)
        preds["fixed_a0.5"].append(
            anchored(key, lambda a: blend_ratio(specs.gpu(a), dst, "fp32", 0.5), 0.5)
        )
        preds["fitted_a"].append(
            anchored(key, lambda a: blend_ratio(specs.gpu(a), dst, "fp32", global_a))
        )
        for name, g in groups.items():
            alpha = alphas[name].get(g(key), global_a)

            def blended(a: str, al: float = alpha) -> float:
                return blend_ratio(specs.gpu(a), dst, "fp32", al)

            preds[name].append(anchored(key, blended))
        gexp = exponent.get(m.model, 1.0)

        def powered(a: str, g: float = gexp) -> float:
            return float(blend_ratio(specs.gpu(a), dst, "fp32", 0.5) ** g)

        preds["exponent_per_model"].append(anchored(key, powered, 0.5))
        mspec = specs.model(m.model, m.input)

        def roof_ratio(
            a: str, spec: ModelSpec = mspec, b: int = m.batch_size, n: int = m.gpus
        ) -> float:
            return roof.samples_per_s(spec, dst, b, n, "fp32") / (
                roof.samples_per_s(spec, specs.gpu(a), b, n, "fp32")
            )

        preds["roofline_ratio"].append(anchored(key, roof_ratio))
        one = measured.get((m.model, m.input, m.batch_size, 1), {})
        here = measured.get(key, {})
        base = anchored(
            (m.model, m.input, m.batch_size, 1),
            lambda a: blend_ratio(specs.gpu(a), dst, "fp32", global_a),
        )
        scale = [math.log(here[a] / one[a]) for a in here if a in one]
        preds["one_gpu_x_scaling"].append(
            base + float(np.mean(scale)) if base is not None and scale else preds["fitted_a"][-1]
        )
    _exchange_variants(train, test, specs, preds)
    _time_fit_variants(train, test, specs, preds)
    _exponent_per_job(train, test, specs, preds)
    actual = np.log([m.samples_per_s for m in test])
    out: dict[str, float] = {"n": float(len(test)), "fitted_alpha": round(global_a, 3)}
    for name, values in preds.items():
        p = np.asarray([np.nan if v is None else v for v in values])
        ok = ~np.isnan(p)
        out[name] = round(float(np.median(np.abs(np.expm1(p[ok] - actual[ok])))) * 100, 1)
    # floors: best constant correction of fitted_a per group, fitted on the held-out rows
    base_p = np.asarray([np.nan if v is None else v for v in preds["fitted_a"]])
    for name, grp in (
        ("floor_per_model", lambda m: m.model),
        ("floor_per_model_gpus", lambda m: (m.model, m.gpus)),
        ("floor_per_model_batch", lambda m: (m.model, m.batch_size)),
    ):
        resid: dict[object, list[float]] = defaultdict(list)
        for m, p, y in zip(test, base_p, actual, strict=True):
            if not math.isnan(p):
                resid[grp(m)].append(y - p)
        errs = [abs(math.expm1(r - float(np.median(v)))) for v in resid.values() for r in v]
        out[name] = round(float(np.median(errs)) * 100, 1)
    return out


def _exchange_variants(
    train: Sequence[Measurement],
    test: Sequence[Measurement],
    specs: Specs,
    preds: dict[str, list[float | None]],
) -> None:
    """Log predictions of the exchange-time variants (see the module doc) into ``preds``."""
    priors = Priors(train, specs, physics=False)
    truth = {_key(m): m.samples_per_s for m in test}
    measured: dict[Key, dict[str, float]] = defaultdict(dict)
    for m in train:
        measured[_key(m)][m.gpu_type] = m.samples_per_s

    def exchange(m: Measurement, link_power: float) -> float | None:
        """Mean exchange time per sample over the anchors measured on 1 and m.gpus GPUs."""
        one = measured.get((m.model, m.input, m.batch_size, 1), {})
        here = measured.get(_key(m), {})
        dst = specs.gpu(m.gpu_type).link_gbs
        costs, weights = [], []
        for anchor, sps in here.items():
            if anchor in one:
                ratio = specs.gpu(anchor).link_gbs / dst
                costs.append((m.gpus / sps - 1.0 / one[anchor]) * ratio**link_power)
                weights.append(1.0 / (0.1 + abs(math.log(ratio))) ** 2)
        return max(float(np.average(costs, weights=weights)), 0.0) if costs else None

    for m in test:
        got = priors.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        preds["exchange_over_link"].append(math.log(got[0]) if got else None)
        single = priors.anchor(m.model, m.gpu_type, m.batch_size, 1, m.precision)
        true_one = truth.get((m.model, m.input, m.batch_size, 1))
        for name, one, power in (
            ("exchange_same_time", single[0] if single else None, 0.0),
            ("exchange_none", single[0] if single else None, None),
            ("floor_true_one_gpu_exchange", true_one, 1.0),
        ):
            if one is None:
                preds[name].append(None)
            elif m.gpus == 1 or power is None:
                preds[name].append(math.log(m.gpus * one))
            else:
                cost = exchange(m, power)
                preds[name].append(None if cost is None else math.log(m.gpus / (1.0 / one + cost)))


#: columns of the per-model time fit (seconds per sample and worker), see
#: :meth:`predictor.model.Priors._physics`; "G" is the blended speed F^-a B^-(1-a)
TIME_FITS: dict[str, tuple[str, ...]] = {
    "time_fit_everywhere": ("t0", "c", "a", "w", "x"),
    "time_fit_no_weights_term": ("t0", "c", "a", "x"),
    "time_fit_no_latency": ("c", "a", "x"),
    "time_fit_blended_speed": ("t0", "G", "w", "x"),
}


def _time_row(m: Measurement, specs: Specs, columns: Sequence[str], alpha: float) -> list[float]:
    gpu = specs.gpu(m.gpu_type)
    values = time_terms(gpu, m.batch_size, m.gpus, "fp32")
    values["G"] = gpu.fp32_tflops**-alpha * (gpu.bandwidth_gbs / 1000.0) ** (alpha - 1.0)
    return [values[c] for c in columns]


def _time_fit_variants(
    train: Sequence[Measurement],
    test: Sequence[Measurement],
    specs: Specs,
    preds: dict[str, list[float | None]],
) -> None:
    """The per-model time fit: kept (between the anchors only) and the variants tried."""
    from scipy.optimize import nnls

    kept = Priors(train, specs)
    blended = Priors(train, specs, physics=False)
    by_model: dict[str, list[Measurement]] = defaultdict(list)
    for m in train:
        by_model[m.model].append(m)
    coefs: dict[tuple[str, str], tuple[tuple[str, ...], np.ndarray]] = {}
    for name, full in TIME_FITS.items():
        for model, rows in by_model.items():
            columns = full
            if len({m.batch_size for m in rows}) < 2:
                columns = tuple(c for c in full if c not in ("t0", "w"))
            if not any(m.gpus > 1 for m in rows):
                columns = tuple(c for c in columns if c != "x")
            A = np.asarray([_time_row(m, specs, columns, kept.alpha) for m in rows])
            y = np.asarray([m.gpus / m.samples_per_s for m in rows])
            coefs[(name, model)] = (columns, nnls(A / y[:, None], np.ones(len(rows)))[0])
    for m in test:
        got = kept.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        preds["time_fit_between"].append(math.log(got[0]) if got else None)
        for name in TIME_FITS:
            columns, coef = coefs[(name, m.model)]
            per_sample_s = float(np.dot(_time_row(m, specs, columns, kept.alpha), coef))
            preds[name].append(math.log(m.gpus / per_sample_s) if per_sample_s > 0 else None)
        # one-GPU time fit everywhere, plus the anchors' exchange x link ratio (kept prior's)
        one = coefs[("time_fit_everywhere", m.model)]
        one_m = Measurement(
            model=m.model, gpu_type=m.gpu_type, batch_size=m.batch_size, gpus=1, samples_per_s=1
        )
        one_s = float(np.dot(_time_row(one_m, specs, one[0], kept.alpha), one[1]))
        base = blended.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        single = blended.anchor(m.model, m.gpu_type, m.batch_size, 1, m.precision)
        if base is None or single is None or one_s <= 0:
            preds["time_fit_one_gpu_plus_exchange"].append(None)
        else:  # the blended prior's exchange time per sample, on the fitted one-GPU time
            exchange_s = max(m.gpus / base[0] - 1.0 / single[0], 0.0)
            preds["time_fit_one_gpu_plus_exchange"].append(math.log(m.gpus / (one_s + exchange_s)))


def _exponent_per_job(
    train: Sequence[Measurement],
    test: Sequence[Measurement],
    specs: Specs,
    preds: dict[str, list[float | None]],
    shrink: float = 0.25,
) -> None:
    """Speed-up^g, g from the same job's one-GPU speed-up between the two training
    types (log observed / log blended), shrunk toward 1 (``1 + shrink (g - 1)``)."""
    blended = Priors(train, specs, physics=False)
    types = sorted({m.gpu_type for m in train})
    one: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for m in train:
        if m.gpus == 1:
            one[(m.model, m.batch_size)][m.gpu_type] = m.samples_per_s
    for m in test:
        got = blended.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        if got is None:
            preds["exponent_per_job_shrunk"].append(None)
            continue
        pair = one.get((m.model, m.batch_size), {})
        g = 1.0
        if len(types) == 2 and len(pair) == 2:
            a, b = types
            spec = math.log(blend_ratio(specs.gpu(a), specs.gpu(b), "fp32", blended.alpha))
            if abs(spec) > 0.05:
                g = 1.0 + shrink * (math.log(pair[b] / pair[a]) / spec - 1.0)
        preds["exponent_per_job_shrunk"].append(math.log(got[0]) + (g - 1.0) * got[1])


def main() -> int:
    table = BenchmarkTable.default()
    rows = measurements_from_table(table)
    specs = Specs(table)
    result = {gpu: run(gpu, rows, specs) for gpu in sorted({m.gpu_type for m in rows})}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
