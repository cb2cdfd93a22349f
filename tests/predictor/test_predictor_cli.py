"""``cpn predictor``: train, predict and evaluate from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from predictor.catalog import catalog_ratio, gpu_spec
from predictor.cli import main
from predictor.history import History, HistoryRecord


def _small_csv(tmp_path: Path) -> Path:
    """Three models on four GPU types, throughput exactly proportional to the catalog."""
    lines = ["model,gpu_type,batch_size,samples_per_s,gpus,precision"]
    for model, base in (("resnet50", 250.0), ("vgg16", 90.0), ("gpt2", 12.0)):
        for gpu in ("T4", "A10", "V100-16GB", "A100-40GB"):
            sps = base * catalog_ratio(gpu_spec("T4"), gpu_spec(gpu))
            lines.append(f"{model},{gpu},32,{sps:.4f},1,")
    path = tmp_path / "small.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_evaluate_on_a_small_file(tmp_path, capsys):
    """Holding out a GPU type of a spec-proportional table gives near-zero error as JSON."""
    csv = _small_csv(tmp_path)
    for family in ("rf", "hgb", "scaling"):
        args = ["evaluate", "--benchmarks", str(csv), "--without-shipped", "--holdout-gpu", "a10"]
        code = main([*args, "--model-family", family, "--json"])
        assert code == 0
        result = json.loads(capsys.readouterr().out)
        assert {"n", "mape", "median_ape"} <= set(result) and result["holdout_gpu"] == "A10"
        assert result["n"] == 3 and result["median_ape"] < 5.0


def test_evaluate_holdout_model_reports_an_error(tmp_path, capsys):
    """Leave-one-model-out runs and reports a finite error."""
    assert (
        main(["evaluate", "--benchmarks", str(_small_csv(tmp_path)), "--holdout-model", "VGG-16"])
        == 0
    )
    out = capsys.readouterr().out
    assert "vgg16" in out and "median APE" in out


def test_train_then_predict_with_the_artifact(tmp_path, capsys):
    """train writes an artifact; predict reads it and gives runtime = work / throughput."""
    csv, out = _small_csv(tmp_path), tmp_path / "model.joblib"
    history = tmp_path / "h.db"
    db = History(history)
    db.add(
        HistoryRecord(
            job_key="a",
            model="resnet50",
            gpu_type="L4",
            gpus=1,
            actual_s=100.0,
            batch_size=32,
            work_samples=20_000.0,
        )
    )
    db.close()
    args = ["train", "--benchmarks", str(csv), "--without-shipped", "--history", str(history)]
    assert main([*args, "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 13 and out.exists()
    args = ["predict", "--model", "ResNet-50", "--gpu-type", "L4", "--batch-size", "32"]
    assert (
        main([*args, "--samples", "20000", "--epochs", "2", "--artifact", str(out), "--json"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    (pred,) = result["predictions"]
    assert pred["source"] == "measured" and not result["unseen"]
    assert pred["runtime_s"] == 200.0  # 40,000 samples at the observed 200 samples/s


def test_predict_every_gpu_type_and_unseen_model(capsys):
    """Without --gpu-type every catalog type is listed; an unknown model is flagged."""
    args = ["predict", "--model", "brand-new-net", "--batch-size", "16", "--steps", "100"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "unseen" in out and "H100-80GB" in out and "K80" in out


def test_bad_input_exits_2(tmp_path, capsys):
    """A malformed benchmark file or missing work is an error naming the problem."""
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "model,gpu_type,batch_size,samples_per_s\nresnet50,NOPE9,8,1\n", encoding="utf-8"
    )
    assert main(["evaluate", "--benchmarks", str(bad), "--holdout-gpu", "T4"]) == 2
    assert "line 2: unknown GPU type 'NOPE9'" in capsys.readouterr().err
    bad.write_text("model,gpu_type,batch_size,samples_per_s\nresnet50,T4,0,1\n", encoding="utf-8")
    assert main(["evaluate", "--benchmarks", str(bad), "--holdout-gpu", "T4"]) == 2
    assert "line 2: batch_size" in capsys.readouterr().err
    assert main(["predict", "--model", "resnet50", "--batch-size", "8"]) == 2
    assert "--samples" in capsys.readouterr().err


def test_evaluate_after_observing_held_out_jobs(tmp_path, capsys):
    """--observe-per-model scores the held-out rows the estimator did not observe."""
    csv = _small_csv(tmp_path)
    args = ["evaluate", "--benchmarks", str(csv), "--without-shipped", "--holdout-gpu", "A10"]
    assert main([*args, "--observe-per-model", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["observed"] == 3 and result["n"] == 0  # one row per model, all observed
    assert main(["evaluate", "--holdout-model", "a3c", "--observe-per-model", "1"]) == 2


def test_rows_of_a_gpu_type_the_catalog_lacks_are_left_out_and_named(tmp_path, capsys):
    """A file that also measures a GPU type the catalog lacks still trains and scores on
    its other rows: those rows are left out, named on stderr and counted in the JSON (one
    document on stdout); holding that type out is an error that says what to do."""
    lines = ["model,gpu_type,batch_size,samples_per_s"]
    for model, base in (("resnet50", 250.0), ("vgg16", 90.0), ("gpt2", 12.0)):
        for gpu in ("T4", "A10", "V100-16GB", "A100-40GB"):
            lines.append(f"{model},{gpu},32,{base * catalog_ratio(gpu_spec('T4'), gpu_spec(gpu))}")
        lines.append(f"{model},Quantum QX-9,32,{base * 7}")
    csv = tmp_path / "mixed.csv"
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["evaluate", "--benchmarks", str(csv), "--without-shipped", "--holdout-gpu", "A10"]
    assert main([*args, "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["skipped_rows"] == 3 and result["unknown_gpu_types"] == ["Quantum QX-9"]
    assert result["n"] == 3 and result["median_ape"] < 5.0
    assert "left out 3 row(s)" in captured.err and "Quantum QX-9" in captured.err
    out = tmp_path / "model.joblib"
    train = ["train", "--benchmarks", str(csv), "--without-shipped", "--out", str(out)]
    assert main(train) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 12
    held = ["evaluate", "--benchmarks", str(csv), "--holdout-gpu", "quantum qx-9", "--json"]
    assert main(held) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "'quantum qx-9' is not in the GPU catalog" in captured.err
