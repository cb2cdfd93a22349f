"""GPU benchmarks carried out: GPUBenchmarks watched on the hub, created for nodes of GPU
types with no recent result, their member Jobs started by the rule and followed, their
results read, checked and taught to the predictor. The decisions are
:mod:`cpn.core.benchmarks`; the shapes :mod:`cpn.api.benchmarks`.

After each cycle (:meth:`Benchmarking.benchmarks_after_cycle`), with what the cycle saw and
planned: a Pending GPUBenchmark whose node has a free GPU once the cycle's starts took
theirs, and no AIJob that may use its GPU type left waiting, gets its Job; a Running one
whose Job completed has its result read from the pod's termination message. Member Job
events of benchmarks kick a cycle. Blocking calls go through the pool, one call per
GPUBenchmark at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from cpn.api import benchmarks as api
from cpn.api import constants as k
from cpn.api.status import rfc3339
from cpn.core import benchmarks as core
from cpn.core.model import CyclePlan, Snapshot
from cpn.runtime.dispatch import Dispatching
from cpn.runtime.ports import Member, describe

log = logging.getLogger(__name__)


class Benchmarking(Dispatching):
    """GPUBenchmarks: watched, created, started, followed, learned from."""

    def watch_benchmarks(self) -> None:
        """Start the GPUBenchmark watch (not waited for: a hub without the CRD still
        schedules; its watch retries)."""

        def on_event(event: str, obj: Mapping[str, Any] | None) -> None:
            if obj is not None and event in {"LIST", "ADDED", "MODIFIED", "DELETED"}:
                self._threadsafe(self._benchmark_event, event, obj)

        self._hub_informers.append(self.hub.watch_benchmarks(on_event))

    def _benchmark_event(self, event: str, obj: Mapping[str, Any]) -> None:
        if event == "LIST":
            self.benchmarks = {i["metadata"]["name"]: i for i in obj.get("items") or []}
            self.benchmarks_listed = True
            recalled = [r for body in self.benchmarks.values() for r in api.recalled(body)]
            if recalled:
                taken = self._teach(recalled, keep=False)
                log.info("learned %d rows from Succeeded GPUBenchmarks on the hub", taken)
        elif event == "DELETED":
            self.benchmarks.pop(obj["metadata"]["name"], None)
        else:
            self.benchmarks[obj["metadata"]["name"]] = obj
        self.kick()

    def _teach(self, rows: list[Any], *, keep: bool) -> int:
        learn: Callable[..., int] | None = getattr(self.estimator, "learn_benchmarks", None)
        if learn is None:
            return 0
        try:
            taken = learn(rows, keep=keep)
        except Exception:
            log.exception("predictor failed to learn from benchmarks")
            return 0
        if taken:  # once retrained, every waiting job is estimated again
            self.store.refresh_all_due = True
        return taken

    def _bench_call(self, name: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` (a coroutine function) for one GPUBenchmark, one at a time."""
        if name in self._bench_busy or self.loop is None:
            return
        self._bench_busy.add(name)

        async def run() -> None:
            try:
                await fn(*args)
            except Exception:
                log.exception("GPUBenchmark %s: step failed", name)
            finally:
                self._bench_busy.discard(name)

        self.loop.create_task(run())

    def benchmarks_after_cycle(self, snapshot: Snapshot, plan: CyclePlan) -> None:
        """Create the GPUBenchmarks the policy asks for; start, follow and finish the others."""
        if not self.benchmarks_listed:
            return
        policy = self.store.policy.benchmarks
        if policy.enabled:
            seen = [
                core.NodeSeen(cluster=n.cluster, node=n.name, gpu_type=n.gpu_type)
                for c in snapshot.clusters
                for n in c.nodes
            ]
            known = [api.known_of(b) for b in self.benchmarks.values()]
            for node in core.to_create(
                seen, known, now_s=self.clock.wall(), max_age_days=policy.max_age_days
            ):
                new = api.new_benchmark(node.cluster, node.node)
                if new["metadata"]["name"] not in self.benchmarks:
                    self.benchmarks[new["metadata"]["name"]] = new  # assumed until watched
                    self._bench_call(new["metadata"]["name"], self._create_benchmark, new)
        free = core.free_after(snapshot, plan)
        types = {(n.cluster, n.name): n.gpu_type for c in snapshot.clusters for n in c.nodes}
        for name, body in list(self.benchmarks.items()):
            phase = api.phase_of(body)
            if not (body.get("metadata") or {}).get("uid"):
                continue  # not created yet
            if phase == core.PENDING:
                spec = body.get("spec") or {}
                gpu_type = types.get((spec.get("cluster", ""), spec.get("node", "")), "")
                waiting = core.waiting_for(snapshot, plan, gpu_type)
                self._maybe_start(body, free, types, waiting)
            elif phase == core.RUNNING:
                self._bench_follow(name, body)

    async def _create_benchmark(self, body: Mapping[str, Any]) -> None:
        try:
            await self.call(self.hub.create_benchmark, body)
        except Exception as err:  # noqa: BLE001 - an API call of one GPUBenchmark: logged or told
            self.benchmarks.pop(body["metadata"]["name"], None)
            log.warning("could not create GPUBenchmark %s: %s", body["metadata"]["name"], err)

    def _maybe_start(
        self,
        body: Mapping[str, Any],
        free: Mapping[tuple[str, str], float],
        types: Mapping[tuple[str, str], str],
        waiting: int,
    ) -> None:
        spec = api.read_spec(body, self.store.policy.benchmarks)
        member = self.members.get(spec.cluster)
        ready = member is not None and self.member_status.get(spec.cluster, (False, ""))[0]
        if member is not None and api.job_name(spec.name) in member.jobs:
            verdict = core.Verdict(start=True)  # created before a restart: follow it
        else:
            verdict = core.start_verdict(
                node_exists=(spec.cluster, spec.node) in types,
                node_free_gpus=free.get((spec.cluster, spec.node)),
                queued_jobs=waiting,
                member_ready=bool(ready),
            )
        if not verdict.start or member is None:
            self._bench_status(
                spec.name,
                {"phase": core.PENDING, "reason": verdict.reason, "message": verdict.message},
            )
            return
        gpu_type = types.get((spec.cluster, spec.node), "")
        self._bench_call(spec.name, self._start, body, spec, member, gpu_type)

    async def _start(
        self, body: Mapping[str, Any], spec: api.BenchSpec, member: Member, gpu_type: str
    ) -> None:
        manifest = api.render_job(
            spec,
            image=self.store.policy.benchmarks.image,
            hub=self.config.hub,
            namespace=member.spec.namespace,
            uid=str(body["metadata"].get("uid", "")),
        )
        try:
            await self.call(member.create_job, manifest)
        except Exception as err:  # noqa: BLE001 - an API call of one GPUBenchmark: logged or told
            why = describe(err)
            await self._bench_finish(spec.name, body, "JobNotCreated", why, failed=True)
            return
        status = {
            "phase": core.RUNNING,
            "reason": "Started",
            "message": f"Job {manifest['metadata']['name']} on {spec.cluster}/{spec.node}",
            "memberJob": manifest["metadata"]["name"],
            "gpuType": gpu_type,
            "startTime": _now(self.clock.wall()),
        }
        await self._bench_write(spec.name, status)

    def _bench_follow(self, name: str, body: Mapping[str, Any]) -> None:
        spec = api.read_spec(body, self.store.policy.benchmarks)
        member = self.members.get(spec.cluster)
        if member is None or not member.synced():
            return
        job = member.jobs.get(api.job_name(name))
        if job is None:
            self._bench_call(
                name, self._bench_finish, name, body, "JobGone", "its member Job is gone", True
            )
            return
        conditions = {
            c.get("type"): c
            for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"
        }
        if "Complete" in conditions or "Failed" in conditions:
            failed = conditions.get("Failed")
            self._bench_call(name, self._bench_result, body, spec, member, failed)

    async def _bench_result(
        self,
        body: Mapping[str, Any],
        spec: api.BenchSpec,
        member: Member,
        failed: Mapping[str, Any] | None,
    ) -> None:
        job = api.job_name(spec.name)
        try:
            messages = await self.call(member.termination_messages, job)
        except Exception as err:  # noqa: BLE001 - an API call of one GPUBenchmark: logged or told
            log.warning("GPUBenchmark %s: pods of %s not read: %s", spec.name, job, describe(err))
            return  # tried again after the next cycle
        message = next((m for m in messages if m), "")
        if failed is not None:
            why = failed.get("message") or "its pod failed"
            detail = f"; termination message: {message[:300]}" if message else ""
            await self._bench_finish(spec.name, body, "JobFailed", f"{why}{detail}", True)
            return
        try:
            result = core.read_result(message, spec.models)
        except core.BadResult as bad:
            await self._bench_finish(spec.name, body, bad.reason, bad.message, True)
            return
        status = body.get("status") or {}
        gpu_type = str(status.get("gpuType") or "")
        now = self.clock.wall()
        rows = api.records(
            result, name=spec.name, node=spec.node, gpu_type=gpu_type, measured_at=now
        )
        learned = self._teach(rows, keep=True)
        patch = api.succeeded_status(result, gpu_type=gpu_type, finished_s=now, learned=learned)
        await self._bench_write(spec.name, patch)
        rates = ", ".join(f"{r.model} {r.samples_per_s:g}/s" for r in result.results)
        self.post_event(body, "Measured", f"{gpu_type} on {spec.node}: {rates}", False)

    async def _bench_finish(
        self, name: str, body: Mapping[str, Any], reason: str, message: str, failed: bool
    ) -> None:
        phase = core.FAILED if failed else core.SUCCEEDED
        status = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "completionTime": _now(self.clock.wall()),
        }
        await self._bench_write(name, status)
        self.post_event(body, reason, message, failed)

    def _bench_status(self, name: str, status: dict[str, Any]) -> None:
        current = self.benchmarks.get(name, {}).get("status") or {}
        if all(current.get(key) == value for key, value in status.items()):
            return
        self._bench_call(name, self._bench_write, name, status)

    async def _bench_write(self, name: str, status: dict[str, Any]) -> None:
        try:
            await self.call(self.hub.patch_benchmark_status, name, status)
        except Exception as err:  # noqa: BLE001 - an API call of one GPUBenchmark: logged or told
            log.warning("GPUBenchmark %s: status not written: %s", name, describe(err))
            return
        body = self.benchmarks.get(name)
        if body is not None:  # what the watch will send, so the next cycle does not redo it
            self.benchmarks[name] = {**body, "status": {**(body.get("status") or {}), **status}}


def is_benchmark_job(job: Mapping[str, Any]) -> bool:
    """A member Job that runs a GPUBenchmark (not an AIJob's attempt)."""
    return k.LABEL_BENCHMARK in ((job.get("metadata") or {}).get("labels") or {})


def _now(wall_s: float) -> str:
    return rfc3339(wall_s) or ""
