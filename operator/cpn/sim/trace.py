"""Job traces: the CSV contract, converters for public traces, a synthetic generator.

The trace CSV has one row per job (issue 2, "Contracts"). Required columns:
``job_id``, ``submit_time_s``, ``gpus``, ``duration_s``. Optional (blank when
unknown): ``gpu_type`` (the GPU ``duration_s`` was measured on; blank = the
cluster file's ``reference_gpu``), ``user``, ``group``, ``priority``, ``model``,
``batch_size``, ``epochs``, ``dataset_samples``, ``gpu_memory_gib`` (per GPU),
``cpu``, ``memory_gib`` (job totals, split evenly over its workers),
``data_cluster``, ``data_gb``, ``user_estimate_s``. cpn also reads three
optional extension columns: ``steps`` (training steps, known at submission),
``image_gb`` (container image size) and ``checkpoint`` (true/false: the job
resumes from a checkpoint after a preemption), and the named inputs it reads (cached
per cluster, :mod:`cpn.core.datacache`) in three columns of ``;``-separated lists of
one length: ``datasets`` (``name`` or ``name@version``), ``dataset_gb`` (sizes, blank
= unknown) and ``dataset_cluster`` (where each is). Other columns are ignored.

Every error names the file and the data row (1-based; the header is line 1, so
row N is line N+1).
"""

from __future__ import annotations

import csv
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cpn.core.errors import FieldError, InvalidSpec
from cpn.core.model import DataInput
from cpn.sim import speed

REQUIRED = ("job_id", "submit_time_s", "gpus", "duration_s")
OPTIONAL = (
    "gpu_type",
    "user",
    "group",
    "priority",
    "model",
    "batch_size",
    "epochs",
    "dataset_samples",
    "gpu_memory_gib",
    "cpu",
    "memory_gib",
    "data_cluster",
    "data_gb",
    "user_estimate_s",
)
EXTENSIONS = ("steps", "image_gb", "checkpoint", "datasets", "dataset_gb", "dataset_cluster")
COLUMNS = REQUIRED + OPTIONAL + EXTENSIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceJob:
    """One row of a trace: what was submitted, and how long it truly ran.

    ``gpu_type`` is canonical, or None when ``duration_s`` is on the reference GPU.
    ``model`` is canonical or "". Numbers the trace leaves blank are None.
    """

    job_id: str
    submit_s: float
    gpus: float
    duration_s: float
    gpu_type: str | None = None
    user: str = ""
    group: str = ""
    priority: int = 0
    model: str = ""
    batch_size: int | None = None
    epochs: float | None = None
    dataset_samples: float | None = None
    steps: float | None = None
    gpu_memory_gib: float | None = None
    cpu: float | None = None
    memory_gib: float | None = None
    data_cluster: str | None = None
    data_gb: float | None = None
    image_gb: float | None = None
    user_estimate_s: float | None = None
    checkpoint: bool | None = None
    inputs: tuple[DataInput, ...] = ()

    def row(self) -> dict[str, str]:
        """The job as a CSV row (blank for unknown values)."""

        def fmt(value: object) -> str:
            if value is None:
                return ""
            if isinstance(value, bool):
                return "true" if value else "false"
            if isinstance(value, float):
                return str(int(value)) if value.is_integer() else repr(value)
            return str(value)

        return {
            "job_id": self.job_id,
            "submit_time_s": fmt(self.submit_s),
            "gpus": fmt(self.gpus),
            "duration_s": fmt(self.duration_s),
            "gpu_type": fmt(self.gpu_type),
            "user": self.user,
            "group": self.group,
            "priority": fmt(self.priority) if self.priority else "",
            "model": self.model,
            "batch_size": fmt(self.batch_size),
            "epochs": fmt(self.epochs),
            "dataset_samples": fmt(self.dataset_samples),
            "gpu_memory_gib": fmt(self.gpu_memory_gib),
            "cpu": fmt(self.cpu),
            "memory_gib": fmt(self.memory_gib),
            "data_cluster": fmt(self.data_cluster),
            "data_gb": fmt(self.data_gb),
            "user_estimate_s": fmt(self.user_estimate_s),
            "steps": fmt(self.steps),
            "image_gb": fmt(self.image_gb),
            "checkpoint": fmt(self.checkpoint),
            "datasets": ";".join(i.ident for i in self.inputs),
            "dataset_gb": ";".join(fmt(i.size_gb) for i in self.inputs),
            "dataset_cluster": ";".join(i.location or "" for i in self.inputs),
        }


# --------------------------------------------------------------------------- reading


class _Row:
    """Typed access to one CSV row that records every problem with its column."""

    def __init__(self, values: Mapping[str, str | None]) -> None:
        self.values = values
        self.errors: list[FieldError] = []

    def text(self, column: str) -> str:
        value = self.values.get(column)
        return (value or "").strip()

    def number(
        self, column: str, *, minimum: float | None = None, positive: bool = False
    ) -> float | None:
        raw = self.text(column)
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            self.errors.append(FieldError(column, f"not a number: {raw!r}"))
            return None
        if not math.isfinite(value):
            self.errors.append(FieldError(column, f"not a finite number: {raw!r}"))
            return None
        if positive and value <= 0:
            self.errors.append(FieldError(column, f"must be positive, got {raw!r}"))
            return None
        if minimum is not None and value < minimum:
            self.errors.append(FieldError(column, f"must be at least {minimum:g}, got {raw!r}"))
            return None
        return value

    def integer(self, column: str, *, positive: bool = False) -> int | None:
        value = self.number(column, positive=positive)
        if value is None:
            return None
        if not value.is_integer():
            self.errors.append(FieldError(column, f"not an integer: {self.text(column)!r}"))
            return None
        return int(value)

    def required(self, column: str, value: float | None) -> float:
        if value is None and not self.text(column):
            self.errors.append(FieldError(column, "required, but blank"))
        return 0.0 if value is None else value

    def inputs(self) -> tuple[DataInput, ...]:
        """The ``datasets``, ``dataset_gb`` and ``dataset_cluster`` lists, zipped."""
        names = (
            [n.strip() for n in self.text("datasets").split(";")] if self.text("datasets") else []
        )
        sizes = [t.strip() for t in self.text("dataset_gb").split(";")]
        where = [t.strip() for t in self.text("dataset_cluster").split(";")]
        for column, values in (("dataset_gb", sizes), ("dataset_cluster", where)):
            if values != [""] and len(values) != len(names):
                message = f"{len(values)} values for {len(names)} datasets"
                self.errors.append(FieldError(column, message))
                return ()
        found = []
        for index, ident in enumerate(names):
            name, _, version = ident.partition("@")
            size = _Row({"size": sizes[index] if index < len(sizes) else ""})
            gb = size.number("size", minimum=0.0)
            if not name or size.errors:
                why = size.errors[0].message if size.errors else f"no name in {ident!r}"
                self.errors.append(FieldError("datasets" if not name else "dataset_gb", why))
                continue
            location = where[index] if index < len(where) else ""
            found.append(
                DataInput(name=name, version=version, size_gb=gb or 0.0, location=location or None)
            )
        return tuple(found)

    def boolean(self, column: str) -> bool | None:
        raw = self.text(column).lower()
        if not raw:
            return None
        if raw in {"true", "yes", "1"}:
            return True
        if raw in {"false", "no", "0"}:
            return False
        self.errors.append(FieldError(column, f"not true/false: {raw!r}"))
        return None

    def name(self, column: str, canonical: type[_Canon]) -> str | None:
        raw = self.text(column)
        if not raw:
            return None
        try:
            return canonical.of(raw)
        except speed.UnknownName as exc:
            self.errors.append(FieldError(column, str(exc)))
            return None


class _Canon:
    @staticmethod
    def of(name: str) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


class _Gpu(_Canon):
    @staticmethod
    def of(name: str) -> str:
        return speed.canonical_gpu(name)


class _Model(_Canon):
    @staticmethod
    def of(name: str) -> str:
        return speed.canonical_model(name)


def parse_row(values: Mapping[str, str | None], *, where: str) -> TraceJob:
    """One CSV row (header -> text) as a :class:`TraceJob`; InvalidSpec naming ``where``."""
    row = _Row(values)
    job_id = row.text("job_id")
    if not job_id:
        row.errors.append(FieldError("job_id", "required, but blank"))
    submit_s = row.required("submit_time_s", row.number("submit_time_s", minimum=0.0))
    gpus = row.required("gpus", row.number("gpus", positive=True))
    if gpus > 1 and not gpus.is_integer():
        row.errors.append(FieldError("gpus", f"more than one GPU must be whole: {gpus:g}"))
    duration_s = row.required("duration_s", row.number("duration_s", positive=True))
    priority = row.integer("priority")
    job = TraceJob(
        job_id=job_id,
        submit_s=submit_s,
        gpus=gpus,
        duration_s=duration_s,
        gpu_type=row.name("gpu_type", _Gpu),
        user=row.text("user"),
        group=row.text("group"),
        priority=priority or 0,
        model=row.name("model", _Model) or "",
        batch_size=row.integer("batch_size", positive=True),
        epochs=row.number("epochs", positive=True),
        dataset_samples=row.number("dataset_samples", positive=True),
        steps=row.number("steps", positive=True),
        gpu_memory_gib=row.number("gpu_memory_gib", minimum=0.0),
        cpu=row.number("cpu", minimum=0.0),
        memory_gib=row.number("memory_gib", minimum=0.0),
        data_cluster=row.text("data_cluster") or None,
        data_gb=row.number("data_gb", minimum=0.0),
        image_gb=row.number("image_gb", minimum=0.0),
        user_estimate_s=row.number("user_estimate_s", positive=True),
        checkpoint=row.boolean("checkpoint"),
        inputs=row.inputs(),
    )
    if row.errors:
        raise InvalidSpec(row.errors, where=where)
    return job


def read_trace(path: str | Path) -> tuple[TraceJob, ...]:
    """Load a trace CSV, sorted by submit time (stable). InvalidSpec names file and row."""
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InvalidSpec(f"cannot read trace: {exc.strerror}", where=str(path)) from exc
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in reader.fieldnames or ()]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise InvalidSpec(f"missing required column(s): {', '.join(missing)}", where=str(path))
        reader.fieldnames = header
        jobs: list[TraceJob] = []
        seen: dict[str, int] = {}
        for number, values in enumerate(reader, start=1):
            where = f"{path}: row {number} (line {number + 1})"
            job = parse_row(values, where=where)
            if job.job_id in seen:
                raise InvalidSpec(
                    [FieldError("job_id", f"{job.job_id!r} repeats row {seen[job.job_id]}")],
                    where=where,
                )
            seen[job.job_id] = number
            jobs.append(job)
    jobs.sort(key=lambda j: j.submit_s)
    return tuple(jobs)


def write_trace(jobs: Iterable[TraceJob], path: str | Path) -> int:
    """Write ``jobs`` as a trace CSV (every contract and extension column); returns rows written.

    Citations belong in a README beside the file: the CSV contract has no comments.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        for job in jobs:
            writer.writerow(job.row())
            count += 1
    return count


# --------------------------------------------------------------------------- converters

_JOB_TYPE = re.compile(r"^\s*(?P<model>.+?)\s*(?:\(batch size (?P<batch>\d+)\))?\s*$")


def parse_job_type(job_type: str) -> tuple[str, int | None]:
    """Gavel's job type ``"ResNet-50 (batch size 128)"`` -> (``"ResNet-50"``, 128)."""
    match = _JOB_TYPE.match(job_type)
    if match is None or not match.group("model"):
        raise ValueError(f"not a job type: {job_type!r}")
    batch = match.group("batch")
    return match.group("model"), int(batch) if batch else None


def steps_per_s(model: str, batch_size: int | None, gpu_type: str, gpus: int) -> float:
    """Training steps per second of ``model`` at ``batch_size`` on ``gpus`` x ``gpu_type``.

    From the predictor's benchmark table (Gavel's measured throughputs by default):
    samples/s divided by the batch size (models without one, A3C and CycleGAN, count
    one sample per step). Counts the table lacks scale linearly from the nearest
    measured count (measured: 1, 2, 4 and 8 GPUs). KeyError when unrated.
    """
    from predictor import benchmarks

    rate = benchmarks.BenchmarkTable.default().samples_per_s(
        model, gpu_type, batch_size=batch_size or 1, gpus=gpus
    )
    if rate is None or rate <= 0:
        raise KeyError(f"no throughput for {model} (batch {batch_size}) on {gpus} x {gpu_type}")
    return float(rate) / (batch_size or 1)


def convert_gavel(
    path: str | Path,
    *,
    reference_gpu: str = "V100-16GB",
    prefix: str | None = None,
) -> list[TraceJob]:
    """Convert one of Gavel's Philly-derived ``.trace`` files into trace jobs.

    Columns (tab-separated, no header): job_type, command, num_steps_arg,
    needs_data_dir, total_steps, arrival_time_s, scale_factor. Duration on the
    reference GPU = total_steps / steps_per_s(job type, reference GPU, scale factor).
    Job ids are ``<prefix>-<index>`` (prefix: the file's stem).
    """
    path = Path(path)
    reference = speed.canonical_gpu(reference_gpu)
    prefix = path.stem if prefix is None else prefix
    jobs: list[TraceJob] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}: line {number}"
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 7:
                raise InvalidSpec(
                    f"expected 7 tab-separated fields, got {len(fields)}", where=where
                )
            job_type, _command, _arg, _data_dir, steps_raw, arrival_raw, scale_raw = fields
            try:
                model_name, batch_size = parse_job_type(job_type)
                model = speed.canonical_model(model_name)
                steps = float(steps_raw)
                arrival_s = float(arrival_raw)
                scale = int(scale_raw)
                rate = steps_per_s(model, batch_size, reference, scale)
            except (ValueError, KeyError) as exc:
                raise InvalidSpec(str(exc), where=where) from exc
            jobs.append(
                TraceJob(
                    job_id=f"{prefix}-{len(jobs):04d}",
                    submit_s=arrival_s,
                    gpus=float(scale),
                    duration_s=round(steps / rate, 3),
                    model=model,
                    batch_size=batch_size,
                    steps=steps,
                )
            )
    return jobs


def convert_tiresias(path: str | Path) -> list[TraceJob]:
    """Convert Tiresias' ``60_job.csv`` (job_id, num_gpu, submit_time, iterations, model_name,
    duration, interval). The duration was measured on an unnamed GPU: it is taken as
    the reference GPU's (``gpu_type`` blank). Models the catalog does not know are left blank."""
    path = Path(path)
    jobs: list[TraceJob] = []
    with path.open(newline="", encoding="utf-8") as handle:
        for number, row in enumerate(csv.DictReader(handle), start=1):
            where = f"{path}: row {number} (line {number + 1})"
            try:
                gpus = float(row["num_gpu"])
                submit_s = float(row["submit_time"])
                steps = float(row["iterations"])
                duration_s = float(row["duration"])
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidSpec(f"bad or missing field: {exc}", where=where) from exc
            try:
                model = speed.canonical_model(row.get("model_name") or "")
            except speed.UnknownName:
                model = ""
            jobs.append(
                TraceJob(
                    job_id=f"tiresias-{row['job_id']}",
                    submit_s=submit_s,
                    gpus=gpus,
                    duration_s=duration_s,
                    model=model,
                    steps=steps,
                )
            )
    return jobs


# --------------------------------------------------------------------------- generator

#: Job sizes (GPUs) and their weights in synthetic queues: mostly single-GPU, as in
#: Philly and Gavel's generator, with a tail of distributed jobs.
SIZE_MIX: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.10), (4, 0.12), (8, 0.08))

#: Models every synthetic queue includes when the catalog knows them (the original
#: notes benchmarked their servers on these three).
NOTE_MODELS = ("resnet50", "yolov8m", "llama3-8b")

#: Batch size of a note model the benchmark table does not rate.
NOTE_BATCH = 16

#: Share of peak FLOPS an unrated model reaches (model FLOPs utilisation), used only
#: to turn a synthetic job's target duration into an amount of work.
ASSUMED_MFU = 0.35


@dataclass(frozen=True, slots=True, kw_only=True)
class JobKind:
    """One entry of the synthetic job mix: a model at a batch size, and its speed."""

    model: str
    batch_size: int
    samples_per_s: float  # on one reference GPU


def job_mix(reference_gpu: str) -> list[JobKind]:
    """The synthetic job mix: every (model, batch size) the benchmark table measured on
    one reference GPU, plus :data:`NOTE_MODELS` (rated from FLOPs when unmeasured)."""
    from predictor import benchmarks, catalog

    table = benchmarks.BenchmarkTable.default()
    reference = speed.canonical_gpu(reference_gpu)
    pairs = sorted({(r.model, r.batch_size) for r in table.rows if r.gpus == 1})
    kinds: list[JobKind] = []
    for model, batch_size in pairs:
        rate = table.samples_per_s(model, reference, batch_size=batch_size, gpus=1)
        if rate is not None and rate > 0:
            kinds.append(JobKind(model=model, batch_size=batch_size, samples_per_s=float(rate)))
    for name in NOTE_MODELS:
        try:
            model = speed.canonical_model(name)
        except speed.UnknownName:
            continue
        if any(k.model == model for k in kinds):
            continue
        spec = catalog.model_spec(model)
        tflops = catalog.effective_tflops(catalog.gpu_spec(reference))
        rate = tflops * 1e3 * ASSUMED_MFU / spec.train_gflops_per_sample
        kinds.append(JobKind(model=model, batch_size=NOTE_BATCH, samples_per_s=rate))
    return kinds


def generate(
    *,
    jobs: int,
    seed: int = 0,
    arrival_rate_per_h: float = 20.0,
    reference_gpu: str = "V100-16GB",
    users: int = 8,
    groups: int = 3,
    data_clusters: Sequence[str] = (),
) -> list[TraceJob]:
    """A synthetic queue: Poisson arrivals, the job mix of :func:`job_mix`, seeded.

    Each job draws a model and batch size uniformly from the mix, a size from
    :data:`SIZE_MIX`, and a target runtime as Gavel's generator does: 80% short
    (10^U(1.5, 3) minutes, about 30 minutes to 17 hours) and 20% long (10^U(3, 4)
    minutes). Its work (samples) follows from the table's speed on the reference
    GPU; ``duration_s`` is that work at the table's speed for its GPU count.
    With ``data_clusters``, each job's data sits in one of them (1-200 GB).
    """
    if jobs < 0 or arrival_rate_per_h <= 0 or users < 1 or groups < 1:
        raise ValueError("jobs >= 0, a positive arrival rate and at least one user and group")
    rng = random.Random(seed)
    reference = speed.canonical_gpu(reference_gpu)
    kinds = job_mix(reference)
    if not kinds:
        raise ValueError(f"the benchmark table rates no model on {reference}")
    sizes = [s for s, _ in SIZE_MIX]
    weights = [w for _, w in SIZE_MIX]
    out: list[TraceJob] = []
    now_s = 0.0
    for index in range(jobs):
        now_s += rng.expovariate(arrival_rate_per_h / 3600.0)
        kind = kinds[rng.randrange(len(kinds))]
        gpus = rng.choices(sizes, weights)[0]
        exponent = rng.uniform(1.5, 3.0) if rng.random() < 0.8 else rng.uniform(3.0, 4.0)
        target_s = 60.0 * 10**exponent
        rate = kind.samples_per_s * _speedup(kind, reference, gpus)
        epochs = float(rng.choice((1, 2, 5, 10, 20, 50, 90)))
        per_epoch = max(1.0, round(target_s * rate / epochs))
        samples = per_epoch * epochs
        out.append(
            TraceJob(
                job_id=f"syn-{index:05d}",
                submit_s=round(now_s, 3),
                gpus=float(gpus),
                duration_s=round(samples / rate, 3),
                user=f"user{rng.randrange(users)}",
                group=f"group{rng.randrange(groups)}",
                model=kind.model,
                batch_size=kind.batch_size,
                epochs=epochs,
                dataset_samples=per_epoch,
                steps=float(max(1, round(samples / (kind.batch_size * gpus)))),
                data_cluster=rng.choice(list(data_clusters)) if data_clusters else None,
                data_gb=round(rng.uniform(1.0, 200.0), 1) if data_clusters else None,
                checkpoint=True,
            )
        )
    return out


def _speedup(kind: JobKind, reference: str, gpus: int) -> float:
    """Speed-up of ``gpus`` reference GPUs over one, from the table (linear when unrated)."""
    from predictor import benchmarks

    many = benchmarks.BenchmarkTable.default().samples_per_s(
        kind.model, reference, batch_size=kind.batch_size, gpus=gpus
    )
    if many is None or many <= 0:
        return float(gpus)
    return float(many) / kind.samples_per_s
