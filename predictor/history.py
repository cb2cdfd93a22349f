"""The history of finished jobs, in SQLite: what each job declared and how long it ran.

A file path keeps the history across restarts (WAL journal, one row per finished job);
``":memory:"`` keeps it for one process (the simulator). Safe to share between the
scheduling thread and the retraining thread (one connection behind a lock).
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from predictor.measurements import Measurement

_SCHEMA = """
CREATE TABLE IF NOT EXISTS finished_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_key TEXT NOT NULL,
    model TEXT NOT NULL,
    gpu_type TEXT NOT NULL,
    batch_size INTEGER,
    gpus INTEGER NOT NULL,
    work_samples REAL,
    steps REAL,
    epochs REAL,
    dataset_samples REAL,
    precision TEXT NOT NULL DEFAULT '',
    user TEXT NOT NULL DEFAULT '',
    grp TEXT NOT NULL DEFAULT '',
    actual_s REAL NOT NULL,
    features TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS finished_jobs_model ON finished_jobs (model, gpu_type);
CREATE TABLE IF NOT EXISTS benchmarks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    node TEXT NOT NULL,
    measured_at REAL NOT NULL,
    model TEXT NOT NULL,
    gpu_type TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    precision TEXT NOT NULL DEFAULT '',
    samples_per_s REAL NOT NULL,
    versions TEXT NOT NULL DEFAULT '{}'
);
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkRecord:
    """One measured throughput of the cluster's own GPUs: where (``source``, e.g. the
    GPUBenchmark's name, and ``node``), when (``measured_at``, epoch seconds) and with what
    software (``versions``)."""

    source: str
    node: str
    measured_at: float
    gpu_type: str
    model: str
    batch_size: int
    samples_per_s: float
    precision: str = ""
    gpus: int = 1
    versions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


_COLUMNS = (
    "job_key",
    "model",
    "gpu_type",
    "batch_size",
    "gpus",
    "work_samples",
    "steps",
    "epochs",
    "dataset_samples",
    "precision",
    "user",
    "grp",
    "actual_s",
    "features",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryRecord:
    """One finished job: its declared work, where it ran and how long it took."""

    job_key: str
    model: str
    gpu_type: str
    gpus: int
    actual_s: float
    batch_size: int | None = None
    work_samples: float | None = None
    steps: float | None = None
    epochs: float | None = None
    dataset_samples: float | None = None
    precision: str = ""
    user: str = ""
    group: str = ""
    features: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def samples_per_s(self) -> float | None:
        """Observed throughput, when the job declared its work."""
        if self.work_samples is None or self.actual_s <= 0:
            return None
        return self.work_samples / self.actual_s


#: the columns of table ``benchmarks`` (but its id), as BenchmarkRecord's fields
_BENCH_COLUMNS = (
    "source",
    "node",
    "measured_at",
    "gpu_type",
    "model",
    "batch_size",
    "samples_per_s",
    "precision",
    "gpus",
    "versions",
)


class History:
    """Finished jobs in SQLite (``path`` or ``":memory:"``)."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.commit()

    def add(self, record: HistoryRecord) -> None:
        """Append one finished job."""
        self.add_many([record])

    def add_many(self, records: Iterable[HistoryRecord]) -> None:
        """Append finished jobs in one transaction."""
        self._insert("finished_jobs", _COLUMNS, [_row(r) for r in records])

    def _insert(self, table: str, columns: Sequence[str], rows: list[tuple[object, ...]]) -> None:
        placeholders = ", ".join("?" for _ in columns)
        with self._lock:
            self._db.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})", rows
            )
            self._db.commit()

    def add_benchmarks(self, records: Iterable[BenchmarkRecord]) -> None:
        """Append measured throughputs in one transaction."""
        rows = [
            (*(getattr(r, c) for c in _BENCH_COLUMNS[:-1]), json.dumps(dict(r.versions)))
            for r in records
        ]
        self._insert("benchmarks", _BENCH_COLUMNS, rows)

    def benchmarks(self) -> list[BenchmarkRecord]:
        """Every measured throughput, oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_BENCH_COLUMNS)} FROM benchmarks ORDER BY id"
            ).fetchall()
        out = []
        for row in rows:
            values = dict(zip(_BENCH_COLUMNS, row, strict=True))
            values["versions"] = MappingProxyType(json.loads(values["versions"]))
            out.append(BenchmarkRecord(**values))
        return out

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM finished_jobs").fetchone()
        return int(count)

    def records(self) -> list[HistoryRecord]:
        """Every finished job, oldest first."""
        return list(self.iter_records())

    def iter_records(self) -> Iterator[HistoryRecord]:
        """Every finished job, oldest first (read under the lock, then yielded)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM finished_jobs ORDER BY id"
            ).fetchall()
        for row in rows:
            yield _record(row)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


def _opt(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _row(r: HistoryRecord) -> tuple[object, ...]:
    return (
        r.job_key,
        r.model,
        r.gpu_type,
        r.batch_size,
        r.gpus,
        _opt(r.work_samples),
        _opt(r.steps),
        _opt(r.epochs),
        _opt(r.dataset_samples),
        r.precision,
        r.user,
        r.group,
        float(r.actual_s),
        json.dumps({k: float(v) for k, v in r.features.items()}, sort_keys=True),
    )


def _record(row: tuple[object, ...]) -> HistoryRecord:
    (key, model, gpu, batch, gpus, work, steps, epochs, samples, precision, user, grp) = row[:12]
    actual, features = row[12], row[13]
    return HistoryRecord(
        job_key=str(key),
        model=str(model),
        gpu_type=str(gpu),
        batch_size=None if batch is None else int(str(batch)),
        gpus=int(str(gpus)),
        work_samples=None if work is None else float(str(work)),
        steps=None if steps is None else float(str(steps)),
        epochs=None if epochs is None else float(str(epochs)),
        dataset_samples=None if samples is None else float(str(samples)),
        precision=str(precision),
        user=str(user),
        group=str(grp),
        actual_s=float(str(actual)),
        features=MappingProxyType(json.loads(str(features))),
    )


def measurements_from_history(records: Iterable[HistoryRecord]) -> list[Measurement]:
    """Median observed throughput per (model, GPU type, batch, GPUs, precision).

    Only jobs that declared their work, a model and a batch size count; each key's
    weight is its number of jobs, capped at 5 (a benchmark row weighs 1).
    """
    groups: dict[tuple[str, str, int, int, str], list[float]] = {}
    for r in records:
        sps = r.samples_per_s
        if sps is None or not r.model or r.batch_size is None:
            continue
        groups.setdefault((r.model, r.gpu_type, r.batch_size, r.gpus, r.precision), []).append(sps)
    out = []
    for (model, gpu, batch, gpus, precision), values in sorted(groups.items()):
        values.sort()
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else math.sqrt(values[mid - 1] * values[mid])
        out.append(
            Measurement(
                model=model,
                gpu_type=gpu,
                batch_size=batch,
                gpus=gpus,
                samples_per_s=median,
                precision=precision,
                weight=float(min(len(values), 5)),
            )
        )
    return out
