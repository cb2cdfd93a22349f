"""Trace CSV parsing, the public-trace converters and the synthetic generator."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from simkit import SHARED, SIM_DATA

from cpn.core.errors import InvalidSpec
from cpn.sim import trace
from predictor import benchmarks

HEADER = "job_id,submit_time_s,gpus,duration_s"
PHILLY_VCS = ("11cb48", "6214e9", "6c71a0", "b436b2", "ee9e8c")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_required_and_optional_columns(tmp_path):
    """A row with optional columns is parsed into canonical names and typed values."""
    path = write(
        tmp_path,
        "job_id,submit_time_s,gpus,duration_s,gpu_type,model,batch_size,user,extra\n"
        "a,5,8,3600,tesla-v100-sxm2-32gb,ResNet-50,64,ann,ignored\n"
        "b,1,1,60,,,,,\n",
    )
    jobs = trace.read_trace(path)
    assert [j.job_id for j in jobs] == ["b", "a"]  # sorted by submit time
    a = jobs[1]
    assert a.gpu_type == "V100-32GB"
    assert a.model == "resnet50"
    assert (a.gpus, a.batch_size, a.user, a.duration_s) == (8.0, 64, "ann", 3600.0)
    assert jobs[0].gpu_type is None and jobs[0].model == ""


@pytest.mark.parametrize(
    ("rows", "want_row", "want_text"),
    [
        pytest.param(
            "a,0,1,10\nb,0,x,10\n", "row 2 (line 3)", "gpus: not a number", id="bad number"
        ),
        pytest.param(
            "a,0,1,10\nb,0,1,-5\n", "row 2", "duration_s: must be positive", id="negative"
        ),
        pytest.param("a,,1,10\n", "row 1", "submit_time_s: required", id="blank required"),
        pytest.param("a,0,1,10\na,3,1,10\n", "row 2", "repeats row 1", id="duplicate id"),
        pytest.param("a,0,1.5,10\n", "row 1", "must be whole", id="fractional multi-GPU"),
    ],
)
def test_row_errors_name_the_row(tmp_path, rows, want_row, want_text):
    """A malformed row is refused with the file, the row and the column named."""
    path = write(tmp_path, HEADER + "\n" + rows)
    with pytest.raises(InvalidSpec) as err:
        trace.read_trace(path)
    message = str(err.value)
    assert str(path) in message
    assert want_row in message
    assert want_text in message


@pytest.mark.parametrize(
    ("column", "value"),
    [pytest.param("gpu_type", "Z9000", id="gpu"), pytest.param("model", "nosuchnet", id="model")],
)
def test_unknown_names_are_errors_naming_the_row(tmp_path, column, value):
    """GPU types and models the catalogs do not know are refused, naming row and value."""
    path = write(tmp_path, f"{HEADER},{column}\na,0,1,10,\nb,0,1,10,{value}\n")
    with pytest.raises(InvalidSpec) as err:
        trace.read_trace(path)
    assert "row 2" in str(err.value) and value in str(err.value) and column in str(err.value)


def test_missing_required_columns_are_named(tmp_path):
    """A file without a required column is refused, naming the file and the column."""
    path = write(tmp_path, "job_id,submit_time_s,gpus\na,0,1\n")
    with pytest.raises(InvalidSpec, match=r"t\.csv: missing required column\(s\): duration_s"):
        trace.read_trace(path)


def test_write_then_read_round_trips(tmp_path):
    """Every field survives write_trace -> read_trace."""
    jobs = trace.generate(jobs=25, seed=3, data_clusters=("east", "west"))
    path = tmp_path / "g.csv"
    assert trace.write_trace(jobs, path) == 25
    assert list(trace.read_trace(path)) == jobs


def test_parse_job_type():
    """Gavel's job types split into model and batch size."""
    assert trace.parse_job_type("ResNet-50 (batch size 128)") == ("ResNet-50", 128)
    assert trace.parse_job_type("A3C") == ("A3C", None)


def test_steps_per_s_scales_beyond_measured_counts():
    """A scale factor the table lacks (16) is the nearest measured one (8) scaled linearly."""
    at8 = trace.steps_per_s("resnet50", 16, "V100-16GB", 8)
    assert trace.steps_per_s("resnet50", 16, "V100-16GB", 16) == pytest.approx(2 * at8)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared public data not on this machine")
def test_gavel_converter_counts_and_known_row():
    """Converting a Philly VC trace keeps every job, and a known row's fields and duration."""
    source = SHARED / "gavel" / "msr_philly_traces_seed0" / "11cb48.trace"
    jobs = trace.convert_gavel(source)
    assert len(jobs) == sum(1 for line in source.read_text().splitlines() if line.strip())
    first = source.read_text().splitlines()[0].split("\t")
    job = jobs[0]
    assert (job.model, job.batch_size) == ("transformer", 128)
    assert job.steps == float(first[4]) and job.submit_s == float(first[5])
    assert job.gpus == float(first[6])
    rate = benchmarks.BenchmarkTable.default().samples_per_s("transformer", "V100-16GB", 128, 1)
    assert rate is not None
    assert job.duration_s == pytest.approx(float(first[4]) / (rate / 128), rel=1e-6)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared public data not on this machine")
@pytest.mark.parametrize("vc", PHILLY_VCS)
def test_shipped_philly_traces_match_the_converter(vc):
    """The shipped philly/<vc>.csv is exactly the converter's output on Gavel's file."""
    source = SHARED / "gavel" / "msr_philly_traces_seed0" / f"{vc}.trace"
    shipped = trace.read_trace(SIM_DATA / "philly" / f"{vc}.csv")
    assert len(shipped) == 2000
    assert list(shipped) == sorted(trace.convert_gavel(source), key=lambda j: j.submit_s)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared public data not on this machine")
def test_tiresias_converter_round_trips():
    """Tiresias' 60 jobs convert with durations on the reference GPU and known models."""
    jobs = trace.convert_tiresias(SHARED / "tiresias" / "60_job.csv")
    assert len(jobs) == 60
    second = jobs[1]
    assert (second.job_id, second.gpus, second.submit_s, second.duration_s) == (
        "tiresias-1",
        8,
        30,
        147,
    )
    assert second.model == "vgg11" and second.steps == 133 and second.gpu_type is None
    assert list(trace.read_trace(SIM_DATA / "tiresias-60.csv")) == jobs


def test_generator_is_seeded_and_poisson():
    """Same seed, same trace; another seed differs; arrivals average the requested rate."""
    a = trace.generate(jobs=400, seed=7, arrival_rate_per_h=30)
    assert a == trace.generate(jobs=400, seed=7, arrival_rate_per_h=30)
    assert a != trace.generate(jobs=400, seed=8, arrival_rate_per_h=30)
    rate_per_h = len(a) / (a[-1].submit_s / 3600)
    assert 30 * 0.85 < rate_per_h < 30 * 1.15
    assert all(b.submit_s >= p.submit_s for p, b in itertools.pairwise(a))


def test_generator_mix_draws_from_the_table_and_the_notes_models():
    """The job mix spans the benchmark table and includes the notes' three models."""
    models = {j.model for j in trace.generate(jobs=1500, seed=1)}
    assert {"resnet50", "yolov8m", "llama3-8b"} <= models
    assert benchmarks.BenchmarkTable.default().models() <= models


def test_generator_durations_match_declared_work():
    """A synthetic job's duration is its declared work at the table's speed."""
    table = benchmarks.BenchmarkTable.default()
    checked = 0
    for job in trace.generate(jobs=60, seed=2):
        assert job.dataset_samples is not None and job.epochs is not None
        assert job.gpus in (1, 2, 4, 8)
        rate = table.samples_per_s(job.model, "V100-16GB", job.batch_size, int(job.gpus))
        if rate is None:
            continue  # a notes model the table does not rate
        samples = job.dataset_samples * job.epochs
        assert job.duration_s == pytest.approx(samples / rate, rel=1e-3)
        checked += 1
    assert checked > 30
