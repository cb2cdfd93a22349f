"""The shipped benchmark knowledge: names reconciled, the absurd-row rule, honest holdouts."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from predictor.benchmarks import BenchmarkRow, BenchmarkTable
from predictor.catalog import (
    canonical_gpu,
    canonical_model,
    catalog_ratio,
    data_text,
    gpu_spec,
    model_input,
)
from predictor.cli import main
from predictor.evaluation import evaluate, holdout_predictions
from predictor.knowledge import COLLAPSE, SUPERLINEAR, screen, shipped, shipped_rejected
from predictor.measurements import Measurement, measurements_from_table
from predictor.model import TypeOffsets

LAMBDA_SRC = Path("/work/shared/data/lambda/lambda-pytorch-train.csv")


def _lambda_raw() -> list[dict[str, str]]:
    return list(csv.DictReader(data_text("lambda.csv").splitlines()))


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("lambda_name", "gavel_name", "canonical"),
    [
        ("V100 16GB", "v100", "V100-16GB"),
        ("resnet50", "ResNet-50", "resnet50"),
    ],
)
def test_both_tables_name_the_same_thing_alike(lambda_name, gavel_name, canonical):
    """A GPU or model both tables measured resolves to one canonical name from either."""
    resolve = canonical_gpu if canonical.isupper() else canonical_model
    assert resolve(lambda_name) == resolve(gavel_name) == canonical


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("H100 80GB SXM5", "H100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),  # GPU feature discovery's label, same card
        ("H100 80GB PCIe Gen5", "H100-80GB-PCIE"),
        ("NVIDIA-H100-PCIe", "H100-80GB-PCIE"),
        ("A100 80GB SXM4", "A100-80GB"),
        ("A100 80GB PCIe", "A100-80GB-PCIE"),
        ("A100 40GB PCIe", "A100-40GB"),
        ("Quadro RTX 8000", "RTX8000"),
        ("RTX 6000 Ada", "RTX6000ADA"),
        ("Quadro RTX 6000", "RTX6000"),  # the Turing card is another type
        ("RTX A6000", "RTXA6000"),
    ],
)
def test_lambda_gpu_names_resolve(name, canonical):
    """Lambda's GPU names map to catalog types; PCIe and SXM cards are told apart."""
    assert canonical_gpu(name) == canonical


def test_pcie_and_sxm_cards_differ_in_the_catalog():
    """The PCIe cards have their own, lower figures and a PCIe link."""
    sxm, pcie = gpu_spec("H100-80GB"), gpu_spec("H100-80GB-PCIE")
    assert pcie.bandwidth_gbs < sxm.bandwidth_gbs and pcie.link_gbs < sxm.link_gbs
    assert gpu_spec("A100-80GB-PCIE").link_gbs < gpu_spec("A100-80GB").link_gbs


def test_a_variant_alias_names_the_model_and_its_input():
    """bert_base_squad is BERT-base on SQuAD: one model, another input, other figures."""
    assert canonical_model("bert_base_squad") == "bert-base"
    assert model_input("bert_base_squad") == "squad"
    assert model_input("bert-base") == ""
    table = BenchmarkTable.parse(
        ["model,gpu_type,batch_size,samples_per_s", "bert_large_squad,A10,8,10"]
    )
    (row,) = table.rows
    assert (row.model, row.input) == ("bert-large", "squad")
    spec = table.model_spec(row.model).for_input(row.input)
    assert spec.forward_gmacs > table.model_spec("bert-large").forward_gmacs


def test_every_lambda_row_resolves_to_the_catalog():
    """No Lambda row stands alone: every name is a catalog entry (the one mapping)."""
    table = BenchmarkTable.parse(data_text("lambda.csv").splitlines(), source="lambda.csv")
    assert len(table.rows) == len(_lambda_raw()) == 980
    assert not table.extra_models and not table.extra_gpus
    assert len({r.gpu_type for r in table.rows}) == 12
    assert len(table.models()) == 10


@pytest.mark.skipif(not LAMBDA_SRC.exists(), reason="shared Lambda data not present")
def test_shipped_lambda_table_is_the_conversion():
    """lambda.csv is predictor.lambdalabs' conversion: per-GPU batch, names as published."""
    from predictor.lambdalabs import convert

    rows = convert(LAMBDA_SRC.read_text(encoding="utf-8").splitlines())
    shipped_rows = _lambda_raw()
    assert len(rows) == len(shipped_rows)
    for ours, raw in zip(rows, shipped_rows, strict=True):
        assert (ours[0], ours[1], str(ours[2]), str(ours[4])) == (
            raw["model"],
            raw["gpu_type"],
            raw["batch_size"],
            raw["gpus"],
        )
    source = list(csv.DictReader(LAMBDA_SRC.read_text(encoding="utf-8").splitlines()))
    eight = next(r for r in source if r["num_gpus"] == "8")
    converted = rows[source.index(eight)]
    assert converted[2] * 8 == int(eight["batch_size"])  # the job's batch -> each GPU's
    assert converted[3] == float(eight["samples_per_s"])  # the job's throughput, kept


def test_fp32_uses_tf32_tensor_cores_where_the_gpu_has_them():
    """FP32 training on Ampere and later runs on TF32; on a V100 it is plain FP32."""
    from predictor.catalog import effective_tflops

    assert effective_tflops(gpu_spec("A100-80GB"), "fp32") == gpu_spec("A100-80GB").tf32_tflops
    assert effective_tflops(gpu_spec("V100-16GB"), "fp32") == gpu_spec("V100-16GB").fp32_tflops
    assert effective_tflops(gpu_spec("A100-80GB")) == pytest.approx(
        math.sqrt(19.5 * 312)
    )  # unknown precision: unchanged


def test_mixed_precision_compute_is_the_mean_of_cuda_and_tensor_cores():
    """A mixed-precision step runs matmuls on tensor cores, the rest on CUDA cores: the
    geometric mean of FP32 and tensor FP16, as for unknown precision."""
    from predictor.catalog import effective_tflops

    for gpu in ("A100-80GB", "RTX4090", "V100-16GB"):
        spec = gpu_spec(gpu)
        for precision in ("fp16", "bf16", "amp", "mixed"):
            assert effective_tflops(spec, precision) == pytest.approx(
                math.sqrt(spec.fp32_tflops * spec.fp16_tflops)
            )


# --------------------------------------------------------------------------- the rule


def _row(gpus: int, sps: float, *, batch: int = 32, gpu: str = "A10") -> BenchmarkRow:
    return BenchmarkRow(
        model="resnet50",
        gpu_type=gpu,
        batch_size=batch,
        samples_per_s=sps,
        gpus=gpus,
        precision="fp16",
        origin=f"test {gpus} x {sps}",
    )


def test_rule_rejects_super_linear_and_collapsed_rows_only():
    """Per GPU above 2x one GPU's, or the whole job below half of it: rejected."""
    one = _row(1, 100.0)
    fine = [_row(2, 190.0), _row(4, 2 * 4 * 100.0), _row(8, 60.0)]  # 8 GPUs, 0.6 x: kept
    superlinear = _row(4, 4 * 100.0 * SUPERLINEAR * 1.01)
    collapsed = _row(2, 100.0 * COLLAPSE * 0.99)
    unjudged = _row(4, 1e12, batch=64)  # no one-GPU row at its batch size: not judged
    other_type = _row(2, 1e12, gpu="A30")  # nor on another type
    kept, rejected = screen([one, *fine, superlinear, collapsed, unjudged, other_type])
    assert kept == [one, *fine, unjudged, other_type]
    assert [(r.row, r.check) for r in rejected] == [
        (superlinear, "super-linear"),
        (collapsed, "collapse"),
    ]
    assert rejected[0].ratio == pytest.approx(SUPERLINEAR * 1.01)
    assert rejected[1].reference_sps == 100.0 and rejected[1].references == 1


def test_rule_compares_with_the_median_of_several_one_gpu_rows():
    """One odd one-GPU row among several does not make its peers' multi-GPU rows absurd."""
    ones = [_row(1, 100.0), _row(1, 105.0), _row(1, 1000.0)]
    eight = _row(8, 8 * 95.0)
    kept, rejected = screen([*ones, eight])
    assert eight in kept and not rejected


def test_shipped_tables_lose_only_the_absurd_rows():
    """Lambda's NCF rows on several H100s (billions of samples/s) are rejected by the rule;
    no Gavel row is; every rejected row breaks a stated factor."""
    rejected = shipped_rejected()
    assert rejected
    assert all("lambda.csv" in r.row.origin for r in rejected)
    assert all(r.ratio > SUPERLINEAR or r.ratio < COLLAPSE for r in rejected)
    absurd = [r for r in rejected if r.row.samples_per_s > 1e9]
    assert absurd and all(r.row.model == "ncf" and r.check == "super-linear" for r in absurd)
    assert len(shipped().rows) == 246 + 980 - len(rejected)
    assert max(r.samples_per_s for r in shipped().rows if r.model == "ncf") < 1e9


def test_screen_command_prints_the_rule_and_every_rejected_row(capsys):
    """`cpn predictor screen --json` is one JSON document: the rule and what it rejected."""
    assert main(["screen", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "super-linear" in report["rule"] and report["superlinear_factor"] == SUPERLINEAR
    assert report["rows_rejected"] == len(report["rejected"]) == len(shipped_rejected())
    first = report["rejected"][0]
    assert {"origin", "model", "gpu_type", "gpus", "check", "ratio"} <= set(first)


def test_screen_judges_an_admins_file_too(tmp_path, capsys):
    """A file's absurd row is named with its file and line; the file's other rows stay."""
    path = tmp_path / "mine.csv"
    path.write_text(
        "model,gpu_type,batch_size,samples_per_s,gpus,precision\n"
        "resnet50,L4,64,300,1,fp16\n"
        "resnet50,L4,64,590,2,fp16\n"
        "resnet50,L4,64,90000,4,fp16\n",
        encoding="utf-8",
    )
    assert main(["screen", "--benchmarks", str(path), "--without-shipped", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows_kept"] == 2
    assert [r["origin"] for r in report["rejected"]] == [f"{path} line 4"]


# --------------------------------------------------------------------------- holdouts


def test_given_models_reach_training_and_nothing_else_of_the_held_out_type():
    """Scaling the held-out type's other rows by 7 leaves every prediction unchanged;
    scaling the given models' rows there moves them (they are what was learned from)."""
    rows = measurements_from_table(shipped())
    gpu, given = "RTX3090", ("resnet50", "ssd")

    def tampered(models_hit: bool) -> list[Measurement]:
        return [
            replace(m, samples_per_s=m.samples_per_s * 7.0)
            if m.gpu_type == gpu and (m.model in given) == models_hit
            else m
            for m in rows
        ]

    kwargs = {"family": "rf", "holdout_gpu": gpu, "table": shipped(), "given_models": given}
    test_a, pred_a = holdout_predictions(rows, **kwargs)
    test_b, pred_b = holdout_predictions(tampered(False), **kwargs)
    _, pred_c = holdout_predictions(tampered(True), **kwargs)
    assert test_a and all(m.model not in given and m.gpu_type == gpu for m in test_a)
    assert [m.samples_per_s * 7.0 for m in test_a] == pytest.approx(
        [m.samples_per_s for m in test_b]
    )
    np.testing.assert_allclose(pred_a, pred_b, rtol=1e-9)
    assert np.median(pred_c / pred_a) > 3.0  # the given rows are used


def test_one_given_model_corrects_a_type_the_spec_sheet_misjudges():
    """A new type twice as fast as its specification says for every model: knowing one
    model's rows there brings the others to it (the type offset); without, they are off."""
    models = {"resnet50": 250.0, "bert-base": 40.0, "gpt2": 12.0, "vgg16": 90.0}
    rows = []
    for model, base in models.items():
        for gpu in ("T4", "A10", "V100-16GB", "A100-40GB", "L4"):
            truth = base * catalog_ratio(gpu_spec("T4"), gpu_spec(gpu), "fp16")
            truth *= 2.0 if gpu == "L4" else 1.0
            rows.append(
                Measurement(
                    model=model,
                    gpu_type=gpu,
                    batch_size=32,
                    gpus=1,
                    samples_per_s=truth,
                    precision="fp16",
                )
            )
    table = BenchmarkTable([])
    none = evaluate(rows, family="scaling", holdout_gpu="L4", table=table)
    one = evaluate(rows, family="scaling", holdout_gpu="L4", table=table, given_models=["resnet50"])
    assert none["median_ape"] > 30.0
    assert one["n"] == 3 and one["median_ape"] < 1.0


def test_evaluate_scores_only_the_files_rows_and_trains_on_the_shipped_tables(tmp_path, capsys):
    """--benchmarks F: F's held-out rows are scored (not the shipped tables' rows of that
    type), F's other rows and the shipped tables train, given models' rows are not scored."""
    path = tmp_path / "mine.csv"
    lines = ["model,gpu_type,batch_size,samples_per_s,gpus,precision"]
    for model, sps in (("resnet50", 900.0), ("ssd", 240.0), ("bert_base_squad", 150.0)):
        lines.append(f"{model},L40S,64,{sps},1,fp16")
        lines.append(f"{model},RTX 3090,64,{sps / 2.5},1,fp16")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["evaluate", "--benchmarks", str(path), "--holdout-gpu", "L40S", "--json"]
    assert main([*args, "--model-family", "scaling", "--given-models", "resnet50"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out)
    assert out.count("\n") == 1
    assert result["n"] == 2 and result["given_models"] == ["resnet50"]
    assert result["given_rows"] == 1 and "lambda.csv" in result["sources"]
    assert result["median_ape"] >= 0.0
    assert main([*args, "--given-models", "nosuchmodel"]) == 2
    assert "nosuchmodel" in capsys.readouterr().err


def test_evaluate_reads_a_plain_file_of_newer_gpu_types(tmp_path, capsys):
    """A four-column file of types newer than the shipped tables, named as public
    benchmarks name them, is scored on its held-out type (none of them is in the shipped
    tables, so every prediction comes from the catalog's figures and the file's rows)."""
    path = tmp_path / "newer.csv"
    lines = ["model,gpu_type,batch_size,samples_per_s"]
    for gpu, scale in (("B200", 4.0), ("GH200 96GB", 2.4), ("H100 NVL", 2.0), ("RTX 5090", 1.6)):
        for model, sps in (("resnet50", 700.0), ("ssd", 200.0), ("bert_base_squad", 150.0)):
            lines.append(f"{model},{gpu},64,{sps * scale}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = main(["evaluate", "--benchmarks", str(path), "--holdout-gpu", "B200", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    result = json.loads(out)
    assert result["n"] == 3 and result["median_ape"] >= 0.0


def test_a_model_the_catalog_lacks_is_predicted_from_its_rows_on_other_types(tmp_path, capsys):
    """A file's model that no catalog entry describes is not refused: on the held-out type
    it is predicted from its own rows on the other types, far better than from nothing
    (rows: 0.37 x Lambda's ResNet-50 FP16 one-GPU throughput on each type)."""
    resnet = {"RTX 4090": (448, 1301.0), "RTX 3090": (448, 905.0), "RTX A6000": (928, 916.0),
              "A100 80GB SXM4": (1280, 1582.0), "RTX 6000 Ada": (928, 1146.0)}  # fmt: skip
    lines = ["model,gpu_type,batch_size,samples_per_s,gpus,precision"]
    lines += [f"mystery_net,{g},{b},{0.37 * sps:.1f},1,fp16" for g, (b, sps) in resnet.items()]
    errors = {}
    for name, rows in (("with_rows", lines), ("alone", lines[:2])):
        path = tmp_path / f"{name}.csv"
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        args = ["evaluate", "--benchmarks", str(path), "--holdout-gpu", "RTX4090", "--json"]
        assert main(args) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["n"] == 1 and result["imputed_models"] == ["mystery_net"]
        errors[name] = result["median_ape"]
    assert errors["with_rows"] < errors["alone"] / 2


def test_given_models_need_a_held_out_gpu_type(capsys):
    """--given-models with --holdout-model is a clear error, exit 2."""
    code = main(["evaluate", "--holdout-model", "resnet50", "--given-models", "ssd"])
    assert code == 2
    assert "--given-models needs --holdout-gpu" in capsys.readouterr().err


def test_type_offsets_prefer_models_of_the_same_domain_and_precision():
    """On a type, a model takes the error of measured models of its own domain (and its
    precision class and GPU count) when there are any, else every model's median."""

    def m(model: str, precision: str = "fp16", gpus: int = 1) -> Measurement:
        return Measurement(
            model=model,
            gpu_type="L4",
            batch_size=32,
            gpus=gpus,
            samples_per_s=1.0,
            precision=precision,
        )

    offsets = TypeOffsets(
        [(m("resnet50"), 0.3), (m("bert-base"), -0.2), (m("bert-base", "fp32"), 0.5)],
        {"resnet50": "vision", "bert-base": "nlp"},
    )
    assert offsets.offset("L4", "vgg16", "fp16", 1, "vision") == (0.3, 0.0)
    assert offsets.offset("L4", "gpt2", "fp16", 1, "nlp") == (-0.2, 0.0)
    assert offsets.offset("L4", "gpt2", "fp32", 1, "nlp") == (0.5, 0.0)
    point, half = offsets.offset("L4", "ncf", "fp16", 1, "recsys") or (0.0, 0.0)
    assert point == pytest.approx(0.05) and half == pytest.approx(0.25)
    assert offsets.offset("A10", "gpt2", "fp16", 1, "nlp") is None  # nothing measured there
    assert offsets.offset("L4", "resnet50", "fp16", 1, "vision") == (-0.2, 0.0)  # never its own
    again = TypeOffsets.from_list(offsets.to_list())
    assert again.offset("L4", "vgg16", "fp16", 1, "vision") == (0.3, 0.0)
