"""GPU benchmarks carried out: GPUBenchmarks watched on the hub, created for nodes of GPU
types with no recent result, their member Jobs started by the rule and followed, their
results read, checked and taught to the predictor. The decisions are
:mod:`cpn.core.benchmarks`; the shapes :mod:`cpn.api.benchmarks`.

After each cycle (:meth:`Benchmarking.after_cycle`), with what the cycle saw and
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
from cpn.runtime.ports import Member, describe
from cpn.runtime.state import RuntimeState

log = logging.getLogger(__name__)

#: reason (and Event) of a GPUBenchmark whose Job a user job's need stopped
PREEMPTED = "PreemptedByUserJob"

#: how long a Job this process created may stay unseen by its member's informer before
#: its GPUBenchmark is told the Job is gone (the informer lags the create; the same
#: five minutes as Kubernetes' own controllers wait on their expectations)
UNSEEN_GRACE_S = 300.0


class Benchmarking:
    """GPUBenchmarks: watched, created, started, followed, learned from. Shares the
    runtime's ``state``; ``write_all_soon`` asks for the hub's statuses to be written (the
    members' ``SlowNodes`` condition, from ``state.slow_nodes``)."""

    def __init__(self, state: RuntimeState, write_all_soon: Callable[[], None]) -> None:
        self.state = state
        self._write_all_soon = write_all_soon
        self.benchmarks: dict[str, Mapping[str, Any]] = {}  # on the hub, by name
        self.listed = False
        self.busy: set[str] = set()  # with a call in flight
        self._preempted: set[str] = set()  # whose deleted Job may still be seen
        self._unseen: dict[str, float] = {}  # created here, not seen yet: since (monotonic)
        self._speeds_judged: object = None  # what the slow-node rule was judged on
        self._slow_told: set[tuple[str, str]] = set()  # (GPUBenchmark, model) warned about

    def watch(self) -> None:
        """Start the GPUBenchmark watch (not waited for: a hub without the CRD still
        schedules; its watch retries)."""

        def on_event(event: str, obj: Mapping[str, Any] | None) -> None:
            if obj is not None and event in {"LIST", "ADDED", "MODIFIED", "DELETED"}:
                self.state.threadsafe(self._benchmark_event, event, obj)

        self.state.hub_informers.append(self.state.hub.watch_benchmarks(on_event))

    def _benchmark_event(self, event: str, obj: Mapping[str, Any]) -> None:
        if event == "LIST":
            self.benchmarks = {i["metadata"]["name"]: i for i in obj.get("items") or []}
            self.listed = True
            recalled = [r for body in self.benchmarks.values() for r in api.recalled(body)]
            if recalled:
                taken = self._teach(recalled, keep=False)
                log.info("learned %d rows from Succeeded GPUBenchmarks on the hub", taken)
        elif event == "DELETED":
            self.benchmarks.pop(obj["metadata"]["name"], None)
        else:
            self.benchmarks[obj["metadata"]["name"]] = obj
        self.state.kick()

    def _teach(self, rows: list[Any], *, keep: bool) -> int:
        try:
            taken = self.state.estimator.learn_benchmarks(rows, keep=keep)
        except Exception:
            log.exception("predictor failed to learn from benchmarks")
            return 0
        if taken:  # once retrained, every waiting job is estimated again
            self.state.store.refresh_all_due = True
        return taken

    def _bench_call(self, name: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` (a coroutine function) for one GPUBenchmark, one at a time."""
        if name in self.busy or self.state.loop is None:
            return
        self.busy.add(name)

        async def run() -> None:
            try:
                await fn(*args)
            except Exception:
                log.exception("GPUBenchmark %s: step failed", name)
            finally:
                self.busy.discard(name)

        self.state.loop.create_task(run())

    def after_cycle(self, snapshot: Snapshot, plan: CyclePlan) -> None:
        """Create the GPUBenchmarks the policy asks for; start, preempt, follow and finish
        the others; flag slow nodes when results changed."""
        if not self.listed:
            return
        if self.state.store.policy.benchmarks.enabled:
            self._create_wanted(snapshot)
        self._judge_speeds(snapshot)
        open_ = [
            (name, body, phase)
            for name, body in list(self.benchmarks.items())
            if (body.get("metadata") or {}).get("uid")  # created (not only assumed)
            and (phase := api.phase_of(body)) in (core.PENDING, core.RUNNING)
        ]
        if not open_:
            return
        free = core.free_after(snapshot, plan)
        types = {(n.cluster, n.name): n.gpu_type for c in snapshot.clusters for n in c.nodes}
        waiting = core.waiting(snapshot, plan)
        for name, body, phase in open_:
            spec = body.get("spec") or {}
            where = (str(spec.get("cluster", "")), str(spec.get("node", "")))
            gpu_type = types.get(where, "")
            if phase == core.PENDING:
                self._maybe_start(body, free, types, waiting.waiting_for(gpu_type))
                continue
            who = core.preempting(snapshot, plan, gpu_type=gpu_type, node_free_gpus=free.get(where))
            if who is None or not self._maybe_preempt(name, body, who):
                self._bench_follow(name, body)

    def _create_wanted(self, snapshot: Snapshot) -> None:
        seen = [
            core.NodeSeen(cluster=n.cluster, node=n.name, gpu_type=n.gpu_type)
            for c in snapshot.clusters
            for n in c.nodes
        ]
        known = [api.known_of(b) for b in self.benchmarks.values()]
        policy = self.state.store.policy.benchmarks
        for node in core.to_create(
            seen, known, now_s=self.state.clock.wall(), max_age_days=policy.max_age_days
        ):
            new = api.new_benchmark(node.cluster, node.node)
            if new["metadata"]["name"] not in self.benchmarks:
                self.benchmarks[new["metadata"]["name"]] = new  # assumed until watched
                self._bench_call(new["metadata"]["name"], self._create_benchmark, new)

    def _judge_speeds(self, snapshot: Snapshot) -> None:
        """The slow-node rule (:func:`cpn.core.benchmarks.slow_nodes`) over the latest
        Succeeded result of each node the members have now, judged again when results or
        nodes changed: each member's slow nodes for its ``SlowNodes`` condition, and one
        Warning Event ``SlowNode`` per GPUBenchmark and model found slow."""
        done = [
            (name, body)
            for name, body in self.benchmarks.items()
            if api.phase_of(body) == core.SUCCEEDED
        ]
        if not done and not self.state.slow_nodes:
            return  # nothing measured: nothing slow, nothing to write
        nodes = frozenset((n.cluster, n.name) for c in snapshot.clusters for n in c.nodes)
        basis = (
            nodes,
            frozenset((n, (b.get("status") or {}).get("completionTime")) for n, b in done),
        )
        if basis == self._speeds_judged:
            return
        self._speeds_judged = basis
        rates = [r for _, body in sorted(done, key=_finished) for r in api.node_rates(body)]
        slow = core.slow_nodes(r for r in rates if (r.cluster, r.node) in nodes)
        verdict: dict[str, tuple[core.SlowNode, ...]] = {}
        for found in slow:
            verdict[found.rate.cluster] = (*verdict.get(found.rate.cluster, ()), found)
        for found in slow:
            told = (found.rate.source, found.rate.model)
            body = self.benchmarks.get(found.rate.source)
            if told in self._slow_told or body is None:
                continue
            self._slow_told.add(told)
            self.state.post_event(body, "SlowNode", api.slow_message(found), True)
        if verdict != self.state.slow_nodes:
            self.state.slow_nodes = verdict
            self._write_all_soon()  # the members' SlowNodes condition

    async def _create_benchmark(self, body: Mapping[str, Any]) -> None:
        try:
            await self.state.call(self.state.hub.create_benchmark, body)
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
        spec = api.read_spec(body, self.state.store.policy.benchmarks)
        member = self.state.members.get(spec.cluster)
        ready = member is not None and self.state.member_status.get(spec.cluster, (False, ""))[0]
        job = member.jobs.get(api.job_name(spec.name)) if member is not None else None
        if job is not None and (spec.name in self._preempted or _deleting(job)):
            return  # its preempted Job is still going away: not adopted, not made again
        if member is not None and member.synced():
            self._preempted.discard(spec.name)
        if job is not None:
            verdict = core.Verdict(start=True)  # created before a restart: follow it
        else:
            verdict = core.start_verdict(
                node_exists=(spec.cluster, spec.node) in types,
                node_free_gpus=free.get((spec.cluster, spec.node)),
                queued_jobs=waiting,
                member_ready=bool(ready),
            )
        if not verdict.start or member is None:
            current = self.benchmarks.get(spec.name, {}).get("status") or {}
            if current.get("reason") == PREEMPTED:
                return  # stays Pending for its preemption until it starts again
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
            image=self.state.store.policy.benchmarks.image,
            hub=self.state.config.hub,
            namespace=member.spec.namespace,
            uid=str(body["metadata"].get("uid", "")),
        )
        try:
            await self.state.call(member.create_job, manifest)
        except Exception as err:  # noqa: BLE001 - an API call of one GPUBenchmark: logged or told
            why = describe(err)
            await self._bench_finish(spec.name, body, "JobNotCreated", why, failed=True)
            return
        self._unseen[spec.name] = self.state.clock.monotonic()
        status = {
            "phase": core.RUNNING,
            "reason": "Started",
            "message": f"Job {manifest['metadata']['name']} on {spec.cluster}/{spec.node}",
            "memberJob": manifest["metadata"]["name"],
            "gpuType": gpu_type,
            "startTime": _now(self.state.clock.wall()),
        }
        await self._bench_write(spec.name, status)

    def _bench_follow(self, name: str, body: Mapping[str, Any]) -> None:
        spec = api.read_spec(body, self.state.store.policy.benchmarks)
        member = self.state.members.get(spec.cluster)
        if member is None or not member.synced():
            return
        job = member.jobs.get(api.job_name(name))
        if job is None and name in self._preempted:
            return  # preempted: its Pending status is on its way
        if job is None and self._not_seen_yet(name):
            return  # created a moment ago: its member's informer has not shown it yet
        self._unseen.pop(name, None)
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

    def _not_seen_yet(self, name: str) -> bool:
        since = self._unseen.get(name)
        return since is not None and self.state.clock.monotonic() - since < UNSEEN_GRACE_S

    def _maybe_preempt(self, name: str, body: Mapping[str, Any], job_key: str) -> bool:
        """Preempt a Running benchmark for the AIJob ``job_key`` (the rule:
        :func:`cpn.core.benchmarks.preempting`) unless its Job has ended or is not seen."""
        spec = api.read_spec(body, self.state.store.policy.benchmarks)
        member = self.state.members.get(spec.cluster)
        if member is None or not member.synced() or name in self.busy:
            return False
        job = member.jobs.get(api.job_name(name))
        if job is None or _deleting(job) or _ended(job):
            return False  # followed: its end is read, or it is gone
        self._bench_call(name, self._bench_preempt, body, spec, member, job_key)
        return True

    async def _bench_preempt(
        self, body: Mapping[str, Any], spec: api.BenchSpec, member: Member, job_key: str
    ) -> None:
        """Delete the benchmark's member Job, then mark it Pending (``PreemptedByUserJob``,
        and an Event); it starts again under the start rule."""
        job = api.job_name(spec.name)
        self._preempted.add(spec.name)
        try:
            await self.state.call(member.delete_job, job)
        except Exception as err:  # noqa: BLE001 - an API call of one GPUBenchmark: logged, retried
            self._preempted.discard(spec.name)
            log.warning("GPUBenchmark %s: Job %s not deleted: %s", spec.name, job, describe(err))
            return
        status = body.get("status") or {}
        message = (
            f"AIJob {job_key} needs the GPU it took on {spec.cluster}/{spec.node}: Job {job} "
            "deleted; it runs again once no AIJob that may use this GPU type waits"
        )
        patch = {
            "phase": core.PENDING,
            "reason": PREEMPTED,
            "message": message,
            "memberJob": None,
            "startTime": None,
            "preemptions": int(status.get("preemptions") or 0) + 1,
        }
        await self._bench_write(spec.name, patch)
        self.state.post_event(body, PREEMPTED, message, False)
        log.info("GPUBenchmark %s preempted for AIJob %s", spec.name, job_key)

    async def _bench_result(
        self,
        body: Mapping[str, Any],
        spec: api.BenchSpec,
        member: Member,
        failed: Mapping[str, Any] | None,
    ) -> None:
        job = api.job_name(spec.name)
        try:
            messages = await self.state.call(member.termination_messages, job)
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
        now = self.state.clock.wall()
        rows = api.records(
            result, name=spec.name, node=spec.node, gpu_type=gpu_type, measured_at=now
        )
        learned = self._teach(rows, keep=True)
        patch = api.succeeded_status(result, gpu_type=gpu_type, finished_s=now, learned=learned)
        await self._bench_write(spec.name, patch)
        rates = ", ".join(f"{r.model} {r.samples_per_s:g}/s" for r in result.results)
        self.state.post_event(body, "Measured", f"{gpu_type} on {spec.node}: {rates}", False)

    async def _bench_finish(
        self, name: str, body: Mapping[str, Any], reason: str, message: str, failed: bool
    ) -> None:
        phase = core.FAILED if failed else core.SUCCEEDED
        status = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "completionTime": _now(self.state.clock.wall()),
        }
        await self._bench_write(name, status)
        self.state.post_event(body, reason, message, failed)

    def _bench_status(self, name: str, status: dict[str, Any]) -> None:
        current = self.benchmarks.get(name, {}).get("status") or {}
        if all(current.get(key) == value for key, value in status.items()):
            return
        self._bench_call(name, self._bench_write, name, status)

    async def _bench_write(self, name: str, status: dict[str, Any]) -> None:
        try:
            await self.state.call(self.state.hub.patch_benchmark_status, name, status)
        except Exception as err:  # noqa: BLE001 - an API call of one GPUBenchmark: logged or told
            log.warning("GPUBenchmark %s: status not written: %s", name, describe(err))
            return
        body = self.benchmarks.get(name)
        if body is not None:  # what the watch will send, so the next cycle does not redo it
            self.benchmarks[name] = {**body, "status": {**(body.get("status") or {}), **status}}


def _finished(item: tuple[str, Mapping[str, Any]]) -> str:
    return str((item[1].get("status") or {}).get("completionTime") or "")


def _deleting(job: Mapping[str, Any]) -> bool:
    return bool((job.get("metadata") or {}).get("deletionTimestamp"))


def _ended(job: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in {"Complete", "Failed"} and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def is_benchmark_job(job: Mapping[str, Any]) -> bool:
    """A member Job that runs a GPUBenchmark (not an AIJob's attempt)."""
    return k.LABEL_BENCHMARK in ((job.get("metadata") or {}).get("labels") or {})


def _now(wall_s: float) -> str:
    return rfc3339(wall_s) or ""
