"""A waiting job's runtime given its siblings still running (policy ``running_siblings``).

Siblings are near-replicas: jobs of one submitter, model and GPU count submitted close
together (sweeps, job arrays, resubmissions), as the estimator says
(``Estimate.siblings``, ``Estimate.sibling_s``). The estimator learns from finished jobs
only, so while a burst of siblings runs far past its estimate every sibling still waiting
keeps the short estimate, ranks ahead of jobs that really are short, and (when the running
ones checkpoint) stops them one after another. The running siblings are evidence: they
have run at least their age. :func:`censored_by_siblings` takes, for each waiting job with
running siblings, their median age as a share of their own estimate (the position in the
law each of them has survived) and, when that is past the law's median, ranks the job by
its law's conditional median given that it runs at least as far
(:func:`cpn.core.runtime_law.conditional_median_s`); the high quantile moves by the same
factor. Estimates only ever grow, and only for the cycle's ranking, placement and
projections: the estimator's own figures (the AIJob status) stay as they are.
"""

from __future__ import annotations

from dataclasses import replace

from cpn.core.fifodue import ran_s
from cpn.core.model import Job, Snapshot, frozen_map
from cpn.core.runtime_law import conditional_median_s, sigma_of


def censored_by_siblings(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with each waiting job whose running siblings outlived the median of
    their law estimated given that it runs at least as far (module docstring)."""
    ages: dict[str, list[tuple[float, float]]] = {}  # siblings key -> (submit, age / estimate)
    for item in snapshot.running:
        job = item.job
        median = job.estimate.runtime_s.get(item.gpu_type)
        if not job.estimate.siblings or not median or job.gpus <= 0:
            continue
        age = snapshot.now_s - item.start_s + ran_s(job)
        ages.setdefault(job.estimate.siblings, []).append((job.submit_s, age / median))
    if not ages:
        return snapshot
    pending = tuple(_given_siblings(job, ages) for job in snapshot.pending)
    if all(new is old for new, old in zip(pending, snapshot.pending, strict=True)):
        return snapshot  # no evidence for any: the cycle reads the snapshot as it came
    return replace(snapshot, pending=pending)


def _given_siblings(job: Job, ages: dict[str, list[tuple[float, float]]]) -> Job:
    estimate = job.estimate
    found = ages.get(estimate.siblings) if estimate.siblings else None
    if not found:
        return job
    near = sorted(
        share for submit, share in found if abs(submit - job.submit_s) <= estimate.sibling_s
    )
    survived = near[(len(near) - 1) // 2] if near else 0.0  # lower median: half ran this far
    if survived <= 1.0:
        return job
    runtime: dict[str, float] = {}
    high: dict[str, float] = {}
    for gpu_type, median in estimate.runtime_s.items():
        top = estimate.high_s.get(gpu_type)
        given = max(median, conditional_median_s(median, sigma_of(median, top), survived * median))
        runtime[gpu_type] = given
        if top is not None:
            high[gpu_type] = top * given / median if median > 0 else top
    return replace(
        job, estimate=replace(estimate, runtime_s=frozen_map(runtime), high_s=frozen_map(high))
    )
