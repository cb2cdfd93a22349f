"""Node and GPU utilisation from a member cluster's Prometheus.

Only the CPU utilisation ceiling of the policy uses these numbers for scheduling; what
is *allocated* always comes from the Kubernetes API's own accounting. The GPUs each pod
holds (dcgm-exporter labels a GPU's series with the pod using it) are read for display:
a running AIJob's GPU utilisation and memory in its status (:meth:`MetricsSource.pod_gpus`).
Two kinds of staleness are handled, as the original notes learned the hard way:

- a sample older than ``max_age_s`` (Prometheus scrapes periodically; after a
  restart its numbers lag) is ignored;
- a sample taken before the newest workload on that node started cannot
  reflect it, so it is ignored too (:meth:`MetricsSource.cpu_util` takes the
  node's last start time).

The HTTP session is injectable, so unit tests pass a fake; the end-to-end
tests use the test bed's real Prometheus.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from cpn.runtime.ports import GpuReading

log = logging.getLogger(__name__)

#: Node CPU busy share over the last minute, per node (node-exporter's series): idle time
#: over all CPU time, both rates from the same samples. ``1 - rate(idle)`` alone read a node
#: whose series is younger than the window as busy (Prometheus extrapolates a young series'
#: increase only half a scrape back, so its rate is the increase over the window's length):
#: an idle node that had just joined, or every node after Prometheus restarted, read 0.96 at
#: first and stayed above the CPU ceiling for a quarter of a minute.
CPU_QUERY = (
    '1 - sum by (instance) (rate(node_cpu_seconds_total{mode="idle"}[1m]))'
    " / sum by (instance) (rate(node_cpu_seconds_total[1m]))"
)
#: Mean GPU utilisation per node (dcgm-exporter's series), for display.
GPU_QUERY = "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)"
#: Per GPU a pod holds: utilisation (percent) and framebuffer used (MiB).
POD_GPU_UTIL_QUERY = 'DCGM_FI_DEV_GPU_UTIL{pod!=""}'
POD_GPU_MEMORY_QUERY = 'DCGM_FI_DEV_FB_USED{pod!=""}'
#: What names one GPU of one pod in dcgm-exporter's series.
_POD_GPU_LABELS = ("namespace", "pod", "Hostname", "gpu")


@dataclass(slots=True)
class Sample:
    value: float
    at_s: float  # the sample's own timestamp (epoch seconds)


@dataclass(slots=True)
class Reading:
    """The last successful read of one member's Prometheus."""

    cpu: dict[str, Sample] = field(default_factory=dict)
    gpu: dict[str, Sample] = field(default_factory=dict)
    #: per GPU a pod holds, keyed by _POD_GPU_LABELS: utilisation and memory used
    pod_util: dict[tuple[str, ...], Sample] = field(default_factory=dict)
    pod_memory: dict[tuple[str, ...], Sample] = field(default_factory=dict)
    ok: bool = False
    error: str = ""
    read_at_s: float = 0.0


def _vector(result: object, label: str) -> dict[str, Sample]:
    return {key[0]: sample for key, sample in _keyed(result, (label,)).items()}


def _keyed(result: object, labels: tuple[str, ...]) -> dict[tuple[str, ...], Sample]:
    """Samples of an instant vector by the values of ``labels`` (rows lacking the first
    label, or not a number, are left out)."""
    out: dict[tuple[str, ...], Sample] = {}
    if not isinstance(result, list):
        return out
    for row in result:
        metric = row.get("metric") or {}
        at, value = row.get("value") or (0, "nan")
        key = tuple(str(metric.get(label) or "") for label in labels)
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if key[0] and number == number:
            out[key] = Sample(value=number, at_s=float(at))
    return out


def read_error(err: BaseException, timeout_s: float) -> str:
    """One line on why a read failed. A server that answers too late says so first (the
    client's text names the whole query URL before its cause, which the cut hid)."""
    text = f"{type(err).__name__}: {err}"
    if "timed out" in text.lower():
        return f"no answer in {timeout_s:g}s (read timed out): {text}"[:300]
    return text[:300]


class MetricsSource:
    """Reads one Prometheus; :meth:`refresh` is blocking (call it from a worker thread)."""

    def __init__(
        self,
        url: str,
        *,
        max_age_s: float = 120.0,
        session: requests.Session | None = None,
        timeout_s: int = 5,
    ) -> None:
        self.url = url
        self.max_age_s = max_age_s
        self.timeout_s = timeout_s
        # One quick retry: the next refresh comes soon anyway, and nothing waits on it.
        self._prom = PrometheusConnect(
            url=url,
            disable_ssl=True,
            session=session,
            timeout=timeout_s,
            retry=Retry(total=1, backoff_factor=0.1),
        )
        self.reading = Reading()

    def refresh(self) -> Reading:
        """Query CPU and GPU utilisation; on failure keep the old samples, mark not ok."""
        try:
            cpu = _vector(self._prom.custom_query(CPU_QUERY), "instance")
            gpu = _vector(self._prom.custom_query(GPU_QUERY), "Hostname")
            pod_util = _keyed(self._prom.custom_query(POD_GPU_UTIL_QUERY), _POD_GPU_LABELS)
            pod_memory = _keyed(self._prom.custom_query(POD_GPU_MEMORY_QUERY), _POD_GPU_LABELS)
        except Exception as err:  # noqa: BLE001 - unreachable, HTTP, payload: logged once
            error = read_error(err, self.timeout_s)
            if error != self.reading.error:  # each new failure once, not every refresh
                log.warning("prometheus %s not read: %s", self.url, error)
            self.reading.ok = False
            self.reading.error = error
            return self.reading
        self.reading = Reading(
            cpu=cpu,
            gpu=gpu,
            pod_util=pod_util,
            pod_memory=pod_memory,
            ok=True,
            read_at_s=time.time(),
        )
        return self.reading

    def pod_gpus(self, now_s: float) -> dict[tuple[str, str], list[GpuReading]]:
        """Per (namespace, pod): one reading per GPU it holds, from samples newer than
        ``max_age_s`` (memory None when its series is missing or stale)."""
        out: dict[tuple[str, str], list[GpuReading]] = {}
        for key, util in sorted(self.reading.pod_util.items()):
            if now_s - util.at_s > self.max_age_s:
                continue
            memory = self.reading.pod_memory.get(key)
            mib = memory.value if memory and now_s - memory.at_s <= self.max_age_s else None
            pct = min(max(util.value, 0.0), 100.0)
            out.setdefault((key[0], key[1]), []).append(
                GpuReading(util_pct=pct, memory_mib=mib, at_s=util.at_s)
            )
        return out

    def cpu_util(self, now_s: float, started_s: Mapping[str, float]) -> dict[str, float]:
        """Trusted CPU utilisation (0..1) per node; nodes with stale samples are left out."""
        out = {}
        for node, sample in self.reading.cpu.items():
            if now_s - sample.at_s > self.max_age_s:
                continue
            if sample.at_s < started_s.get(node, 0.0) + 60.0:  # the rate window lags a start
                continue
            out[node] = min(max(sample.value, 0.0), 1.0)
        return out

    def fresh(self, now_s: float) -> tuple[bool, str]:
        """Whether metrics are usable now, and why not."""
        if not self.reading.ok:
            return False, self.reading.error or "not read yet"
        newest = max((s.at_s for s in self.reading.cpu.values()), default=0.0)
        if not newest:
            return False, "no node CPU series (node_cpu_seconds_total)"
        age = now_s - newest
        if age > self.max_age_s:
            return False, f"newest sample is {age:.0f}s old"
        return True, f"node CPU samples newer than {self.max_age_s:.0f}s"
