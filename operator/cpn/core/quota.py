"""Hierarchical quotas: a group's limit, its users' limits and its per-domain limits inside it.

A user's quota can never lift them above their group's: both are checked. A group's
limit in a domain (``quotas.groups.G.domains.D``) counts only its jobs bound to that
domain (:func:`cpn.core.domains.job_domain`), on top of the group's limit over all.
Limits are GPUs in total and/or per GPU type, and a number of concurrent jobs; usage
counts the jobs that hold GPUs (staging, dispatched and running: the snapshot's
``running``) and the starts decided earlier in the same cycle. A job counts once however
many workers it has.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cpn.core import reasons
from cpn.core.domains import job_domain
from cpn.core.model import Job, Running
from cpn.core.policy import Limit, QueuePolicy

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Bucket:
    """One limit and the key its usage is counted under."""

    label: str  # "group team-a" / "user alice in team-a" / "group team-a in domain batch"
    usage_key: tuple[str, str]  # ("g", group), ("u", group/user) or ("d", group@domain)
    limit: Limit


class QuotaLedger:
    """GPU usage and job counts per group and user, checked against the policy's limits."""

    def __init__(self, policy: QueuePolicy, running: Iterable[Running]) -> None:
        self.policy = policy
        self.total: dict[tuple[str, str], float] = {}
        self.per_type: dict[tuple[tuple[str, str], str], float] = {}
        self.jobs: dict[tuple[str, str], int] = {}
        for item in running:
            self.take(item.job, item.gpu_type)

    def buckets(self, job: Job) -> list[Bucket]:
        """The limits that apply to ``job`` (group first, then its domain's, then user)."""
        quota = self.policy.quotas.groups.get(job.group)
        if quota is None:
            return []
        out = [Bucket(f"group {job.group}", ("g", job.group), quota.limit)]
        domain = job_domain(self.policy, job) if quota.domains else ""
        if domain in quota.domains:
            label = f"group {job.group} in domain {domain}"
            out.append(Bucket(label, ("d", f"{job.group}@{domain}"), quota.domains[domain]))
        user_limit = quota.users.get(job.user, quota.default_user)
        if user_limit is not None:
            out.append(
                Bucket(
                    f"user {job.user} in {job.group}", ("u", f"{job.group}/{job.user}"), user_limit
                )
            )
        return out

    def used(self, bucket: Bucket, gpu_type: str | None = None) -> float:
        """GPUs the bucket uses, in total or of one type."""
        if gpu_type is None:
            return self.total.get(bucket.usage_key, 0.0)
        return self.per_type.get((bucket.usage_key, gpu_type), 0.0)

    def running(self, bucket: Bucket) -> int:
        """Jobs the bucket has holding GPUs (with this cycle's starts so far)."""
        return self.jobs.get(bucket.usage_key, 0)

    def job_room(self, bucket: Bucket) -> int | None:
        """How many more jobs the bucket may start (None: no job limit)."""
        if bucket.limit.jobs is None:
            return None
        return max(0, bucket.limit.jobs - self.running(bucket))

    def exceeds(self, job: Job, gpu_type: str | None = None) -> str:
        """Why starting ``job`` (on ``gpu_type`` if given) would break a quota; "" if not."""
        for bucket in self.buckets(job):
            limit = bucket.limit
            if limit.gpus is not None and self.used(bucket) + job.gpus > limit.gpus + _EPS:
                return reasons.over_quota(bucket.label, self.used(bucket), limit.gpus, job.gpus)
            if gpu_type is not None and gpu_type in limit.per_type:
                cap = limit.per_type[gpu_type]
                if self.used(bucket, gpu_type) + job.gpus > cap + _EPS:
                    used = self.used(bucket, gpu_type)
                    return reasons.over_type_quota(bucket.label, gpu_type, used, cap, job.gpus)
            if full := self._full(bucket):
                return full
        return ""

    def _full(self, bucket: Bucket) -> str:
        """Why ``bucket`` takes no more jobs (its concurrent-job limit); "" if it does."""
        limit = bucket.limit.jobs
        if limit is not None and self.running(bucket) >= limit:
            return reasons.over_job_limit(bucket.label, self.running(bucket), limit)
        return ""

    def over_job_limit(self, job: Job) -> str:
        """Why one more job of ``job``'s group or user would break a concurrent-job limit;
        "" if not. Lending never lifts these (:attr:`~cpn.core.policy.Quotas.lending` lends
        idle GPUs, not job slots)."""
        return next((full for bucket in self.buckets(job) if (full := self._full(bucket))), "")

    def _keys(self, job: Job) -> list[tuple[str, str]]:
        keys = [("g", job.group), ("u", f"{job.group}/{job.user}")]
        quota = self.policy.quotas.groups.get(job.group)
        if quota is not None and quota.domains:
            keys.append(("d", f"{job.group}@{job_domain(self.policy, job)}"))
        return keys

    def take(self, job: Job, gpu_type: str) -> None:
        """Count a start (or a running job) against its group, user and domain."""
        for key in self._keys(job):
            self.total[key] = self.total.get(key, 0.0) + job.gpus
            self.per_type[(key, gpu_type)] = self.per_type.get((key, gpu_type), 0.0) + job.gpus
            self.jobs[key] = self.jobs.get(key, 0) + 1

    def take_slot(self, job: Job) -> None:
        """Count ``job`` against its concurrent-job limits only: a preemption made for it
        keeps the slot it will start in next cycle, so no second preemption is made for a
        job of its group or user that could not start then."""
        for key in self._keys(job):
            self.jobs[key] = self.jobs.get(key, 0) + 1
