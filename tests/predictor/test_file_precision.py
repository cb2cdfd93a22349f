"""The precision of a benchmark file that states none (predictor.file_precision)."""

from __future__ import annotations

import json
from dataclasses import replace

from predictor.benchmarks import BenchmarkRow, BenchmarkTable
from predictor.catalog import effective_tflops, gpu_spec
from predictor.cli import main
from predictor.file_precision import infer_precision, with_precision

#: samples/s per effective TFLOPS of each model (a made-up but consistent world)
SPEED = {"resnet50": 10.0, "bert-base": 3.0, "ssd": 2.0, "gnmt": 6.0}
KNOWN = ("A100-80GB", "V100-16GB", "RTX3090", "A10", "H100-80GB", "RTXA6000")
NEW = ("L40S", "L4", "RTX6000ADA")


def _row(model: str, gpu: str, precision: str) -> BenchmarkRow:
    sps = SPEED[model] * effective_tflops(gpu_spec(gpu), precision)
    return BenchmarkRow(
        model=model, gpu_type=gpu, batch_size=64, samples_per_s=sps, precision=precision
    )


def _shipped() -> BenchmarkTable:
    return BenchmarkTable([_row(m, g, p) for m in SPEED for g in KNOWN for p in ("fp32", "fp16")])


def _file(precision: str) -> BenchmarkTable:
    """New types measured in ``precision``, the column dropped."""
    return BenchmarkTable(
        [replace(_row(m, g, precision), precision="") for m in SPEED for g in NEW]
    )


def test_a_file_measured_in_fp32_is_read_as_fp32():
    """Rows of types nothing else measured, without a precision column: the class whose
    predictions from the shipped rows are nearest is the file's."""
    inferred = infer_precision(_file("fp32"), _shipped(), exclude_gpu="L4", family="scaling")
    assert inferred.precision == "fp32"
    assert inferred.rows == len(SPEED) * 2  # the held-out type's rows are not judged
    assert inferred.errors["fp32"] < min(inferred.errors[""], inferred.errors["fp16"])


def test_a_file_measured_in_mixed_precision_is_not_read_as_fp32():
    """Mixed precision and unknown share their compute figure (the geometric mean of FP32
    and tensor FP16): where they predict alike the tie goes to unknown, never to FP32."""
    inferred = infer_precision(_file("fp16"), _shipped(), exclude_gpu="L4", family="scaling")
    assert inferred.precision in {"", "fp16"}
    assert inferred.errors["fp32"] > max(inferred.errors[""], inferred.errors["fp16"])


def test_what_is_held_out_is_never_read():
    """The held-out type's rows move nothing: multiplied by 7, the same choice and errors;
    a file of that type alone is judged on nothing and stays unknown."""
    own = _file("fp32")
    skewed = BenchmarkTable(
        [
            replace(r, samples_per_s=r.samples_per_s * 7) if r.gpu_type == "L4" else r
            for r in own.rows
        ]
    )
    a = infer_precision(own, _shipped(), exclude_gpu="L4", family="scaling")
    b = infer_precision(skewed, _shipped(), exclude_gpu="L4", family="scaling")
    assert a == b
    alone = BenchmarkTable([r for r in own.rows if r.gpu_type == "L4"])
    assert infer_precision(alone, _shipped(), exclude_gpu="L4", family="scaling").precision == ""
    held_model = infer_precision(own, _shipped(), exclude_model="gnmt", family="scaling")
    assert held_model.rows == (len(SPEED) - 1) * len(NEW)


def test_rows_that_state_a_precision_are_kept():
    """Only rows without a precision are judged and relabelled."""
    stated = BenchmarkTable([_row(m, "L4", "fp16") for m in SPEED])
    assert infer_precision(stated, _shipped(), family="scaling").rows == 0
    mixed = BenchmarkTable([*stated.rows, *_file("fp32").rows])
    relabelled = with_precision(mixed, "fp32")
    assert [r.precision for r in relabelled.rows[: len(SPEED)]] == ["fp16"] * len(SPEED)
    assert {r.precision for r in relabelled.rows[len(SPEED) :]} == {"fp32"}
    assert with_precision(mixed, "") is mixed


def test_evaluate_reports_the_precision_it_read_the_file_in(tmp_path, capsys):
    """``evaluate --benchmarks F`` on a four-column file says which precision it read F in
    and how near each class came, in its one JSON document."""
    path = tmp_path / "newer.csv"
    lines = ["model,gpu_type,batch_size,samples_per_s"]
    lines += [
        f"{r.model},{r.gpu_type},{r.batch_size},{r.samples_per_s}" for r in _file("fp32").rows
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["evaluate", "--benchmarks", str(path), "--holdout-gpu", "L40S"]
    assert main([*args, "--model-family", "scaling", "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out)
    assert out.count("\n") == 1
    assert result["inferred_precision"] in {"fp32", "fp16", "unknown"}
    assert set(result["precision_errors"]) == {"unknown", "fp32", "fp16"}
    assert result["precision_judged_rows"] == len(SPEED) * 2
