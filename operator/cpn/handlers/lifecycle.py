"""Start-up and clean-up: the composition root. Builds the runtime and keeps it in memo."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from cpn.adapters import lease
from cpn.adapters.clock import SystemClock
from cpn.adapters.hub import KubeHub
from cpn.adapters.kube import hub_client
from cpn.adapters.usagestore import KubeUsageStore
from cpn.config import load_config
from cpn.runtime.engine import Runtime
from cpn.runtime.state import WRITE_WORKERS


def build_estimator(history_db: str, artifact: str) -> Any:
    """The learned predictor; construction never fails the operator."""
    from cpn.api.predictions import PredictorEstimator

    return PredictorEstimator(
        history=history_db or ":memory:", artifact=artifact or None, retrain="thread"
    )


@kopf.on.startup()
async def operator_started(
    settings: kopf.OperatorSettings, memo: Any, logger: Any, **_: Any
) -> None:
    config = load_config()
    # Events are how users learn why their job waits: post them at info level too.
    settings.posting.level = logging.INFO
    # Watches are re-established at least this often (fresh resourceVersions).
    settings.watching.server_timeout = 120
    settings.networking.request_timeout = 60
    api = hub_client()
    runtime = Runtime(
        config,
        KubeHub(api, config, threads=config.dispatch_workers + WRITE_WORKERS),
        build_estimator(config.history_db, config.predictor_artifact),
        clock=SystemClock(),
        leadership=lease.LeaseLeadership(),
    )
    runtime.state.usage.store = KubeUsageStore(api, config.namespace)
    memo.runtime = runtime
    memo.loop_task = asyncio.create_task(runtime.run(), name="cpn-scheduler")
    memo.sweep_task = asyncio.create_task(_sweeper(runtime), name="cpn-sweeper")
    logger.info("cpn operator started", extra={"namespace": config.namespace})


async def _sweeper(runtime: Runtime) -> None:
    while True:
        await asyncio.sleep(max(runtime.config.interval_s, 5.0))
        try:
            await runtime.sweep()
        except Exception:
            logging.getLogger(__name__).exception("sweep failed")


@kopf.on.cleanup()
async def operator_stopping(memo: kopf.Memo, **_: Any) -> None:
    """SIGTERM: stop acting as the leader first, stop the loop, then hand the Lease over."""
    lease.step_down()
    runtime: Runtime | None = getattr(memo, "runtime", None)
    for name in ("loop_task", "sweep_task"):
        task = getattr(memo, name, None)
        if task is not None:
            task.cancel()
    if runtime is not None:
        await runtime.stop()
    await asyncio.to_thread(lease.release)


@kopf.on.probe(id="cycles")
def cycles_probe(memo: kopf.Memo, **_: Any) -> int:
    runtime: Runtime | None = getattr(memo, "runtime", None)
    return runtime.cycles if runtime else 0
