"""The GPU and model catalogs, their aliases, the benchmark table and throughput ratios."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from predictor import catalog
from predictor.benchmarks import BenchmarkError, BenchmarkTable, precision_class, throughput_ratio
from predictor.catalog import (
    UnknownName,
    canonical_gpu,
    canonical_model,
    expand_gpu_types,
    gpu_key,
    gpu_spec,
    model_key,
    model_spec,
)

GAVEL_SRC = Path("/work/shared/data/gavel/gavel_isolated_throughputs.csv")


def test_every_alias_resolves_to_its_own_gpu_type():
    """Each GPU alias and canonical name resolves to the entry that lists it."""
    for name in catalog.gpu_types():
        spec = gpu_spec(name)
        assert canonical_gpu(name) == name
        for alias in spec.aliases:
            assert canonical_gpu(alias) == name, alias
            assert canonical_gpu(alias.upper()) == name
            assert canonical_gpu(alias.lower()) == name


def test_every_alias_resolves_to_its_own_model():
    """Each model alias and canonical name resolves to the entry that lists it."""
    for name in catalog.model_names():
        spec = model_spec(name)
        assert canonical_model(name) == name
        for alias in spec.aliases:
            assert canonical_model(alias) == name, alias
            assert canonical_model(alias.upper()) == name


def test_no_alias_maps_to_two_types():
    """No normalised key is claimed by two GPU types or two models."""
    seen: dict[str, str] = {}
    for name in catalog.gpu_types():
        for alias in (name, *gpu_spec(name).aliases):
            assert seen.setdefault(gpu_key(alias), name) == name, alias
    seen = {}
    for name in catalog.model_names():
        for alias in (name, *model_spec(name).aliases):
            assert seen.setdefault(model_key(alias), name) == name, alias


def test_duplicate_alias_is_rejected():
    """Building an index where one alias names two entries fails loudly."""
    with pytest.raises(ValueError, match="both"):
        catalog._index("GPU", [("A", ["x-1"]), ("B", ["X1"])], gpu_key)


def test_gpu_specs_are_plausible():
    """Every GPU has positive figures and tensor FP16 at least its FP32."""
    for name in catalog.gpu_types():
        spec = gpu_spec(name)
        assert spec.fp32_tflops > 0 and spec.bandwidth_gbs > 0 and spec.memory_gib > 0
        assert spec.fp16_tflops >= spec.fp32_tflops
        assert name == name.upper()


def test_gpu_links_are_plausible():
    """Every GPU names its GPU-to-GPU link; NVLink (SXM) parts outpace any PCIe slot."""
    for name in catalog.gpu_types():
        spec = gpu_spec(name)
        assert spec.link_gbs > 0 and spec.interconnect, name
        pcie = "PCIe" in spec.interconnect
        assert (spec.link_gbs <= 64) == pcie, name  # PCIe 5.0 x16: 64 GB/s each way
    # a K80 board's two GPUs share one PCIe 3.0 x16 slot
    assert gpu_spec("K80").link_gbs == gpu_spec("P100").link_gbs / 2
    assert gpu_spec("V100-16GB").link_gbs > 4 * gpu_spec("V100S-32GB").link_gbs


def test_required_gpu_types_are_present():
    """The catalog covers the types the issue lists."""
    required = {
        "K80", "P100", "V100-16GB", "V100-32GB", "T4", "A10", "RTX2080TI", "RTX6000",
        "A100-40GB", "A100-80GB", "A800-80GB", "H100-80GB", "H800-80GB", "L40S", "L4",
        "A30", "A40", "RTX3090", "RTX4090",
    }  # fmt: skip
    assert required <= set(catalog.gpu_types())


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("Tesla-V100-SXM2-32GB", "V100-32GB"),
        ("NVIDIA-A100-PCIE-40GB", "A100-40GB"),
        ("Tesla-K80", "K80"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("Tesla V100-SXM2-16GB", "V100-16GB"),
        ("a100-80gb", "A100-80GB"),
        ("v100", "V100-16GB"),
        ("V100", "V100-16GB"),
        ("A100", "A100-40GB"),
        ("2080ti", "RTX2080TI"),
        ("k80", "K80"),
        ("Quadro RTX 6000", "RTX6000"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA-A100-SXM4-80GB-SHARED", "A100-80GB"),
    ],
)
def test_gpu_alias_examples(alias, expected):
    """GFD labels, nvidia-smi names and short forms resolve case-insensitively."""
    assert canonical_gpu(alias) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("H100 SXM", "H100-80GB"),  # board words: the SXM socket, HGX/DGX, HBM
        ("H200 SXM 141GB", "H200-141GB"),
        ("HGX B200", "B200-180GB"),
        ("DGX B200", "B200-180GB"),
        ("NVIDIA A100 80GB HBM2e", "A100-80GB"),
        ("GeForce RTX 5090 Founders Edition", "RTX5090"),
        ("A100 SXM4 40GB", "A100-40GB"),  # a memory size picks the family's variant
        ("V100 SXM2 32GB", "V100-32GB"),
        ("H100 PCIe 80GB", "H100-80GB-PCIE"),
        ("B200 192GB", "B200-180GB"),  # a family of one variant takes any size
        ("H100 NVL", "H100-NVL-94GB"),  # newer types, as public benchmarks name them
        ("GH200 96GB", "GH200-96GB"),
        ("RTX 5000 Ada", "RTX5000ADA"),
        ("RTX A5000", "RTXA5000"),
        ("Titan RTX", "TITANRTX"),
        ("GTX 1080 Ti", "GTX1080TI"),
        ("AMD Instinct MI300X", "MI300X-192GB"),  # AMD's, as rocm-smi and tables name them
        ("MI300X OAM", "MI300X-192GB"),
        ("amd_instinct_mi325x", "MI325X-256GB"),
    ],
)
def test_board_words_and_memory_sizes_resolve(name, expected):
    """Names as benchmark tables write them (form factor, board, memory) find the type."""
    assert canonical_gpu(name) == expected


@pytest.mark.parametrize(
    "name",
    ["A100 20GB", "H100 PCIe 94GB", "RTX 6000 48GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
     "RTX 3090 Ti", "Gaudi 3", "SXM"],
)  # fmt: skip
def test_a_size_no_variant_has_is_not_guessed(name):
    """A memory size no variant of the family has (within 10% for a family of one), a MIG
    slice, another card of the same number, or no GPU at all, stays unknown."""
    with pytest.raises(UnknownName):
        canonical_gpu(name)


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("ResNet-50", "resnet50"),
        ("resnet50", "resnet50"),
        ("resnet-50", "resnet50"),
        ("bert-base-uncased", "bert-base"),
        ("ResNet-18", "resnet18"),
        ("LM", "lstm-lm"),
        ("LM (batch size 20)", "lstm-lm"),
        ("Recommendation", "recommendation"),
        ("A3C", "a3c"),
        ("CycleGAN", "cyclegan"),
        ("Transformer", "transformer"),
        ("inception4", "inception-v4"),
        ("inception3", "inception-v3"),
        ("vgg19", "vgg19"),
        ("Meta-Llama-3-8B", "llama3-8b"),
    ],
)
def test_model_alias_examples(alias, expected):
    """Gavel's, Tiresias' and everyday model spellings resolve."""
    assert canonical_model(alias) == expected


def test_tiresias_models_resolve():
    """Every model name in Tiresias' 60-job trace is in the catalog."""
    for name in ("alexnet", "googlenet", "inception3", "inception4", "resnet101"):
        canonical_model(name)
    for name in ("resnet152", "resnet50", "vgg11", "vgg16", "vgg19"):
        canonical_model(name)


def test_unknown_names_raise_naming_the_input():
    """An unknown GPU or model raises UnknownName (a ValueError) quoting the input."""
    with pytest.raises(UnknownName, match="MI250X"):
        canonical_gpu("MI250X")
    with pytest.raises(ValueError, match="my-secret-net"):
        canonical_model("my-secret-net")
    with pytest.raises(UnknownName):
        expand_gpu_types("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")


def test_expand_family_gives_every_variant():
    """A family name expands to all its variants; a variant to itself."""
    assert expand_gpu_types("V100") >= {"V100-16GB", "V100-32GB"}
    assert expand_gpu_types("a100") == frozenset({"A100-40GB", "A100-80GB", "A100-80GB-PCIE"})
    assert expand_gpu_types("NVIDIA A100") == expand_gpu_types("a100")
    assert expand_gpu_types("A100-80GB") == frozenset({"A100-80GB"})
    assert expand_gpu_types("t4") == frozenset({"T4"})


def test_every_default_benchmark_row_resolves():
    """The shipped table has rows and each names catalog entries."""
    table = BenchmarkTable.default()
    assert len(table.rows) > 200
    for row in table.rows:
        assert canonical_model(row.model) == row.model
        assert canonical_gpu(row.gpu_type) == row.gpu_type
        assert row.samples_per_s > 0 and row.batch_size >= 1 and row.gpus >= 1
    assert not table.extra_models and not table.extra_gpus


@pytest.mark.skipif(not GAVEL_SRC.exists(), reason="shared Gavel data not present")
def test_shipped_table_is_the_gavel_conversion():
    """benchmarks.csv equals predictor.gavel's conversion of the shared source."""
    from predictor.gavel import convert

    rows = convert(GAVEL_SRC.read_text(encoding="utf-8").splitlines())
    table = BenchmarkTable.default()
    assert len(rows) == len(table.rows)
    for ours, row in zip(rows, table.rows, strict=True):
        assert (ours[0], ours[1], ours[2], ours[4]) == (
            row.model,
            row.gpu_type,
            row.batch_size,
            row.gpus,
        )
        assert math.isclose(ours[3], row.samples_per_s)


def test_gavel_steps_become_samples():
    """A Gavel row's steps/s times its batch size is the table's samples/s."""
    table = BenchmarkTable.default()
    # Gavel: ResNet-50 batch 64 on one V100 runs 4.394775 steps/s
    assert table.samples_per_s("ResNet-50", "v100", 64) == pytest.approx(4.394775 * 64)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bench.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_model_nobody_describes_is_kept_with_median_facts(tmp_path):
    """A model the catalog does not know and whose row gives no facts is kept (its rows are
    measurements like any other), with the catalog models' median facts, and listed as
    imputed; one whose row gives its facts stands alone and is not."""
    path = _write(
        tmp_path,
        "model,gpu_type,batch_size,samples_per_s,params_m,forward_gmacs\n"
        "resnet50,A100,64,900,,\nmystery,A100,8,10,,\nowndesc,A100,8,10,5,2\n",
    )
    table = BenchmarkTable.load(path)
    assert table.imputed_models == ("mystery",)
    params, gmacs = catalog.median_model_facts()
    spec = table.model_spec("mystery")
    assert (spec.params_m, spec.forward_gmacs, spec.estimated) == (params, gmacs, True)
    assert table.samples_per_s("mystery", "A100", 8) == 10
    assert table.model_spec("owndesc").params_m == 5 and not table.model_spec("owndesc").estimated


def test_load_reads_spreadsheet_and_pandas_spellings(tmp_path):
    """A byte-order mark, capitals, Lambda's ``num_gpus`` and whole numbers written as
    floats read as the plain columns; a fractional count is an error naming the row."""
    path = _write(
        tmp_path,
        "\ufeffModel, GPU_Type ,batch_size,samples_per_s,num_gpus\n"
        "resnet50,A100,64.0,900,1.0\nresnet50,A100,64,1700,2\n",
    )
    table = BenchmarkTable.load(path)
    assert [(r.gpus, r.batch_size) for r in table.rows] == [(1, 64), (2, 64)]
    assert table.samples_per_s("resnet50", "A100", 64, gpus=2) == 1700
    bad = "model,gpu_type,batch_size,samples_per_s\nresnet50,A100,64.5,900\n"
    with pytest.raises(BenchmarkError, match="line 2: batch_size must be a whole number"):
        BenchmarkTable.load(_write(tmp_path, bad))


def test_load_reads_precision_spellings_and_unknown_ones_as_none(tmp_path):
    """Frameworks' and tables' spellings of a precision read as the predictor's names; a
    value it cannot read is unknown (as if the column were empty), so the file's precision
    is inferred for that row instead of taken as stated."""
    spellings = ["Float32", "TF32", "half", "bfloat16", "AMP_FP16", "Mixed Precision", "n/a"]
    lines = ["model,gpu_type,batch_size,samples_per_s,precision"]
    lines += [f"resnet50,A100,{64 + i},900,{p}" for i, p in enumerate(spellings)]
    table = BenchmarkTable.load(_write(tmp_path, "\n".join(lines) + "\n"))
    assert [r.precision for r in table.rows] == ["fp32", "tf32", "fp16", "bf16", "amp", "mixed", ""]


def test_tf32_rows_are_the_fp32_class(tmp_path):
    """FP32 training on Ampere and later runs on TF32 tensor cores by default, so a row
    stating ``tf32`` answers an FP32 query (and a TF32 one) and never a mixed-precision
    one, and the other way round."""
    lines = ["model,gpu_type,batch_size,samples_per_s,precision"]
    lines += ["resnet50,A100,64,900,tf32", "resnet50,A100,64,2400,fp16"]
    table = BenchmarkTable.load(_write(tmp_path, "\n".join(lines) + "\n"))
    assert precision_class("TF32") == precision_class("fp32") == "fp32"
    assert table.samples_per_s("resnet50", "A100", 64, precision="fp32") == 900
    assert table.samples_per_s("resnet50", "A100", 64, precision="tf32") == 900
    assert table.samples_per_s("resnet50", "A100", 64, precision="bf16") == 2400


def test_load_rejects_unknown_gpu_naming_the_row(tmp_path):
    """An unknown GPU type without specs is an error with file and line."""
    path = _write(
        tmp_path, "# comment\nmodel,gpu_type,batch_size,samples_per_s\nvgg16,MI250X,8,10\n"
    )
    with pytest.raises(BenchmarkError, match=r"line 3.*MI250X"):
        BenchmarkTable.load(path)


def test_skipped_rows_of_unknown_gpus_stay_known_to_derived_tables(tmp_path):
    """With ``skip_unknown_gpus`` such a row is left out and listed (where, as written),
    and a table derived from the file's rows (a precision set on them) still lists it;
    a file with no other row is an error all the same."""
    text = "model,gpu_type,batch_size,samples_per_s\nvgg16,MI250X,8,10\nvgg16,T4,8,20\n"
    table = BenchmarkTable.load(_write(tmp_path, text), skip_unknown_gpus=True)
    assert [r.gpu_type for r in table.rows] == ["T4"]
    assert [name for _, name in table.skipped] == ["MI250X"]
    assert table.skipped[0][0].endswith("line 2")
    assert table.with_rows(table.rows).skipped == table.skipped
    only = "model,gpu_type,batch_size,samples_per_s\nvgg16,MI250X,8,10\n"
    with pytest.raises(BenchmarkError, match=r"line 2.*MI250X.*no row of the file"):
        BenchmarkTable.load(_write(tmp_path, only), skip_unknown_gpus=True)


def test_load_rejects_bad_numbers(tmp_path):
    """A non-positive throughput or batch is an error naming the row."""
    bad = "model,gpu_type,batch_size,samples_per_s\nvgg16,T4,8,-1\n"
    with pytest.raises(BenchmarkError, match="line 2"):
        BenchmarkTable.load(_write(tmp_path, bad))
    with pytest.raises(BenchmarkError, match="missing column"):
        BenchmarkTable.load(_write(tmp_path, "model,gpu_type\nvgg16,T4\n"))


def test_stand_alone_rows_are_accepted(tmp_path):
    """Rows that carry their own model and GPU features load and resolve."""
    path = _write(
        tmp_path,
        "model,gpu_type,batch_size,samples_per_s,params_m,forward_gmacs,"
        "fp32_tflops,bandwidth_gbs,memory_gib\n"
        "mynet,MI250X,32,500,10,2,163,5300,192\n",
    )
    table = BenchmarkTable.load(path)
    assert table.samples_per_s("mynet", "mi250x", 32) == 500
    assert table.model_spec("mynet").forward_gmacs == 2
    assert table.gpu_spec("MI250X").bandwidth_gbs == 5300
    assert table.gpu_spec("MI250X").link_gbs == 0  # not given: unknown


def test_stand_alone_gpu_row_may_give_its_link(tmp_path):
    """A stand-alone GPU row's optional link_gbs column is read."""
    path = _write(
        tmp_path,
        "model,gpu_type,batch_size,samples_per_s,gpus,fp32_tflops,bandwidth_gbs,memory_gib,"
        "link_gbs\nresnet50,MI250X,32,500,8,163,5300,192,64\n",
    )
    table = BenchmarkTable.load(path)
    assert table.gpu_spec("MI250X").link_gbs == 64
    assert table.measured_gpu_counts("resnet50", "MI250X") == {8}


def test_samples_per_s_lookup_rules():
    """Batch sizes interpolate in log space within range, clamp outside; GPUs scale."""
    table = BenchmarkTable.parse(
        [
            "model,gpu_type,batch_size,samples_per_s,gpus",
            "vgg16,T4,16,100,1",
            "vgg16,T4,64,400,1",
            "vgg16,T4,16,350,4",
        ]
    )
    assert table.samples_per_s("vgg16", "T4", 32) == pytest.approx(200)
    assert table.samples_per_s("vgg16", "T4", 8) == pytest.approx(100)
    assert table.samples_per_s("vgg16", "T4", 128) == pytest.approx(400)
    assert table.samples_per_s("vgg16", "T4", 16, gpus=8) == pytest.approx(700)
    assert table.samples_per_s("vgg16", "T4", 16, gpus=3) == pytest.approx(350 * 3 / 4)
    assert table.samples_per_s("vgg16", "A10", 16) is None
    assert table.samples_per_s("nope", "T4", 16) is None


def test_throughput_ratio_uses_measurements_when_both_measured():
    """K80 -> V100 for ResNet-50 is the measured ratio, and ratios invert."""
    table = BenchmarkTable.default()
    expected = table.samples_per_s("resnet50", "V100-16GB", 64) / table.samples_per_s(
        "resnet50", "K80", 64
    )
    assert throughput_ratio("ResNet-50", 64, "k80", "v100") == pytest.approx(expected)
    there = throughput_ratio("lm", 20, "P100", "K80", gpus=4)
    back = throughput_ratio("lm", 20, "K80", "P100", gpus=4)
    assert there * back == pytest.approx(1.0)
    assert throughput_ratio("resnet50", 64, "A100", "NVIDIA-A100-SXM4-40GB") == 1.0


def test_throughput_ratio_falls_back_to_catalog():
    """Unmeasured types use the spec ratio; newer GPUs come out faster."""
    r = throughput_ratio(None, None, "V100-16GB", "A100-40GB")
    assert 1.3 < r < 3.0
    assert throughput_ratio("bert-base", 32, "A100-40GB", "H100-80GB") > 1.5
    assert throughput_ratio(None, None, "H100-80GB", "T4") < 0.2
    # an unmeasured destination anchors on the measured type closest to it
    anchored = throughput_ratio("resnet50", 64, "K80", "V100-32GB")
    measured = throughput_ratio("resnet50", 64, "K80", "V100-16GB")
    assert anchored == pytest.approx(
        measured * throughput_ratio(None, None, "V100-16GB", "V100-32GB")
    )
