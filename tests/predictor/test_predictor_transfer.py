"""Speed-ratio transfer (predictor.transfer): other models' measured ratio on a new type."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from predictor.measurements import Measurement, query_of
from predictor.model import ThroughputModel
from predictor.transfer import MIN_TYPES, PROFILE_EPS, UNSHARED_GAP, RatioTransfer

KNOWN = ("A", "B", "C")


def _m(model: str, gpu: str, sps: float, *, gpus: int = 1, precision: str = "fp16") -> Measurement:
    return Measurement(
        model=model,
        gpu_type=gpu,
        batch_size=32,
        gpus=gpus,
        samples_per_s=sps,
        precision=precision,
    )


def _flat(anchor: str, target: str, precision: str, model: str) -> float:
    return 1.0


def _rows(target_factor: float = 3.0) -> list[Measurement]:
    """Two reference models and one other on three known types (1 and 4 GPUs); the
    references also on the new type N, ``target_factor`` times as fast as on every known
    type at equal GPU count."""
    base = {"A": 100.0, "B": 200.0, "C": 400.0}
    rows = []
    for gpu, sps in base.items():
        for gpus, scale in ((1, 1.0), (4, 3.0)):
            rows.append(_m("ref1", gpu, sps * scale, gpus=gpus))
            rows.append(_m("ref2", gpu, 2 * sps * scale, gpus=gpus))
            rows.append(_m("other", gpu, 0.5 * sps * (scale * 1.2), gpus=gpus))
    for gpus, scale in ((1, 1.0), (4, 3.0)):
        rows.append(_m("ref1", "N", 100.0 * target_factor * scale, gpus=gpus))
        rows.append(_m("ref2", "N", 200.0 * target_factor * scale, gpus=gpus))
    return rows


def test_the_references_ratio_moves_to_the_other_model_with_its_own_scaling():
    """N is 3x type A for the references: 'other' there is 3x its A rate, at 1 and at 4
    GPUs (its own scaling, 1.2x better than the references', is kept)."""
    t = RatioTransfer(_rows(), _flat)
    one = t.predict("other", "N", 32, 1, "fp16")
    four = t.predict("other", "N", 32, 4, "fp16")
    assert one is not None and four is not None
    assert one[0] == pytest.approx(0.5 * 100.0 * 1.2 * 3.0, rel=1e-9)
    assert four[0] == pytest.approx(0.5 * 100.0 * 3.0 * 1.2 * 3.0, rel=1e-9)
    assert one[1] == pytest.approx(0.0, abs=1e-9)  # every known type agrees


def test_the_spec_sheet_moves_the_ratio_to_the_models_own_speed_up():
    """When the spec sheet says 'other' gains 2x more from N than the references do, the
    transferred ratio is 2x too."""

    def speedup(anchor: str, target: str, precision: str, model: str) -> float:
        return 4.0 if model == "other" else 2.0

    t = RatioTransfer(_rows(), speedup)
    got = t.predict("other", "N", 32, 1, "fp16")
    assert got is not None and got[0] == pytest.approx(0.5 * 100.0 * 1.2 * 3.0 * 2.0)


def test_too_few_known_types_or_a_measured_type_give_nothing():
    rows = [r for r in _rows() if r.gpu_type != "C"]
    assert MIN_TYPES == 3
    assert RatioTransfer(rows, _flat).predict("other", "N", 32, 1, "fp16") is None
    assert RatioTransfer(rows, _flat, min_types=2).predict("other", "N", 32, 1, "fp16")
    full = RatioTransfer(_rows(), _flat)
    assert full.predict("ref1", "N", 32, 1, "fp16") is None  # measured there
    assert full.predict("other", "N", 32, 1, "fp32") is None  # no reference in FP32
    assert full.predict("other", "N", 32, 2, "fp16") is None  # nor on 2 GPUs


def test_references_are_compared_on_their_own_input_only():
    """A reference row on the new type is compared with the same input's rows on the known
    types: a different benchmark of the same model (another host) gives no ratio."""
    rows = [
        replace(r, input="imagenet") if r.model == "ref1" and r.gpu_type == "N" else r
        for r in _rows()
        if r.model != "ref2"
    ]
    assert RatioTransfer(rows, _flat).ratios("N", "A", "mixed", 1) == {}
    assert RatioTransfer(rows, _flat).predict("other", "N", 32, 1, "fp16") is None


def test_fp32_ratios_are_not_taken_across_the_tf32_break():
    """In FP32 a known type is skipped when only one of it and the target has TF32."""
    rows = [replace(r, precision="fp32") for r in _rows()]
    tf32 = {"A": True, "B": True, "C": True, "N": False}
    same = RatioTransfer(rows, _flat)
    split = RatioTransfer(rows, _flat, has_tf32=tf32.__getitem__)
    assert same.predict("other", "N", 32, 1, "fp32") is not None
    assert split.predict("other", "N", 32, 1, "fp32") is None
    fp16 = RatioTransfer(_rows(), _flat, has_tf32=tf32.__getitem__)
    assert fp16.predict("other", "N", 32, 1, "fp16") is not None  # FP16 is unaffected


def test_the_model_serves_a_transfer_where_references_were_measured():
    """ThroughputModel: a model not measured on a type where others were is predicted by
    the transfer (kind "transfer") when three known types give it; only from training."""
    rows = []
    for gpu, factor in (("T4", 1.0), ("A10", 2.0), ("A100-40GB", 5.0), ("L4", 1.5)):
        for model, base in (("resnet50", 300.0), ("bert-base", 40.0), ("gpt2", 10.0)):
            if gpu == "L4" and model == "gpt2":
                continue
            rows.append(_m(model, gpu, base * factor))
    model = ThroughputModel("scaling").fit(rows)
    query = query_of(_m("gpt2", "L4", 1.0))
    point, low, high, kind = model.predict_one(query)
    assert kind == "transfer"
    assert point == pytest.approx(10.0 * 1.5, rel=0.05)
    assert low < point < high


def test_rows_of_unknown_precision_are_compared_with_every_class():
    """An admin's file without a precision column: its rows on the new type are compared
    with the known types' rows of any class, and a query of unknown precision is served."""
    known = [r for r in _rows() if r.gpu_type != "N"]
    new = [replace(r, precision="") for r in _rows() if r.gpu_type == "N"]
    t = RatioTransfer(known + new, _flat)
    got = t.predict("other", "N", 32, 1, "")
    assert got is not None and got[0] == pytest.approx(0.5 * 100.0 * 1.2 * 3.0)
    assert t.predict("other", "N", 32, 1, "fp16") is None  # no FP16 reference on N


def _profile_rows() -> list[Measurement]:
    """Four known types; 'other' runs at half of ref2's speed on every one of them (ref2's
    speed profile), ref1's profile differs. On N ref1 is 3x and ref2 1.5x their A rate."""
    ref1 = {"A": 100.0, "B": 200.0, "C": 400.0, "D": 250.0, "N": 300.0}
    ref2 = {"A": 100.0, "B": 300.0, "C": 150.0, "D": 400.0, "N": 150.0}
    rows = [_m("ref1", g, s) for g, s in ref1.items()]
    rows += [_m("ref2", g, s) for g, s in ref2.items()]
    rows += [_m("other", g, 0.5 * s) for g, s in ref2.items() if g != "N"]
    return rows


def test_the_reference_whose_profile_the_model_follows_weighs_most():
    """'other' tracked ref2 from every known type to every other: its rate on N follows
    ref2's ratio (75/s), not the plain mean of both references' ratios (about 106/s)."""
    t = RatioTransfer(_profile_rows(), _flat)
    got = t.predict("other", "N", 32, 1, "fp16")
    assert got is not None
    assert got[0] == pytest.approx(0.5 * 150.0, rel=0.02)
    weights = t.reference_weights("other", "N", "A", "mixed", 1, ("ref1", "ref2"))
    assert weights["ref2"] == pytest.approx(1.0 / PROFILE_EPS**2)
    assert weights["ref1"] < weights["ref2"] / 50


def test_a_reference_never_measured_with_the_model_elsewhere_gets_the_default_gap():
    """With the model measured on the anchor alone, nothing compares it with the
    references: every reference gets the same weight (the plain mean, as before)."""
    rows = [r for r in _profile_rows() if not (r.model == "other" and r.gpu_type != "A")]
    t = RatioTransfer(rows, _flat, min_types=1)
    weights = t.reference_weights("other", "N", "A", "mixed", 1, ("ref1", "ref2"))
    assert weights == {
        "ref1": pytest.approx(1.0 / (PROFILE_EPS + UNSHARED_GAP) ** 2),
        "ref2": pytest.approx(1.0 / (PROFILE_EPS + UNSHARED_GAP) ** 2),
    }
    got = t.predict("other", "N", 32, 1, "fp16")
    assert got is not None and got[0] == pytest.approx(50.0 * math.sqrt(3.0 * 1.5))
