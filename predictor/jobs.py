"""The predictor's own words for a job and for its answer.

The predictor imports nothing from its users. It reads a job through
:class:`JobLike` (any object with these attributes: cpn's ``Job`` is one,
:class:`JobFacts` is the predictor's own) and answers with a :class:`Prediction`.
cpn turns a ``Prediction`` into its core ``Estimate`` in :mod:`cpn.api.predictions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol


class JobLike(Protocol):
    """What the predictor reads of a job (read-only)."""

    @property
    def key(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def gpus_per_worker(self) -> int: ...
    @property
    def workers(self) -> int: ...
    @property
    def features(self) -> Mapping[str, float]: ...
    @property
    def user_estimate_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFacts:
    """A job as the predictor alone describes it (for its own evaluations and tools).

    ``features`` carries the declared work: ``batch_size``, ``steps``,
    ``dataset_samples``, ``epochs``, ``precision_bits`` (see
    :func:`predictor.features.describe_job`).
    """

    key: str = ""
    model: str = ""
    user: str = ""
    group: str = ""
    gpus_per_worker: int = 1
    workers: int = 1
    features: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    user_estimate_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """Predicted runtime of one job on each GPU type asked for.

    ``runtime_s`` is the median per GPU type, ``high_s`` a high quantile;
    ``unseen`` flags a conservative answer (a model neither benchmarked nor observed,
    or no history to go by); ``new_model`` says the job names a model neither
    benchmarked nor observed finishing; ``source`` says which layer of the predictor
    answered.
    """

    runtime_s: Mapping[str, float]
    high_s: Mapping[str, float]
    unseen: bool
    source: str
    new_model: bool = False
