"""Staging recorded as usage (kind ``staging``): the GPUs a job held while its inputs were
staged, from its dispatch to when they were all there (or its staging failed); not a run."""

from __future__ import annotations

from cpn.cli.usage import report
from cpn.core.accounting import KIND_STAGING, DayUsage, rolled_up
from tests.runtime.test_staging import GB, bed


def test_a_staging_that_succeeded_is_recorded_as_staging_and_its_run_apart() -> None:
    b = bed()
    try:
        record = b.add("a", ("imagenet", "m2", 10 * GB))
        dispatched = b.clock.wall()
        b.start(record, staged=("imagenet@v1",))
        b.clock.advance(20)
        name = b.staging_jobs()[0]
        b.report(name, "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:16Z")
        (made,) = b.state.usage.pending.values()
        assert (made.kind, made.outcome, made.attempt) == (KIND_STAGING, "succeeded", 1)
        assert (made.start_s, made.end_s) == (dispatched, dispatched + 20)
        assert made.gpu_s == 20.0 * record.job.gpus  # type: ignore[union-attr]
        assert record.dispatch_s == dispatched + 20  # its run counts from here
    finally:
        b.close()


def test_a_staging_that_failed_is_recorded_and_nothing_else() -> None:
    b = bed()
    b.state.store.set_policy(b.state.store.policy)  # defaults: staging_attempts
    try:
        record = b.add("a", ("ds", "m2", GB))
        b.start(record, staged=("ds@v1",))
        for _ in range(10):  # fail every attempt the policy allows
            if record.phase != "Staging":
                break
            b.clock.advance(3600)
            b.run(b.staging.tick)
            b.report(b.staging_jobs()[-1], "Failed", "2026-01-01T00:00:00Z", "")
        assert record.phase == "Failed"
        kinds = [(r.kind, r.outcome) for r in b.state.usage.pending.values()]
        assert kinds == [(KIND_STAGING, "failed")]
    finally:
        b.close()


def test_stagings_count_their_gpu_hours_not_as_runs_and_cpn_usage_splits_them() -> None:
    b = bed()
    try:
        record = b.add("a", ("imagenet", "m2", 10 * GB))
        b.start(record, staged=("imagenet@v1",))
        b.clock.advance(36)
        b.report(b.staging_jobs()[0], "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:16Z")
    finally:
        b.close()
    (made,) = b.state.usage.pending.values()
    day = DayUsage(made.day, {made.key: made})
    doc = report([day], since_s=None, until_s=None, group=None, user=None, by=None)
    assert doc["runs"] == 0
    assert doc["totalGpuSeconds"] == made.gpu_s
    assert doc["gpuHoursByKind"]["staging"] == round(made.gpu_s / 3600.0, 6)
    assert doc["gpuHoursByKind"]["run"] == 0.0
    folded = rolled_up(day, before_s=float("inf"), budget_bytes=0, row_bytes=1)
    (total,) = folded.totals.values()
    assert (total.gpu_s, total.runs) == (made.gpu_s, 0)
