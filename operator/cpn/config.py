"""Process configuration of the operator: one frozen value, read once at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorConfig:
    """How the operator runs. Each field can be set by ``CPN_<FIELD>`` in the environment."""

    namespace: str = "cpn-system"
    """Namespace of the policy ConfigMap, the member kubeconfig Secrets and the Lease."""
    policy_configmap: str = "cpn-policy"
    """Name of the policy ConfigMap (the document is under the data key ``policy.yaml``)."""
    hub: str = "hub"
    """Name of this hub, written on member Jobs' origin labels."""
    interval_s: float = 30.0
    """Safety-net period of the scheduling loop; events trigger it sooner."""
    debounce_s: float = 0.2
    """Events within this window are merged into one cycle."""
    member_grace_s: float = 5.0
    """A member whose probes (``GET /readyz``) miss, or whose watches fail, this long is
    NotReady: nothing new is placed there."""
    member_timeout_s: float = 60.0
    """A member NotReady this long (counted from its first missed probe) loses its jobs:
    they are requeued, and their old member Jobs are deleted when it comes back."""
    metrics_max_age_s: float = 120.0
    """Prometheus samples older than this are ignored (the API's accounting still holds)."""
    history_db: str = ""
    """SQLite file of finished jobs for the predictor ("" = in memory)."""
    predictor_artifact: str = ""
    """Trained predictor artifact; "" trains from the bundled benchmark table."""
    decision_log: str = ""
    """File for the JSON decision log ("-" = stdout, "" = off)."""
    decision_log_max_bytes: int = 64 << 20
    """The decision log file rotates at this size."""
    decision_log_backups: int = 5
    """Rotated decision log files kept (LOG.1 ... LOG.N)."""
    metrics_port: int = 0
    """Port of /metrics, /healthz and /readyz (0 = off)."""
    metrics_address: str = "127.0.0.1"
    """Address the metrics server binds (a pod sets 0.0.0.0 so its Service reaches it)."""
    eta_interval_s: float = 5.0
    """The queue is projected forward for ETAs at most this often."""
    hami_pool: str = ""
    """HAMi resource pool named on shared-GPU pods (annotation hami.io/resource-pool)."""
    dispatch_workers: int = 16
    """Parallel API calls when dispatching."""
    hub_write_qps: float = 50.0
    """AIJob status patches and Events sent to the hub per second at most (0 = no limit):
    in a burst of submissions they queue behind creating member Jobs and merge while they
    wait, so the hub's API server stays free for users' own requests."""
    hub_write_burst: int = 100
    """Hub writes allowed at once above ``hub_write_qps`` after a quiet spell."""
    leader_election: bool = True
    """Run only while holding the Lease ``cpn-operator``: one active instance, whether two
    replicas run or a local ``cpn run`` meets a deployed one (false: no election)."""
    lease_duration_s: float = 15.0
    usage_retention_days: float = 7.0
    """Runs are kept one by one in the usage store this long after they end, then rolled up
    into per-day totals by group, user, GPU type and domain (docs/admin-guide.md)."""
    dry_run: bool = False
    """Decide and log, but create no member Jobs."""
    check_plans: bool = False
    """Check every cycle's plan against its snapshot (:func:`cpn.core.check.check_plan`,
    what the simulator checks) and log each rule it breaks as an error starting
    ``plan check:`` (the end-to-end tests turn it on and fail on such a line)."""


def load_config(env: Mapping[str, str] | None = None, **overrides: object) -> OperatorConfig:
    """Build the config from ``CPN_*`` variables, then ``overrides``; raises ValueError."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    for f in fields(OperatorConfig):
        raw = env.get(f"CPN_{f.name.upper()}")
        if raw is None:
            continue
        kind = type(getattr(OperatorConfig(), f.name))
        try:
            if kind is bool:
                values[f.name] = raw.strip().lower() in {"1", "true", "yes", "on"}
            else:
                values[f.name] = kind(raw)
        except ValueError as err:
            raise ValueError(f"CPN_{f.name.upper()}={raw!r}: {err}") from err
    values.update({k: v for k, v in overrides.items() if v is not None})
    return OperatorConfig(**values)  # type: ignore[arg-type]
