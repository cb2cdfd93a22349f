"""What every end-to-end test of the operator needs: the hub with ``cpn run`` attached,
AIJob manifests, and waits on real objects. Fixtures in each test module stay thin."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException, ServiceException
from urllib3.exceptions import ProtocolError

from cpn.adapters.kube import client_from_kubeconfig
from cpn.cli.devbed import bootstrap_testbed, start_operator, stop_process, wait_until
from cpn.cli.run import EXIT_LEADERSHIP_LOST
from testbed.bed import Testbed

#: The default policy with quick retries, so failure tests finish in seconds.
TEST_POLICY = """
retry: {max_attempts: 2, backoff_s: 1}
"""

#: Operator settings every e2e test uses unless it says otherwise (CPN_* variables); every
#: cycle's plan is checked (cpn.core.check) and a broken rule fails the test (running_hub).
FAST = {"interval_s": 5, "debounce_s": 0.1, "lease_duration_s": 6, "check_plans": True}


class Hub:
    """The hub with the operator running: helpers to apply and read AIJobs.

    Like the Deployment of the manifests, the hub starts the operator again when it exits
    because it lost its Lease (a loaded machine can delay a renewal past the suite's short
    deadline); ``supervise=False`` leaves that to the test (the fail-over tests check it)."""

    def __init__(
        self,
        tb: Testbed,
        log: Path,
        *,
        args: tuple[str, ...] = (),
        supervise: bool = True,
        **settings: object,
    ) -> None:
        self.tb = tb
        self.log = log
        self.args = args
        self.settings = {**FAST, **settings}
        self.kubeconfig = tb.kubeconfig("hub")
        self.api = client_from_kubeconfig(self.kubeconfig.read_text())
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.restarts_after_lost_lease = 0
        self._changed = threading.Condition()
        self._stopping = False
        self.proc = self.start()
        if supervise:
            threading.Thread(target=self._supervise, name="hub-supervisor", daemon=True).start()

    def start(self, log: Path | None = None) -> subprocess.Popen[bytes]:
        """Start one more operator process with this hub's settings (appending to the log,
        or to ``log``)."""
        return start_operator(self.kubeconfig, log or self.log, args=self.args, **self.settings)

    def restart(self) -> None:
        with self._changed:
            self.proc = self.start()
            self._changed.notify_all()

    def stop(self) -> None:
        """Stop the operator for good (no restart after this)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        stop_process(self.proc)

    def _supervise(self) -> None:
        while True:
            proc = self.proc
            code = proc.wait()
            with self._changed:
                if self._stopping:
                    return
                if code == EXIT_LEADERSHIP_LOST and proc is self.proc:
                    print(f"hub: the operator lost its Lease (exit {code}); starting it again")
                    self.restarts_after_lost_lease += 1
                    self.proc = self.start()
                    continue
                # stopped by the test: wait until the test starts another one (or stops)
                self._changed.wait_for(lambda ended=proc: self._stopping or self.proc is not ended)
                if self._stopping:
                    return

    def kubectl(
        self, *args: str, input_: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.tb.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            input=input_,
            text=True,
            capture_output=True,
            check=check,
        )

    def aijob(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(
            "cpn.io", "v1alpha1", namespace, "aijobs", name
        )

    def aijobs(self, namespace: str) -> list[dict[str, Any]]:
        """Every AIJob of a namespace, listed in pages (a loaded API server may cut one huge
        response short)."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = self.custom.list_namespaced_custom_object(
                "cpn.io", "v1alpha1", namespace, "aijobs", limit=200, _continue=token
            )
            items += page["items"]
            token = page["metadata"].get("continue")
            if not token:
                return items

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return self.aijob(namespace, name).get("status") or {}

    def member_jobs(self, cluster: str, uid: str) -> list[Any]:
        with self.tb.api_client(cluster) as api:
            jobs = client.BatchV1Api(api).list_job_for_all_namespaces(
                label_selector=f"cpn.io/aijob-uid={uid}"
            )
            return list(jobs.items)


@contextmanager
def running_hub(
    tb: Testbed,
    folder: Path,
    *,
    policy: str = TEST_POLICY,
    args: tuple[str, ...] = (),
    supervise: bool = True,
    bandwidth_gbps: float = 10.0,
    **settings: object,
) -> Iterator[Hub]:
    """Bootstrap the bed with ``policy`` (and every MemberCluster's static link figure
    ``bandwidth_gbps``), run the operator, stop it (and print its log) after. The decision
    log is on by default, so a failed test can be replayed and explained."""
    bootstrap_testbed(tb, policy_yaml=policy, bandwidth_gbps=bandwidth_gbps)
    settings.setdefault("decision_log", folder / "decisions.jsonl")
    hub = Hub(tb, folder / "operator.log", args=args, supervise=supervise, **settings)
    try:
        yield hub
    finally:
        hub.stop()
        print(hub.log.read_text()[-5000:])
        print(f"decision log: {settings['decision_log']}")
    broken = [line for line in hub.log.read_text().splitlines() if "plan check:" in line]
    assert broken == [], "the operator carried out plans that break cpn.core.check's rules"


def orphans(tb: Testbed) -> list[str]:
    """Unfinished member Jobs of cpn whose AIJob is gone from the hub (``member/name (its
    AIJob)``): they hold GPUs that nothing will free until an operator sweeps them."""
    with tb.api_client("hub") as api:
        aijobs = client.CustomObjectsApi(api).list_cluster_custom_object(
            "cpn.io", "v1alpha1", "aijobs"
        )["items"]
    alive = {a["metadata"]["uid"] for a in aijobs}
    found = []
    for member in tb.members:
        with tb.api_client(member) as api:
            jobs = client.BatchV1Api(api).list_job_for_all_namespaces(
                label_selector="app.kubernetes.io/managed-by=cpn"
            )
        for job in jobs.items:
            labels = job.metadata.labels or {}
            done = {c.type for c in job.status.conditions or [] if c.status == "True"}
            if labels.get("cpn.io/aijob-uid") not in alive and not done & {"Complete", "Failed"}:
                owner = f"{labels.get('cpn.io/aijob-namespace')}/{labels.get('cpn.io/aijob-name')}"
                found.append(f"{member}/{job.metadata.name} ({owner})")
    return found


@contextmanager
def new_namespace(hub: Hub, prefix: str, **labels: str) -> Iterator[str]:
    """A fresh namespace; its AIJobs are deleted (while the operator runs) when done."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = {f"cpn.io/{k}": v for k, v in labels.items()}
    hub.core.create_namespace({"metadata": meta})
    try:
        yield name
    finally:
        # While the operator runs, so their member Jobs go at once.
        hub.kubectl("delete", "aijobs", "--all", "-n", name, "--timeout=60s", check=False)
        hub.kubectl("delete", "namespace", name, "--wait=false", check=False)


def aijob(
    name: str,
    *,
    gpus: int = 1,
    model: str = "resnet50",
    workers: int = 1,
    durations: dict[str, str] | None = None,
    gpu_types: list[str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """An AIJob manifest whose simulated runtime on the test bed depends on the GPU type."""
    durations = durations or {"A100-80GB": "6s", "V100-32GB": "15s"}
    notes = {
        "cpn.io/per-gpu-type": json.dumps({"testbed.cpn.io/duration": durations}),
        **(annotations or {}),
    }
    resources: dict[str, Any] = {"gpus": gpus, "cpu": "2", "memory": "8Gi"}
    if gpu_types:
        resources["gpuTypes"] = gpu_types
    return {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "AIJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "resources": resources,
            "model": {"name": model, "batchSize": 64, "datasetSamples": 50000, "epochs": 1},
            "template": {
                "metadata": {"annotations": notes},
                "spec": {"containers": [{"name": "train", "image": "trainer:1"}]},
            },
            **spec,
        },
    }


def apply(hub: Hub, namespace: str, *docs: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return hub.kubectl(
        "apply", "-n", namespace, "-f", "-", input_=yaml.safe_dump_all(docs), check=False
    )


def set_policy(hub: Hub, text: str) -> None:
    """Put ``text`` into the policy ConfigMap (as an admin edits it)."""
    patch = json.dumps({"data": {"policy.yaml": text}})
    done = hub.kubectl(
        "patch", "configmap", "cpn-policy", "-n", "cpn-system", "--type=merge", "-p", patch
    )
    assert done.returncode == 0, done.stderr


def events_of(hub: Hub, namespace: str, name: str) -> list[str]:
    """Reasons of the Events posted about the AIJob ``name`` as it exists now (by its UID:
    Events of an earlier object of the same name never count); of any object of that name
    once it is gone."""
    try:
        uid = hub.aijob(namespace, name)["metadata"]["uid"]
    except ApiException as exc:
        if exc.status != 404:
            raise
        uid = None
    selector = f"involvedObject.name={name}" + (f",involvedObject.uid={uid}" if uid else "")
    events = hub.core.list_namespaced_event(namespace, field_selector=selector)
    return [e.reason for e in events.items]


def wait_events_of(
    hub: Hub, namespace: str, name: str, *want: str, timeout_s: float = 60
) -> list[str]:
    """:func:`events_of` once every reason of ``want`` is among them. The operator writes
    an Event after the status change it goes with (its write queue serves status patches
    first, :class:`cpn.runtime.writes.WriteQueue`), so a read right after a status wait can
    come before the Event."""
    last: list[str] = []

    def check() -> list[str] | None:
        nonlocal last
        last = events_of(hub, namespace, name)
        return last if all(reason in last for reason in want) else None

    try:
        found: list[str] = wait_until(check, timeout_s=timeout_s, what=f"Events {want} of {name}")
    except TimeoutError as err:
        raise AssertionError(f"{err}; Events so far: {last}") from None
    return found


def event_marks(hub: Hub, namespace: str, name: str) -> dict[str, int]:
    """The Events about ``name`` so far (UID -> count), to tell new ones apart later."""
    events = hub.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return {e.metadata.uid: e.count or 1 for e in events.items}


def new_events(hub: Hub, namespace: str, name: str, marks: dict[str, int]) -> list[str]:
    """Reasons of the Events about ``name`` posted after ``marks`` was taken (a new Event,
    or one counted again): an Event left by an earlier test never counts."""
    events = hub.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [e.reason for e in events.items if (e.count or 1) > marks.get(e.metadata.uid, 0)]


def wait_status(
    hub: Hub, namespace: str, name: str, *, timeout_s: float = 60, **want: Any
) -> dict[str, Any]:
    """Wait until the AIJob's status has every ``want`` field; the error shows the last status."""
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        nonlocal last
        last = hub.status(namespace, name)
        return last if all(last.get(k) == v for k, v in want.items()) else None

    try:
        found: dict[str, Any] = wait_until(check, timeout_s=timeout_s, what=f"{name} {want}")
    except TimeoutError as err:
        raise AssertionError(f"{err}; last status: {json.dumps(last, indent=1)}") from None
    return found


def phases(hub: Hub, namespace: str) -> Counter[str]:
    """How many of a namespace's AIJobs are in each phase (nothing while the hub's API
    server is too busy to answer: a poll tries again)."""
    try:
        items = hub.aijobs(namespace)
    except (ServiceException, ProtocolError, http.client.IncompleteRead):
        return Counter()
    return Counter((i.get("status") or {}).get("phase", "") for i in items)


def member_jobs_by_uid(tb: Testbed) -> Counter[str]:
    """Member Jobs of cpn on every member, counted per origin AIJob UID."""
    counts: Counter[str] = Counter()
    for member in tb.members:
        with tb.api_client(member) as api:
            jobs = client.BatchV1Api(api).list_job_for_all_namespaces(
                label_selector="cpn.io/aijob-uid"
            )
            counts.update(j.metadata.labels["cpn.io/aijob-uid"] for j in jobs.items)
    return counts


class JobCreations:
    """Every cpn member Job created on the bed's members while it runs, seen by watch: a
    Job created and deleted again still counts (a list at the end would miss it)."""

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb
        self.seen: dict[str, set[str]] = {}  # AIJob UID -> UIDs of member Jobs made for it
        self.completed: dict[str, set[str]] = {}  # AIJob UID -> its member Jobs seen Complete
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Barrier(len(tb.members) + 1)
        self._threads = [
            threading.Thread(target=self._follow, args=(m,), daemon=True) for m in tb.members
        ]

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter({uid: len(jobs) for uid, jobs in self.seen.items()})

    def runs(self) -> Counter[str]:
        """Member Jobs seen Complete, per AIJob UID: more than one is work done twice."""
        with self._lock:
            return Counter({uid: len(jobs) for uid, jobs in self.completed.items()})

    def _add(self, job: Any) -> None:
        origin = (job.metadata.labels or {}).get("cpn.io/aijob-uid")
        if origin:
            complete = any(
                c.type == "Complete" and c.status == "True"
                for c in (job.status.conditions if job.status else None) or []
            )
            with self._lock:
                self.seen.setdefault(origin, set()).add(job.metadata.uid)
                if complete:
                    self.completed.setdefault(origin, set()).add(job.metadata.uid)

    def _follow(self, member: str) -> None:
        with self.tb.api_client(member) as api:
            batch = client.BatchV1Api(api)
            version, first = None, True
            while not self._stop.is_set():
                try:
                    if version is None:  # (re)list: what exists now, and where to watch from
                        listed = batch.list_job_for_all_namespaces(
                            label_selector="cpn.io/aijob-uid"
                        )
                        for job in listed.items:
                            self._add(job)
                        version = listed.metadata.resource_version
                        if first:
                            first = False
                            self._ready.wait()
                    stream = watch.Watch().stream(
                        batch.list_job_for_all_namespaces,
                        label_selector="cpn.io/aijob-uid",
                        resource_version=version,
                        timeout_seconds=5,
                        allow_watch_bookmarks=True,
                    )
                    for event in stream:
                        obj = event["object"]
                        version = obj.metadata.resource_version
                        if event["type"] in {"ADDED", "MODIFIED"}:
                            self._add(obj)
                except ApiException as exc:
                    if exc.status != 410:
                        self.errors.append(f"{member}: {exc.status} {exc.reason}")
                    version = None  # expired: list again (a Job made and gone meanwhile is lost)
                except Exception as exc:  # a member restarting: keep following
                    self.errors.append(f"{member}: {type(exc).__name__}")
                    version = None
                    self._stop.wait(0.5)

    def __enter__(self) -> JobCreations:
        for thread in self._threads:
            thread.start()
        self._ready.wait(timeout=60)  # every member listed: nothing created from now is missed
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)


def printed_table(text: str) -> list[dict[str, str]]:
    """kubectl's table as dicts, cut at the header's column starts (cells may be empty)."""
    lines = text.splitlines()
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return [dict.fromkeys(names, ""), *rows] if rows else [dict.fromkeys(names, "")]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get(url: str) -> tuple[int, str]:
    """HTTP GET: (status, body); (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)
