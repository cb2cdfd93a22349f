"""A data-sharing trace made from any trace: datasets assigned per group, by a stated law.

Real traces (Philly's among them) say who submitted a job but not what it read. This
module gives each job one dataset, drawn so that jobs of one group share data, as
teams do. The law (also in docs/data-locality.md), with its defaults:

* each group (the trace's ``group``; jobs without one form one group) owns
  ``per_group`` = 8 datasets, named ``<group>-d1`` ... ``<group>-d8``;
* a dataset's size is log-normal: median ``median_gb`` = 50 GB, ``sigma`` = 1.0 (so half
  of them between about 25 and 100 GB), kept within [1, 2000] GB;
* each dataset lives at one home cluster, drawn uniformly from the cluster file's;
* a job reads one dataset of its group, the k-th with probability proportional to
  ``1 / k ** zipf_s``, ``zipf_s`` = 1.1 (Zipf popularity: a few datasets are most used).

Everything is drawn from one ``random.Random(seed)``: groups in sorted order (their
datasets' sizes, then homes), then jobs in trace order. Nothing is fitted to a trace.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import replace
from itertools import accumulate

from cpn.core.model import DataInput
from cpn.sim.trace import TraceJob

_NOT_NAME = re.compile(r"[^a-z0-9.-]+")


#: The law's defaults (see the module docstring) and the bounds of a dataset's size.
PER_GROUP = 8
MEDIAN_GB = 50.0
SIGMA = 1.0
ZIPF_S = 1.1
MIN_GB, MAX_GB = 1.0, 2000.0


def with_datasets(
    trace: Sequence[TraceJob],
    clusters: Sequence[str],
    *,
    seed: int = 0,
    per_group: int = PER_GROUP,
    median_gb: float = MEDIAN_GB,
    sigma: float = SIGMA,
    zipf_s: float = ZIPF_S,
) -> list[TraceJob]:
    """``trace`` with one dataset per job, drawn by the law of the module docstring."""
    if per_group < 1 or not clusters:
        raise ValueError("need at least one dataset per group and one cluster")
    rng = random.Random(seed)
    homes = sorted(clusters)
    owned: dict[str, list[DataInput]] = {}
    for group in sorted({job.group for job in trace}):
        stem = _NOT_NAME.sub("-", (group or "nogroup").lower()).strip("-.") or "group"
        sizes = [_size(rng.lognormvariate(math.log(median_gb), sigma)) for _ in range(per_group)]
        owned[group] = [
            DataInput(name=f"{stem}-d{k}", size_gb=size, location=rng.choice(homes))
            for k, size in enumerate(sizes, start=1)
        ]
    weights = list(accumulate(1.0 / k**zipf_s for k in range(1, per_group + 1)))
    return [
        replace(job, inputs=tuple(rng.choices(owned[job.group], cum_weights=weights)))
        for job in trace
    ]


def _size(drawn: float) -> float:
    return round(min(MAX_GB, max(MIN_GB, drawn)), 1)
