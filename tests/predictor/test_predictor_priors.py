"""The scaling priors: fitted compute share, gradient exchange over the GPUs' link,
latency-aware roofline, no leakage in holdouts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from predictor.benchmarks import BenchmarkTable
from predictor.catalog import effective_tflops, gpu_spec, model_spec
from predictor.evaluation import holdout_predictions
from predictor.measurements import Measurement, measurements_from_table
from predictor.priors import Priors, _Target
from predictor.roofline import (
    Roofline,
    Specs,
    blend_ratio,
    exchange_volume_s,
    fit_alpha,
    fit_roofline,
)

GPUS = ("T4", "A10", "V100-16GB", "A100-40GB")


def _row(model: str, gpu: str, batch: int, gpus: int, sps: float) -> Measurement:
    """One FP32 measurement."""
    return Measurement(
        model=model, gpu_type=gpu, batch_size=batch, gpus=gpus, samples_per_s=sps, precision="fp32"
    )


def _blended_rows(alpha: float) -> list[Measurement]:
    """Rows whose cross-GPU speed-ups follow blend_ratio(alpha) exactly."""
    rows = []
    for model, base in {"resnet50": 300.0, "bert-base": 80.0, "gpt2": 10.0}.items():
        for batch in (16, 64):
            for gpu in GPUS:
                ratio = blend_ratio(gpu_spec("T4"), gpu_spec(gpu), "fp32", alpha)
                rows.append(_row(model, gpu, batch, 1, base * batch / 16 * ratio))
    return rows


@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.8])
def test_fit_alpha_recovers_the_compute_share(alpha):
    """Speed-ups generated with a compute share alpha give that alpha back."""
    assert fit_alpha(_blended_rows(alpha), Specs()) == pytest.approx(alpha, abs=1e-6)


def test_fit_alpha_is_clipped_and_defaults_without_pairs():
    """One GPU type says nothing (default); implausible speed-ups are clipped to [0, 1]."""
    rows = _blended_rows(0.5)
    one_type = [m for m in rows if m.gpu_type == "A10"]
    assert fit_alpha(one_type, Specs(), default=0.42) == 0.42
    assert fit_alpha(_blended_rows(1.6), Specs()) == 1.0
    assert fit_alpha(_blended_rows(-0.7), Specs()) == 0.0


def test_roofline_fit_recovers_a_latency_bound_table():
    """Rows made by a known Roofline are fitted back to within a few percent."""
    truth = Roofline(t0_s=0.02, efficiency=0.4, exchange=3.0, alpha=0.3)
    rows = []
    for model in ("resnet50", "bert-base", "gpt2", "lstm-lm"):
        for gpu in GPUS:
            for batch in (4, 32, 256):
                for gpus in (1, 4):
                    sps = truth.samples_per_s(model_spec(model), gpu_spec(gpu), batch, gpus, "fp32")
                    rows.append(_row(model, gpu, batch, gpus, sps))
    fitted = fit_roofline(rows, Specs())
    assert fitted.t0_s == pytest.approx(truth.t0_s, rel=0.05)
    assert fitted.efficiency == pytest.approx(truth.efficiency, rel=0.05)
    assert fitted.exchange == pytest.approx(truth.exchange, rel=0.05)
    assert fitted.alpha == pytest.approx(truth.alpha, abs=0.05)


def test_roofline_exchange_costs_more_for_big_models_on_slow_links():
    """The gradient exchange grows with the parameters and shrinks with the link: 8 GPUs
    lose more to it on PCIe than on NVLink, and more for the LSTM (many parameters per
    FLOP) than for ResNet-50."""
    roof = Roofline(t0_s=0.01, efficiency=0.3, exchange=2.0, alpha=0.5)

    def efficiency(model: str, gpu: str) -> float:
        spec, card = model_spec(model), gpu_spec(gpu)
        return roof.samples_per_s(spec, card, 32, 8, "fp32") / (
            8 * roof.samples_per_s(spec, card, 32, 1, "fp32")
        )

    assert efficiency("lstm-lm", "V100S-32GB") < efficiency("lstm-lm", "V100-16GB") < 1.0
    assert efficiency("lstm-lm", "V100S-32GB") < efficiency("resnet50", "V100S-32GB")
    assert exchange_volume_s(model_spec("gpt2"), gpu_spec("A10"), 1) == 0.0


def test_roofline_latency_makes_small_batches_slower_per_sample():
    """With a fixed per-step latency, samples/s grows with the batch and saturates."""
    roof = Roofline(t0_s=0.05, efficiency=0.3, exchange=1.0, alpha=0.5)
    spec, gpu = model_spec("resnet50"), gpu_spec("A100-40GB")
    small, large, huge = (roof.samples_per_s(spec, gpu, b, 1, "fp32") for b in (1, 64, 4096))
    assert small < large < huge
    assert huge == pytest.approx(roof.samples_per_s(spec, gpu, 0, 1, "fp32"), rel=0.1)


@pytest.mark.parametrize(
    ("family", "holdout"),
    [
        ("scaling", {"holdout_gpu": "K80"}),
        ("scaling", {"holdout_model": "transformer"}),
        ("rf", {"holdout_model": "lstm-lm"}),
        ("scaling", {"holdout_gpu": "V100-16GB"}),
        ("rf", {"holdout_gpu": "P100"}),
        ("scaling", {"holdout_gpu": "P100"}),
    ],
)
def test_holdout_predictions_never_see_the_held_out_rows(family, holdout):
    """Scaling every held-out row's throughput leaves the predictions for them unchanged."""
    rows = measurements_from_table(BenchmarkTable.default())
    key, value = next(iter(holdout.items()))
    field = "gpu_type" if key == "holdout_gpu" else "model"
    tampered = [
        replace(m, samples_per_s=m.samples_per_s * 7.0) if getattr(m, field) == value else m
        for m in rows
    ]
    test_a, pred_a = holdout_predictions(rows, family=family, **holdout)
    test_b, pred_b = holdout_predictions(tampered, family=family, **holdout)
    assert len(test_a) == len(test_b) > 0
    assert [m.samples_per_s * 7.0 for m in test_a] == pytest.approx(
        [m.samples_per_s for m in test_b]
    )
    np.testing.assert_allclose(pred_a, pred_b, rtol=1e-9)


#: per-worker seconds per sample spent exchanging gradients over a 1 GB/s link, per model
_EXCHANGE = {"resnet50": 0.02, "bert-base": 0.05, "gpt2": 0.3}


def _target(model: str, gpu: str, batch: int, gpus: int, anchors: tuple[str, ...]) -> _Target:
    """An FP32 anchor prior to compute with the private helpers of :class:`Priors`."""
    return _Target(
        model=model, gpu_type=gpu, batch_size=batch, gpus=gpus, precision="fp32", anchors=anchors
    )


def _exchange_rows(alpha: float) -> list[Measurement]:
    """One-GPU speed-ups follow blend_ratio(alpha); n GPUs add exchange time / link."""
    rows = []
    for one in _blended_rows(alpha):
        rows.append(one)
        link = gpu_spec(one.gpu_type).link_gbs
        for gpus in (2, 8):
            per_sample_s = 1.0 / one.samples_per_s + _EXCHANGE[one.model] * (gpus - 1) / link
            rows.append(replace(one, gpus=gpus, samples_per_s=gpus / per_sample_s))
    return rows


@pytest.mark.parametrize("holdout", ["A10", "V100-16GB"])
def test_exchange_prior_moves_the_exchange_time_by_link_bandwidth(holdout):
    """Multi-GPU rows made of compute + exchange/link are predicted exactly on a held-out
    type whose link differs from every anchor's; scaling efficiencies would be wrong."""
    rows = _exchange_rows(0.3)
    train = [m for m in rows if m.gpu_type != holdout]
    # V100 lies between the anchors: physics=False tests the blended path on its own
    priors = Priors(train, Specs(), physics=False)
    assert priors.alpha == pytest.approx(0.3, abs=1e-6)
    for m in (m for m in rows if m.gpu_type == holdout and m.gpus > 1):
        got = priors.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        assert got is not None
        assert got[0] == pytest.approx(m.samples_per_s, rel=1e-6), m
        old = priors._scaled(_target(m.model, m.gpu_type, m.batch_size, m.gpus, GPUS[:1]))
        assert old is not None and abs(old[0] / m.samples_per_s - 1) > 0.02, m


def test_exchange_per_sample_scales_with_one_over_the_batch_beyond_the_measured_ones():
    """The exchange is once per step: at a batch below every anchor's, each sample carries
    more of it (anchors measured at 64 only, the target at 16 and 256)."""
    exchange_per_step = 2.0  # s x GB/s per step and extra worker

    def sps(gpu: str, batch: int, gpus: int) -> float:
        one = 100.0 * blend_ratio(gpu_spec("T4"), gpu_spec(gpu), "fp32", 0.3)
        link = gpu_spec(gpu).link_gbs
        return gpus / (1.0 / one + exchange_per_step * (gpus - 1) / link / batch)

    rows = [
        _row("gpt2", gpu, 64, gpus, sps(gpu, 64, gpus))
        for gpu in GPUS
        if gpu != "A10"
        for gpus in (1, 2, 8)
    ]
    priors = Priors(rows, Specs(), physics=False)
    for batch in (16, 64, 256):
        got = priors.anchor("gpt2", "A10", batch, 8, "fp32")
        assert got is not None
        assert got[0] == pytest.approx(sps("A10", batch, 8), rel=1e-6), batch


def test_anchors_are_the_same_benchmarks_types_when_it_was_measured_elsewhere():
    """A model measured on two inputs: a query for one input is scaled from that input's
    rows (when there are any on other types), not from the other benchmark's."""
    rows = [_row("resnet50", gpu, 32, 1, 100.0) for gpu in ("T4", "V100-16GB")]
    other = replace(_row("resnet50", "A100-40GB", 32, 1, 5000.0), input="imagenet")
    rows.append(other)
    priors = Priors(rows, Specs())
    same = priors.anchor("resnet50", "A10", 32, 1, "fp32")
    assert same == priors._scaled(_target("resnet50", "A10", 32, 1, ("T4", "V100-16GB")))
    other_input = priors.anchor("resnet50", "A10", 32, 1, "fp32", "imagenet")
    assert other_input == priors._scaled(_target("resnet50", "A10", 32, 1, ("A100-40GB",)))
    # an input measured only on the target type: every measured type anchors
    every = priors.anchor("resnet50", "T4", 32, 1, "fp32", "cifar10")
    assert every == priors._scaled(_target("resnet50", "T4", 32, 1, ("A100-40GB", "V100-16GB")))


def test_exchange_prior_falls_back_without_link_figures():
    """A GPU type with no link figure gets the anchors' own multi-GPU scaling."""
    table = BenchmarkTable(
        [],
        extra_gpus={
            "NOLINK": replace(
                gpu_spec("A10"), name="NOLINK", family="NOLINK", link_gbs=0.0, aliases=()
            )
        },
    )
    specs = Specs(table)
    rows = [m for m in _exchange_rows(0.5) if m.gpu_type != "A10"]
    priors = Priors(rows, specs)
    anchors = tuple(sorted(priors.measured_types("gpt2")))
    got = priors.anchor("gpt2", "NOLINK", 16, 8, "fp32")
    assert got == priors._scaled(_target("gpt2", "NOLINK", 16, 8, anchors))
    assert got != priors.anchor("gpt2", "A10", 16, 8, "fp32")


#: per model: (t0 s per step, c compute, a bandwidth, w weights per step, x exchange per step)
_PHYSICS = {
    "resnet50": (0.004, 0.02, 0.002, 0.01, 0.0),
    "bert-base": (0.010, 0.005, 0.004, 0.02, 0.3),
    "gpt2": (0.000, 0.0, 0.010, 0.05, 1.2),
}


def _physics_sps(model: str, gpu: str, batch: int, gpus: int) -> float:
    """Samples/s when the per-sample time is t0/b + c/F + a/B + w/(B b) + x r/(L b) exactly."""
    t0, c, a, w, x = _PHYSICS[model]
    spec = gpu_spec(gpu)
    f = effective_tflops(spec, "fp32")  # TF32 on the A10 and A100, as the model assumes
    bw, link = spec.bandwidth_gbs / 1000, spec.link_gbs / 100
    r = 2 * (gpus - 1) / gpus
    per_sample_s = t0 / batch + c / f + a / bw + w / (bw * batch)
    per_sample_s += x * r / (link * batch)
    return gpus / per_sample_s


def _physics_rows() -> list[Measurement]:
    """Rows of every model, GPU type, batch size (8, 32, 128) and GPU count (1, 2, 8)."""
    return [
        _row(model, gpu, batch, gpus, _physics_sps(model, gpu, batch, gpus))
        for model in _PHYSICS
        for gpu in GPUS
        for batch in (8, 32, 128)
        for gpus in (1, 2, 8)
    ]


def _priors_and_blended(rows: list[Measurement]) -> tuple[Priors, Priors]:
    """The priors over ``rows`` with the per-model time fit, and without (blended speed-up)."""
    return Priors(rows, Specs()), Priors(rows, Specs(), physics=False)


def test_physics_prior_recovers_a_type_between_its_anchors():
    """V100 lies between T4, A10 and A100 in compute, bandwidth and link: rows made of
    latency + compute + memory + exchange are predicted exactly there (one GPU and
    several, batch sizes not measured too); the blended speed-up is off on many."""
    rows = _physics_rows()
    train = [m for m in rows if m.gpu_type != "V100-16GB"]
    priors, blended = _priors_and_blended(train)
    off = 0
    for m in (m for m in rows if m.gpu_type == "V100-16GB"):
        got = priors.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        assert got is not None
        assert got[0] == pytest.approx(m.samples_per_s, rel=1e-6), m
        old = blended.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        assert old is not None
        off += abs(old[0] / m.samples_per_s - 1) > 0.02
    # the blended speed-up (its compute share fitted per model) misses a third of them
    assert off >= len(_PHYSICS) * 9 // 3
    unmeasured = _physics_sps("bert-base", "V100-16GB", 64, 4)
    got = priors.anchor("bert-base", "V100-16GB", 64, 4, "fp32")
    assert got is not None and got[0] == pytest.approx(unmeasured, rel=1e-6)


@pytest.mark.parametrize("holdout", ["A100-40GB", "T4"])
def test_physics_prior_is_not_used_to_extrapolate(holdout):
    """A type faster (A100: bandwidth) or slower (T4) than every anchor gets the blended
    speed-up, not the per-model fit."""
    rows = _physics_rows()
    train = [m for m in rows if m.gpu_type != holdout]
    priors, blended = _priors_and_blended(train)
    for m in (m for m in rows if m.gpu_type == holdout):
        got = priors.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)
        assert got is not None
        assert got == blended.anchor(m.model, m.gpu_type, m.batch_size, m.gpus, m.precision)


def test_physics_prior_needs_two_anchor_types():
    """With one other measured type there is nothing to fit: the blended speed-up."""
    rows = [m for m in _physics_rows() if m.gpu_type in ("T4", "V100-16GB")]
    priors, blended = _priors_and_blended(rows)
    assert priors.anchor("gpt2", "A10", 32, 2, "fp32") == blended.anchor(
        "gpt2", "A10", 32, 2, "fp32"
    )
    assert priors.anchor("gpt2", "V100-16GB", 32, 2, "fp32") == blended.anchor(
        "gpt2", "V100-16GB", 32, 2, "fp32"
    )


def _last_bits(rows: list[Measurement]) -> list[Measurement]:
    """``rows`` with each throughput moved in its last bits, as another CPU's BLAS
    kernels move a fit's sums."""
    return [
        replace(m, samples_per_s=m.samples_per_s * (1 + (i % 7 - 3) * 4e-16))
        for i, m in enumerate(rows)
    ]


def test_fits_do_not_carry_last_bit_noise():
    """The roofline and the per-model time fits keep only the digits they mean: rows that
    differ in their last bits give equal fits (so equal forests and schedules on any
    CPU), while a change of a few per cent moves them."""
    rows = _physics_rows()
    noisy = _last_bits(rows)
    assert noisy != rows
    assert fit_roofline(noisy, Specs()) == fit_roofline(rows, Specs())
    a, b = Priors(rows, Specs()), Priors(noisy, Specs())
    for model in _PHYSICS:
        fit_a, fit_b = a._physics_fit(model, GPUS, "fp32"), b._physics_fit(model, GPUS, "fp32")
        assert fit_a is not None and fit_b is not None
        assert fit_a[0] == fit_b[0] and fit_a[1].tolist() == fit_b[1].tolist(), model
    moved = [
        replace(m, samples_per_s=m.samples_per_s * 1.05) if m.model == "resnet50" else m
        for m in rows
    ]
    assert fit_roofline(moved, Specs()) != fit_roofline(rows, Specs())
